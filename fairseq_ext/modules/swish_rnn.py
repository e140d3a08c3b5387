"""SwishRNN, the recurrence layer of "Simple Recurrence Improves Masked Language Models" (Lei et
al.), which replaces each feed-forward block of BERT-rab.

* Eq. 2: ``X1 = X W1``, ``X2 = X W2`` (``d -> d'``, no bias).
* Eq. 3: ``c[i] = Swish(c[i-k] - x1[i]) + x1[i]``, ``Swish(z) = sigmoid(alpha * z + beta) * z``
  (footnote 2; ``alpha`` and ``beta`` are learned vectors of size ``d'`` initialised to 1 and 0),
  ``c[i] = 0`` for ``i <= 0``. With step size ``k`` (§3 "Speeding up recurrence") position ``i``
  depends on ``i - k``: ``k`` interleaved independent chains, ``ceil(T / k)`` sequential steps;
  ``T`` need not be a multiple of ``k``.
* Eq. 4: ``H = W3 ((C + b_c) * GeLU(X2 + b_sigma)) + b3`` (the paper found GeLU better than a
  sigmoid gate).

Layout is fairseq's: time-major ``(T, B, C)``, optional ``(B, T)`` padding mask. Padding never
changes the outputs at real positions: ``x1`` is zeroed at padded positions, so a run of
padding before a sequence (left padding) keeps ``c = Swish(0 - 0) + 0 = 0``, exactly the
initial state, and padding after it (right padding) comes after every real position of the
left-to-right recurrence (the same argument holds mirrored for the reverse direction).

Direction (not in the paper, off by default): ``"forward"`` is the paper's left-to-right
recurrence; ``"reverse"`` runs it right to left; ``"bidirectional"`` runs the first
``d' / 2`` channels left to right and the other ``d' - d'/2`` right to left, so the
parameter count and FLOPs do not change.

:func:`swish_recurrence` runs the custom op ``fairseq_ext::swish_recurrence`` (C++ kernels in
``fairseq_ext/csrc/swish_recurrence.cpp``, compiled by ``make install``; its backward is the op
``fairseq_ext::swish_recurrence_backward``, wired here with ``torch.library.register_autograd``,
and both have ``register_fake`` kernels, so autograd, ``torch.compile(fullgraph=True)`` and
``torch.library.opcheck`` work). CPU kernels always; CUDA kernels
(``fairseq_ext/csrc/swish_recurrence_kernels.cu``) when the extension was built against a CUDA
torch. On other devices, or when the extension is not built, it runs
:func:`swish_recurrence_reference` (the pure-PyTorch recurrence, also the test oracle) and logs
once which implementation is in use.
"""
import functools
import logging
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


def check_recurrence_inputs(x1: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                            step_size: int) -> None:
    """Clear errors for what the recurrence cannot take (raised at the Python entry)."""
    if not isinstance(step_size, int) or step_size < 1:
        raise ValueError(f"swish_recurrence: step_size must be an integer >= 1; got {step_size!r}")
    if x1.dim() != 3:
        raise ValueError(f"swish_recurrence: x1 must be (T, B, d') (time-major, rank 3); "
                         f"got shape {tuple(x1.shape)}")
    hidden = x1.size(-1)
    for name, vector in (("alpha", alpha), ("beta", beta)):
        if vector.dim() != 1 or vector.size(0) != hidden:
            raise ValueError(f"swish_recurrence: {name} must be a vector of size d' = {hidden}; "
                             f"got shape {tuple(vector.shape)}")
        if vector.dtype != x1.dtype or vector.device != x1.device:
            raise ValueError(f"swish_recurrence: {name} is {vector.dtype} on {vector.device} but "
                             f"x1 is {x1.dtype} on {x1.device}; use one dtype and device")


