"""Checks of a fairseq data-bin made before fairseq reads it, so a wrong one stops the run with
one line naming the file and what to change.

fairseq itself stops on a missing data-bin with a traceback (``FileNotFoundError: ...
'DATA/dict.txt'``; :func:`check_data_bin`), on an empty split with ``cannot mmap an empty
file``, which names neither file nor fix (:func:`check_split_not_empty`), and on a truncated
``.bin`` or ``.idx`` (a killed ``fairseq-preprocess`` or copy, a full disk) only when a batch
reaches the lost sequences, deep in training, with numpy's ``offset must be non-negative``.
:func:`check_split` makes all the checks of one split when it is loaded (:func:`indexed_bytes`
reads the index's header and last entry only, in both of fairseq's binary formats); our
``bidirectional_lm`` task calls it, and fairseq's ``masked_lm`` through our archs' config check
(:mod:`fairseq_ext.models.validation`). The errors and their fixes: docs/troubleshooting.md.
"""
import itertools
import os
import struct
from typing import Optional, Tuple

import numpy as np
from fairseq.data import indexed_dataset

from fairseq_ext.cli.errors import UserInputError


class DataBinError(UserInputError, ValueError):
    """A data-bin that fairseq cannot read; the message says what to change."""


def check_data_bin(data: str) -> None:
    """Raise :class:`DataBinError` unless ``data`` (one data-bin path) holds a ``dict.txt``."""
    if not os.path.isdir(data):
        raise DataBinError(f"the data-bin {data} does not exist: check the path (the positional "
                           "DATA argument), or make it with scripts/prepare_corpus.sh")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise DataBinError(f"{data} is not a fairseq data-bin (it has no dict.txt): point DATA at "
                           "the folder fairseq-preprocess or scripts/prepare_corpus.sh wrote")


def check_split_not_empty(data: str, split: str, validation: bool = False) -> None:
    """Raise :class:`DataBinError` if ``split`` of the data-bin ``data`` exists and holds no
    tokens (fairseq's ``MMapIndexedDataset`` cannot map an empty ``.bin``). ``validation``:
    the message offers fairseq's ways to validate on something else."""
    path = os.path.join(data, f"{split}.bin")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        fix = ("add documents to it (scripts/prepare_corpus.sh --valid-fraction), validate on "
               "another split (--valid-subset), or train without validation "
               "(--disable-validation)" if validation else
               "add documents to it (re-run fairseq-preprocess or scripts/prepare_corpus.sh)")
        raise DataBinError(f"the {split} split of {data} is empty ({path} has 0 bytes): {fix}")


#: The index headers of fairseq's two binary formats, as fairseq writes them: ``mmap``
#: (fairseq-preprocess's default) and ``cached``/``lazy`` (the legacy IndexedDataset).
MMAP_INDEX_MAGIC = indexed_dataset.MMapIndexedDataset.Index._HDR_MAGIC
LEGACY_INDEX_MAGIC = indexed_dataset.IndexedDataset._HDR_MAGIC


class _TruncatedIndex(Exception):
    """An ``.idx`` file shorter than its header says (``path``, ``size``, ``needed`` bytes)."""

    def __init__(self, path: str, size: int, needed: int):
        super().__init__(path, size, needed)
        self.path, self.size, self.needed = path, size, needed


def indexed_bytes(index_path: str) -> Optional[Tuple[int, int]]:
    """``(sequences, bytes)``: how many sequences the fairseq index ``index_path`` lists and how
    many bytes of data its ``.bin`` must hold, or ``None`` for a format other than fairseq's
    ``mmap`` and ``cached``/``lazy`` binary ones. Reads the header and the last entry only.
    Raises :class:`_TruncatedIndex` when the index itself is cut short.

    * ``mmap``: magic (9 bytes), version (8), dtype code (1), count N (8), then N int32 sizes
      and N int64 byte offsets; the data ends at ``offset[N-1] + size[N-1] * itemsize``.
    * ``cached``/``lazy``: magic (8), version (8), dtype code and element size (8 + 8), N and
      the number of sizes S (8 + 8), N+1 int64 dim offsets, N+1 int64 data offsets (in
      elements), S int64 sizes; the data ends at ``data_offsets[N] * element_size``.
    """
    file_size = os.path.getsize(index_path)
    with open(index_path, "rb") as f:
        head = f.read(9)
        if head == MMAP_INDEX_MAGIC:
            header = f.read(8 + 1 + 8)
            if len(header) < 17:
                raise _TruncatedIndex(index_path, file_size, 26)
            (dtype_code,) = struct.unpack("<B", header[8:9])
            (count,) = struct.unpack("<Q", header[9:17])
            needed = 26 + count * (4 + 8)
            if file_size < needed:
                raise _TruncatedIndex(index_path, file_size, needed)
            if count == 0:
                return 0, 0
            f.seek(26 + (count - 1) * 4)
            (last_size,) = struct.unpack("<i", f.read(4))
            f.seek(26 + count * 4 + (count - 1) * 8)
            (last_offset,) = struct.unpack("<q", f.read(8))
            dtype = indexed_dataset._code_to_dtype.get(dtype_code)  # fairseq's own table
            if dtype is None:
                return None
            return count, last_offset + last_size * np.dtype(dtype).itemsize
        if head[:8] == LEGACY_INDEX_MAGIC:
            f.seek(8)
            header = f.read(40)
            if len(header) < 40:
                raise _TruncatedIndex(index_path, file_size, 48)
            _version, _code, element_size, count, n_sizes = struct.unpack("<QQQQQ", header)
            needed = 48 + (count + 1) * 16 + n_sizes * 8
            if file_size < needed:
                raise _TruncatedIndex(index_path, file_size, needed)
            f.seek(48 + (count + 1) * 8 + count * 8)
            (end,) = struct.unpack("<q", f.read(8))
            return count, end * element_size
    return None


