"""``--criterion masked_lm_categories``: fairseq's ``masked_lm`` loss, plus the loss and
perplexity of each kind of corrupted token.

BERT-style corruption (``--mask-prob``, ``--leave-unmasked-prob``, ``--random-token-prob``)
turns each corrupted token into ``<mask>``, a random token, or leaves it unchanged. The 3ML
paper reports the MLM perplexity of each kind separately (Table 1, Table 2c: "PPL" of [MASK],
replaced and unchanged tokens). The categories are read off the sample itself (input token vs
target), so this works for any masked LM, RoBERTa included:

* ``mask``: the input is ``<mask>``;
* ``unchanged``: the input equals the target (a random replacement that drew the original
  token counts here: the model sees the true token);
* ``replaced``: any other input.

The overall loss, gradient and ``sample_size`` are exactly fairseq's ``masked_lm``; the
per-category figures are logged as ``loss_mask`` / ``ppl_mask`` and so on (base 2, like
``loss``), in training logs and in ``fairseq-validate``.
"""
import math

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import CRITERION_REGISTRY, register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.criterions.predicted_positions import (
    at_predicted,
    masked_sum,
    positions_to_predict,
)
from fairseq_ext.data.masking_capacity import MaskingCapacity
from fairseq_ext.models.masked_lm_run import masked_lm_run
from fairseq_ext.models.validation import warn_if_validate_ignores_criterion

CATEGORIES = ("mask", "replaced", "unchanged")
#: Logged when not zero: tokens 3ML's static sizes left out of its encoder, and asked
#: positions they left unpredicted (--static-sizes; a bound exceeded once in a billion batches,
#: and, for the predictions, never under fairseq's masking).
DROPPED = ("kept_dropped", "predicted_dropped")


def corruption_categories(inputs: torch.Tensor, targets: torch.Tensor, mask_idx: int):
    """Boolean masks (same shape as ``inputs``) of the [MASK], replaced and unchanged tokens
    among predicted positions, given their inputs and targets."""
    is_mask = inputs.eq(mask_idx)
    is_unchanged = inputs.eq(targets) & ~is_mask
    return {"mask": is_mask, "replaced": ~is_mask & ~is_unchanged, "unchanged": is_unchanged}


def summed(logging_outputs, keys) -> dict:
    """``key -> sum over logging_outputs`` as Python numbers, read from the device at once
    (one device-to-host read for all the keys, not one per key)."""
    values = [sum(log.get(key, 0) for log in logging_outputs) for key in keys]
    tensors = [v for v in values if torch.is_tensor(v)]
    if tensors:
        read = iter(torch.stack([t.detach().double().reshape(()) for t in tensors]).tolist())
        values = [next(read) if torch.is_tensor(v) else v for v in values]
    return dict(zip(keys, values))


def registered_name(criterion_class) -> str:
    """The ``--criterion`` name ``criterion_class`` is registered under."""
    return next(name for name, cls in CRITERION_REGISTRY.items() if cls is criterion_class)


@register_criterion("masked_lm_categories", dataclass=MaskedLmConfig)
class MaskedLmCategoriesLoss(MaskedLmLoss):
    """fairseq's masked LM loss with per-category loss/ppl for [MASK], replaced, unchanged."""

    def __init__(self, cfg: MaskedLmConfig, task):
        super().__init__(cfg, task)
        self.mask_idx = task.source_dictionary.index("<mask>")
        if self.mask_idx == task.source_dictionary.unk():
            raise ConfigError("--criterion masked_lm_categories needs a <mask> symbol in the "
                              "dictionary; use --task masked_lm (which adds it)")
        # fairseq-validate builds the checkpoint's criterion (this one) whatever --criterion says
        warn_if_validate_ignores_criterion(registered_name(type(self)))
        #: the task's masking, for models that size their tensors statically (3ML)
        self.masking_capacity = MaskingCapacity.from_task(getattr(task, "cfg", None))

    def forward(self, model, sample, reduce=True):
        losses, logging_output, sample_size, extra = self.token_losses(model, sample)
        loss = losses.sum()
        logging_output["loss"] = loss.data
        self.add_logging(model, sample, extra, logging_output)
        return loss, sample_size, logging_output

    def add_logging(self, model, sample, extra, logging_output) -> None:
        """Hook for subclasses: more figures from the model's extra outputs."""

    def token_losses(self, model, sample):
        """Per-token losses (nats) of the corrupted tokens, the logging output with the
        per-category sums, the sample size and the model's extra outputs: fairseq's
        ``masked_lm`` recipe for choosing the positions (including its fallback for a batch
        without corrupted tokens), with no device-to-host read beyond the one gather of the
        targets fairseq's criterion makes, and none with a model that sizes its predictions
        statically (:mod:`~fairseq_ext.criterions.predicted_positions`)."""
        masked_tokens, sample_size = positions_to_predict(sample["target"], self.padding_idx,
                                                          self.tpu)
        kwargs = {"masked_tokens": masked_tokens}
        if getattr(model, "accepts_masking_capacity", False):
            kwargs["masking_capacity"] = self.masking_capacity
        logits, extra = model(**sample["net_input"], **kwargs)[:2]
        target, inputs = at_predicted(masked_tokens, extra,
                                      (sample["target"], sample["net_input"]["src_tokens"]))
        losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target,
                                 reduction="none", ignore_index=self.padding_idx)
        logging_output = {
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        predicted = target.ne(self.padding_idx)
        for name, selected in corruption_categories(inputs, target, self.mask_idx).items():
            selected = selected & predicted
            logging_output[f"loss_{name}"] = masked_sum(losses, selected).data
            logging_output[f"n_{name}"] = selected.sum().data
        run = masked_lm_run(extra)
        if run is not None:  # 3ML: what its static sizes left out (never, in practice)
            logging_output["kept_dropped"] = run.kept_tokens_dropped.data
            logging_output["predicted_dropped"] = run.predictions_dropped.data
        return losses, logging_output, sample_size, extra

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        keys = [f"{kind}_{name}" for name in CATEGORIES for kind in ("n", "loss")]
        sums = summed(logging_outputs, keys + list(DROPPED))
        for name in CATEGORIES:
            count = sums[f"n_{name}"]
            if count > 0:
                metrics.log_scalar(f"loss_{name}", sums[f"loss_{name}"] / count / math.log(2),
                                   count, round=3)
                metrics.log_derived(
                    f"ppl_{name}",
                    lambda meters, key=f"loss_{name}": utils.get_perplexity(meters[key].avg),
                )
        for name in DROPPED:  # 3ML's static sizes exceeded (fairseq_ext.data.masking_capacity)
            if sums[name] > 0:
                metrics.log_scalar_sum(name, sums[name], round=0)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
