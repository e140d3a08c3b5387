"""Tests of the corpus pipeline (``python -m fairseq_ext.corpus.prepare_corpus``).

The corpora are made here, small enough that sentencepiece trains in well under a second; the
real ``fairseq-preprocess`` runs in every full build. Nothing is downloaded unless
``FAIRSEQ_EXT_NETWORK_TESTS=1`` (then one test fetches Debian's python3.11-doc).
"""

import collections
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairseq_ext.corpus import python_docs
from fairseq_ext.corpus.documents import ReplacementCounter, assign_split, iter_documents, list_input
from fairseq_ext.corpus.prepare_corpus import main
from fairseq_ext.corpus.rst_cleaner import clean_rst

REPO_ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "valid", "test")
WORDS = (
    "the river runs past an old mill where children play and farmers bring grain from the "
    "hills each morning before the market opens in a small town near the sea while boats "
    "return with fish and stories of storms that nobody believes"
).split()
# Small settings shared by the builds: a tiny vocabulary and large enough held-out fractions.
SMALL = [
    "--vocab-size",
    "120",
    "--valid-fraction",
    "0.2",
    "--test-fraction",
    "0.2",
    "--workers",
    "2",
]
# Invalid UTF-8 put into train documents, and how many bytes each replacement covers:
# 0xff alone (1), a truncated 3-byte sequence (2, one U+FFFD), 0xc3 before "(" (1).
INVALID_BYTES = b"caf\xff ok \xe2\x82 and \xc3( end"
INVALID_BYTE_COUNT = 4
INVALID_TEXT = "caf\ufffd ok \ufffd and \ufffd( end"


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))


def run_main(capsys, *args) -> tuple[int, str, str]:
    """Run the CLI in this process; return (exit status, stdout, stderr)."""
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def read_split_documents(text_file: Path) -> list[list[str]]:
    """The documents of a cleaned split file (blank-line separated lines)."""
    text = text_file.read_text(encoding="utf-8")
    return [block.split("\n") for block in text.rstrip("\n").split("\n\n")] if text.strip() else []


def decode_data_bin(destdir: Path, split: str, decode_line) -> list[list[str]]:
    """Read ``split`` back from the fairseq data-bin: its documents, each a list of decoded
    lines. An empty item (only eos) separates documents."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(destdir / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(destdir / split), dictionary)
    documents, current = [], []
    for index in range(len(dataset)):
        item = dataset[index]
        assert item[-1].item() == dictionary.eos()
        symbols = [dictionary[i] for i in item[:-1].tolist()]
        if not symbols:
            documents.append(current)
            current = []
            continue
        assert "<unk>" not in symbols
        current.append(decode_line(symbols))
    documents.append(current)
    return documents


def spm_decoder(destdir: Path):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(destdir / "spm.model"))
    return processor.decode_pieces


def make_directory_corpus(root: Path) -> dict[str, list[str]]:
    """Write 40 documents (some in subdirectories, some with wrapped paragraphs and untidy
    whitespace, two train documents with invalid UTF-8); return {relative path: expected
    cleaned lines}."""
    rng = random.Random(7)
    expected = {}
    invalid_documents = 0
    for number in range(40):
        relative = f"{'part/' if number % 4 == 0 else ''}doc{number:02d}.txt"
        paragraphs = [
            [sentence(rng) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))
        ]
        raw = "\n\n\n".join(
            "\n".join(f"  {line}   " for line in paragraph) for paragraph in paragraphs
        )
        data = raw.encode() + b"\n"
        lines = [" ".join(" ".join(paragraph).split()) for paragraph in paragraphs]
        if invalid_documents < 2 and assign_split(relative, 0.2, 0.2) == "train":
            data += b"\n" + INVALID_BYTES + b"\n"
            lines.append(INVALID_TEXT)
            invalid_documents += 1
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        expected[relative] = lines
    assert invalid_documents == 2
    return expected


@pytest.fixture(scope="module")
def directory_build(tmp_path_factory):
    """One complete build of a directory corpus: (input dir, destdir, expected documents by
    relative path)."""
    root = tmp_path_factory.mktemp("directory_corpus")
    corpus = root / "docs"
    expected = make_directory_corpus(corpus)
    destdir = root / "bin"
    status = main(["--input", str(corpus), "--destdir", str(destdir), *SMALL])
    assert status == 0
    return corpus, destdir, expected


def copy_build(directory_build, tmp_path: Path) -> Path:
    """A private copy of the fixture's destdir (mtimes kept, so its stamps still match)."""
    destination = tmp_path / "bin"
    shutil.copytree(directory_build[1], destination)
    return destination


