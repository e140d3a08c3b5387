"""Patch items 8 and 9 in-process (the real fairseq-train runs are in tests/test_preemption.py).

* Item 8: ``BufferedIterator`` yields the same batches in the same order; a producer left
  mid-epoch with a full queue ends when ``close_buffered_iterators`` (what fairseq-train calls
  after "done training", and ``atexit``) stops it, and one whose iterator is garbage collected
  is asked to stop.
* Item 9: fairseq's own per-GPU spawn (``call_main``), which needs CUDA devices to run: a
  process that exits 75 after its checkpoint makes the command exit 75, any other failure is
  raised as before; ``--no-save-on-signal``, ``--no-save`` and ``--no-last-checkpoints`` turn
  the handlers off.
"""
import gc
import signal

import pytest
import torch
from fairseq import preemption
from fairseq.data import iterators
from fairseq.dataclass.configs import FairseqConfig
from fairseq.distributed import utils as distributed_utils
from omegaconf import OmegaConf


def producers():
    return list(iterators._running_consumers)


def test_buffered_batches_keep_their_order():
    assert list(iterators.BufferedIterator(3, list(range(50)))) == list(range(50))


def test_a_producer_blocked_on_a_full_queue_ends_when_stopped():
    batches = iterators.BufferedIterator(2, list(range(1000)))
    assert [next(batches) for _ in range(3)] == [0, 1, 2]
    thread = batches._consumer
    assert thread.is_alive() and thread in producers()  # blocked on the full queue
    iterators.close_buffered_iterators()
    assert not thread.is_alive() and thread not in producers()


def test_a_collected_iterator_asks_its_producer_to_stop():
    batches = iterators.BufferedIterator(2, list(range(1000)))
    next(batches)
    thread = batches._consumer
    del batches
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


def spawn_config():
    return OmegaConf.create({
        "distributed_training": {"distributed_init_method": "tcp://localhost:1",
                                 "distributed_no_spawn": False, "distributed_rank": 0,
                                 "distributed_world_size": 2},
        "common": {"tpu": False},
    })


@pytest.mark.parametrize("exit_code", [preemption.PREEMPTED_EXIT_STATUS, 1])
def test_spawned_processes_stopped_on_a_signal_make_the_command_exit_75(exit_code, monkeypatch):
    def spawn(*args, **kwargs):
        raise torch.multiprocessing.ProcessExitedException(
            f"process 0 terminated with exit code {exit_code}", error_index=0, error_pid=1,
            exit_code=exit_code)

    monkeypatch.setattr(torch.multiprocessing, "spawn", spawn)
    if exit_code == preemption.PREEMPTED_EXIT_STATUS:
        with pytest.raises(SystemExit) as stopped:
            distributed_utils.call_main(spawn_config(), main=None)
        assert stopped.value.code == preemption.PREEMPTED_EXIT_STATUS
    else:
        with pytest.raises(torch.multiprocessing.ProcessExitedException):
            distributed_utils.call_main(spawn_config(), main=None)


@pytest.mark.parametrize("flag", [None, "no_save_on_signal", "no_save", "no_last_checkpoints"])
def test_the_handlers_are_on_by_default_and_off_with_each_flag(flag, monkeypatch):
    cfg = OmegaConf.structured(FairseqConfig)
    if flag:
        cfg.checkpoint[flag] = True
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    try:
        preemption.configure(cfg)
        installed = all(signal.getsignal(s) is preemption._record for s in preemption.SIGNALS)
        assert installed == (flag is None)
    finally:
        preemption.uninstall()
    assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before
