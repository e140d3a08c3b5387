"""``fairseq_ext::swish_recurrence``: the recurrence of SwishRNN (Lei et al., Eq. 3) as a custom
op, laid out as pytorch/extension-cpp does.

Eq. 3: ``c[i] = Swish(c[i-k] - x1[i]) + x1[i]``, ``Swish(z) = sigmoid(alpha z + beta) z``,
``c[i] = 0`` for ``i <= 0``; ``x1`` ``(T, B, d')`` time-major, ``alpha``, ``beta`` ``(d',)``. The
C++/CUDA kernels (``csrc/``) register the op and its backward with ``TORCH_LIBRARY`` when
``fairseq_ext.ops._C`` is imported (here, once); this module registers their fake kernels and
the autograd formula, so autograd, ``torch.compile`` and ``torch.library.opcheck`` work.
:func:`swish_recurrence` is the entry the layer calls: the op where it has a kernel for the
device, else :func:`swish_recurrence_reference` (the pure-PyTorch recurrence, also the tests'
oracle), with a one-time warning naming the implementation. Build and speed: docs/swishrnn.md.
"""
import functools
import logging

import torch

logger = logging.getLogger(__name__)

OP_NAME = "fairseq_ext::swish_recurrence"
BACKWARD_OP_NAME = "fairseq_ext::swish_recurrence_backward"
#: Set to "1", the CUDA kernels run one column per thread for every dtype, read at each launch;
#: otherwise fp16/bf16 run two neighbouring columns per thread, each access 4 bytes, where the
#: column count is even and the arrays 4-byte aligned (``csrc/swish_recurrence_kernels.cu``).
#: The results are the same bits either way; ``scripts/bench_swishrnn.py --part a`` times both.
COLUMNS_PER_THREAD_ENV = "FAIRSEQ_EXT_SWISH_COLUMNS_PER_THREAD"


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
    ``k`` chains advance together, ``k`` positions per step (``ceil(T / k)`` steps, ``x1`` split
    once, so its backward is one concatenation, not a zero-filled gradient per step); the
    arithmetic runs in fp32 at least (fp16/bf16 inputs come back in their dtype).
    """
    check_recurrence_inputs(x1, alpha, beta, step_size)
    if x1.size(0) == 0:
        return x1.new_zeros(x1.shape)
    compute_dtype = torch.promote_types(x1.dtype, torch.float32)
    x = x1.to(compute_dtype)
    a, b = alpha.to(compute_dtype), beta.to(compute_dtype)
    previous = x.new_zeros((min(step_size, x.size(0)),) + tuple(x.shape[1:]))
    steps = []
    for current in x.split(step_size, dim=0):
        z = previous[:current.size(0)] - current
        previous = torch.sigmoid(a * z + b) * z + current
        steps.append(previous)
    return torch.cat(steps, dim=0).to(x1.dtype)


def _load_extension():
    """Import the compiled extension (its import registers the op); None if it is not built."""
    try:
        from fairseq_ext.ops import _C
    except ImportError:
        return None
    return _C


def _devices_with_kernels() -> tuple:
    """Device types for which the extension registered a kernel of the op (CPU always, CUDA
    when it was built with CUDA)."""
    if EXTENSION is None:
        return ()
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return tuple(device for device, key in (("cpu", "CPU"), ("cuda", "CUDA"))
                 if has_kernel(OP_NAME, key))


EXTENSION = _load_extension()
NATIVE_OP_AVAILABLE = EXTENSION is not None
NATIVE_OP_DEVICES = _devices_with_kernels()


def cpu_kernels() -> str:
    """Which fp32 CPU kernels the op runs: ``"AVX2"`` (vectorized with AVX2+FMA) or
    ``"portable"`` (ATen's portable Vectorized); ``"none"`` without the extension."""
    return EXTENSION.cpu_kernels() if EXTENSION is not None else "none"


def _check_fake_inputs(x1, alpha, beta, step):
    torch._check(x1.dim() == 3, lambda: f"swish_recurrence: x1 must be (T, B, D), got {x1.shape}")
    torch._check(alpha.dim() == 1 and alpha.size(0) == x1.size(2),
                 lambda: f"swish_recurrence: alpha must be (D,) with D = {x1.size(2)}")
    torch._check(beta.shape == alpha.shape, lambda: "swish_recurrence: beta must be (D,)")
    torch._check(step >= 1, lambda: f"swish_recurrence: step must be >= 1, got {step}")


if NATIVE_OP_AVAILABLE:

    @torch.library.register_fake(OP_NAME)
    def _swish_recurrence_fake(x1, alpha, beta, step):
        _check_fake_inputs(x1, alpha, beta, step)
        return x1.new_empty(x1.shape)  # contiguous, as the kernels return it

    @torch.library.register_fake(BACKWARD_OP_NAME)
    def _swish_recurrence_backward_fake(grad_c, x1, c, alpha, beta, step):
        _check_fake_inputs(x1, alpha, beta, step)
        torch._check(grad_c.shape == x1.shape and c.shape == x1.shape,
                     lambda: "swish_recurrence_backward: grad_c and c must have x1's shape")
        return x1.new_empty(x1.shape), alpha.new_empty(alpha.shape), beta.new_empty(beta.shape)

    def _setup_context(ctx, inputs, output):
        x1, alpha, beta, step = inputs
        ctx.save_for_backward(x1, output, alpha, beta)
        ctx.step = step

    def _backward(ctx, grad_c):
        x1, c, alpha, beta = ctx.saved_tensors
        grad_x1, grad_alpha, grad_beta = torch.ops.fairseq_ext.swish_recurrence_backward(
            grad_c, x1, c, alpha, beta, ctx.step)
        return grad_x1, grad_alpha, grad_beta, None

    torch.library.register_autograd(OP_NAME, _backward, setup_context=_setup_context)


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
        "the fairseq_ext.ops._C extension is not built (run `make install`)" if not NATIVE_OP_AVAILABLE
        else f"the {OP_NAME} op has no {x1.device.type} kernel yet")
    return swish_recurrence_reference(x1, alpha, beta, step_size)