def test_directory_input_documents_per_split_and_round_trip(directory_build):
    corpus, destdir, expected = directory_build
    manifest = json.loads((destdir / "manifest.json").read_text())
    assert manifest["complete"] is True
    summary = manifest["summary"]
    seen = []
    for split in SPLITS:
        wanted = [
            expected[path] for path in sorted(expected) if assign_split(path, 0.2, 0.2) == split
        ]
        assert wanted, f"the corpus should give documents to {split}"
        assert read_split_documents(destdir / "prep" / f"{split}.txt") == wanted
        # sentencepiece's default normalization (nmt_nfkc) drops U+FFFD, the rest reads back as is.
        normalized = [
            [" ".join(line.replace("\ufffd", "").split()) for line in document]
            for document in wanted
        ]
        assert decode_data_bin(destdir, split, spm_decoder(destdir)) == normalized
        assert summary["documents"][split] == len(wanted)
        assert summary["lines"][split] == sum(len(document) for document in wanted)
        seen.extend(map(tuple, wanted))
    assert len(seen) == len(expected)  # every document in exactly one split


def test_data_bin_items_and_tokens_match_the_summary(directory_build):
    from fairseq.data import Dictionary, data_utils

    destdir = directory_build[1]
    summary = json.loads((destdir / "manifest.json").read_text())["summary"]
    dictionary = Dictionary.load(str(destdir / "dict.txt"))
    for split in SPLITS:
        dataset = data_utils.load_indexed_dataset(str(destdir / split), dictionary)
        items = summary["lines"][split] + summary["documents"][split] - 1  # lines + separators
        assert len(dataset) == items
        assert int(dataset.sizes.sum()) == summary["tokens"][split] + items  # + one eos per item


def test_dictionary_is_the_spm_vocabulary(directory_build):
    import sentencepiece

    destdir = directory_build[1]
    processor = sentencepiece.SentencePieceProcessor(model_file=str(destdir / "spm.model"))
    entries = [
        line.split(" ") for line in (destdir / "dict.txt").read_text(encoding="utf-8").splitlines()
    ]
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    assert [piece for piece, _count in entries] == [
        p for p in pieces if p not in ("<unk>", "<s>", "</s>")
    ]
    # each piece's count is its number of occurrences in the training split, as
    # fairseq-preprocess writes a dictionary it builds: counted here from the binarized split
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(destdir / "dict.txt"))
    train = data_utils.load_indexed_dataset(str(destdir / "train"), dictionary)
    occurrences = collections.Counter(int(t) for i in range(len(train)) for t in train[i])
    assert [int(count) for _piece, count in entries] == [
        occurrences[dictionary.index(piece)] for piece, _count in entries]
    assert sum(int(count) for _piece, count in entries) == json.loads(
        (destdir / "manifest.json").read_text())["summary"]["tokens"]["train"]
    assert "<mask>" not in (destdir / "dict.txt").read_text()


def test_invalid_bytes_are_replaced_and_counted(directory_build, capsys):
    corpus, destdir, _expected = directory_build
    manifest = json.loads((destdir / "manifest.json").read_text())
    assert manifest["summary"]["replaced_bytes"] == 2 * INVALID_BYTE_COUNT
    train_text = (destdir / "prep" / "train.txt").read_text(encoding="utf-8")
    assert train_text.count(INVALID_TEXT) == 2
    status, out, _err = run_main(capsys, "--input", corpus, "--destdir", destdir, *SMALL)
    assert status == 0
    assert f"replaced bytes (invalid UTF-8): {2 * INVALID_BYTE_COUNT}" in out


