"""Count the FLOPs of a real forward+backward with ``torch.utils.flop_counter.FlopCounterMode``
and set them beside :mod:`fairseq_ext.flops`' analytic count (``python -m fairseq_ext.flops
--measure``).

FlopCounterMode counts matrix products (``mm``, ``addmm``, ``bmm``, attention kernels) with a
multiply-add as 2 FLOPs and ignores element-wise work, the same convention as the analytic
formulas; the backward pass counts the products for input and weight gradients (2 x forward).
The batch is corrupted with exact counts (``round(m L)`` corrupted positions per sequence, of
which ``round(f m L)`` become ``<mask>``), and the analytic count is evaluated at those lengths.

``scaled_dot_product_attention`` runs on its math backend while counting (:func:`flop_counter`):
its matrix products are then counted as written (2 x forward in the backward, the analytic
convention), whatever kernel the device would pick. (FlopCounterMode has no formula for the CPU
fused kernel, so it would count nothing there; fused kernels recompute the attention scores in
the backward, 0.5 x the attention map's forward FLOPs more, which the analytic convention does
not count.)
"""
import contextlib
from typing import Dict, Iterator, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fairseq_ext.flops.families import ModelSpec, exact_forward_flops
from fairseq_ext.flops.formulas import TRAINING_MULTIPLIER
from fairseq_ext.training.model_building import build_arch, corrupted_batch, masked_lm_task


@contextlib.contextmanager
def flop_counter() -> Iterator[FlopCounterMode]:
    """A silent ``FlopCounterMode`` with SDPA on its math backend (module doc)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        yield counter


def measure_training_flops(arch: str, spec: ModelSpec, length: int, mask_prob: float,
                           vocab_size: int, mask_fraction: float, overrides: Dict,
                           batch_size: int = 1, seed: int = 0) -> Tuple[float, float]:
    """(measured, analytic) training FLOPs per sequence of one forward+backward of ``arch``."""
    task = masked_lm_task(vocab_size, mask_prob, mask_fraction)
    model = build_arch(arch, task, length, **overrides)
    generator = torch.Generator().manual_seed(seed)
    src, target, corrupted, n_mask = corrupted_batch(task, batch_size, length, mask_prob,
                                                     mask_fraction, generator)
    masked = target.ne(task.source_dictionary.pad())
    with flop_counter() as counter:
        logits = model(src, masked_tokens=masked)[0]
        F.cross_entropy(logits.float(), target[masked], reduction="sum").backward()
    measured = counter.get_total_flops() / batch_size
    analytic = TRAINING_MULTIPLIER * exact_forward_flops(spec, length, n_mask, corrupted - n_mask,
                                                         vocab_size)
    return measured, analytic
