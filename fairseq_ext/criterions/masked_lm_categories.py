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
from fairseq_ext.models.validation import warn_if_validate_ignores_criterion

CATEGORIES = ("mask", "replaced", "unchanged")


def corruption_categories(inputs: torch.Tensor, targets: torch.Tensor, mask_idx: int):
    """Boolean masks (same shape as ``inputs``) of the [MASK], replaced and unchanged tokens
    among predicted positions, given their inputs and targets."""
    is_mask = inputs.eq(mask_idx)
    is_unchanged = inputs.eq(targets) & ~is_mask
    return {"mask": is_mask, "replaced": ~is_mask & ~is_unchanged, "unchanged": is_unchanged}


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
        ``masked_lm`` recipe for choosing the positions (including its fallbacks for a batch
        without corrupted tokens)."""
        target = sample["target"]
        masked_tokens = target.ne(self.padding_idx)
        sample_size = masked_tokens.int().sum()
        if self.tpu:
            masked_tokens = None
        elif masked_tokens.device == torch.device("cpu"):
            if not masked_tokens.any():
                masked_tokens = None
        else:
            masked_tokens = torch.where(masked_tokens.any(), masked_tokens, masked_tokens.new([True]))
        logits, extra = model(**sample["net_input"], masked_tokens=masked_tokens)[:2]
        inputs = sample["net_input"]["src_tokens"]
        if masked_tokens is not None:
            target, inputs = target[masked_tokens], inputs[masked_tokens]
        target, inputs = target.reshape(-1), inputs.reshape(-1)
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
            logging_output[f"loss_{name}"] = losses[selected].sum().data
            logging_output[f"n_{name}"] = selected.sum().data
        return losses, logging_output, sample_size, extra

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        for name in CATEGORIES:
            count = utils.item(sum(log.get(f"n_{name}", 0) for log in logging_outputs))
            if count > 0:
                total = utils.item(sum(log.get(f"loss_{name}", 0) for log in logging_outputs))
                metrics.log_scalar(f"loss_{name}", total / count / math.log(2), count, round=3)
                metrics.log_derived(
                    f"ppl_{name}",
                    lambda meters, key=f"loss_{name}": utils.get_perplexity(meters[key].avg),
                )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