def test_rerun_skips_every_step(directory_build, tmp_path, capsys):
    corpus = directory_build[0]
    destdir = copy_build(directory_build, tmp_path)
    before = {
        path: path.stat().st_mtime_ns
        for path in destdir.rglob("*")
        if path.is_file() and path.name != "manifest.json"
    }
    started = time.monotonic()
    status, out, _err = run_main(capsys, "--input", corpus, "--destdir", destdir, *SMALL)
    elapsed = time.monotonic() - started
    assert status == 0
    assert "run:" not in out
    for step in ("clean", "tokenizer", "encode", "dict", "preprocess"):
        assert f"skip: {step} (done)" in out
    assert elapsed < 5, f"a re-run with nothing to do took {elapsed:.1f}s"
    after = {path: path.stat().st_mtime_ns for path in before}
    assert after == before


def test_interrupted_step_is_redone(directory_build, tmp_path, capsys):
    corpus = directory_build[0]
    destdir = copy_build(directory_build, tmp_path)
    original_bin = (destdir / "valid.bin").read_bytes()
    # As if the run died while encoding: a half-written temporary, and no encode stamp.
    leftover = destdir / "prep" / "train.tok.tmp-99999"
    leftover.write_text("half a line")
    (destdir / "prep" / "encode.stamp.json").unlink()
    status, out, _err = run_main(capsys, "--input", corpus, "--destdir", destdir, *SMALL)
    assert status == 0
    assert "skip: clean (done)" in out and "skip: tokenizer (done)" in out
    assert "run: encode" in out
    assert "run: dict" in out  # it counts the pieces of the re-encoded train split
    assert "run: preprocess" in out  # it reads the re-encoded files
    assert not leftover.exists()
    assert (destdir / "valid.bin").read_bytes() == original_bin
    # A damaged output (its size no longer matches the stamp) is rebuilt too.
    with open(destdir / "train.bin", "ab") as handle:
        handle.write(b"garbage")
    status, out, _err = run_main(capsys, "--input", corpus, "--destdir", destdir, *SMALL)
    assert status == 0 and "run: preprocess" in out and "skip: encode (done)" in out


def test_changed_setting_is_refused(directory_build, tmp_path, capsys):
    corpus = directory_build[0]
    destdir = copy_build(directory_build, tmp_path)
    before = {path: path.read_bytes() for path in destdir.rglob("*") if path.is_file()}
    status, out, err = run_main(
        capsys, "--input", corpus, "--destdir", destdir, *SMALL[:-2], "--vocab-size", "150"
    )
    assert status == 2
    assert len(err.strip().splitlines()) == 1
    assert "vocab_size: 120 -> 150" in err and "--destdir" in err and "--overwrite" in err
    assert "Traceback" not in err
    assert {path: path.read_bytes() for path in before} == before


def test_overwrite_replaces_only_tool_files_and_split_is_deterministic(
    directory_build, tmp_path, capsys
):
    corpus, original, _expected = directory_build
    destdir = copy_build(directory_build, tmp_path)
    user_files = {destdir / "notes.txt": "mine", destdir / "prep" / "my-list.txt": "also mine"}
    for path, text in user_files.items():
        path.write_text(text)
    status, out, _err = run_main(
        capsys,
        "--input",
        corpus,
        "--destdir",
        destdir,
        *SMALL[:-2],
        "--vocab-size",
        "150",
        "--overwrite",
    )
    assert status == 0
    assert "overwrite:" in out and "run: tokenizer" in out
    for path, text in user_files.items():
        assert path.read_text() == text
    assert json.loads((destdir / "manifest.json").read_text())["settings"]["vocab_size"] == 150
    # Two runs, one assignment: the cleaned splits do not depend on the vocabulary.
    for split in SPLITS:
        assert (destdir / "prep" / f"{split}.txt").read_bytes() == (
            original / "prep" / f"{split}.txt"
        ).read_bytes()


