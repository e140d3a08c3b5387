"""Forward FLOPs of the building blocks, one sequence (3ML paper, Appendix D).

A multiply-add counts as 2 FLOPs; embedding lookups, biases, norms, activations, softmax and
dropout are ignored. The whole-model formulas combine these per family
(:mod:`fairseq_ext.flops.families`).
"""
from typing import Tuple

from fairseq_ext.cli.errors import ConfigError

#: Training FLOPs = 3 x forward: the backward pass computes the gradients of the inputs and of
#: the weights, each a matrix product as large as the forward one. The 3ML paper (App. D) says
#: forward and backward "consume similar FLOPs" (x 2); we count x 3, which is what
#: ``torch.utils.flop_counter.FlopCounterMode`` measures. Speedups (ratios) and equal-budget
#: update counts are the same under either convention; absolute FLOPs are 1.5 x the paper's.
TRAINING_MULTIPLIER = 3


def self_attention_flops(length: float, dim: int) -> float:
    """Multi-head self-attention on ``length`` tokens: ``2 (4 L D^2 + 2 L^2 D)``."""
    return 2 * (4 * length * dim ** 2 + 2 * length ** 2 * dim)


def feed_forward_flops(length: float, dim: int, ffn_dim: int) -> float:
    """Two-layer feed-forward block, ``D -> F -> D``: ``2 (2 L D F)``."""
    return 2 * (2 * length * dim * ffn_dim)


def cross_attention_flops(queries: float, keys: float, dim: int) -> float:
    """``Lq`` queries attending to ``Lk`` keys: ``2 (2 Lq D^2 + 2 Lk D^2 + 2 Lq Lk D)``."""
    return 2 * (2 * queries * dim ** 2 + 2 * keys * dim ** 2 + 2 * queries * keys * dim)


def transformer_block_flops(length: float, dim: int, ffn_dim: int) -> float:
    """A self-attention Transformer block (encoder layer)."""
    return self_attention_flops(length, dim) + feed_forward_flops(length, dim, ffn_dim)


def cross_block_flops(queries: float, keys: float, dim: int, ffn_dim: int) -> float:
    """A Transformer decoder block with self- and cross-attention, no causal mask (3ML-cross)."""
    return (self_attention_flops(queries, dim) + cross_attention_flops(queries, keys, dim)
            + feed_forward_flops(queries, dim, ffn_dim))


def swishrnn_flops(length: float, dim: int, hidden_dim: int) -> float:
    """SwishRNN layer (Lei et al., Eqs. 2 and 4): three ``d x d'`` matrices, ``2 (3 L d d')``
    (the element-wise recurrence, Eq. 3, is ignored like activations)."""
    return 2 * (3 * length * dim * hidden_dim)


def swishrnn_bert_block_flops(length: float, dim: int, hidden_dim: int) -> float:
    """A SwishRNN-BERT block: self-attention, and a SwishRNN layer in place of the FFN."""
    return self_attention_flops(length, dim) + swishrnn_flops(length, dim, hidden_dim)


def prediction_head_flops(tokens: float, input_dim: int, embed_dim: int, vocab_size: int) -> float:
    """MLM head on ``tokens`` positions: dense ``input_dim -> embed_dim``, then the tied
    projection to the vocabulary: ``2 n (D_in D_e + D_e V)``."""
    return 2 * tokens * (input_dim * embed_dim + embed_dim * vocab_size)


def projection_flops(tokens: float, in_dim: int, out_dim: int) -> float:
    """A linear projection of ``tokens`` vectors (0 when the dims agree: no layer)."""
    return 0.0 if in_dim == out_dim else 2 * tokens * in_dim * out_dim


def decoder_lm_forward_flops(length: float, dim: int, ffn_dim: int, layers: int,
                             vocab_size: int, predicted_tokens: float) -> float:
    """Decoder-only Transformer LM: ``layers`` blocks on ``length`` tokens (self-attention
    counted on the full ``L x L`` map) and the output projection ``2 n D V`` on the
    ``predicted_tokens`` it predicts."""
    return (layers * transformer_block_flops(length, dim, ffn_dim)
            + 2 * predicted_tokens * dim * vocab_size)


def check_mask_prob(mask_prob: float) -> None:
    if not 0.0 < mask_prob < 1.0:
        raise ConfigError(f"--mask-prob must be in (0, 1); got {mask_prob}")


def corrupted_tokens(length: float, mask_prob: float, mask_fraction: float) -> Tuple[float, float]:
    """``(mask, other)``: the expected ``<mask>`` and other corrupted tokens of ``length``
    tokens at masking rate ``mask_prob`` (checked by :func:`check_mask_prob`), of which
    ``mask_fraction`` become ``<mask>`` (App. D: ``f m L`` [MASK]s)."""
    check_mask_prob(mask_prob)
    corrupted = mask_prob * length
    mask = mask_fraction * corrupted
    return mask, corrupted - mask


def format_flops(flops: float) -> str:
    """``1.23e+15 (1.230 PFLOPs)``-style text."""
    return f"{flops:.3e} ({flops / 1e15:.4g} PFLOPs)"
