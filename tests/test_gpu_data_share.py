"""The share of a data-bin a GPU call carries (fairseq_ext_lab/benchmarks/gpu_data_share.py):
which lines it keeps (by hand), that they are the source's lines token for token, and its
refusals."""
import json
import shutil

import numpy as np
import pytest
from fairseq.data import indexed_dataset

from fairseq_ext_lab.benchmarks import gpu_data_share
from fairseq_ext_lab.benchmarks.gpu_data_share import share_lines, write_share


def test_each_stretch_gives_whole_lines_up_to_its_part():
    """Lines of 3,1,4,1,5,9,2,6 tokens (31), 8 tokens in 2 stretches: the first stretch
    (from token 0) keeps lines 0-1 (4 tokens, its part); the second starts at token 15.5,
    inside line 5 (tokens 14-22), which alone passes its part of 4, so it keeps that line."""
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    assert share_lines(sizes, 8, 2) == [(0, 2), (5, 6)]
    assert share_lines(sizes, 31, 2) == [(0, 8)]  # the whole split
    assert share_lines(sizes, 100, 4) == [(0, 8)]
    # one line longer than every stretch: kept once, never twice
    assert share_lines([100, 1, 1], 10, 3) == [(0, 1)]


def read_lines(prefix):
    dataset = indexed_dataset.MMapIndexedDataset(str(prefix))
    lines = [dataset[i].tolist() for i in range(len(dataset))]
    del dataset
    return lines


def test_the_share_holds_the_sources_lines_spread_over_the_split(tiny_data_bin, tmp_path):
    dest = tmp_path / "share"
    source_train = read_lines(tiny_data_bin / "train")
    total = sum(len(line) for line in source_train)
    summary = write_share(tiny_data_bin, dest, {"train": total // 4, "valid": 10 ** 9}, 8)
    kept = read_lines(dest / "train")
    sizes = [len(line) for line in source_train]
    ranges = share_lines(sizes, total // 4, 8)
    assert kept == [source_train[i] for start, stop in ranges for i in range(start, stop)]
    assert len(ranges) == 8
    # each stretch gives at least its part, and at most one line more
    for start, stop in ranges:
        taken = sum(sizes[start:stop])
        assert total / 4 / 8 <= taken < total / 4 / 8 + max(sizes)
    # stretch k starts at the line that holds token k/8 of the split
    offsets = np.cumsum([0] + sizes)
    for k, (start, _) in enumerate(ranges):
        assert offsets[start] <= k * total / 8 < offsets[start + 1]
    assert read_lines(dest / "valid") == read_lines(tiny_data_bin / "valid")  # all of it
    assert (dest / "dict.txt").read_bytes() == (tiny_data_bin / "dict.txt").read_bytes()
    on_disk = json.loads((dest / gpu_data_share.SHARE_JSON).read_text())
    assert on_disk == json.loads(json.dumps(summary))
    train = on_disk["splits"]["train"]
    assert (train["lines"], train["tokens"], train["source_tokens"]) == (
        len(kept), sum(len(line) for line in kept), total)
    assert on_disk["splits"]["valid"]["share"] == 1.0


def test_a_second_share_replaces_the_first_and_bad_destinations_are_refused(tiny_data_bin,
                                                                            tmp_path):
    dest = tmp_path / "share"
    write_share(tiny_data_bin, dest, {"train": 200, "valid": 50}, 4)
    (dest / "stale.bin").write_bytes(b"x")
    gpu_data_share.main([str(tiny_data_bin), str(dest), "--train-tokens", "300",
                         "--valid-tokens", "60", "--windows", "2"])
    assert not (dest / "stale.bin").exists()
    assert json.loads((dest / "share.json").read_text())["splits"]["train"]["windows"] == 2
    copy = tmp_path / "copy"
    shutil.copytree(tiny_data_bin, copy)
    with pytest.raises(SystemExit, match="would overwrite its source"):
        write_share(copy, copy, {"train": 10}, 2)
    assert (copy / "train.bin").is_file()
    (copy / "valid.idx").unlink()
    with pytest.raises(SystemExit, match="has no valid.idx"):
        write_share(copy, tmp_path / "other", {"train": 10, "valid": 10}, 2)
    with pytest.raises(SystemExit):
        gpu_data_share.main([str(tiny_data_bin), str(dest), "--windows", "0"])
    # a folder of the user's that is not a share is left as it is
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="is not a share"):
        write_share(tiny_data_bin, saved, {"train": 10, "valid": 10}, 2)
    assert (saved / "notes.txt").read_text() == "mine"