def test_files_without_manifest_are_never_touched(directory_build, tmp_path, capsys):
    destdir = tmp_path / "somebody-elses"
    destdir.mkdir()
    (destdir / "dict.txt").write_text("precious 1\n")
    status, _out, err = run_main(
        capsys, "--input", directory_build[0], "--destdir", destdir, *SMALL
    )
    assert status == 2
    assert "dict.txt" in err and "no manifest.json" in err
    assert (destdir / "dict.txt").read_text() == "precious 1\n"
    assert sorted(p.name for p in destdir.iterdir()) == ["dict.txt"]


@pytest.mark.slow
def test_single_file_input_and_default_destdir(tmp_path, capsys, monkeypatch):
    rng = random.Random(3)
    documents = [[sentence(rng) for _ in range(rng.randint(1, 4))] for _ in range(30)]
    corpus = tmp_path / "stories.txt"
    corpus.write_text(
        "\n\n".join("\n".join(f" {line} " for line in document) for document in documents)
        + "\n\n\n"
    )
    monkeypatch.chdir(tmp_path)
    status, out, _err = run_main(capsys, "--input", corpus, *SMALL)
    assert status == 0
    destdir = tmp_path / "data-bin" / "stories-spm120"
    assert "summary: data-bin/stories-spm120" in out
    counter = ReplacementCounter()
    identities = {}
    for document in iter_documents(list_input(corpus), "text", counter):
        identities[tuple(document.lines)] = document.identity
    assert len(identities) == len(documents)
    decode = spm_decoder(destdir)
    for split in SPLITS:
        wanted = [d for d in documents if assign_split(identities[tuple(d)], 0.2, 0.2) == split]
        assert wanted
        assert read_split_documents(destdir / "prep" / f"{split}.txt") == wanted
        assert decode_data_bin(destdir, split, decode) == wanted


def test_spm_model_and_srcdict_are_reused(directory_build, tmp_path, capsys):
    corpus, built, expected = directory_build
    destdir = tmp_path / "reused"
    status, out, _err = run_main(
        capsys,
        "--input",
        corpus,
        "--destdir",
        destdir,
        *SMALL,
        "--spm-model",
        built / "spm.model",
        "--srcdict",
        built / "dict.txt",
    )
    assert status == 0
    assert (destdir / "spm.model").read_bytes() == (built / "spm.model").read_bytes()
    assert (destdir / "dict.txt").read_text() == (built / "dict.txt").read_text()
    for split in SPLITS:
        assert (destdir / f"{split}.bin").read_bytes() == (built / f"{split}.bin").read_bytes()
    valid = [expected[path] for path in sorted(expected) if assign_split(path, 0.2, 0.2) == "valid"]
    assert decode_data_bin(destdir, "valid", spm_decoder(destdir)) == valid
    settings = json.loads((destdir / "manifest.json").read_text())["settings"]
    assert (
        "spm_model_sha256" in settings
        and "srcdict_sha256" in settings
        and "vocab_size" not in settings
    )


