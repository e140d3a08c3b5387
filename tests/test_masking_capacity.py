"""Static sizes for masked batches (fairseq_ext.data.masking_capacity): Chernoff's bound against
the exact binomial tail, the bounds against fairseq's own MaskTokensDataset over thousands of
rows, and which masking settings have no bound."""
import argparse
import math

import pytest
from masked_batches import fairseq_masked_batch

from fairseq_ext.data.masking_capacity import (
    MaskingCapacity,
    binomial_lower_bound,
    round_up,
)
from fairseq_ext.training.model_building import MaskedLmTaskStub


def binomial_cdf(k: int, n: int, p: float) -> float:
    """Exact P(X <= k), X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize("n,p,probability", [(40, 0.8, 1e-6), (100, 0.8, 1e-9),
                                             (64, 0.5, 1e-3), (7, 0.9, 1e-2)])
def test_chernoff_bound_is_a_true_bound_and_not_far_off(n, p, probability):
    k = binomial_lower_bound(n, p, probability)
    if k >= 0:
        assert binomial_cdf(k, n, p) <= probability
        # Chernoff's exponent at k itself: the bound it claims
        a = k / n
        kl = (a * math.log(a / p) if a else 0) + (1 - a) * math.log((1 - a) / (1 - p))
        assert math.exp(-n * kl) <= probability * (1 + 1e-9)
    # the exact quantile is at most a few standard deviations beyond it
    exact = max(j for j in range(-1, n + 1) if j < 0 or binomial_cdf(j, n, p) <= probability)
    assert k <= exact <= k + 4 * math.sqrt(n * p * (1 - p)) + 2


def test_degenerate_binomials():
    assert binomial_lower_bound(0, 0.8, 1e-9) == -1
    assert binomial_lower_bound(10, 0.0, 1e-9) == -1
    assert binomial_lower_bound(10, 1.0, 1e-9) == 9  # X = 10 surely: P(X <= 9) = 0


def test_sizes_by_hand():
    capacity = MaskingCapacity(mask_prob=0.5, unmask_prob=0.2)
    assert capacity.corrupted_per_row(64) == 33  # floor(32) + 1
    assert capacity.predicted_total(2, 64) == round_up(66, 8, 128) == 72
    assert capacity.masks_per_row(64) == 40
    # kept: T minus a count of <mask>s that Binomial(32, 0.8) exceeds but for 1e-9 / 4
    surely = binomial_lower_bound(32, 0.8, 1e-9 / 2 / 2)
    assert capacity.kept_per_row(2, 64) == round_up(64 - surely, 8, 64)
    surely_total = binomial_lower_bound(64, 0.8, 1e-9 / 2)
    assert capacity.kept_total(2, 64) == min(round_up(128 - surely_total, 8, 128),
                                             2 * capacity.kept_per_row(2, 64))
    assert round_up(65, 8, 1000) == 72 and round_up(65, 8, 70) == 70


def masked_rows(rows: int, length: int, mask_prob: float, seed: int):
    """fairseq-masked rows, some shorter (as with padding): ``(src, target, pad, mask)``."""
    task = MaskedLmTaskStub(55, mask_prob=mask_prob, leave_unmasked_prob=0.1,
                            random_token_prob=0.1)
    src, tgt = fairseq_masked_batch(task, rows, length, seed, shorter_every=3, shorter_by=1)
    return src, tgt, task.source_dictionary.pad(), task.mask_idx


@pytest.mark.parametrize("mask_prob", [0.15, 0.5])
def test_bounds_hold_on_fairseqs_masking(mask_prob):
    capacity = MaskingCapacity(mask_prob, 0.2)
    src, tgt, pad, mask_idx = masked_rows(3000, 40, mask_prob, seed=1)
    corrupted = tgt.ne(pad).sum(1)
    masks = src.eq(mask_idx).sum(1)
    kept = (src.ne(pad) & src.ne(mask_idx)).sum(1)
    assert int(corrupted.max()) <= capacity.corrupted_per_row(40)  # exact bound, reached
    assert int(corrupted.max()) >= capacity.corrupted_per_row(40) - 1
    assert int(masks.max()) <= capacity.masks_per_row(40)
    batch = 8
    assert int(kept.max()) <= capacity.kept_per_row(batch, 40)
    totals = kept.view(-1, batch).sum(1)
    assert int(totals.max()) <= capacity.kept_total(batch, 40)
    assert int(corrupted.view(-1, batch).sum(1).max()) <= capacity.predicted_total(batch, 40)
    # and they are not vacuous: well below the batch's size at 50%
    if mask_prob == 0.5:
        assert capacity.kept_total(batch, 40) < 0.85 * batch * 40


def test_from_task_only_for_token_level_masking():
    def cfg(**kwargs):
        base = dict(mask_prob=0.15, leave_unmasked_prob=0.1, random_token_prob=0.1,
                    mask_whole_words=False, mask_multiple_length=1, mask_stdev=0.0)
        base.update(kwargs)
        return argparse.Namespace(**base)

    assert MaskingCapacity.from_task(cfg()) == MaskingCapacity(0.15, 0.2)
    assert MaskingCapacity.from_task(cfg(mask_whole_words=True)) is None
    assert MaskingCapacity.from_task(cfg(mask_multiple_length=3)) is None
    assert MaskingCapacity.from_task(cfg(mask_stdev=1.0)) is None
    assert MaskingCapacity.from_task(cfg(mask_prob=1.5)) is None
    assert MaskingCapacity.from_task(None) is None
    assert MaskingCapacity.from_task(argparse.Namespace(mask_prob="${task.mask_prob}")) is None
