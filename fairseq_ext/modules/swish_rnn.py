"""SwishRNN, the recurrence layer of "Simple Recurrence Improves Masked Language Models" (Lei et
al.), which replaces each feed-forward block of BERT-rab.

* Eq. 2: ``X1 = X W1``, ``X2 = X W2`` (``d -> d'``, no bias).
* Eq. 3: ``c[i] = Swish(c[i-k] - x1[i]) + x1[i]``, ``Swish(z) = sigmoid(alpha * z + beta) * z``
  (footnote 2; learned ``alpha``, ``beta`` of size ``d'``, initialised to 1 and 0), ``c[i] = 0``
  for ``i <= 0``; step size ``k`` (§3) gives ``k`` interleaved chains.
* Eq. 4: ``H = W3 ((C + b_c) * GeLU(X2 + b_sigma)) + b3``.

Layout is fairseq's: time-major ``(T, B, C)``, optional ``(B, T)`` padding mask; ``x1`` is zeroed
at padding, which keeps the initial state, so left or right padding never changes real positions.
``direction`` ``"reverse"`` / ``"bidirectional"`` (half the channels each way) go beyond the
paper. :func:`~fairseq_ext.ops.swish_recurrence.swish_recurrence` runs the recurrence (the custom
op, or its pure-PyTorch reference). Details: docs/swishrnn.md, "The layer and the op".
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from fairseq_ext.ops.swish_recurrence import swish_recurrence

DIRECTIONS = ("forward", "reverse", "bidirectional")


class SwishRNN(nn.Module):
    """The SwishRNN block of Lei et al. (Eqs. 2-4): ``(T, B, d) -> (T, B, d)``.

    Parameters: ``W1``, ``W2`` (``d x d'``, stored together as ``in_proj``, no bias), ``alpha``
    and ``beta`` (Swish, ``d'``), ``b_c`` and ``b_sigma`` (``d'``), ``W3`` and ``b3``
    (``out_proj``, ``d' -> d``): ``3 d d' + 4 d' + d`` in all. With ``d' = 2048`` (base) or
    ``2752`` (large) this matches a BERT FFN block's ``2 d F + F + d`` to within 1%.
    """

    def __init__(self, embed_dim: int, hidden_dim: int, step_size: int = 1,
                 direction: str = "forward"):
        super().__init__()
        if embed_dim < 1 or hidden_dim < 1:
            raise ValueError(f"SwishRNN: embed_dim and hidden_dim must be >= 1; got {embed_dim}, "
                             f"{hidden_dim}")
        if not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"SwishRNN: step_size must be an integer >= 1; got {step_size!r}")
        if direction not in DIRECTIONS:
            raise ValueError(f"SwishRNN: direction must be one of {', '.join(DIRECTIONS)}; got "
                             f"{direction!r}")
        if direction == "bidirectional" and hidden_dim < 2:
            raise ValueError("SwishRNN: a bidirectional recurrence needs hidden_dim >= 2")
        self.embed_dim, self.hidden_dim, self.step_size = embed_dim, hidden_dim, step_size
        self.direction = direction
        self.in_proj = nn.Linear(embed_dim, 2 * hidden_dim, bias=False)  # [W1 | W2], Eq. 2
        self.alpha = nn.Parameter(torch.ones(hidden_dim))
        self.beta = nn.Parameter(torch.zeros(hidden_dim))
        self.bias_c = nn.Parameter(torch.zeros(hidden_dim))
        self.bias_sigma = nn.Parameter(torch.zeros(hidden_dim))
        self.out_proj = nn.Linear(hidden_dim, embed_dim)  # W3, b3, Eq. 4
        nn.init.normal_(self.in_proj.weight, std=0.02)
        nn.init.normal_(self.out_proj.weight, std=0.02)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x`` ``(T, B, d)``; ``padding_mask`` ``(B, T)``, True at padding (left or right)."""
        if x.dim() != 3 or x.size(-1) != self.embed_dim:
            raise ValueError(f"SwishRNN: input must be (T, B, {self.embed_dim}); got "
                             f"{tuple(x.shape)}")
        x1, x2 = self.in_proj(x).chunk(2, dim=-1)
        if padding_mask is not None:
            x1 = x1.masked_fill(padding_mask.transpose(0, 1).unsqueeze(-1), 0.0)
        c = self.recurrence(x1, self.alpha.to(x1.dtype), self.beta.to(x1.dtype))
        return self.out_proj((c + self.bias_c) * F.gelu(x2 + self.bias_sigma))

    def recurrence(self, x1: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """Eq. 3 over time in :attr:`direction` (reverse: on the time-flipped sequence)."""
        def run(x, a, b, reverse):
            if not reverse:
                return swish_recurrence(x.contiguous(), a, b, self.step_size)
            return swish_recurrence(x.flip(0), a, b, self.step_size).flip(0)

        if self.direction != "bidirectional":
            return run(x1, alpha, beta, self.direction == "reverse")
        half = self.hidden_dim // 2
        return torch.cat([run(x1[..., :half], alpha[:half], beta[:half], False),
                          run(x1[..., half:], alpha[half:], beta[half:], True)], dim=-1)

    def extra_repr(self) -> str:
        direction = "" if self.direction == "forward" else f", direction={self.direction}"
        return (f"{self.embed_dim} -> {self.hidden_dim} -> {self.embed_dim}, "
                f"step_size={self.step_size}{direction}")


def parameter_count(embed_dim: int, hidden_dim: int) -> int:
    """Parameters of one :class:`SwishRNN` block: ``3 d d' + 4 d' + d``."""
    return 3 * embed_dim * hidden_dim + 4 * hidden_dim + embed_dim