def test_a_srcdict_fairseq_cannot_load_is_one_line(directory_build, tmp_path, capsys):
    """A symbol listed twice (without fairseq's overwrite flag) reads as 'symbol count' lines
    but fairseq's Dictionary refuses it: one line naming the file, no traceback."""
    corpus, built, _expected = directory_build
    lines = (built / "dict.txt").read_text().splitlines()
    srcdict = tmp_path / "dict.txt"
    srcdict.write_text("\n".join(lines + lines[:1]) + "\n")
    status, _out, err = run_main(capsys, "--input", corpus, "--destdir", tmp_path / "bin", *SMALL,
                                 "--spm-model", built / "spm.model", "--srcdict", srcdict)
    assert status == 2
    assert f"--srcdict {srcdict}: fairseq cannot load it" in err and "Duplicate" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_gpt2_bpe_writes_ids_and_builds_dictionary(tmp_path, capsys):
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode, get_encoder

    byte_tokens = list(bytes_to_unicode().values())
    encoder = {token: index for index, token in enumerate(byte_tokens)}
    encoder.update({"th": 256, "the": 257, "Ġthe": 258})
    (tmp_path / "encoder.json").write_text(json.dumps(encoder))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\nt h\nth e\nĠ the\n")
    rng = random.Random(5)
    documents = [[sentence(rng) for _ in range(rng.randint(1, 3))] for _ in range(25)]
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n\n".join("\n".join(document) for document in documents) + "\n")
    destdir = tmp_path / "bin"
    status, _out, _err = run_main(
        capsys,
        "--input",
        corpus,
        "--destdir",
        destdir,
        "--bpe",
        "gpt2",
        *SMALL,
        "--gpt2-encoder-json",
        tmp_path / "encoder.json",
        "--gpt2-vocab-bpe",
        tmp_path / "vocab.bpe",
    )
    assert status == 0
    first_line = (destdir / "prep" / "train.tok").read_text().splitlines()[0].split()
    assert (
        all(token.isdigit() for token in first_line) and "258" in (destdir / "dict.txt").read_text()
    )
    bpe = get_encoder(str(destdir / "gpt2" / "encoder.json"), str(destdir / "gpt2" / "vocab.bpe"))
    for split in SPLITS:
        wanted = read_split_documents(destdir / "prep" / f"{split}.txt")
        assert (
            decode_data_bin(destdir, split, lambda ids: bpe.decode([int(i) for i in ids])) == wanted
        )


def test_missing_and_empty_inputs_exit_2_with_one_line(tmp_path, capsys):
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("  \n\n \t \n")
    cases = {
        tmp_path / "missing": "input not found",
        tmp_path / "empty-dir": "input is empty",
        tmp_path / "empty.txt": "input is empty",
        tmp_path / "blank.txt": "input has no text",
    }
    for path, message in cases.items():
        status, _out, err = run_main(
            capsys, "--input", path, "--destdir", tmp_path / f"bin-{path.name}"
        )
        assert status == 2, path
        assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.slow
def test_wrapper_script_reports_missing_input(tmp_path):
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts/prepare_corpus.sh"), "--input", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"),
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [f"fairseq-ext-prepare-corpus: error: input not found: {tmp_path / 'nope'}"]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data-bin").exists()


@pytest.mark.slow
def test_empty_held_out_split_names_the_option_and_a_fixed_rerun_proceeds(tmp_path, capsys):
    rng = random.Random(11)
    corpus = tmp_path / "stories.txt"
    corpus.write_text("\n\n".join(sentence(rng) for _ in range(12)) + "\n")
    destdir = tmp_path / "bin"
    status, _out, err = run_main(
        capsys, "--input", corpus, "--destdir", destdir, "--vocab-size", "60"
    )
    assert status == 2
    assert (
        "the valid split is empty (12 documents in all, --valid-fraction 0.05): raise --valid-fraction"
        in err
    )
    assert not list((destdir / "prep").glob("*.stamp.json")) and not list(
        (destdir / "prep").glob("*.txt")
    )
    # Nothing was finished, so the destdir may be reused with the fixed settings.
    status, out, err = run_main(
        capsys,
        "--input",
        corpus,
        "--destdir",
        destdir,
        "--vocab-size",
        "60",
        "--valid-fraction",
        "0.3",
        "--test-fraction",
        "0.3",
    )
    assert status == 0, err
    assert (
        "unfinished run with other settings (test_fraction: 0.05 -> 0.3; valid_fraction: 0.05 -> 0.3)"
        in out
    )


RST_SNIPPET = """\
.. _tutorial-label:

.. XXX a comment that must vanish
   including its indented second line

=================
 Sample Chapter
=================

:Author: Someone <someone@example.org>

The :func:`len` builtin and :class:`~collections.abc.Sized` work
together; see :ref:`the sizing rules <sizing>` and ``len(x)``.
This is *emphasised*, **strong**, and a `link <https://example.org>`_.

Example session::

   >>> len([1, 2])
   2

A doctest block follows.

>>> print("hidden")
hidden

.. code-block:: python
   :linenos:

   def hidden():
       pass

.. note::

   Notes keep their prose, even with :pep:`8` inside.

.. function:: frobnicate(x, y=None)
              frobnicate(x, *, z)
   :noindex:

   Return a frobnicated *x*. See also |project|.

   .. versionadded:: 3.11
      The *z* parameter.

   .. deprecated:: 3.12

+------+------+
| cell | cell |
+======+======+
| a    | b    |
+------+------+

=====  =====
col    other
=====  =====
x      y
=====  =====

Subsection
----------

- first item that
  wraps onto a second line
- second item [#]_

.. |project| replace:: the *Frobnicator*
.. [#] A footnote with prose.
.. toctree::
   :maxdepth: 2

   hidden/page

.. index:: single: hidden
"""


