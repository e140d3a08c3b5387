"""What fairseq's own tests rely on, held for every function our fairseq patch changes.

The patch series (``patches/series``) exists to fix fairseq, so it must change nothing else that
fairseq v0.12.2's own tests check. Its item 6 once removed partial checkpoint files at the top
of ``load_checkpoint``; fairseq's ``tests/test_train.py`` calls that function with
``save_dir=None`` and a mocked file system, and 5 of its 6 tests failed with ``TypeError: stat:
path should be string ... not NoneType``. These tests are ours, written from reading fairseq's:

* ``load_checkpoint`` with ``save_dir=None`` and the file system mocked as fairseq's tests mock
  it (``os.path.join``, ``os.path.isfile``, ``PathManager.exists``): no checkpoint, a full epoch,
  a partial epoch, ``--finetune-from-model`` on the first launch and on a resume. Where
  training resumes and which reset flags reach the trainer are computed here by hand. With a
  real ``--save-dir`` holding a partial ``.tmp``, ``load_checkpoint`` touches no file (Python's
  audit hooks record every open, listing, removal and rename).
* ``save_checkpoint`` with ``--no-save``: the directory is made, the best value kept, nothing
  written, the trainer never asked to save.
* The partial-file clean-up lives where stock ``fairseq-train`` already touches ``--save-dir``
  (``verify_checkpoint_directory``); an unset, missing or remote ``--save-dir`` is left alone.
* The atomic copy goes through ``PathManager`` (copy, open, rename) only, so mocking those
  leaves the disk untouched.
* Batching and token blocks (patch items 1 and 2) on the cases fairseq's ``test_iterators`` and
  ``test_token_block_dataset`` cover: ``--skip-remainder-batch`` and ``--update-freq`` grouping
  on batches that keep the short last one, the ``eos`` and ``complete`` break modes on
  hand-made sentences, and block offsets past 2**32 tokens. (``batch_by_size`` itself, the case
  of fairseq's ``test_data_utils``, is compared with a pure-Python reference over 216 settings
  in ``tests/test_fairseq_build.py``.)

fairseq's own suite run against this build and against the unpatched wheel, test by test:
``docs/fairseq_tests.md``.
"""
import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import ListDataset, TokenBlockDataset, data_utils, iterators
from fairseq.dataclass.configs import CheckpointConfig
from omegaconf import OmegaConf

# --- recording file-system access -------------------------------------------------------------

#: Audit events (PEP 578) by which a Python program touches the file system.
FILE_SYSTEM_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.remove", "os.rename",
                                "os.replace", "os.mkdir", "os.rmdir", "os.truncate",
                                "shutil.copyfile", "os.utime", "os.chmod"})
_recorders = []


def _audit(event, args):
    if _recorders and event in FILE_SYSTEM_EVENTS:
        path = args[0] if args else None
        if isinstance(path, int):  # open(fd): no new access
            return
        if isinstance(path, (str, bytes, os.PathLike)) and os.fsdecode(path).endswith(
                (".py", ".pyc", ".so")):  # an import, not the code under test
            return
        _recorders[-1].append((event, os.fsdecode(path) if path is not None else None))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one records only when asked


@contextlib.contextmanager
def file_system_access():
    """Yield the list of (event, path) file-system accesses made inside the block."""
    events = []
    _recorders.append(events)
    try:
        yield events
    finally:
        _recorders.remove(events)


# --- load_checkpoint, as fairseq's test_train.py calls it ---------------------------------------

EPOCH_SIZE = 150


def epoch_iterator():
    """An epoch of EPOCH_SIZE one-item batches over items 0..EPOCH_SIZE-1, unshuffled."""
    items = torch.arange(EPOCH_SIZE)
    dataset = ListDataset(items, sizes=np.ones(EPOCH_SIZE, dtype=np.int64))
    return iterators.EpochBatchIterator(dataset=dataset, collate_fn=dataset.collater,
                                        batch_sampler=[[i] for i in range(EPOCH_SIZE)],
                                        disable_shuffling=True)


