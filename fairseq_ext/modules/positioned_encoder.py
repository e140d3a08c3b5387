"""fairseq's ``TransformerEncoder`` run on a subset of a sequence's tokens at their own positions.

3ML's encoder (Liao et al., 2022, §2.2) sees only the non-[MASK] tokens, and "each keeps its
original learned position". fairseq's encoder derives positions from the token layout
(``utils.make_positions``), so a packed subsequence would get positions 0..n-1. This subclass
keeps fairseq's encoder unchanged (same modules, same parameter names, so its weights export as
a plain RoBERTa encoder) and adds :meth:`PositionedTransformerEncoder.forward_positioned`,
which takes the positions explicitly, and :meth:`~PositionedTransformerEncoder.forward_packed`,
the same computation on packed tokens (no padding in its linear layers,
:mod:`fairseq_ext.modules.packed_encoder_layer`).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerEncoder
from fairseq.modules import LearnedPositionalEmbedding

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.modules.packed_encoder_layer import (
    attention_mask,
    packed_encoder_layer,
    packed_layer_unsupported,
)
from fairseq_ext.modules.token_selection import PackedTokens


def embed_learned_positions(embed_positions: LearnedPositionalEmbedding,
                            positions: torch.Tensor) -> torch.Tensor:
    """Look up explicit positions (fairseq's convention: ``padding_idx + 1 + index``, and
    ``padding_idx`` at padding) in a learned positional embedding table."""
    if not isinstance(embed_positions, LearnedPositionalEmbedding):
        raise ConfigError("3ML needs learned positional embeddings (--encoder-learned-pos); "
                          f"got {type(embed_positions).__name__}")
    return F.embedding(positions, embed_positions.weight, embed_positions.padding_idx)


class PositionedTransformerEncoder(TransformerEncoder):
    """A :class:`fairseq.models.transformer.TransformerEncoder` that can also run on tokens
    with explicit positions. Its ordinary ``forward`` is fairseq's, untouched."""

    # A copy of fairseq's TransformerEncoderBase.forward_embedding, which takes the positions
    # from the tokens (make_positions); forward_positioned copies forward_scriptable likewise.
    def embed_positioned(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """fairseq's ``forward_embedding`` (scaled token embedding, positions, embedding
        LayerNorm, dropout, quant noise) with the positions given; any leading shape."""
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.embed_positions is not None:
            x = x + embed_learned_positions(self.embed_positions, positions)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x

    def packed_unsupported(self) -> Optional[str]:
        """Why :meth:`forward_packed` cannot run this encoder's layers, or ``None``."""
        for i, layer in enumerate(self.layers):
            reason = packed_layer_unsupported(layer)
            if reason is not None:
                return f"encoder layer {i}: {reason}"
        return None

    def forward_packed(self, tokens: torch.Tensor, positions: torch.Tensor,
                       packed: PackedTokens) -> torch.Tensor:
        """Encode the packed tokens ``tokens`` ``(N,)`` at ``positions`` ``(N,)`` (rows and
        order as ``packed`` says); returns ``(N, C)``.

        :meth:`forward_positioned` on the padded grid, computed without padding: the same
        embedding and layers, with the attention of each row on ``packed``'s grid. Check
        :meth:`packed_unsupported` first (once, at setup).
        """
        x = self.embed_positioned(tokens, positions)
        attend = attention_mask(packed)
        for layer in self.layers:
            x = packed_encoder_layer(layer, x, packed, attend)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x

    def forward_positioned(self, tokens: torch.Tensor, positions: torch.Tensor,
                           padding_mask: torch.Tensor) -> torch.Tensor:
        """Encode ``tokens`` ``(B, L)`` placed at ``positions`` ``(B, L)``.

        Same computation as fairseq's ``forward_embedding`` + ``forward_scriptable``, with the
        positional embedding looked up at ``positions`` instead of ``make_positions(tokens)``.
        ``padding_mask`` ``(B, L)`` is True at padding. Returns ``(L, B, C)``.
        """
        x = self.embed_positioned(tokens, positions)
        x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=padding_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x
