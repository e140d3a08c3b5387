"""A data-bin split that cannot be read whole is refused when it is loaded, in one line naming
the file, both sizes and the fix (:mod:`fairseq_ext.data.data_bin`).

The splits are written here with fairseq's own builders, in both of its binary formats (``mmap``,
fairseq-preprocess's default, and the legacy ``lazy``/``cached`` one), and cut as a killed
``fairseq-preprocess`` or copy leaves them. The byte counts in the messages are computed here
from the sequences written, not read back from the index. Through the CLIs:
``tests/test_user_errors.py``.
"""
import numpy as np
import pytest
import torch
from fairseq.data import data_utils, indexed_dataset

from fairseq_ext.cli.errors import UserInputError
from fairseq_ext.data.data_bin import (
    DataBinError,
    check_split,
    check_splits,
    indexed_bytes,
)

#: Sequence lengths of the test split: 7 sequences, 40 tokens.
LENGTHS = [5, 1, 9, 3, 12, 6, 4]
REBUILD = ("re-run fairseq-preprocess (or scripts/prepare_corpus.sh) to rebuild it, or copy the "
           "data-bin again")


def write_split(directory, split="train", impl="mmap", vocab_size=1000, lengths=LENGTHS):
    """A split of ``lengths`` sequences written by fairseq's builder for ``impl``; returns
    the bytes of token data it holds, computed from the lengths and the dtype fairseq picks."""
    builder = indexed_dataset.make_builder(str(directory / f"{split}.bin"), impl=impl,
                                           vocab_size=vocab_size)
    for i, length in enumerate(lengths):
        builder.add_item(torch.arange(length, dtype=torch.int64) + i)
    builder.finalize(str(directory / f"{split}.idx"))
    itemsize = (np.dtype(indexed_dataset.best_fitting_int_dtype(vocab_size)).itemsize
                if impl == "mmap" else 4)  # the legacy (lazy/cached) builder writes int32
    return sum(lengths) * itemsize


@pytest.mark.parametrize("impl", ["mmap", "lazy"])
@pytest.mark.parametrize("vocab_size", [200, 70000])  # uint16/uint32 tokens (mmap)
def test_a_whole_split_passes_and_its_size_is_read_off_the_index(tmp_path, impl, vocab_size):
    data_bytes = write_split(tmp_path, impl=impl, vocab_size=vocab_size)
    assert (tmp_path / "train.bin").stat().st_size == data_bytes
    assert indexed_bytes(str(tmp_path / "train.idx")) == (len(LENGTHS), data_bytes)
    check_split(str(tmp_path), "train")
    # fairseq reads it whole
    dataset = data_utils.load_indexed_dataset(str(tmp_path / "train"), None, impl)
    assert [len(dataset[i]) for i in range(len(dataset))] == LENGTHS


@pytest.mark.parametrize("impl", ["mmap", "lazy"])
@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_a_bin_cut_short_names_both_sizes(tmp_path, impl, keep):
    data_bytes = write_split(tmp_path, impl=impl)
    cut = int(data_bytes * keep)
    with open(tmp_path / "train.bin", "r+b") as f:
        f.truncate(cut)
    with pytest.raises(DataBinError) as error:
        check_split(str(tmp_path), "train")
    assert str(error.value) == (
        f"the train split of {tmp_path} is truncated: {tmp_path}/train.bin has {cut} bytes, but "
        f"{tmp_path}/train.idx indexes {data_bytes} (7 sequences; its write or copy was cut "
        f"short); {REBUILD}")
    assert isinstance(error.value, UserInputError)  # fairseq's tools print it as one line


def test_without_the_check_fairseq_fails_only_when_a_batch_reaches_the_lost_tokens(tmp_path):
    """Why the check runs at load: fairseq maps the cut file without complaint."""
    data_bytes = write_split(tmp_path, vocab_size=200)  # two bytes a token
    with open(tmp_path / "train.bin", "r+b") as f:
        f.truncate(data_bytes // 2)  # the last sequences lost
    dataset = data_utils.load_indexed_dataset(str(tmp_path / "train"), None, "mmap")
    assert dataset[0].tolist() == list(range(5))
    with pytest.raises(ValueError, match="offset must be non-negative and no greater than "
                                         f"buffer length \\({data_bytes // 2}\\)"):
        dataset[len(LENGTHS) - 1]


@pytest.mark.parametrize("impl, header", [("mmap", 26), ("lazy", 48)])
def test_an_index_cut_short(tmp_path, impl, header):
    write_split(tmp_path, impl=impl)
    index = tmp_path / "train.idx"
    size = index.stat().st_size
    # mmap: 26 header bytes, then 4 + 8 bytes a sequence; lazy: 48, then 8 + 8 a sequence
    # (+ 16), then 8 a size
    assert size == (header + 12 * 7 if impl == "mmap" else header + 16 * 8 + 8 * 7)
    with open(index, "r+b") as f:
        f.truncate(size - 5)
    with pytest.raises(DataBinError, match=(
            f"the train split of {tmp_path} is truncated: its index {tmp_path}/train.idx has "
            f"{size - 5} bytes, fewer than the {size} its header announces")):
        check_split(str(tmp_path), "train")
    with open(index, "r+b") as f:
        f.truncate(10)  # inside the header itself
    with pytest.raises(DataBinError, match=f"has 10 bytes, fewer than the {header} its header"):
        check_split(str(tmp_path), "train")


def test_a_bin_longer_than_its_index(tmp_path):
    data_bytes = write_split(tmp_path, vocab_size=200)
    with open(tmp_path / "train.bin", "ab") as f:
        f.write(b"\x00" * 10)
    with pytest.raises(DataBinError, match=(
            f"{tmp_path}/train.bin has {data_bytes + 10} bytes, but {tmp_path}/train.idx "
            f"indexes {data_bytes} \\(7 sequences\\), so one of the two comes from another run")):
        check_split(str(tmp_path), "train")


@pytest.mark.parametrize("remove, keep", [("idx", "bin"), ("bin", "idx")])
def test_half_a_split(tmp_path, remove, keep):
    write_split(tmp_path)
    (tmp_path / f"train.{remove}").unlink()
    with pytest.raises(DataBinError, match=(
            f"the train split of {tmp_path} is incomplete: {tmp_path}/train.{keep} is there but "
            f"{tmp_path}/train.{remove} is not")):
        check_split(str(tmp_path), "train")


def test_an_empty_split_keeps_its_own_message(tmp_path):
    write_split(tmp_path, split="valid", lengths=[])
    assert (tmp_path / "valid.bin").stat().st_size == 0
    with pytest.raises(DataBinError, match=f"the valid split of {tmp_path} is empty"):
        check_split(str(tmp_path), "valid", validation=True)


def test_a_split_that_is_not_there_is_left_to_the_task(tmp_path):
    check_split(str(tmp_path), "test")  # fairseq says "Dataset not found" in its own words


def test_combined_splits_are_each_checked(tmp_path):
    """fairseq-train loads train, train1, train2 ... while they exist (combine=True)."""
    write_split(tmp_path, "train")
    write_split(tmp_path, "train1")
    data_bytes = write_split(tmp_path, "train2", vocab_size=200)
    with open(tmp_path / "train2.bin", "r+b") as f:
        f.truncate(data_bytes - 1)
    check_splits(str(tmp_path), "train")  # without combine: train only
    with pytest.raises(DataBinError, match="the train2 split .* is truncated"):
        check_splits(str(tmp_path), "train", combine=True)
