"""The share of a pre-training data-bin that a GPU call carries (``scripts/gpu_wheels.sh``).

A device call carries at most 64 MiB with the working tree, and the embedded English corpus's
data-bin is about 85 MB (31.1M training pieces). :func:`write_share` copies an evenly spread
share of it into a new data-bin: each split is cut into ``windows`` stretches of equal tokens,
and the first whole lines of each stretch are kept until the stretch has given its part of the
split's token target, so every part of the corpus (its sources lie in order) is in the share in
proportion. The dictionary and sentencepiece model are copied unchanged, so a suite built on
the full data-bin (``scripts/prepare_downstream.sh``) encodes the same way; ``share.json`` says
what was kept, and of what.

    python -m fairseq_ext_lab.benchmarks.gpu_data_share data-bin/english-spm8000 \\
        .gpu-data/english-spm8000-share --train-tokens 8000000 --valid-tokens 400000
"""
import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

#: The files copied unchanged from the source data-bin (those that exist).
COPIED_FILES = ("dict.txt", "spm.model")
SHARE_JSON = "share.json"


def share_lines(sizes: Sequence[int], tokens: int, windows: int) -> List[Tuple[int, int]]:
    """The line ranges ``[start, stop)`` of a share of about ``tokens`` tokens of a split whose
    lines hold ``sizes`` tokens: ``windows`` stretches of equal tokens, and from the start of
    each, whole lines until that stretch has given ``tokens / windows`` (at least one line). The
    whole split when ``tokens`` is not below its size."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    if tokens >= total:
        return [(0, len(sizes))]
    ends = np.cumsum(sizes)  # the token offset where each line ends
    quota = tokens / windows
    ranges = []
    for window in range(windows):
        start = int(np.searchsorted(ends, window * total / windows, side="right"))
        # the first line whose end reaches the quota: whole lines, at least one
        stop = int(np.searchsorted(ends, ends[start] - sizes[start] + quota, side="left")) + 1
        stop = min(stop, len(sizes))
        if ranges and start < ranges[-1][1]:  # a line longer than a stretch: no line twice
            start = ranges[-1][1]
        if start < stop:
            ranges.append((start, stop))
    return ranges


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_split(source: Path, dest: Path, split: str, tokens: int, windows: int,
                vocab_size: int) -> Dict:
    """Write split ``split`` of data-bin ``source`` into ``dest`` cut to :func:`share_lines`'s
    ranges, with fairseq's mmap builder (as fairseq-preprocess makes it for ``vocab_size``
    symbols); its counts for ``share.json``."""
    from fairseq.data import indexed_dataset

    dataset = indexed_dataset.MMapIndexedDataset(str(source / split))
    sizes = np.array(dataset.sizes, dtype=np.int64)
    ranges = share_lines(sizes, tokens, windows)
    builder = indexed_dataset.make_builder(str(dest / f"{split}.bin"), "mmap",
                                           vocab_size=vocab_size)
    kept_lines = kept_tokens = 0
    for start, stop in ranges:
        for index in range(start, stop):
            builder.add_item(dataset[index])
        kept_lines += stop - start
        kept_tokens += int(sizes[start:stop].sum())
    builder.finalize(str(dest / f"{split}.idx"))
    del dataset
    return {"lines": kept_lines, "tokens": kept_tokens, "source_lines": int(len(sizes)),
            "source_tokens": int(sizes.sum()), "windows": len(ranges),
            "share": round(kept_tokens / max(int(sizes.sum()), 1), 4)}


def write_share(source: Path, dest: Path, split_tokens: Dict[str, int], windows: int) -> Dict:
    """Write the share of data-bin ``source`` into ``dest`` (a new or empty folder, or an earlier
    share, which is replaced): each split of
    ``split_tokens`` cut to about that many tokens, the dictionary and sentencepiece model
    copied; returns what ``share.json`` holds."""
    for name in ("dict.txt",) + tuple(f"{split}.idx" for split in split_tokens):
        if not (source / name).is_file():
            raise SystemExit(f"error: {source} has no {name}: give a data-bin made by "
                             "scripts/prepare_corpus.sh")
    if dest.resolve() == source.resolve():
        raise SystemExit(f"error: the share would overwrite its source {source}: give another "
                         "destination")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / SHARE_JSON).is_file():
        raise SystemExit(f"error: {dest} holds files and is not a share (no {SHARE_JSON}): give "
                         "a new or empty folder")
    from fairseq.data import Dictionary

    vocab_size = len(Dictionary.load(str(source / "dict.txt")))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in COPIED_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
    summary = {
        "source": str(source),
        "dictionary_sha256": sha256_of(source / "dict.txt"),
        "method": f"each split in {windows} stretches of equal tokens; the first whole lines "
                  "of each stretch up to its part of the split's tokens",
        "splits": {split: write_split(source, dest, split, tokens, windows, vocab_size)
                   for split, tokens in split_tokens.items()},
    }
    (dest / SHARE_JSON).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext_lab.benchmarks.gpu_data_share",
        description="Write an evenly spread share of a pre-training data-bin (train and valid) "
                    "into a new data-bin, small enough for a GPU call to carry.")
    parser.add_argument("source", type=Path, help="the data-bin (scripts/prepare_corpus.sh)")
    parser.add_argument("dest", type=Path, help="the share's data-bin (emptied first)")
    parser.add_argument("--train-tokens", type=int, default=8_000_000,
                        help="the training tokens kept (default: 8,000,000)")
    parser.add_argument("--valid-tokens", type=int, default=400_000,
                        help="the validation tokens kept (default: 400,000)")
    parser.add_argument("--windows", type=int, default=64,
                        help="the stretches each split is taken from (default: 64)")
    args = parser.parse_args(argv)
    if min(args.train_tokens, args.valid_tokens, args.windows) < 1:
        parser.error("--train-tokens, --valid-tokens and --windows must be positive")
    summary = write_share(args.source, args.dest,
                          {"train": args.train_tokens, "valid": args.valid_tokens},
                          args.windows)
    for split, counts in summary["splits"].items():
        print(f"{split}: {counts['tokens']:,} of {counts['source_tokens']:,} tokens "
              f"({counts['share']:.1%}), {counts['lines']:,} lines in {counts['windows']} "
              f"stretches -> {args.dest}")


if __name__ == "__main__":
    main()
