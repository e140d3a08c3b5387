"""``--criterion bidirectional_lm``: the loss of generalized bidirectionality (Artetxe et al.,
2022, §2): cross-entropy over the predicted positions only.

The ``bidirectional_lm`` task's ``target`` holds the output at the last ``n_predict`` tokens of
each document (the masked token for the last ``n_mask``, the next token for the others) and
padding elsewhere. The criterion asks the model for logits at those positions only
(``masked_tokens``, as RoBERTa's), so the output projection runs on ``n_predict`` tokens, which
is what the FLOPs formula counts.

Logged (base 2, like fairseq's criteria: ``loss / sample_size / ln 2``):

* ``loss`` / ``ppl``: over every predicted token; ``sample_size`` is their number;
* ``loss_mask`` / ``ppl_mask``: the predicted positions whose input is ``<mask>`` (masked-token
  targets, "single token infilling");
* ``loss_next`` / ``ppl_next``: the other predicted positions (next-token targets);
* ``pflops`` / ``total_pflops``: training FLOPs per update and in total
  (:mod:`fairseq_ext.flops.training_metrics`, family ``bidirectional_lm``), from the batch's
  padded length and the number of positions the head really ran on.
"""
import math

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

from fairseq_ext.flops.training_metrics import TRAIN_FLOPS_KEY, TrainingFlops, log_training_flops
from fairseq_ext.models.validation import warn_if_validate_ignores_criterion

#: The kinds of predicted tokens, logged as loss_<kind> / ppl_<kind>.
KINDS = ("mask", "next")


@register_criterion("bidirectional_lm", dataclass=MaskedLmConfig)
class BidirectionalLmLoss(MaskedLmLoss):
    """Cross-entropy over the predicted positions, split into ``<mask>`` and next-token
    targets, with training FLOPs (module doc). fairseq's ``masked_lm`` config (``--tpu``) and
    its loss/ppl reduction."""

    def __init__(self, cfg: MaskedLmConfig, task):
        super().__init__(cfg, task)
        dictionary = task.source_dictionary
        mask_idx = dictionary.index("<mask>")
        #: ``None`` for a dictionary without ``<mask>`` (every target is then a next token)
        self.mask_idx = None if mask_idx == dictionary.unk() else mask_idx
        self.training_flops = TrainingFlops(len(dictionary))
        # fairseq-validate builds the checkpoint's criterion (this one) whatever --criterion says
        warn_if_validate_ignores_criterion("bidirectional_lm")

    def predicted_positions(self, target: torch.Tensor):
        """``(masked_tokens, sample_size)``: the positions to compute logits for and the number
        of predicted tokens. A batch without any asks for every position (padding's targets
        are ignored), as fairseq's ``masked_lm`` does, so every parameter still gets a
        gradient; on GPU without a device-to-host sync."""
        predicted = target.ne(self.padding_idx)
        sample_size = predicted.int().sum()
        if self.tpu:
            return None, sample_size
        if predicted.device == torch.device("cpu"):
            return (predicted if predicted.any() else None), sample_size
        return torch.where(predicted.any(), predicted, predicted.new([True])), sample_size

    def forward(self, model, sample, reduce=True):
        target = sample["target"]
        masked_tokens, sample_size = self.predicted_positions(target)
        logits = model(**sample["net_input"], masked_tokens=masked_tokens)[0]
        inputs = sample["net_input"]["src_tokens"]
        if masked_tokens is not None:
            target, inputs = target[masked_tokens], inputs[masked_tokens]
        target, inputs = target.reshape(-1), inputs.reshape(-1)
        losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target,
                                 reduction="none", ignore_index=self.padding_idx)
        loss = losses.sum()
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        predicted = target.ne(self.padding_idx)
        is_mask = (inputs.eq(self.mask_idx) if self.mask_idx is not None
                   else torch.zeros_like(predicted))
        for kind, selected in (("mask", predicted & is_mask), ("next", predicted & ~is_mask)):
            logging_output[f"loss_{kind}"] = losses[selected].sum().data
            logging_output[f"n_{kind}"] = selected.sum().data
        if model.training:
            logging_output[TRAIN_FLOPS_KEY] = self.batch_training_flops(model, sample, logits)
        return loss, sample_size, logging_output

    def batch_training_flops(self, model, sample, logits) -> float:
        """Training FLOPs of this batch (3 x forward): the blocks on the padded length, the
        head on the rows it really ran on (the predicted positions; every position in a batch
        without any). ``<mask>`` and next-token rows cost the same, so only their total (a
        shape, no device sync) enters."""
        sequences, length = sample["net_input"]["src_tokens"].shape
        head_rows = logits.numel() // logits.size(-1)
        return self.training_flops.of_batch(model, sequences, length, 0.0, float(head_rows))

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        for kind in KINDS:
            count = utils.item(sum(log.get(f"n_{kind}", 0) for log in logging_outputs))
            if count > 0:
                total = utils.item(sum(log.get(f"loss_{kind}", 0) for log in logging_outputs))
                metrics.log_scalar(f"loss_{kind}", total / count / math.log(2), count, round=3)
                metrics.log_derived(
                    f"ppl_{kind}",
                    lambda meters, key=f"loss_{kind}": utils.get_perplexity(meters[key].avg),
                )
        log_training_flops(logging_outputs)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
