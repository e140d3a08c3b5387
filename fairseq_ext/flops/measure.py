"""Count the FLOPs of a real forward+backward with ``torch.utils.flop_counter.FlopCounterMode``
and set them beside :mod:`fairseq_ext.flops`' analytic count (``python -m fairseq_ext.flops
--measure``).

FlopCounterMode counts matrix products (``mm``, ``addmm``, ``bmm``, attention kernels) with a
multiply-add as 2 FLOPs and ignores element-wise work, the same convention as the analytic
formulas; the backward pass counts the products for input and weight gradients (2 x forward).
The batch is corrupted with exact counts (``round(m L)`` corrupted positions per sequence, of
which ``round(f m L)`` become ``<mask>``), and the analytic count is evaluated at those lengths.
"""
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fairseq_ext.flops.families import ModelSpec, exact_forward_flops
from fairseq_ext.flops.formulas import TRAINING_MULTIPLIER
from fairseq_ext.model_building import MaskedLmTaskStub, build_arch


def masked_lm_task(vocab_size: int, mask_prob: float, mask_fraction: float) -> MaskedLmTaskStub:
    """A task stub whose corrupted tokens are ``mask_fraction`` ``<mask>``, the rest split
    evenly between random and unchanged tokens."""
    other = (1.0 - mask_fraction) / 2
    return MaskedLmTaskStub(vocab_size, mask_prob, leave_unmasked_prob=other,
                            random_token_prob=other)


def corrupted_batch(task, batch_size: int, length: int, mask_prob: float, mask_fraction: float,
                    generator: torch.Generator):
    """Random tokens with exactly ``round(m L)`` corrupted positions per row: ``round(f m L)``
    of them ``<mask>``, half of the rest random tokens, the others unchanged."""
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    first_word = task.source_dictionary.nspecial
    tokens = torch.randint(first_word, mask_idx, (batch_size, length), generator=generator)
    src, target = tokens.clone(), torch.full_like(tokens, pad)
    corrupted = round(mask_prob * length)
    n_mask = round(mask_fraction * corrupted)
    n_random = (corrupted - n_mask) // 2
    for row in range(batch_size):
        chosen = torch.randperm(length, generator=generator)[:corrupted]
        target[row, chosen] = tokens[row, chosen]
        src[row, chosen[:n_mask]] = mask_idx
        src[row, chosen[n_mask:n_mask + n_random]] = torch.randint(
            first_word, mask_idx, (n_random,), generator=generator)
    return src, target, corrupted, n_mask


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
    with FlopCounterMode(display=False) as counter:
        logits = model(src, masked_tokens=masked)[0]
        F.cross_entropy(logits.float(), target[masked], reduction="sum").backward()
    measured = counter.get_total_flops() / batch_size
    analytic = TRAINING_MULTIPLIER * exact_forward_flops(spec, length, n_mask, corrupted - n_mask,
                                                         vocab_size)
    return measured, analytic
