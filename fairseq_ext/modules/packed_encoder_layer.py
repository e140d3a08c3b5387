"""fairseq's ``TransformerEncoderLayer`` run on packed tokens: no FLOP spent on padding.

3ML's encoder (Liao et al., 2022, §2.2, App. D Eq. 3) runs on the ``L_e = L (1 - 0.8 m)`` kept
tokens of each sequence; padded to the batch's longest kept row, it would run on the max instead
of the mean (4% more encoder work at 50% masking, batch 8). Here the layer's linear parts (Q/K/V
and output projections, FFN, LayerNorms, dropout, residuals) run on the ``N`` kept tokens of the
whole batch as one ``(N, C)`` matrix, and only the attention core on the padded ``(B, W)`` grid
(:class:`~fairseq_ext.modules.token_selection.PackedTokens`). :func:`packed_encoder_layer` is
fairseq 0.12's ``TransformerEncoderLayerBase.forward`` step by step with the layer's own modules
(so a checkpoint runs on either path), its attention fairseq's fast path through
``F.scaled_dot_product_attention``. :func:`packed_layer_unsupported` names the layer features
this does not mirror; a model checks it when it is built. See docs/three_ml.md and
docs/training_step.md.
"""
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from fairseq_ext.modules.token_selection import PackedTokens, ensure_attendable


def packed_layer_unsupported(layer) -> Optional[str]:
    """Why ``layer`` cannot run on packed tokens (a feature :func:`packed_encoder_layer` does
    not mirror), or ``None`` when it can."""
    if not isinstance(layer, TransformerEncoderLayerBase):
        return f"{type(layer).__name__} is not a fairseq TransformerEncoderLayer"
    attn = layer.self_attn
    if type(attn) is not MultiheadAttention or not attn.self_attention:
        return f"its attention is {type(attn).__name__}, not fairseq's self-attention"
    if attn.bias_k is not None or attn.add_zero_attn:
        return "its attention has key/value biases or zero attention"
    if getattr(attn, "use_xformers", False):
        return "its attention runs through xformers"
    if not attn.qkv_same_dim or abs(attn.scaling - attn.head_dim ** -0.5) > 1e-12:
        return "its attention's key/value dims or scaling differ from the query's"
    if getattr(layer, "return_fc", False):
        return "it returns its FFN output (return_fc)"
    return None


def attention_mask(packed: PackedTokens) -> torch.Tensor:
    """``(B, 1, 1, W)`` bool, True where a key takes part: the grid's tokens, and slot 0 of a
    row without any (:func:`ensure_attendable`: its outputs are never read; this keeps the
    softmax finite)."""
    return ~ensure_attendable(~packed.valid)[:, None, None, :]


def project_qkv(attn: MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(..., C)`` through fairseq's ``q_proj``, ``k_proj`` and ``v_proj`` at once:
    ``(..., 3 C)`` (one matrix product on the concatenated weights instead of three: fewer ops
    and a wider GEMM; the same values, the gradients split back to each weight)."""
    weights = (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
    biases = (attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)
    bias = None if any(b is None for b in biases) else torch.cat(biases)
    return F.linear(x, torch.cat(weights), bias)


def attention_dropout(attn: MultiheadAttention) -> float:
    """The attention-probability dropout ``attn`` applies now."""
    dropout = attn.dropout_module
    return dropout.p if attn.training or dropout.apply_during_inference else 0.0


def grid_self_attention(attn: MultiheadAttention, x: torch.Tensor,
                        attend: torch.Tensor) -> torch.Tensor:
    """fairseq's self-attention of ``x`` ``(B, L, C)``, each row attending to the keys
    ``attend`` ``(B, 1, 1, L)`` allows; returns ``(B, L, C)``."""
    batch, length, _ = x.shape
    heads, head_dim = attn.num_heads, attn.head_dim
    qkv = project_qkv(attn, x).view(batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=attend,
                                         dropout_p=attention_dropout(attn))
    return attn.out_proj(out.transpose(1, 2).reshape(batch, length, heads * head_dim))


def packed_self_attention(attn: MultiheadAttention, x: torch.Tensor, packed: PackedTokens,
                          attend: torch.Tensor) -> torch.Tensor:
    """fairseq's self-attention of ``x`` ``(N, C)`` (packed tokens), each token attending to
    its own row's tokens (``attend`` from :func:`attention_mask`); returns ``(N, C)``.

    Q, K and V, projected at once, go to the grid in one scatter, in the
    ``(B, W, 3, heads, head_dim)`` layout that SDPA reads through a permute, and the output
    comes back in one gather. The grid's padding slots hold zeros, or with static sizes the
    padding entries' values: as keys they are masked, and their queries' outputs are read by
    padding entries only."""
    heads, head_dim = attn.num_heads, attn.head_dim
    grid = packed.to_grid(project_qkv(attn, x), exact_padding=False)  # (B, W, 3 C)
    qkv = grid.view(packed.batch, packed.width, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=attend,
                                         dropout_p=attention_dropout(attn))
    out = packed.from_grid(out.transpose(1, 2))  # (N, heads, head_dim)
    return attn.out_proj(out.reshape(-1, heads * head_dim))


# A copy of fairseq's TransformerEncoderLayerBase.forward, which takes (T, B, C) with a padding
# mask, not packed tokens, and calls its attention itself.
def encoder_layer_forward(layer: TransformerEncoderLayerBase, x: torch.Tensor,
                          self_attention: Callable[[MultiheadAttention, torch.Tensor],
                                                   torch.Tensor]) -> torch.Tensor:
    """``TransformerEncoderLayerBase.forward``'s computation on ``x`` (tokens along any
    leading dims), with ``self_attention(layer.self_attn, x)`` as its attention."""
    residual = x
    if layer.normalize_before:
        x = layer.self_attn_layer_norm(x)
    x = self_attention(layer.self_attn, x)
    x = layer.dropout_module(x)
    x = layer.residual_connection(x, residual)
    if not layer.normalize_before:
        x = layer.self_attn_layer_norm(x)

    residual = x
    if layer.normalize_before:
        x = layer.final_layer_norm(x)
    x = layer.activation_fn(layer.fc1(x))
    x = layer.activation_dropout_module(x)
    x = layer.fc2(x)
    x = layer.dropout_module(x)
    x = layer.residual_connection(x, residual)
    if not layer.normalize_before:
        x = layer.final_layer_norm(x)
    return x


def packed_encoder_layer(layer: TransformerEncoderLayerBase, x: torch.Tensor,
                         packed: PackedTokens, attend: torch.Tensor) -> torch.Tensor:
    """``TransformerEncoderLayerBase.forward`` on packed tokens ``x`` ``(N, C)``."""
    return encoder_layer_forward(
        layer, x, lambda attn, h: packed_self_attention(attn, h, packed, attend))


def grid_encoder_layer(layer: TransformerEncoderLayerBase, x: torch.Tensor,
                       attend: torch.Tensor) -> torch.Tensor:
    """``TransformerEncoderLayerBase.forward`` on ``x`` ``(B, L, C)`` (batch first), keys
    ``attend`` ``(B, 1, 1, L)`` (True where a key takes part): fairseq's layer with a
    ``encoder_padding_mask``, in fewer ops (one Q/K/V product, SDPA)."""
    return encoder_layer_forward(layer, x,
                                 lambda attn, h: grid_self_attention(attn, h, attend))
