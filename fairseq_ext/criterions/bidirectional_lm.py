"""``--criterion bidirectional_lm``: the loss of generalized bidirectionality (Artetxe et al.,
2022, §2): cross-entropy over the predicted positions only (the task's non-padding ``target``),
the only positions the model computes logits for (``masked_tokens``), as the FLOPs formula counts.

Logs ``loss``/``ppl``, ``loss_mask``/``ppl_mask`` (``<mask>`` inputs), ``loss_next``/``ppl_next``
and training FLOPs; under the task's ``--eval-mode`` (§3.2) the figures of Tables 3-5 per
``--r-bidir`` group, each with its standard error ``<name>_se``
(:mod:`fairseq_ext.reporting.uncertainty`), and the per-row scores for ``--eval-scores-out``
under :data:`EVAL_ROWS_KEY`. docs/bidirectional.md ("What is built", "Evaluation", "Error bars")
lists them.
"""
import math
from typing import Dict, List

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

from fairseq_ext.criterions.masked_lm_categories import summed
from fairseq_ext.criterions.predicted_positions import (
    at_predicted,
    masked_sum,
    positions_to_predict,
)
from fairseq_ext.flops.training_metrics import TRAIN_FLOPS_KEY, TrainingFlops, log_training_flops
from fairseq_ext.models.validation import warn_if_validate_ignores_criterion
from fairseq_ext.reporting.uncertainty import (
    binomial_standard_error,
    ratio_standard_error_from_sums,
)

#: The kinds of predicted tokens, logged as loss_<kind> / ppl_<kind>.
KINDS = ("mask", "next")
#: Prefix of the per-group evaluation sums in logging outputs: ``eval:<mode>:<label>:<stat>``.
EVAL_KEY = "eval"
#: Logging-output key of the per-row ``(loss, tokens, correct)`` of an evaluation batch, each
#: ``(B,)``; the ``bidirectional_lm`` task's ``valid_step`` removes it (``--eval-scores-out``).
EVAL_ROWS_KEY = "eval_rows"


def evaluation_stats(logging_outputs) -> Dict[tuple, Dict[str, float]]:
    """``{(mode, label): {"loss": nats, "n": tokens, "rows": ..., "correct": ..., "loss_sq",
    "n_sq", "loss_n"}}`` summed over ``logging_outputs`` (the criterion's
    ``eval:<mode>:<label>:<stat>`` keys), in logged order. A row is a document (an infilled
    position for ``infill``)."""
    stats: Dict[tuple, Dict[str, float]] = {}
    for log in logging_outputs:
        for key, value in log.items():
            if not key.startswith(EVAL_KEY + ":"):
                continue
            _, mode, label, stat = key.split(":")
            group = stats.setdefault((mode, label), {})
            group[stat] = group.get(stat, 0.0) + float(utils.item(value))
    return stats


def loss_standard_error(stats: Dict[str, float]) -> float:
    """Delta-method standard error, in nats, of a group's token-weighted mean loss."""
    return ratio_standard_error_from_sums(stats.get("rows", 0.0), stats.get("loss", 0.0),
                                          stats.get("n", 0.0), stats.get("loss_sq", 0.0),
                                          stats.get("n_sq", 0.0), stats.get("loss_n", 0.0))


def group_figures(stats: Dict[str, float]) -> Dict[str, float]:
    """A group's ``loss`` (base 2), ``ppl``, and for ``infill`` rows ``acc`` (%), each with its
    ``<name>_se`` (docs/bidirectional.md, "Error bars")."""
    n = stats.get("n", 0.0)
    if not n:
        return {}
    loss_nats = stats.get("loss", 0.0) / n
    error_nats = loss_standard_error(stats)
    figures = {"loss": loss_nats / math.log(2), "loss_se": error_nats / math.log(2),
               "ppl": math.exp(loss_nats), "ppl_se": math.exp(loss_nats) * error_nats}
    if "correct" in stats:
        figures["acc"] = 100.0 * stats["correct"] / n
        figures["acc_se"] = 100.0 * binomial_standard_error(stats["correct"], n)
    return figures


def evaluation_report_lines(logging_outputs) -> List[str]:
    """One line per evaluation group (per R): documents (infill: masked positions), tokens,
    loss (base 2), ppl and, for infilling, accuracy, each ± its standard error; what
    fairseq-validate prints before its summary."""
    lines = []
    for (mode, label), stats in evaluation_stats(logging_outputs).items():
        figures = group_figures(stats)
        if not figures:
            continue
        setting = "" if label == "full" else f" | r_bidir {label[1:]}"
        unit = "positions" if mode == "infill" else "documents"
        text = (f"{mode}{setting} | {unit} {int(stats.get('rows', 0))} | tokens "
                f"{int(stats['n'])} | loss {figures['loss']:.3f} ± {figures['loss_se']:.3f} | "
                f"ppl {figures['ppl']:.2f} ± {figures['ppl_se']:.2f}")
        if mode == "infill":
            text += f" | accuracy {figures['acc']:.2f} ± {figures['acc_se']:.2f}"
        lines.append(text + (" (± 1 standard error over positions; accuracy: binomial)"
                             if mode == "infill" else
                             " (± 1 standard error: delta method over documents)"))
    return lines


