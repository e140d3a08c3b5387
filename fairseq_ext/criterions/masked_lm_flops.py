"""``--criterion masked_lm_flops``: ``masked_lm_categories`` that also counts training FLOPs.

A drop-in for fairseq's ``masked_lm`` criterion (same loss, gradient and sample size) that
keeps the per-category metrics of :mod:`~fairseq_ext.criterions.masked_lm_categories` and
logs, for every training update, its FLOPs computed with :mod:`fairseq_ext.flops` from the
batch's **actual** shapes: the padded length the encoder really ran on (3ML: after the [MASK]s
were removed, padding included), the decoder's length, and the number of predicted [MASK] and
other corrupted tokens. Training FLOPs = 3 x forward.

Logged, in PFLOPs (1e15), in the progress bar, json logs and tensorboard:

* ``pflops``: FLOPs per update (averaged over the log interval);
* ``total_pflops``: the running total since the start of training. It is kept in fairseq's
  ``default`` metrics aggregator, which fairseq saves in the checkpoint's extra state
  (``extra_state["metrics"]``) and restores on ``--restore-file`` resume, so the total
  survives save/resume (``--reset-meters`` starts it again from 0).

An architecture without a FLOPs formula stops at the first training step with an error that
names it, never a silent 0.
"""
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.logging.meters import SumMeter

from fairseq_ext.criterions.masked_lm_categories import MaskedLmCategoriesLoss

_TOTAL_KEY = "_train_pflops_total"  # leading "_": kept (and checkpointed) but not printed


@register_criterion("masked_lm_flops", dataclass=MaskedLmConfig)
class MaskedLmFlopsLoss(MaskedLmCategoriesLoss):
    """fairseq's masked LM loss, per-category metrics, and training FLOPs per update."""

    def __init__(self, cfg: MaskedLmConfig, task):
        super().__init__(cfg, task)
        self.vocab_size = len(task.source_dictionary)
        self._spec = None

    def model_spec(self, model):
        from fairseq_ext import flops  # not at import: `python -m fairseq_ext.flops` runs it

        if self._spec is None:
            self._spec = flops.spec_from_args(model.args)
        return self._spec

    def add_logging(self, model, sample, extra, logging_output) -> None:
        if model.training:
            logging_output["train_flops"] = self.batch_training_flops(model, sample, extra,
                                                                      logging_output)

    def batch_training_flops(self, model, sample, extra, logging_output) -> float:
        """Training FLOPs of this batch from its actual shapes (3 x forward)."""
        from fairseq_ext import flops

        spec = self.model_spec(model)
        batch, length = sample["net_input"]["src_tokens"].shape
        n_mask = float(logging_output["n_mask"])
        n_other = float(logging_output["n_replaced"] + logging_output["n_unchanged"])
        if spec.encoder_only:
            encoder_length, decoder_length = length, 0
        else:
            encoder_length = extra["encoder_padded_length"]
            decoder_length = extra["decoder_padded_length"]
        per_sequence = flops.forward_flops(spec, encoder_length, decoder_length, n_mask / batch,
                                           n_other / batch, self.vocab_size)
        return flops.TRAINING_MULTIPLIER * per_sequence * batch

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        train_flops = utils.item(sum(log.get("train_flops", 0) for log in logging_outputs))
        if train_flops > 0:
            pflops = train_flops / 1e15
            metrics.log_scalar("pflops", pflops, weight=1)
            _add_to_running_total(pflops)
            metrics.log_derived("total_pflops", _running_total)


def _add_to_running_total(pflops: float) -> None:
    """Add to the total in the ``default`` aggregator, the one fairseq checkpoints.

    ``metrics.get_meters("default")`` is the aggregator fairseq saves and, after a resume, the
    one ``metrics.load_state_dict`` restored. (``metrics.log_scalar_sum`` would write into the
    pre-restore object that fairseq keeps in its list of active aggregators, and the total
    would stop growing after a resume.)
    """
    default = metrics.get_meters("default")
    if _TOTAL_KEY not in default:
        default.add_meter(_TOTAL_KEY, SumMeter(), priority=10)
    default[_TOTAL_KEY].update(pflops)


def _running_total(meters) -> float:
    """The total kept in the ``default`` aggregator, whatever aggregator asks."""
    meter = metrics.get_meter("default", _TOTAL_KEY)
    return meter.sum if meter is not None else 0.0