def swish_recurrence_reference(x1: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                               step_size: int = 1) -> torch.Tensor:
    """Eq. 3 in plain PyTorch: ``c[i] = Swish(c[i-k] - x1[i]) + x1[i]``, ``c[i <= 0] = 0``.

    ``x1``: ``(T, B, d')``; ``alpha``, ``beta``: ``(d',)``. Returns ``c`` ``(T, B, d')``. The
    ``k`` chains advance together, ``k`` positions per step (``ceil(T / k)`` steps); the
    arithmetic runs in fp32 at least (fp16/bf16 inputs come back in their own dtype).
    """
    check_recurrence_inputs(x1, alpha, beta, step_size)
    compute_dtype = torch.promote_types(x1.dtype, torch.float32)
    x = x1.to(compute_dtype)
    a, b = alpha.to(compute_dtype), beta.to(compute_dtype)
    length = x.size(0)
    previous = x.new_zeros((min(step_size, length),) + tuple(x.shape[1:]))
    steps = []
    for start in range(0, length, step_size):
        current = x[start:start + step_size]
        z = previous[:current.size(0)] - current
        previous = torch.sigmoid(a * z + b) * z + current
        steps.append(previous)
    if not steps:
        return x1.new_zeros(x1.shape)
    return torch.cat(steps, dim=0).to(x1.dtype)


def _load_native_op() -> bool:
    """Import the compiled extension, whose import registers ``fairseq_ext::swish_recurrence``."""
    try:
        from fairseq_ext import _C  # noqa: F401
    except ImportError:
        return False
    return True


def _devices_with_kernels() -> tuple:
    """Device types for which the extension registered a ``fairseq_ext::swish_recurrence``
    kernel (CPU always; CUDA when it was built with CUDA)."""
    if not NATIVE_OP_AVAILABLE:
        return ()
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return tuple(device for device, key in (("cpu", "CPU"), ("cuda", "CUDA"))
                 if has_kernel("fairseq_ext::swish_recurrence", key))


NATIVE_OP_AVAILABLE = _load_native_op()
NATIVE_OP_DEVICES = _devices_with_kernels()

if NATIVE_OP_AVAILABLE:

    @torch.library.register_fake("fairseq_ext::swish_recurrence")
    def _swish_recurrence_fake(x1, alpha, beta, step):
        return torch.empty_like(x1)

    @torch.library.register_fake("fairseq_ext::swish_recurrence_backward")
    def _swish_recurrence_backward_fake(grad_c, x1, c, alpha, beta, step):
        return torch.empty_like(x1), torch.empty_like(alpha), torch.empty_like(beta)

    def _setup_context(ctx, inputs, output):
        x1, alpha, beta, step = inputs
        ctx.save_for_backward(x1, output, alpha, beta)
        ctx.step = step

    def _backward(ctx, grad_c):
        x1, c, alpha, beta = ctx.saved_tensors
        grad_x1, grad_alpha, grad_beta = torch.ops.fairseq_ext.swish_recurrence_backward(
            grad_c, x1, c, alpha, beta, ctx.step)
        return grad_x1, grad_alpha, grad_beta, None

    torch.library.register_autograd("fairseq_ext::swish_recurrence", _backward,
                                    setup_context=_setup_context)


@functools.lru_cache(maxsize=None)
def _warn_reference_in_use(reason: str) -> None:
    logger.warning(f"SwishRNN: {reason}; using the pure-PyTorch reference recurrence "
                   "(ceil(T/k) sequential steps), which is much slower")


def swish_recurrence(x1: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                     step_size: int = 1) -> torch.Tensor:
    """The SwishRNN recurrence (Eq. 3) on ``x1`` ``(T, B, d')``; see the module docstring.

    Runs the ``fairseq_ext::swish_recurrence`` op where it has a kernel, otherwise the reference
    (a one-time warning names the implementation in use and why).
    """
    check_recurrence_inputs(x1, alpha, beta, step_size)
    if NATIVE_OP_AVAILABLE and x1.device.type in NATIVE_OP_DEVICES:
        return torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, step_size)
    _warn_reference_in_use(
        "the fairseq_ext._C extension is not built (run `make install`)" if not NATIVE_OP_AVAILABLE
        else f"the fairseq_ext::swish_recurrence op has no {x1.device.type} kernel yet")
    return swish_recurrence_reference(x1, alpha, beta, step_size)


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