@register_criterion("bidirectional_lm", dataclass=MaskedLmConfig)
class BidirectionalLmLoss(MaskedLmLoss):
    """Cross-entropy over the predicted positions, split into ``<mask>`` and next-token
    targets, with training FLOPs. fairseq's ``masked_lm`` config (``--tpu``) and
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
        gradient; without a device-to-host read
        (:func:`~fairseq_ext.criterions.predicted_positions.positions_to_predict`)."""
        return positions_to_predict(target, self.padding_idx, self.tpu)

    def forward(self, model, sample, reduce=True):
        target = sample["target"]
        masked_tokens, sample_size = self.predicted_positions(target)
        logits, extra = model(**sample["net_input"], masked_tokens=masked_tokens)[:2]
        target, inputs = at_predicted(masked_tokens, extra,
                                      (target, sample["net_input"]["src_tokens"]))
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
            logging_output[f"loss_{kind}"] = masked_sum(losses, selected).data
            logging_output[f"n_{kind}"] = selected.sum().data
        if "eval_group" in sample:
            logging_output.update(self.evaluation_logging(sample, masked_tokens, logits, target,
                                                          losses))
        if model.training:
            logging_output[TRAIN_FLOPS_KEY] = self.batch_training_flops(model, sample, logits)
        return loss, sample_size, logging_output

    def evaluation_logging(self, sample, masked_tokens, logits, target, losses) -> Dict:
        """Per evaluation group: summed loss (nats), predicted tokens, rows and, for ``infill``,
        correct argmax predictions over the non-special vocabulary (and the target's id); with
        the per-row sums of squares the standard errors need, accumulated in float64. Every
        group's keys are logged in every batch (zeros where absent), so outputs sum across
        workers. The rows' own scores go under :data:`EVAL_ROWS_KEY`."""
        mode = self.task.eval_mode
        labels = self.task.eval_group_labels
        groups = sample["eval_group"]
        rows = groups.new_zeros(sample["target"].shape)
        rows += torch.arange(rows.size(0), device=rows.device).unsqueeze(1)
        rows = rows[masked_tokens] if masked_tokens is not None else rows.reshape(-1)
        predicted = target.ne(self.padding_idx)
        batch_rows = groups.size(0)

        def per_row(values):
            total = torch.zeros(batch_rows, dtype=torch.float64, device=values.device)
            return total.index_add_(0, rows[predicted], values[predicted].double())

        row_loss, row_tokens = per_row(losses.detach()), per_row(predicted.double())
        row_correct = torch.zeros_like(row_loss)
        row_target = torch.full_like(row_loss, -1.0)
        if mode == "infill":
            # one predicted token per infill row: its id (for the constant-guess baseline)
            row_target = per_row(target.double())
            special = torch.tensor(self.task.special_token_ids(), device=logits.device)
            scores = logits.reshape(-1, logits.size(-1)).float().index_fill(1, special, -math.inf)
            row_correct = per_row((scores.argmax(dim=-1).eq(target) & predicted).double())
        row_stats = {"loss": row_loss, "n": row_tokens, "rows": torch.ones_like(row_loss),
                     "loss_sq": row_loss * row_loss, "n_sq": row_tokens * row_tokens,
                     "loss_n": row_loss * row_tokens}
        if mode == "infill":
            row_stats["correct"] = row_correct
        out = {}
        for index, label in enumerate(labels):
            in_group = groups.eq(index)
            prefix = f"{EVAL_KEY}:{mode}:{label}"
            for stat, values in row_stats.items():
                out[f"{prefix}:{stat}"] = values[in_group].sum().data
        out[EVAL_ROWS_KEY] = (row_loss, row_tokens, row_correct, row_target)
        return out

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
        sums = summed(logging_outputs, [f"{stat}_{kind}" for kind in KINDS
                                        for stat in ("n", "loss")])
        for kind in KINDS:
            count = sums[f"n_{kind}"]
            if count > 0:
                metrics.log_scalar(f"loss_{kind}", sums[f"loss_{kind}"] / count / math.log(2),
                                   count, round=3)
                metrics.log_derived(
                    f"ppl_{kind}",
                    lambda meters, key=f"loss_{kind}": utils.get_perplexity(meters[key].avg),
                )
        log_training_flops(logging_outputs)
        for (mode, label), stats in evaluation_stats(logging_outputs).items():
            figures = group_figures(stats)
            if mode == "full_doc_ppl":
                metrics.log_scalar_sum("documents", stats["rows"], round=0)
                if figures:
                    metrics.log_scalar("loss_se", figures["loss_se"], round=3)
                    metrics.log_scalar("ppl_se", figures["ppl_se"], round=2)
                continue
            name = "suffix" if mode == "suffix_ppl" else mode
            if figures:
                metrics.log_scalar(f"{name}_loss_{label}", figures["loss"], stats["n"], round=3)
                metrics.log_derived(f"{name}_ppl_{label}", lambda meters, key=f"{name}_loss_{label}":
                                    utils.get_perplexity(meters[key].avg))
                metrics.log_scalar(f"{name}_loss_{label}_se", figures["loss_se"], round=3)
                metrics.log_scalar(f"{name}_ppl_{label}_se", figures["ppl_se"], round=2)
                if mode == "infill":
                    metrics.log_scalar_sum(f"positions_{label}", stats["rows"], round=0)
                    metrics.log_scalar(f"infill_acc_{label}", figures["acc"], stats["n"], round=2)
                    metrics.log_scalar(f"infill_acc_{label}_se", figures["acc_se"], round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
