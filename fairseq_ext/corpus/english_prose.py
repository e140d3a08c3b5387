"""A data lever of the transfer diagnosis (docs/transfer.md): English prose for pre-training, encoded with an
existing data-bin's sentencepiece model and dictionary, so that its checkpoints fine-tune on
that data-bin's downstream suite unchanged.

The source is GCIDE, the GNU Collaborative International Dictionary of English (Debian's
``dict-gcide``, fetched into the cache without root): each blank-line-separated entry becomes one
cleaned line (:func:`entry_lines`), shuffled (seed 0), 2% to valid. This is a measured lever,
not the project's corpus: GCIDE is close in kind to the ``GlossPair`` task's WordNet
definitions. ``scripts/prepare_english_prose.sh DATA_BIN OUT`` writes
``OUT/{dict.txt,spm.model,train.*,valid.*}``; ``recipes/roberta/english_prose.sh`` pre-trains the
demo's RoBERTa on it. The figures: docs/transfer.md.
"""
from __future__ import annotations

import argparse
import gzip
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List

from .errors import CorpusError
from .python_docs import ensure_package

PACKAGE = "dict-gcide"
SUBDIR = "usr/share/dictd"
DICTIONARY_FILE = "gcide.dict.dz"  # dictzip: gzip-compatible
MIN_WORDS, MAX_CHARS, VALID_SHARE, SEED = 8, 400, 0.02, 0


def entry_lines(text: str) -> List[str]:
    """One cleaned line per blank-line-separated dictionary entry of ``text``: the headword's
    pronunciation markup (``\\Ab*do"men\\``) and ``[...]`` source tags dropped, whitespace
    collapsed, cut at :data:`MAX_CHARS` characters; entries under :data:`MIN_WORDS` words left
    out."""
    out = []
    for block in text.split("\n\n"):
        lines = [line.strip() for line in block.split("\n")]
        lines = [line for line in lines if line and not line.startswith("[")]
        if not lines:
            continue
        lines[0] = re.sub(r"\\[^\\]*\\", "", lines[0])
        line = re.sub(r"\[[^\]]*\]", "", " ".join(lines))
        line = re.sub(r"\s+", " ", line).strip()
        if len(line.split()) >= MIN_WORDS:
            out.append(line[:MAX_CHARS])
    return out


def split_lines(lines: Iterable[str], seed: int = SEED,
                valid_share: float = VALID_SHARE) -> tuple:
    """``(train, valid)``: the lines shuffled with ``seed``, the last ``valid_share`` valid."""
    lines = list(lines)
    random.Random(seed).shuffle(lines)
    cut = int(len(lines) * (1 - valid_share))
    return lines[:cut], lines[cut:]


def prepare(data_bin: Path, out: Path, cache_dir: Path, workers: int = 1) -> None:
    """``out``: GCIDE's lines, encoded with ``data_bin``'s ``spm.model`` and binarized with its
    ``dict.txt`` (``fairseq-preprocess --only-source --srcdict``)."""
    import sentencepiece

    for name in ("spm.model", "dict.txt"):
        if not (data_bin / name).is_file():
            raise CorpusError(f"{data_bin} has no {name}: give a data-bin of "
                              "scripts/prepare_corpus.sh")
    if out.exists():
        raise CorpusError(f"{out} exists; choose another output directory")
    folder, _ = ensure_package(PACKAGE, SUBDIR, cache_dir, print)
    with gzip.open(folder / DICTIONARY_FILE, "rt", encoding="utf-8", errors="replace") as handle:
        train, valid = split_lines(entry_lines(handle.read()))
    work = out.with_name(out.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(data_bin / "spm.model"))
    for split, lines in (("train", train), ("valid", valid)):
        (work / f"{split}.spm").write_text("".join(
            " ".join(processor.encode(line, out_type=str)) + "\n" for line in lines))
    preprocess = Path(sys.executable).with_name("fairseq-preprocess")
    subprocess.run([str(preprocess), "--only-source", "--srcdict", str(data_bin / "dict.txt"),
                    "--trainpref", str(work / "train.spm"), "--validpref",
                    str(work / "valid.spm"), "--destdir", str(work), "--workers", str(workers)],
                   check=True)
    shutil.copyfile(data_bin / "spm.model", work / "spm.model")
    for name in ("train.spm", "valid.spm"):
        (work / name).unlink()
    work.rename(out)
    print(f"{out}: {len(train)} train and {len(valid)} valid lines of GCIDE, encoded with "
          f"{data_bin / 'spm.model'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="prepare_english_prose.sh",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data_bin", type=Path, help="the data-bin whose spm.model and dict.txt "
                        "encode the prose (scripts/prepare_corpus.sh's)")
    parser.add_argument("out", type=Path, help="the new data-bin")
    parser.add_argument("--cache-dir", type=Path, default=Path("data/cache"))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        prepare(args.data_bin, args.out, args.cache_dir, args.workers)
    except CorpusError as error:
        print(f"prepare_english_prose.sh: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
