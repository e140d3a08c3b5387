"""What must be identical between two checkpoints of the same update: the exact-resume standard
that ``tests/test_exact_resume.py`` and ``tests/test_checkpoint_faults.py`` hold runs to.

:func:`training_state` picks the model's weights, Adam's moments and step, the lr scheduler, the
data iterator's position and the value of every logged training metric at that update (fairseq
keeps each meter's last value, unrounded, in ``extra_state["metrics"]``: the loss of that update,
its per-category losses, ``pflops``, ``gnorm``, ...) with the running ``total_pflops`` total;
:func:`assert_identical` compares them bit for bit.
"""
import torch

import fairseq_ext  # noqa: F401  (the allow-list: torch.load of fairseq checkpoints)
from fairseq_ext.flops.training_metrics import _TOTAL_KEY

#: Meters whose value is a measurement of the update, not a clock.
EXACT_METERS = ("AverageMeter", "SumMeter")


def assert_identical(a, b, where):
    """``a == b`` bit for bit, through dicts, lists and tensors (dtype included)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and torch.equal(a, b), f"{where}: {a} != {b}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {a.keys()} != {b.keys()}"
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {a} != {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def training_state(checkpoint):
    """What must be identical after an update, from a checkpoint (a path, or the dict that
    ``torch.load`` / fairseq's ``load_checkpoint_to_cpu`` returned for one). Needs the
    ``masked_lm_flops`` or ``bidirectional_lm`` criterion (the ``total_pflops`` meter)."""
    state = torch.load(checkpoint, map_location="cpu") if not isinstance(checkpoint, dict) \
        else checkpoint
    extra = state["extra_state"]
    history = state["optimizer_history"][-1]
    # The epoch's "train" meters are what the log prints. Of the "default" aggregator only our
    # running total counts: fairseq keeps logging into the pre-restore "default" object after a
    # resume, so the saved one's other meters stop at the resumed update (nothing reads them).
    meters = {name: meter_state for _, name, kind, meter_state in extra["metrics"]["train"]
              if kind in EXACT_METERS}
    meters["total_pflops"] = next(meter_state for _, name, _, meter_state
                                  in extra["metrics"]["default"] if name == _TOTAL_KEY)
    return {"model": state["model"], "optimizer": state["last_optimizer_state"],
            "lr_scheduler": history["lr_scheduler_state"], "num_updates": history["num_updates"],
            "train_iterator": extra["train_iterator"], "meters": meters}
