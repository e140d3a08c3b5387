"""fairseq's multi-head self-attention run through ``scaled_dot_product_attention`` with a
per-example attention mask, or through FlexAttention with a block mask.

fairseq's :class:`~fairseq.modules.MultiheadAttention` takes one ``(T, T)`` mask for the whole
batch; the packed documents of generalized bidirectionality
(:mod:`fairseq_ext.modules.bidirectional_attention_mask`) need a ``(B, 1, T, T)`` one.
:class:`MaskedSelfAttention` keeps fairseq's parameters, names, initialisation and scaling, and
computes ``softmax(Q K^T / sqrt(d_head) + mask) V`` through ``scaled_dot_product_attention`` for
a 4-D float ``attn_mask``, or the same attention through the compiled ``flex_attention`` for a
:class:`~fairseq_ext.modules.block_sparse_attention.DocumentBlockMask`, so a checkpoint runs on
either path. Anything else (no mask, a ``(T, T)`` mask, incremental decoding) is fairseq's own
``MultiheadAttention.forward``, so fairseq's sequence generator works unchanged.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_ext.modules.block_sparse_attention import DocumentBlockMask


class MaskedSelfAttention(MultiheadAttention):
    """fairseq's self-attention that also takes a per-example additive mask ``(B, 1 or H, T,
    T)`` and then runs SDPA, or a :class:`DocumentBlockMask` and then runs FlexAttention."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, **kwargs):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, **kwargs)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None, incremental_state=None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """``query`` ``(T, B, C)``. With a 4-D float ``attn_mask`` and no incremental state:
        SDPA (``need_weights`` / ``need_head_weights`` then compute the probabilities
        explicitly: averaged over heads, or ``(H, B, Tq, Tk)``). With a
        :class:`DocumentBlockMask`: FlexAttention (no weights, no dropout, no
        ``key_padding_mask``: the block mask already excludes padding). Otherwise fairseq's
        forward."""
        if isinstance(attn_mask, DocumentBlockMask):
            if incremental_state is not None:
                raise ValueError("incremental decoding is causal: it takes no DocumentBlockMask")
            self.check_plain_self_attention(query, key, value, static_kv, before_softmax)
            return self.flex_forward(query, attn_mask, key_padding_mask,
                                     need_weights or need_head_weights)
        if attn_mask is None or attn_mask.dim() != 4 or incremental_state is not None:
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=need_weights,
                                   static_kv=static_kv, attn_mask=attn_mask,
                                   before_softmax=before_softmax,
                                   need_head_weights=need_head_weights)
        self.check_plain_self_attention(query, key, value, static_kv, before_softmax)
        # fairseq's MultiheadAttention.forward (projections, scaling, weights) copied, since it
        # takes one (T, T) mask, not a per-example (B, H, T, T) one
        length, bsz, embed_dim = query.shape
        if attn_mask.size(-1) != length or attn_mask.size(-2) != length:
            raise ValueError(f"attn_mask must be (B, 1 or H, {length}, {length}); got "
                             f"{tuple(attn_mask.shape)}")
        heads, head_dim = self.num_heads, self.head_dim

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return x.view(length, bsz, heads, head_dim).permute(1, 2, 0, 3)

        q, k, v = (split_heads(proj(query)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        bias = attn_mask.to(q.dtype)
        if key_padding_mask is not None:
            padding = key_padding_mask.view(bsz, 1, 1, length).to(torch.bool)
            bias = bias.masked_fill(padding, float("-inf"))
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

    def check_plain_self_attention(self, query, key, value, static_kv, before_softmax) -> None:
        """The per-example paths are plain self-attention."""
        if static_kv or before_softmax or self.bias_k is not None or self.add_zero_attn:
            raise ValueError("MaskedSelfAttention with a per-example mask is plain "
                             "self-attention: static_kv, before_softmax, add_bias_kv and "
                             "add_zero_attn are not supported")
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("MaskedSelfAttention is self-attention: pass the same tensor as "
                             "query, key and value")

    def flex_forward(self, query: Tensor, block_mask: DocumentBlockMask,
                     key_padding_mask: Optional[Tensor], need_weights: bool):
        """FlexAttention with ``block_mask`` on ``query`` ``(T, B, C)``: ``(out, None)``."""
        if need_weights:
            raise ValueError("FlexAttention returns no attention weights: use "
                             "--attention-impl sdpa to get them")
        if key_padding_mask is not None:
            raise ValueError("with a DocumentBlockMask, padding is part of the mask: pass no "
                             "key_padding_mask")
        if (self.training or self.dropout_module.apply_during_inference) and self.dropout_module.p > 0:
            raise ValueError(f"FlexAttention computes no attention dropout, and this layer "
                             f"trains with --attention-dropout {self.dropout_module.p:g}: use "
                             "--attention-impl auto or sdpa")
        q, k, v = (proj(query) for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = block_mask.attend(q, k, v, self.num_heads, self.scaling)
        return self.out_proj(out), None
