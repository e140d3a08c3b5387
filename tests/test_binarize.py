"""The corpus binarizer (:mod:`fairseq_ext.corpus.binarize`) against fairseq-preprocess itself:
the same ``.bin``/``.idx`` bytes and the same counts, on a text with blank lines (document
separators), runs of whitespace, a literal ``<unk>`` and words the dictionary lacks, cut into
chunks smaller than the file and spread over two worker processes."""

from pathlib import Path

import pytest

from conftest import fairseq_cli, run_cli
from fairseq_ext.corpus import binarize
from fairseq_ext.corpus.binarize import binarize_file

DICTIONARY = "the 9\nriver 7\nmill 5\nold 4\nruns 3\n"
LINES = [
    "the river runs",
    "",
    "old   mill\tthe",  # whitespace runs: one separator
    "the <unk> river",  # a literal <unk>: not counted as replaced
    "barn the silo",  # two words the dictionary lacks: replaced by <unk>
    "",
    "mill",
] * 7


@pytest.fixture
def tokenized(tmp_path: Path):
    (tmp_path / "dict.txt").write_text(DICTIONARY)
    text = tmp_path / "train.tok"
    text.write_text("".join(line + "\n" for line in LINES))
    return text, tmp_path / "dict.txt"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_binaries_equal_fairseq_preprocess_byte_for_byte(tokenized, tmp_path, monkeypatch,
                                                         workers):
    text, dictionary = tokenized
    monkeypatch.setattr(binarize, "LINES_PER_CHUNK", 3)  # 17 chunks, two in flight per worker
    ours = tmp_path / "ours"
    ours.mkdir()
    counts = binarize_file(text, dictionary, ours / "train", workers)
    reference = tmp_path / "fairseq"
    run_cli([fairseq_cli("fairseq-preprocess"), "--only-source", "--srcdict", dictionary,
             "--trainpref", text, "--destdir", reference, "--workers", "1"])
    for extension in ("bin", "idx"):
        assert (ours / f"train.{extension}").read_bytes() == \
            (reference / f"train.{extension}").read_bytes()
    log = (reference / "preprocess.log").read_text()
    tokens = sum(len(line.split()) + 1 for line in LINES)
    assert f"{len(LINES)} sents, {tokens} tokens" in log
    assert (counts.items, counts.tokens_with_eos, counts.replaced) == (len(LINES), tokens, 2 * 7)
    assert counts.replaced_percent == pytest.approx(100 * 14 / tokens)


def test_items_are_the_lines_mapped_through_the_dictionary(tokenized, tmp_path):
    """By hand: fairseq's Dictionary puts its four specials first (<s> 0, <pad> 1, </s> 2,
    <unk> 3), then the entries in file order."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    text, dictionary = tokenized
    binarize_file(text, dictionary, tmp_path / "train", 1)
    items = MMapIndexedDataset(str(tmp_path / "train"))
    the, river, mill, old, runs, eos, unknown = 4, 5, 6, 7, 8, 2, 3
    assert [items[i].tolist() for i in range(7)] == [
        [the, river, runs, eos], [eos], [old, mill, the, eos], [the, unknown, river, eos],
        [unknown, the, unknown, eos], [eos], [mill, eos]]
    assert len(items) == len(LINES)