def fake_trainer(saved):
    """A trainer whose ``load_checkpoint`` returns ``saved`` (an iterator position as
    ``(epoch, iterations_in_epoch)``, or None when there is no checkpoint)."""
    trainer = mock.MagicMock()
    trainer.checkpoint_suffix = ""
    trainer.load_checkpoint.return_value = None if saved is None else {
        "train_iterator": {"epoch": saved[0], "iterations_in_epoch": saved[1],
                           "shuffle": False}}
    trainer.get_train_iterator.side_effect = lambda epoch, **kw: epoch_iterator()
    return trainer


def checkpoint_config(**overrides):
    """fairseq's whole checkpoint config with its defaults, ``save_dir`` unset."""
    fields = {**dataclasses.asdict(CheckpointConfig()), "save_dir": None, **overrides}
    return OmegaConf.create(fields)


@pytest.fixture
def mocked_file_system():
    """The file system as fairseq's tests mock it: every path joins to the same stand-in, every
    file exists for ``os.path.isfile``; ``PathManager.exists`` is returned for the test to
    program (False: nothing exists)."""
    exists = mock.MagicMock(return_value=False)
    with mock.patch("os.path.join", mock.MagicMock(return_value="<joined>")), \
            mock.patch("os.path.isfile", mock.MagicMock(return_value=True)), \
            mock.patch("os.makedirs", mock.MagicMock()), \
            mock.patch("fairseq.file_io.PathManager.exists", exists):
        yield exists


def first_items(epoch_itr, n):
    itr = epoch_itr.next_epoch_itr(shuffle=False)
    return [int(next(itr)[0]) for _ in range(n)]


@pytest.mark.parametrize("saved, epoch, first", [
    (None, 1, 0),            # no checkpoint: epoch 1 from its first item
    ((1, 0), 1, 0),          # a checkpoint at the start of epoch 1
    ((2, 50), 2, 50),        # partial: 50 of epoch 2's 150 batches done, the 51st comes next
    ((2, EPOCH_SIZE), 3, 0),  # full: epoch 2 done, epoch 3 from its first item
])
def test_load_checkpoint_resumes_where_the_checkpoint_stopped(mocked_file_system, saved, epoch,
                                                              first):
    trainer = fake_trainer(saved)
    with file_system_access() as accessed:
        extra_state, epoch_itr = checkpoint_utils.load_checkpoint(checkpoint_config(), trainer)
    assert accessed == []
    (path, *flags), kwargs = trainer.load_checkpoint.call_args
    assert path == "<joined>" and flags == [False, False, {}] and kwargs == {"reset_meters": False}
    trainer.get_train_iterator.assert_called_once_with(epoch=saved[0] if saved else 1,
                                                       load_dataset=True)
    assert first_items(epoch_itr, 3) == [first, first + 1, first + 2]
    assert epoch_itr.epoch == epoch
    trainer.lr_step.assert_called_once_with(epoch)


def test_load_checkpoint_partial_epoch_runs_to_its_end_then_the_next(mocked_file_system):
    trainer = fake_trainer((2, 50))
    _, epoch_itr = checkpoint_utils.load_checkpoint(checkpoint_config(), trainer)
    itr = epoch_itr.next_epoch_itr(shuffle=False)
    assert [int(batch[0]) for batch in itr] == list(range(50, EPOCH_SIZE))
    assert epoch_itr.iterations_in_epoch == EPOCH_SIZE and not itr.has_next()
    epoch_itr.next_epoch_itr(shuffle=False)
    assert (epoch_itr.epoch, epoch_itr.iterations_in_epoch) == (3, 0)


PRETRAINED = "/pretrained/model.pt"


