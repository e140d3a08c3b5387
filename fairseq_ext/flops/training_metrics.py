"""Training-FLOPs metrics that any criterion can log.

A criterion holds a :class:`TrainingFlops` and, in ``forward``, puts
:meth:`TrainingFlops.of_batch` into its logging output under :data:`TRAIN_FLOPS_KEY` (training
batches only); its ``reduce_metrics`` calls :func:`log_training_flops`, which logs ``pflops``
(training PFLOPs per update), ``total_pflops`` and ``total_tokens`` (running totals since the
start of training, padding excluded). The totals live in fairseq's ``default`` metrics
aggregator, which fairseq saves in the checkpoint and restores on resume (``--reset-meters``
starts them again from 0). FLOPs follow :mod:`fairseq_ext.flops` (training = 3 x forward, 1.5 x
the 3ML paper's convention; ratios the same). The metrics and the curves drawn from them:
docs/flops.md.
"""
from typing import Optional, Tuple

from fairseq import metrics, utils
from fairseq.logging.meters import SumMeter

from fairseq_ext.flops.families import ModelSpec, spec_from_args, training_flops_of_rows

TRAIN_FLOPS_KEY = "train_flops"
_TOTAL_KEY = "_train_pflops_total"  # leading "_": kept (and checkpointed) but not printed
_TOKENS_KEY = "_train_tokens_total"


class TrainingFlops:
    """Training FLOPs of a criterion's batches, through the FLOPs family of its model."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._spec: Optional[ModelSpec] = None

    def model_spec(self, model) -> ModelSpec:
        """The model's :class:`ModelSpec` (read once; an arch without a formula raises
        :class:`~fairseq_ext.flops.families.NoFlopsFormula`, never a silent 0)."""
        if self._spec is None:
            self._spec = spec_from_args(model.args)
        return self._spec

    def of_batch(self, model, sequences: int, length: int, mask_tokens: float,
                 other_predicted_tokens: float,
                 run_lengths: Optional[Tuple[float, float]] = None) -> float:
        """Training FLOPs of a batch of ``sequences`` rows of ``length`` (padded) tokens with
        ``mask_tokens`` ``<mask>`` and ``other_predicted_tokens`` other predicted tokens in all.

        ``run_lengths`` ``(encoder, decoder)``: the lengths per row the model reports it ran on
        (3ML removes the [MASK]s before its encoder and reports the mean kept tokens per row of
        its packed encoder, whose linear layers see no padding; the attention core still runs
        on the padded grid, so this slightly undercounts attention's own work); otherwise the
        family's
        :meth:`~fairseq_ext.flops.families.FlopsFamily.run_lengths`.
        """
        return training_flops_of_rows(self.model_spec(model), sequences, length,
                                      mask_tokens / sequences, other_predicted_tokens / sequences,
                                      self.vocab_size, run_lengths)


def log_training_flops(logging_outputs) -> None:
    """For a criterion's ``reduce_metrics``: log ``pflops`` and the running ``total_pflops`` and
    ``total_tokens`` from the training logging outputs (those with :data:`TRAIN_FLOPS_KEY`)."""
    training = [log for log in logging_outputs if TRAIN_FLOPS_KEY in log]
    train_flops = utils.item(sum(log[TRAIN_FLOPS_KEY] for log in training))
    if train_flops > 0:
        pflops = train_flops / 1e15
        metrics.log_scalar("pflops", pflops, weight=1)
        _add_to_running_total(_TOTAL_KEY, pflops)
        _add_to_running_total(_TOKENS_KEY, utils.item(sum(log.get("ntokens", 0)
                                                          for log in training)))
        metrics.log_derived("total_pflops", lambda meters: _running_total(_TOTAL_KEY))
        metrics.log_derived("total_tokens", lambda meters: _running_total(_TOKENS_KEY))


def _add_to_running_total(key: str, value: float) -> None:
    """Add to a total in the ``default`` aggregator, the one fairseq checkpoints.

    ``metrics.get_meters("default")`` is the aggregator fairseq saves and, after a resume, the
    one ``metrics.load_state_dict`` restored. (``metrics.log_scalar_sum`` would write into the
    pre-restore object that fairseq keeps in its list of active aggregators, and the total
    would stop growing after a resume.)
    """
    default = metrics.get_meters("default")
    if key not in default:
        default.add_meter(key, SumMeter(), priority=10)
    default[key].update(value)


def _running_total(key: str) -> float:
    """A total kept in the ``default`` aggregator, whatever aggregator asks."""
    meter = metrics.get_meter("default", key)
    return meter.sum if meter is not None else 0.0
