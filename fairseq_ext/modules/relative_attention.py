"""T5-style relative attention bias (Raffel et al., 2020, §2.1) for fairseq's self-attention.

BERT-rab in "Simple Recurrence Improves Masked Language Models" (Lei et al., §4 "Baselines") is
BERT "adding the relative attention bias to each attention layer, following the T5 model": a
learned scalar per head added to every attention logit, by the bucket of the key's offset
``j - i`` (:func:`relative_position_bucket`: half the buckets per sign; in each half, exact
distances up to ``num_buckets / 4``, then log-spaced up to ``max_distance``).
:class:`RelativePositionBias` is the learned ``num_buckets x heads`` table, and
:class:`RelativeBiasSelfAttention` fairseq's :class:`~fairseq.modules.MultiheadAttention` with
the bias added, ``softmax(Q K^T / sqrt(d_head) + bias + padding) V``, through
``scaled_dot_product_attention``, with fairseq's parameter names and scaling (a zero table gives
fairseq's attention exactly). A table per layer by default; ``--rab-shared-across-layers`` shares
one, as T5 does. The archs and flags: docs/swishrnn.md.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_ext.cli.errors import ConfigError


def check_bucket_config(num_buckets: int, max_distance: int) -> None:
    """Clear errors for bucket settings the bidirectional map cannot use."""
    if num_buckets < 4 or num_buckets % 2:
        raise ConfigError(f"--rab-num-buckets must be an even number >= 4 (half of the buckets "
                          f"for each direction); got {num_buckets}")
    if max_distance <= num_buckets // 4:
        raise ConfigError(f"--rab-max-distance ({max_distance}) must exceed the exactly bucketed "
                          f"distances (--rab-num-buckets / 4 = {num_buckets // 4})")


def relative_position_bucket(relative_position: Tensor, num_buckets: int = 32,
                             max_distance: int = 128) -> Tensor:
    """T5's bidirectional bucket of each offset ``key - query`` (integer tensor, any shape).

    Non-positive offsets (keys at or before the query) use buckets ``0 .. num_buckets/2 - 1``,
    positive offsets the upper half. With ``n = num_buckets / 2`` and ``e = n / 2`` exact
    buckets, distance ``r`` goes to ``r`` if ``r < e``, else to
    ``min(e + floor(log(r / e) / log(max_distance / e) * (n - e)), n - 1)``.
    """
    check_bucket_config(num_buckets, max_distance)
    half = num_buckets // 2
    exact = half // 2
    buckets = (relative_position > 0).long() * half
    distance = relative_position.abs()
    # clamp below so log() never sees 0; those positions take the exact branch anyway
    scaled = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    logarithmic = (exact + (scaled * (half - exact)).long()).clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, logarithmic)


class RelativePositionBias(nn.Module):
    """The learned table: one scalar per (bucket, head); ``forward`` gives ``(heads, Tq, Tk)``."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        check_bucket_config(num_buckets, max_distance)
        self.num_heads, self.num_buckets, self.max_distance = num_heads, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)
        self._buckets: Optional[Tensor] = None  # cache of the last (Tq, Tk) map, not saved

    def buckets(self, query_length: int, key_length: int, device) -> Tensor:
        cached = self._buckets
        if (cached is None or cached.shape != (query_length, key_length)
                or cached.device != torch.device(device)):
            offsets = (torch.arange(key_length, device=device)[None, :]
                       - torch.arange(query_length, device=device)[:, None])
            cached = relative_position_bucket(offsets, self.num_buckets, self.max_distance)
            if not torch.compiler.is_compiling():
                self._buckets = cached
        return cached

    def forward(self, query_length: int, key_length: int) -> Tensor:
        weight = self.relative_attention_bias.weight
        buckets = self.buckets(query_length, key_length, weight.device)
        return F.embedding(buckets, weight).permute(2, 0, 1)  # (H, Tq, Tk)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, buckets={self.num_buckets}, max_distance={self.max_distance}"


class RelativeBiasSelfAttention(MultiheadAttention):
    """fairseq's multi-head self-attention plus a T5 relative position bias on the logits."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 num_buckets: int = 32, max_distance: int = 128, **kwargs):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, **kwargs)
        self.position_bias = RelativePositionBias(num_heads, num_buckets, max_distance)

    def attention_bias(self, bsz: int, query_length: int, key_length: int,
                       key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                       dtype: torch.dtype) -> Tensor:
        """The additive mask ``(B or 1, H, Tq, Tk)``: relative bias, ``-inf`` at padded keys,
        plus fairseq's float ``attn_mask`` ``(Tq, Tk)`` if one is given."""
        bias = self.position_bias(query_length, key_length).to(dtype).unsqueeze(0)
        if attn_mask is not None:
            bias = bias + attn_mask.to(dtype)
        if key_padding_mask is not None:
            padding = key_padding_mask.view(bsz, 1, 1, key_length).to(torch.bool)
            bias = bias.masked_fill(padding, float("-inf"))
        return bias

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None, incremental_state=None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """Self-attention on ``query`` ``(T, B, C)`` (``key`` and ``value`` are it or None).

        ``need_weights`` / ``need_head_weights`` return the attention probabilities (averaged
        over heads, or ``(H, B, Tq, Tk)``), computed explicitly; otherwise the fused path runs.
        """
        if incremental_state is not None or static_kv or before_softmax:
            raise ValueError("RelativeBiasSelfAttention is encoder self-attention: incremental "
                             "decoding, static_kv and before_softmax are not supported")
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("RelativeBiasSelfAttention is self-attention: pass the same tensor "
                             "as query, key and value")
        # fairseq's MultiheadAttention.forward (projections, scaling, weights) copied, since it
        # has no hook to add a per-head bias to the logits
        length, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return x.view(length, bsz, heads, head_dim).permute(1, 2, 0, 3)

        q, k, v = (split_heads(proj(query)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        bias = self.attention_bias(bsz, length, length, key_padding_mask, attn_mask, q.dtype)
        dropout = self.dropout_module.p if (self.training or
                                            self.dropout_module.apply_during_inference) else 0.0
        weights = None
        if need_weights or need_head_weights:
            logits = torch.matmul(q, k.transpose(-1, -2)) * self.scaling + bias
            probs = torch.softmax(logits.float(), dim=-1).to(q.dtype)
            out = torch.matmul(F.dropout(probs, dropout, training=dropout > 0), v)
            weights = probs.transpose(0, 1) if need_head_weights else probs.mean(dim=1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
        out = out.permute(2, 0, 1, 3).reshape(length, bsz, embed_dim)
        return self.out_proj(out), weights