@pytest.mark.parametrize("last_exists", [False, True], ids=["first_launch", "resume"])
def test_finetune_from_model(mocked_file_system, last_exists):
    """First launch: the pretrained model, everything reset (the dataloader too: epoch 1, not
    the saved position, epoch 2). A later launch (checkpoint_last exists): checkpoint_last,
    nothing reset, resumed in epoch 2."""
    mocked_file_system.side_effect = lambda path: path == PRETRAINED or (
        last_exists and path == "<joined>")
    trainer = fake_trainer((2, 50))
    with file_system_access() as accessed:
        checkpoint_utils.load_checkpoint(checkpoint_config(finetune_from_model=PRETRAINED),
                                         trainer)
    assert accessed == []
    (path, reset_optimizer, reset_lr_scheduler, _), kwargs = trainer.load_checkpoint.call_args
    resets = [reset_optimizer, reset_lr_scheduler, kwargs["reset_meters"]]
    if last_exists:
        assert path == "<joined>" and resets == [False, False, False]
        trainer.get_train_iterator.assert_called_once_with(epoch=2, load_dataset=True)
    else:
        assert path == PRETRAINED and resets == [True, True, True]
        trainer.get_train_iterator.assert_called_once_with(epoch=1, load_dataset=True)


@pytest.mark.parametrize("flag", ["reset_optimizer", "reset_lr_scheduler", "reset_meters",
                                  "reset_dataloader"])
def test_finetune_from_model_refuses_reset_flags(mocked_file_system, flag):
    trainer = fake_trainer(None)
    cfg = checkpoint_config(finetune_from_model=PRETRAINED, **{flag: True})
    with pytest.raises(ValueError, match="--finetune-from-model can not be set together"):
        checkpoint_utils.load_checkpoint(cfg, trainer)
    trainer.load_checkpoint.assert_not_called()


def test_load_checkpoint_leaves_the_save_dir_alone(tmp_path):
    """A real --save-dir with a partial file an interrupted write left: load_checkpoint asks
    PathManager whether checkpoint_last.pt exists and the trainer to load it, and touches
    nothing itself (the partial file is verify_checkpoint_directory's business)."""
    partial = tmp_path / "checkpoint_last.pt.tmp"
    partial.write_bytes(b"PK\x03\x04 cut short")
    trainer = fake_trainer(None)
    with file_system_access() as accessed:
        checkpoint_utils.load_checkpoint(checkpoint_config(save_dir=str(tmp_path)), trainer)
    assert accessed == []
    assert trainer.load_checkpoint.call_args[0][0] == str(tmp_path / "checkpoint_last.pt")
    assert partial.read_bytes() == b"PK\x03\x04 cut short"


# --- save_checkpoint --no-save ---------------------------------------------------------------


def test_save_checkpoint_with_no_save_writes_nothing(tmp_path):
    save_dir = tmp_path / "checkpoints"
    trainer = mock.MagicMock(data_parallel_rank=0)
    cfg = checkpoint_config(save_dir=str(save_dir), no_save=True)
    with mock.patch.object(checkpoint_utils.save_checkpoint, "best", 2.5, create=True):
        assert checkpoint_utils.save_checkpoint(cfg, trainer, mock.MagicMock(), 1.5) is None
        assert checkpoint_utils.save_checkpoint.best == 1.5  # min(1.5, 2.5): best is kept
        assert checkpoint_utils.save_checkpoint(cfg, trainer, mock.MagicMock(), 3.0) is None
        assert checkpoint_utils.save_checkpoint.best == 1.5
    assert save_dir.is_dir() and list(save_dir.iterdir()) == []
    trainer.save_checkpoint.assert_not_called()
    trainer.consolidate_optimizer.assert_not_called()


# --- verify_checkpoint_directory and the atomic copy -------------------------------------------