def test_rst_cleaner_gives_plain_prose():
    assert clean_rst(RST_SNIPPET) == [
        "Sample Chapter",
        "The len builtin and Sized work together; see the sizing rules and len(x). "
        "This is emphasised, strong, and a link.",
        "Example session:",
        "A doctest block follows.",
        "Notes keep their prose, even with PEP 8 inside.",
        "Return a frobnicated x. See also the Frobnicator.",
        "The z parameter.",
        "Subsection",
        "first item that wraps onto a second line",
        "second item",
        "A footnote with prose.",
    ]


def test_rst_directory_documents(tmp_path):
    (tmp_path / "a.rst.txt").write_text(RST_SNIPPET)
    (tmp_path / "b.rst.txt").write_text("Title\n=====\n\nOnly ``code``::\n\n   x = 1\n")
    (tmp_path / "skip.txt").write_text("not selected by the suffix")
    listing = list_input(tmp_path, suffix=".rst.txt")
    documents = list(iter_documents(listing, "rst", ReplacementCounter()))
    assert [document.identity for document in documents] == ["a.rst.txt", "b.rst.txt"]
    assert list(documents[1].lines) == ["Title", "Only code:"]


def make_fake_deb(root: Path) -> Path:
    """A tiny python3.11-doc .deb holding two .rst.txt sources."""
    package = root / "pkg"
    sources = package / python_docs.SOURCES_SUBDIR
    (sources / "library").mkdir(parents=True)
    (sources / "library" / "demo.rst.txt").write_text("Demo\n====\n\nSome *prose*.\n")
    (sources / "index.rst.txt").write_text(".. toctree::\n\n   library/demo\n")
    (package / "DEBIAN").mkdir()
    (package / "DEBIAN" / "control").write_text(
        "Package: python3.11-doc\nVersion: 3.11.2-0test\nArchitecture: all\n"
        "Maintainer: test <test@example.org>\nDescription: test package\n"
    )
    deb = root / "python3.11-doc_3.11.2-0test_all.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(package), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian/Ubuntu)")
def test_fetch_reads_the_pinned_lists_and_reuses_the_unpacked_tree(tmp_path, monkeypatch):
    from apt_fakes import install_fake_apt, logged_calls

    deb = make_fake_deb(tmp_path)
    calls = install_fake_apt(tmp_path, monkeypatch, versions={"python3.11-doc": "3.11.2-0test"},
                             debs={"python3.11-doc": deb})
    cache = tmp_path / "cache"
    messages = []
    sources, fetched = python_docs.ensure_python_docs(cache, messages.append)
    assert fetched
    # the lists first (into the cache), then the version they offer, then that version
    assert logged_calls(calls) == [
        ["apt-get", "update"],
        ["apt-cache", "show", "--no-all-versions", "python3.11-doc"],
        ["apt-get", "download", "python3.11-doc=3.11.2-0test"],
    ]
    assert sorted(p.relative_to(sources).as_posix() for p in sources.rglob("*.rst.txt")) == [
        "index.rst.txt",
        "library/demo.rst.txt",
    ]
    # The unpacked cache is reused: only the version is looked up the second time.
    calls.unlink()
    assert python_docs.ensure_python_docs(cache, messages.append) == (sources, False)
    assert logged_calls(calls) == [["apt-cache", "show", "--no-all-versions", "python3.11-doc"]]
    assert any(message.startswith("skip: fetch (done)") for message in messages)


