"""``--criterion masked_lm_flops``: ``masked_lm_categories`` that also counts training FLOPs.

A drop-in for fairseq's ``masked_lm`` criterion (same loss, gradient and sample size) that
keeps the per-category metrics of :mod:`~fairseq_ext.criterions.masked_lm_categories` and
logs, for every training update, its FLOPs computed with :mod:`fairseq_ext.flops` from the
batch's **actual** shapes: the length the encoder really ran on (3ML: its kept tokens per
sequence, the [MASK]s removed; others: the padded input length), the decoder's length, and the
number of predicted [MASK] and other corrupted tokens.

Logged, in PFLOPs (1e15), in the progress bar, json logs and tensorboard:

* ``pflops``: FLOPs per update (averaged over the log interval);
* ``total_pflops``: the running total since the start of training, kept in the checkpoint and
  restored on resume (:mod:`fairseq_ext.flops.training_metrics`, which any criterion can use).

Training FLOPs = 3 x forward, which is what ``FlopCounterMode`` measures; the 3ML paper says
forward and backward "consume similar FLOPs" (2 x forward), so our absolute figures are 1.5 x
that convention, while speedups and equal-budget update counts are the same either way.

An architecture without a FLOPs formula stops at the first training step with an error that
names it, never a silent 0.
"""
import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig

from fairseq_ext.criterions.masked_lm_categories import MaskedLmCategoriesLoss
from fairseq_ext.flops.training_metrics import TRAIN_FLOPS_KEY, TrainingFlops, log_training_flops
from fairseq_ext.models.masked_lm_run import masked_lm_run


def as_float64(count):
    """A count as float64: a tensor stays on its device (no read), a number becomes a float."""
    return count.double() if torch.is_tensor(count) else float(count)


@register_criterion("masked_lm_flops", dataclass=MaskedLmConfig)
class MaskedLmFlopsLoss(MaskedLmCategoriesLoss):
    """fairseq's masked LM loss, per-category metrics, and training FLOPs per update."""

    def __init__(self, cfg: MaskedLmConfig, task):
        super().__init__(cfg, task)
        self.training_flops = TrainingFlops(len(task.source_dictionary))

    def add_logging(self, model, sample, extra, logging_output) -> None:
        if model.training:
            logging_output[TRAIN_FLOPS_KEY] = self.batch_training_flops(model, sample, extra,
                                                                        logging_output)

    def batch_training_flops(self, model, sample, extra, logging_output):
        """Training FLOPs of this batch from its actual shapes (3 x forward): the lengths 3ML
        reports it ran on (its :class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun`'s
        ``encoder_length``, ``decoder_padded_length``), else the padded input length. A 0-dim
        float64 tensor on the batch's device: the token counts are not read back (summed and
        read when the logs are)."""
        sequences, length = sample["net_input"]["src_tokens"].shape
        run = masked_lm_run(extra)
        run_lengths = None if run is None else (run.encoder_length, run.decoder_padded_length)
        return self.training_flops.of_batch(
            model, sequences, length, as_float64(logging_output["n_mask"]),
            as_float64(logging_output["n_replaced"] + logging_output["n_unchanged"]), run_lengths)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        log_training_flops(logging_outputs)