def test_verify_checkpoint_directory_removes_partial_checkpoints_only(tmp_path, caplog):
    names = ["checkpoint_last.pt.tmp", "checkpoint_2_400-shard1.pt.tmp", "checkpoint3.pt.tmp",
             "checkpoint_last.pt", "notes.tmp", "checkpoint_best.pt.tmp.keep", "dummy.txt"]
    for name in names:
        (tmp_path / name).write_text(name)
    with caplog.at_level("INFO", logger="fairseq.checkpoint_utils"):
        checkpoint_utils.verify_checkpoint_directory(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_best.pt.tmp.keep", "checkpoint_last.pt", "dummy.txt", "notes.tmp"]
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"removing {tmp_path / n}, left by an interrupted checkpoint write"
        for n in sorted(names[:3])]


def test_verify_checkpoint_directory_makes_a_missing_directory(tmp_path):
    save_dir = tmp_path / "a" / "b"
    checkpoint_utils.verify_checkpoint_directory(str(save_dir))
    assert save_dir.is_dir() and list(save_dir.iterdir()) == []


@pytest.mark.parametrize("save_dir", [None, "/no/such/dir", "manifold://bucket/checkpoints"])
def test_partial_checkpoint_cleanup_leaves_unset_missing_and_remote_dirs_alone(save_dir):
    with file_system_access() as accessed, \
            mock.patch("fairseq.file_io.PathManager.supports_rename",
                       lambda path: "://" not in path):
        checkpoint_utils.remove_partial_checkpoints(save_dir)
    assert accessed == []


def test_atomic_copy_goes_through_path_manager_only(tmp_path):
    """With PathManager's copy, open and rename mocked (as a test of remote storage would), the
    copy touches no file: the calls are the copy into NAME.tmp and its rename over NAME."""
    src, dst = str(tmp_path / "checkpoint_1_3.pt"), str(tmp_path / "checkpoint_last.pt")
    with mock.patch("fairseq.file_io.PathManager.copy", return_value=True) as copy, \
            mock.patch("fairseq.file_io.PathManager.open", mock.mock_open()) as opened, \
            mock.patch("fairseq.file_io.PathManager.rename") as rename, \
            file_system_access() as accessed:
        assert checkpoint_utils.copy_checkpoint(src, dst)
    copy.assert_called_once_with(src, dst + ".tmp", overwrite=True)
    opened.assert_called_once_with(dst + ".tmp", "rb")
    rename.assert_called_once_with(dst + ".tmp", dst)
    # the one access of its own: the directory is opened to sync the rename (durable only so)
    assert accessed == [("open", str(tmp_path))] and not Path(dst).exists()


def test_a_failed_copy_is_reported_and_renames_nothing(tmp_path):
    src, dst = str(tmp_path / "a.pt"), str(tmp_path / "checkpoint_last.pt")
    with mock.patch("fairseq.file_io.PathManager.copy", return_value=False), \
            mock.patch("fairseq.file_io.PathManager.rename") as rename:
        assert checkpoint_utils.copy_checkpoint(src, dst) is False
    rename.assert_not_called()


# --- batching and token blocks (patch items 1 and 2), fairseq's iterator cases -----------------


def batches_of(n_items, batch_size, multiple=1):
    """The batches fairseq makes for ``n_items`` one-token items, ``--batch-size``,
    ``--required-batch-size-multiple``."""
    return data_utils.batch_by_size(np.arange(n_items), lambda i: 1, max_sentences=batch_size,
                                    required_batch_size_multiple=multiple)


@pytest.mark.parametrize("n_items, batch_size, multiple", [
    (3, 1, 1), (3, 2, 1), (3, 4, 1), (10, 3, 1), (9, 3, 1),
    (20, 16, 8), (2, 16, 8)])  # patch item 1: the short last batch is kept, not dropped
