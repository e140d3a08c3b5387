"""Count the FLOPs of a real forward+backward with ``torch.utils.flop_counter.FlopCounterMode``
and set them beside :mod:`fairseq_ext.flops`' analytic count (``python -m fairseq_ext.flops
--measure``).

FlopCounterMode counts matrix products with a multiply-add as 2 FLOPs and ignores element-wise
work, the analytic formulas' convention; the backward counts input and weight gradients (2 x
forward). The batch is corrupted with exact counts (``round(m L)`` corrupted positions per
sequence, ``round(f m L)`` of them ``<mask>``), and the analytic count is evaluated at those
lengths. ``scaled_dot_product_attention`` runs on its math backend while counting
(:func:`flop_counter`), so its products are counted as written whatever kernel the device would
pick: FlopCounterMode has no formula for the CPU fused kernel, and fused kernels recompute the
scores in the backward, which the analytic convention does not count. See docs/flops.md.
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
