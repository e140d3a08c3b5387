"""A held-out part of a data-bin's training split, for choosing settings without looking at the
figures they will be judged on (the studies' learning rates, :mod:`fairseq_ext_lab.
studies`).

:func:`heldout_data_bin` writes a new data-bin whose ``train`` is the original training split
without its last lines and whose ``valid`` is those lines (cut at a document boundary, an empty
line, where there is one near the cut, so that no document is split between the two); the
dictionary is copied. Runs trained on it and scored on its ``valid`` split never see the
original ``valid`` split, on which the compared figures are measured. A second call with the
same share reuses the directory (its ``heldout.json`` says what it holds); another share is
refused.
"""
import json
import shutil
from pathlib import Path

HELDOUT_JSON = "heldout.json"


def split_point(lengths, share: float, window: int = 200) -> int:
    """Where the held-out lines start: ``len * (1 - share)``, moved forward to the first empty
    line (a lone ``</s>``, length 1: a document boundary) within ``window`` lines, if any."""
    total = len(lengths)
    start = min(max(int(round(total * (1.0 - share))), 1), total - 1)
    for index in range(start, min(start + window, total - 1)):
        if lengths[index] == 1:
            return index + 1  # the boundary stays with the training part's last document
    return start


def heldout_data_bin(data: Path, out: Path, share: float = 0.05) -> Path:
    """``out``: ``data``'s dictionary, ``train`` = the first ``1 - share`` of its training
    lines, ``valid`` = the rest (:func:`split_point`). Reused when ``out`` already holds the
    same split."""
    from fairseq.data import Dictionary, indexed_dataset

    if not 0.0 < share < 0.5:
        raise SystemExit(f"error: held-out share {share}: give a share in (0, 0.5)")
    data, out = Path(data), Path(out)
    wanted = {"source": str(data.resolve()), "share": share}
    marker = out / HELDOUT_JSON
    if marker.is_file():
        held = json.loads(marker.read_text())
        if {key: held.get(key) for key in wanted} != wanted:
            raise SystemExit(f"error: {out} holds another held-out split ({held}); remove it or "
                             "choose another directory")
        return out
    if out.exists():
        shutil.rmtree(out)  # a split interrupted before its marker was written
    out.mkdir(parents=True)
    dictionary = Dictionary.load(str(data / "dict.txt"))
    source = indexed_dataset.make_dataset(str(data / "train"), impl="mmap")
    if source is None:
        raise SystemExit(f"error: {data} has no train split (train.bin/train.idx, mmap) to hold "
                         "lines out of")
    lengths = source.sizes
    start = split_point(lengths, share)
    for name, lines in (("train", range(0, start)), ("valid", range(start, len(lengths)))):
        builder = indexed_dataset.make_builder(str(out / f"{name}.bin"), impl="mmap",
                                               vocab_size=len(dictionary))
        for index in lines:
            builder.add_item(source[index])
        builder.finalize(str(out / f"{name}.idx"))
    shutil.copy(data / "dict.txt", out / "dict.txt")
    held = {**wanted, "train_lines": start, "heldout_lines": len(lengths) - start,
            "heldout_tokens": int(lengths[start:].sum())}
    marker.write_text(json.dumps(held, indent=2))
    return out