@pytest.mark.parametrize("skip", [False, True])
def test_skip_remainder_batch_on_batches_that_keep_the_short_last_one(n_items, batch_size,
                                                                      multiple, skip):
    batches = batches_of(n_items, batch_size, multiple)
    assert [len(b) for b in batches] == [batch_size] * (n_items // batch_size) + (
        [n_items % batch_size] if n_items % batch_size else [])  # the short one kept
    dataset = ListDataset(list(range(n_items)), sizes=np.ones(n_items, dtype=np.int64))
    epoch = iterators.EpochBatchIterator(dataset=dataset, collate_fn=dataset.collater,
                                         batch_sampler=batches, disable_shuffling=True,
                                         skip_remainder_batch=skip).next_epoch_itr()
    expected = len(batches) - 1 if skip else len(batches)  # fairseq drops the last, whatever
    assert len(epoch) == expected
    seen = [item for batch in epoch for item in batch]
    assert seen == [int(i) for b in batches[:expected] for i in b]


@pytest.mark.parametrize("n_batches, update_freq", [(9, 2), (9, 3), (5, 2), (1, 2)])
@pytest.mark.parametrize("skip", [False, True])
def test_update_freq_groups_with_and_without_the_remainder(n_batches, update_freq, skip):
    batches = batches_of(n_batches * 2, 2)
    dataset = ListDataset(list(range(n_batches * 2)), sizes=np.ones(n_batches * 2, dtype=np.int64))
    epoch = iterators.EpochBatchIterator(dataset=dataset, collate_fn=dataset.collater,
                                         batch_sampler=batches, disable_shuffling=True)
    grouped = iterators.GroupedIterator(epoch.next_epoch_itr(), update_freq,
                                        skip_remainder_batch=skip)
    full, rest = divmod(n_batches, update_freq)
    assert len(grouped) == full + (0 if skip or not rest else 1)
    sizes = [len(group) for group in grouped]
    assert sizes == [update_freq] * full + ([rest] if rest and not skip else [])


def token_blocks(sentences, **kwargs):
    sentences = [torch.tensor(s) for s in sentences]
    dataset = TokenBlockDataset(sentences, [len(s) for s in sentences], pad=0, eos=1, **kwargs)
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_eos_break_mode_keeps_each_sentence_even_a_lone_eos():
    """Patch item 2 (np.compat.long -> np.int64) is on this path; numpy 2 crashed in it."""
    for sentences in ([[5, 4, 3, 2, 1], [1], [8, 7, 6, 1]], [[5, 4, 3, 2, 1], [8, 7, 6, 1], [1]]):
        assert token_blocks(sentences, block_size=None, break_mode="eos") == sentences


def test_none_and_complete_break_modes_by_hand():
    sentences = [[5, 4, 3, 2, 1], [8, 7, 6, 1], [9, 1]]
    assert token_blocks(sentences, block_size=3, break_mode="none") == [
        [5, 4, 3], [2, 1, 8], [7, 6, 1], [9, 1]]
    assert token_blocks(sentences, block_size=6, break_mode="complete") == [
        [5, 4, 3, 2, 1], [8, 7, 6, 1, 9, 1]]
    # a sentence longer than the block stands alone; a lone eos packs with its neighbour
    assert token_blocks([[4, 3, 2, 1], [5, 1], [1], [6, 1]], block_size=3,
                        break_mode="complete") == [[4, 3, 2, 1], [5, 1, 1], [6, 1]]


@pytest.mark.parametrize("break_mode", ["complete", "eos"])
def test_block_offsets_past_four_billion_tokens(break_mode):
    """Offsets stay int64 past 2**32 (fairseq's numpy type-promotion regression test; the
    ``eos`` mode's index is the array our patch retyped). One sentence object repeated, so
    the test holds no 4 GB of tokens."""
    sentence = torch.arange(10000)
    n = 430000
    dataset = TokenBlockDataset([sentence] * n, np.full(n, 10000), block_size=6, pad=0, eos=1,
                                break_mode=break_mode)
    start, end = dataset.slice_indices[-1]
    assert end == n * 10000 > 2**32 and start == end - 10000
    assert isinstance(end + 1, (int, np.integer))  # np.uint64 + 1 would be a float
    assert dataset.block_to_dataset_index.dtype == np.int64
    assert dataset[len(dataset) - 1].tolist() == sentence.tolist()
