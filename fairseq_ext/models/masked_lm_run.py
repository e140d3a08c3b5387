"""The one output contract between a masked LM that packs its tokens by what masking did to them
(3ML, :mod:`fairseq_ext.models.three_ml`) and our criteria (``masked_lm_categories``,
``masked_lm_flops``, :mod:`fairseq_ext.criterions.predicted_positions`): a :class:`MaskedLmRun`
in the model's ``extra`` under :data:`MASKED_LM_RUN`, with the same fields and meanings whether
the model sized its tensors by the batch's counts or statically
(:class:`~fairseq_ext.data.masking_capacity.MaskingCapacity`, ``--static-sizes``).
"""
from typing import NamedTuple, Optional, Union

import torch

#: The key of a :class:`MaskedLmRun` in a model's ``extra`` output.
MASKED_LM_RUN = "masked_lm_run"


class MaskedLmRun(NamedTuple):
    """What the model ran on, and which positions its logits are, for a ``(B, T)`` batch. A
    count is a 0-dim tensor where the model did not read it from the device, else a number."""

    #: ``(P,)`` long: the flat position ``b * T + t`` of each of the logits' ``P`` rows, the
    #: asked positions first in row-major order, then positions whose targets are padding; the
    #: criterion gathers the targets there. ``None``: the rows are the ``masked_tokens``
    #: positions in row-major order, as fairseq's RoBERTa returns them (``(B, T, V)``, every
    #: position, for ``masked_tokens=None``).
    prediction_index: Optional[torch.Tensor]
    #: ``(B,)`` long: the kept tokens (neither padding nor ``<mask>``) of each row the encoder
    #: ran on.
    encoder_lengths: torch.Tensor
    #: ``W``: the width of the ``(B, W)`` grid the encoder's attention ran on.
    encoder_padded_length: int
    #: Tokens per row the encoder's linear layers ran on (what the FLOP criteria count, App. D).
    encoder_length: Union[float, torch.Tensor]
    #: Positions per row the decoder ran on.
    decoder_padded_length: Union[int, torch.Tensor]
    #: 0-dim long: kept tokens left out of the encoder because a static size was exceeded
    #: (probability below 1e-9 a batch; 0 when sized by the counts).
    kept_tokens_dropped: torch.Tensor
    #: 0-dim long: asked positions left unpredicted because a static size was exceeded (none
    #: under fairseq's masking; 0 when sized by the counts).
    predictions_dropped: torch.Tensor


def masked_lm_run(extra) -> Optional[MaskedLmRun]:
    """The :class:`MaskedLmRun` in a model's ``extra`` output; ``None`` for a model without one
    (fairseq's RoBERTa and the other masked LMs: logits at the ``masked_tokens`` positions)."""
    return extra.get(MASKED_LM_RUN) if isinstance(extra, dict) else None