@pytest.mark.skipif(
    os.environ.get("FAIRSEQ_EXT_NETWORK_TESTS") != "1",
    reason="set FAIRSEQ_EXT_NETWORK_TESTS=1 to download python3.11-doc",
)
def test_python_docs_default_corpus(tmp_path, capsys):
    status, out, _err = run_main(
        capsys,
        "--cache-dir",
        tmp_path / "cache",
        "--destdir",
        tmp_path / "bin",
        "--vocab-size",
        "2000",
    )
    assert status == 0
    manifest = json.loads((tmp_path / "bin" / "manifest.json").read_text())
    assert manifest["settings"]["source"] == "python-docs"
    assert manifest["summary"]["input_files"] > 400
    assert all(manifest["summary"]["documents"][split] > 0 for split in SPLITS)
    assert "run: fetch" in out


def test_split_sentences_keeps_abbreviations_and_closing_quotes():
    from fairseq_ext.corpus.documents import split_sentences

    text = ('The quick fox. It ran, e.g. Fast away! Then Dr. Who said "Hi." Python 3.11 is out. '
            "See section 2. Next one? (Yes.) done. lower case does not start a sentence")
    assert split_sentences(text) == [
        "The quick fox.", "It ran, e.g. Fast away!", 'Then Dr. Who said "Hi."',
        "Python 3.11 is out.", "See section 2.", "Next one?",
        "(Yes.) done. lower case does not start a sentence",
    ]


@pytest.mark.parametrize("line_unit, expected", [
    ("sentence", ["First sentence here.", "Second one follows.", "A new paragraph."]),
    ("paragraph", ["First sentence here. Second one follows.", "A new paragraph."]),
])
def test_directory_line_unit(tmp_path, line_unit, expected):
    (tmp_path / "doc.txt").write_text("First sentence here.\nSecond one follows.\n\nA new paragraph.\n")
    (document,) = iter_documents(list_input(tmp_path), "text", ReplacementCounter(), line_unit)
    assert list(document.lines) == expected


def test_sentencepiece_sample_is_seeded_in_file_order_and_skips_untrainable_lines(tmp_path):
    from fairseq_ext.corpus.encoders import SPM_MAX_SENTENCE_BYTES, sample_training_lines

    lines = [f"line {number}" for number in range(100)]
    text = tmp_path / "train.txt"
    overlong = "x" * (SPM_MAX_SENTENCE_BYTES + 1)
    text.write_text("\n".join(lines[:50] + ["", "   ", overlong] + lines[50:]) + "\n")
    sample = sample_training_lines(text, 30)
    assert sample == sample_training_lines(text, 30)  # seeded
    assert len(sample) == 30 and len(set(sample)) == 30
    assert sample == sorted(sample, key=lines.index)  # in file order, nothing untrainable
    assert sample != sample_training_lines(text, 30, seed=2)
    assert sample_training_lines(text, 1000) == lines  # all of them when they are fewer


def test_the_data_bin_depends_on_the_text_alone(directory_build, tmp_path, capsys):
    """The same text copied elsewhere (new paths, new mtimes) and built with other --workers
    gives the same sentencepiece model, byte for byte, and the same data: the model's training
    sample is seeded, and it is trained on a fixed thread count."""
    from fairseq_ext.corpus.step_state import corpus_identity

    corpus = directory_build[0]
    builds = []
    for name, workers in (("first", "2"), ("second/deeper", "1")):
        copy = tmp_path / name / "docs"
        shutil.copytree(corpus, copy, copy_function=shutil.copyfile)
        destdir = tmp_path / name / "bin"
        status, _out, _err = run_main(
            capsys, "--input", copy, "--destdir", destdir, *SMALL[:-2], "--workers", workers,
            "--spm-input-sentence-size", "20")
        assert status == 0
        builds.append(destdir)
    first, second = builds
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["summary"]["lines"]["train"] > 20  # the sample is a sample
    assert (first / "spm.model").read_bytes() == (second / "spm.model").read_bytes()
    assert corpus_identity(first) == corpus_identity(second)
    assert corpus_identity(first)["data_sha256"]
    assert corpus_identity(first)["train_tokens"] > 0
