"""Sentence classification heads that read one position per row.

RoBERTa's :class:`~fairseq.models.roberta.model.RobertaClassificationHead` reads the first
token (``<s>``, BERT's [CLS]). A left-to-right language model has seen the whole input only at
its last token, so decoder-only LMs are fine-tuned on the features of a final ``</s>``
(Artetxe et al., 2022, §3.2 "Fine-tuning": "we place a special </s> token at the end of the
sequence (analogous to the special <CLS> token used by BERT) and learn a new classification
head on top").
:class:`PositionClassificationHead` is RoBERTa's head (dropout, dense, activation, dropout,
output projection; same parameter names) applied to the features at a given column of each
row, by default the last non-padding token (:func:`last_token_positions`).
:class:`MeanPoolClassificationHead` is the same head on the mean of each row's non-padding
features (``--classification-pooling mean``), the pooling that lets a randomly initialised
encoder act as a bag of embeddings and a pre-trained one use every token's features.
"""
from typing import Optional

import torch
from fairseq.models.roberta.model import RobertaClassificationHead
from torch import Tensor


def last_token_positions(tokens: Tensor, padding_idx: int) -> Tensor:
    """The column of each row's last non-padding token, ``(B,)`` (left or right padding; 0 for
    an all-padding row)."""
    columns = torch.arange(1, tokens.size(1) + 1, device=tokens.device)
    return (tokens.ne(padding_idx).long() * columns).argmax(dim=1)


class PositionClassificationHead(RobertaClassificationHead):
    """RoBERTa's classification head on the features at ``positions`` (one column per row)."""

    def forward(self, features: Tensor, positions: Optional[Tensor] = None, **kwargs) -> Tensor:
        """``features`` ``(B, T, C)``, ``positions`` ``(B,)`` long (default: column 0, as
        RoBERTa) -> logits ``(B, num_classes)``."""
        if positions is None:
            return super().forward(features)
        rows = torch.arange(features.size(0), device=features.device)
        return super().forward(features[rows, positions].unsqueeze(1))


def mean_pool(features: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
    """The mean of ``features`` ``(B, T, C)`` over the columns where ``padding_mask`` ``(B, T)``
    is False (all columns without a mask) -> ``(B, C)``; an all-padding row gives zeros."""
    if padding_mask is None:
        return features.mean(dim=1)
    keep = (~padding_mask).unsqueeze(-1).to(features.dtype)
    return (features * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)


class MeanPoolClassificationHead(RobertaClassificationHead):
    """RoBERTa's classification head (same parameters) on the mean of each row's non-padding
    features."""

    def forward(self, features: Tensor, padding_mask: Optional[Tensor] = None,
                **kwargs) -> Tensor:
        """``features`` ``(B, T, C)``, ``padding_mask`` ``(B, T)`` bool (True at padding) ->
        logits ``(B, num_classes)``."""
        return super().forward(mean_pool(features, padding_mask).unsqueeze(1))
