"""Which fused kernels are in use: NVIDIA apex when it is importable, torch's own otherwise.

fairseq picks apex's ``FusedLayerNorm`` by itself (``fairseq.modules.LayerNorm``) and falls back
to ``torch.nn.LayerNorm``, which is already a fused native kernel on CPU and CUDA. For Adam,
fairseq's ``--optimizer adam`` uses apex's ``FusedAdam`` when present and otherwise a pure-Python
loop; our ``--optimizer fused_adamw`` (:mod:`fairseq_ext.optim.fused_adamw`) uses apex when
present and otherwise ``torch.optim.AdamW(fused=True)``.

The PyPI package named ``apex`` is an unrelated web toolkit: only the real NVIDIA modules count,
so we probe ``apex.normalization`` and ``apex.optimizers``, never a bare ``import apex``.
"""
import functools
import logging

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def nvidia_apex_available() -> bool:
    """True when NVIDIA apex's fused LayerNorm and Adam can be imported."""
    try:
        from apex.normalization import FusedLayerNorm  # noqa: F401
        from apex.optimizers import FusedAdam  # noqa: F401
    except Exception:  # ImportError, or the unrelated PyPI `apex` failing in other ways
        return False
    return True


def describe_fused_kernels() -> str:
    """One line saying which LayerNorm and Adam implementations are active."""
    if nvidia_apex_available():
        return ("fused kernels: NVIDIA apex (FusedLayerNorm on CUDA, FusedAdam for "
                "--optimizer fused_adamw/adam on CUDA)")
    return ("fused kernels: NVIDIA apex not found; using torch.nn.LayerNorm (native fused kernel) "
            "and torch.optim.AdamW(fused=True) for --optimizer fused_adamw")


@functools.lru_cache(maxsize=None)
def log_fused_kernels() -> None:
    """Log :func:`describe_fused_kernels` once per process."""
    logger.info(describe_fused_kernels())
