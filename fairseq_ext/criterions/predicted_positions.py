"""Which positions a masked-LM criterion predicts, and their targets, without device reads.

fairseq's ``masked_lm`` criterion picks the positions to compute logits for
(``target != pad``), then gathers their targets with a boolean mask (``target[masked]``: a
``nonzero``, a device-to-host read, a host sync on a GPU); on the CPU it also reads whether any
position is masked. Ours do the same choice with at most that one read, shared by every tensor
they gather, and none at all with a model that sizes its predictions statically (3ML with
``--static-sizes``: the ``prediction_index`` of its
:class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun`, the contract documented there, gives the
flat positions of its logits' rows, and the targets are gathered at those with ``index_select``).
"""
from typing import Optional, Sequence, Tuple

import torch

from fairseq_ext.models.masked_lm_run import masked_lm_run


def positions_to_predict(target: torch.Tensor, padding_idx: int,
                         tpu: bool = False) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
    """``(masked_tokens, sample_size)``: fairseq ``masked_lm``'s positions to predict, the
    non-padding targets, or, in a batch without any, every position (padding's targets are
    ignored), so every parameter still gets a gradient; on every device fairseq's CUDA
    expression (``torch.where``), which reads nothing back. ``None`` on TPUs, as fairseq's."""
    predicted = target.ne(padding_idx)
    sample_size = predicted.int().sum()
    if tpu:
        return None, sample_size
    return torch.where(predicted.any(), predicted, predicted.new([True])), sample_size


def at_predicted(masked_tokens: Optional[torch.Tensor], extra: dict,
                 tensors: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
    """``tensors`` (each ``(B, T)``) at the rows of the model's logits, each flattened:

    * the ``prediction_index`` of the model's
      :class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun`: ``index_select``, no read;
    * else (``None``, or a model without one) ``masked_tokens`` (row-major, as fairseq's models
      return logits): one boolean index for all of them together (one read);
    * else (``None``) every position."""
    run = masked_lm_run(extra)
    index = None if run is None else run.prediction_index
    if index is not None:
        return tuple(t.flatten().index_select(0, index) for t in tensors)
    if masked_tokens is None:
        return tuple(t.reshape(-1) for t in tensors)
    stacked = torch.stack(list(tensors), dim=-1)[masked_tokens.expand_as(tensors[0])]
    return tuple(stacked.unbind(dim=-1))


def masked_sum(values: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """``values[selected].sum()`` without the boolean index (which reads the count)."""
    return torch.where(selected, values, values.new_zeros(())).sum()