REBUILD = ("re-run fairseq-preprocess (or scripts/prepare_corpus.sh) to rebuild it, or copy the "
           "data-bin again")


def check_split(data: str, split: str, validation: bool = False) -> None:
    """Raise :class:`DataBinError` if the split ``split`` of the data-bin ``data`` cannot be
    read whole: its ``.bin`` or ``.idx`` missing while the other is there, an index cut short,
    a ``.bin`` shorter (or longer) than its index says, or no tokens at all
    (:func:`check_split_not_empty`; ``validation`` as there). A split with neither file is left
    to the task (fairseq names it). Reads the index's header and last entry, and the sizes of
    both files: cheap enough to run on every load."""
    prefix = os.path.join(data, split)
    bin_path = indexed_dataset.data_file_path(prefix)
    idx_path = indexed_dataset.index_file_path(prefix)
    has_bin, has_idx = os.path.isfile(bin_path), os.path.isfile(idx_path)
    if not (has_bin or has_idx):
        return
    if has_bin != has_idx:
        present, missing = (bin_path, idx_path) if has_bin else (idx_path, bin_path)
        raise DataBinError(f"the {split} split of {data} is incomplete: {present} is there but "
                           f"{missing} is not; {REBUILD}")
    try:
        indexed = indexed_bytes(idx_path)
    except _TruncatedIndex as error:
        raise DataBinError(f"the {split} split of {data} is truncated: its index {error.path} "
                           f"has {error.size} bytes, fewer than the {error.needed} its header "
                           f"announces (its write or copy was cut short); {REBUILD}") from None
    actual = os.path.getsize(bin_path)
    if indexed is None or indexed[1] == actual == 0:
        check_split_not_empty(data, split, validation=validation)
        return
    sequences, expected = indexed
    if actual < expected:
        raise DataBinError(
            f"the {split} split of {data} is truncated: {bin_path} has {actual} bytes, but "
            f"{idx_path} indexes {expected} ({sequences} sequences; its write or copy was cut "
            f"short); {REBUILD}")
    if actual > expected:
        raise DataBinError(
            f"the {split} split of {data} does not match its index: {bin_path} has {actual} "
            f"bytes, but {idx_path} indexes {expected} ({sequences} sequences), so one of the "
            f"two comes from another run; {REBUILD}")


def check_splits(data: str, split: str, validation: bool = False, combine: bool = False) -> None:
    """:func:`check_split` for ``split`` and, with ``combine``, for the ``split1``, ``split2``
    ... after it that fairseq's ``load_indexed_dataset(combine=True)`` reads while they exist."""
    check_split(data, split, validation=validation)
    for k in itertools.count(1):
        if not combine or not os.path.isfile(indexed_dataset.index_file_path(
                os.path.join(data, f"{split}{k}"))):
            return
        check_split(data, f"{split}{k}", validation=validation)


def special_ids(dictionary) -> list:
    """Ids of a fairseq dictionary that are not text: fairseq's specials (``<s>``, ``<pad>``,
    ``</s>``, ``<unk>``), ``<mask>`` and the ``madeupword`` padding symbols fairseq-preprocess
    adds. Infilling never masks nor predicts them; the commonest-piece baseline skips them."""
    return [index for index, symbol in enumerate(dictionary.symbols)
            if index < dictionary.nspecial or symbol == "<mask>" or symbol.startswith("madeupword")]
