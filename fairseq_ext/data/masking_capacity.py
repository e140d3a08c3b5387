"""Static sizes for the tokens of a batch that fairseq's ``MaskTokensDataset`` corrupts.

A model that packs a batch's tokens by what masking did to them (3ML's encoder runs on the
kept tokens, its cross decoder on the [MASK] slots; every masked LM predicts only the
corrupted tokens) needs their counts to size its tensors. Read from the batch, each count is a
host sync on a GPU and a shape that changes from batch to batch, which ``torch.compile`` must
recompile for. :class:`MaskingCapacity` gives instead, from the batch's shape ``(B, T)`` and the
masking settings alone, sizes the counts cannot exceed (the kept tokens: exceed with probability
below :data:`OVERFLOW_PROBABILITY` a batch, by Chernoff's tail bound), rounded up to a few
buckets. Whole-word or span masking has no such bound here (:meth:`MaskingCapacity.from_task`
returns ``None``). The bound, its padding cost and what 3ML does in the rare batch beyond it:
docs/training_step.md ("3ML's sizes").
"""
import dataclasses
import functools
import math
from typing import Optional

import torch

#: The probability that a batch holds more kept tokens than :meth:`MaskingCapacity.kept_per_row`
#: or :meth:`MaskingCapacity.kept_total` allow.
OVERFLOW_PROBABILITY = 1e-9
#: Sizes are rounded up to multiples of these (fewer distinct shapes for ``torch.compile``).
ROW_BUCKET = 8
TOTAL_BUCKET = 8


def round_up(value: int, multiple: int, limit: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``, at most ``limit``."""
    return min(-(-value // multiple) * multiple, limit)


def _kl(a: float, p: float) -> float:
    """``KL(Bernoulli(a) || Bernoulli(p))`` in nats."""
    total = 0.0
    if a > 0:
        total += a * math.log(a / p)
    if a < 1:
        total += (1 - a) * math.log((1 - a) / (1 - p))
    return total


def _as_constant(function):
    """``function`` evaluated by ``torch.compile`` at trace time, its result a constant
    (``torch.compiler.assume_constant_result``): here, a function of the static batch shape."""
    assume = getattr(torch.compiler, "assume_constant_result", None)
    return function if assume is None else assume(function)


@_as_constant
def binomial_lower_bound(trials: int, p: float, probability: float) -> int:
    """The largest ``k`` such that ``P(X <= k) <= probability`` for ``X ~ Binomial(trials, p)``
    by Chernoff's bound ``P(X <= k) <= exp(-trials KL(k/trials || p))`` (``k < trials p``);
    -1 when even ``k = 0`` cannot be bounded so (``X`` may be 0). Computed once per
    arguments (a plain function around the cached one, so that dynamo calls it rather than
    look inside the cache)."""
    return _binomial_lower_bound(trials, p, probability)


@functools.lru_cache(maxsize=4096)
def _binomial_lower_bound(trials: int, p: float, probability: float) -> int:
    if trials <= 0 or p <= 0.0:
        return -1
    if p >= 1.0:
        return trials - 1  # X == trials surely
    log_target = math.log(probability)
    low, high = -1, math.ceil(trials * p) - 1  # k = -1 always qualifies (P = 0)
    while low < high:  # bisection: the bound grows with k below the mean
        middle = (low + high + 1) // 2
        if -trials * _kl(middle / trials, p) <= log_target:
            low = middle
        else:
            high = middle - 1
    return low


@dataclasses.dataclass(frozen=True)
class MaskingCapacity:
    """Static sizes for batches masked by ``MaskTokensDataset`` (module docstring).

    ``mask_prob`` is ``--mask-prob`` (``m``); ``unmask_prob`` is ``--leave-unmasked-prob`` +
    ``--random-token-prob`` (``r``: a corrupted token that is not ``<mask>``). With token-level
    masking, fairseq 0.12 corrupts ``c = int(m n + U)`` of a row's ``n`` tokens, ``U ~ U[0, 1)``,
    each independently ``<mask>`` with probability ``1 - r``. So for rows of at most ``T`` tokens:

    * corrupted (predicted) and [MASK] tokens per row: at most ``floor(m T) + 1``, exactly;
    * kept tokens (neither padding nor ``<mask>``) per row: ``T - k``, ``k`` the largest count
      that ``Binomial(floor(m T), 1 - r)`` falls to or below with probability at most
      ``OVERFLOW_PROBABILITY / (2 B)`` (Chernoff's ``exp(-n KL(k/n || p))``, an upper bound on
      the tail); for the whole batch ``B T - k'``, the same for ``Binomial(B floor(m T), 1 - r)``
      at ``OVERFLOW_PROBABILITY / 2``."""

    mask_prob: float
    unmask_prob: float

    @classmethod
    def from_task(cls, task_cfg) -> Optional["MaskingCapacity"]:
        """The capacity of a ``masked_lm`` task's masking, or ``None`` where it has none here
        (whole-word or span masking, or a task without these settings)."""
        mask_prob = getattr(task_cfg, "mask_prob", None)
        if not isinstance(mask_prob, (int, float)) or not 0.0 < mask_prob < 1.0:
            return None
        if getattr(task_cfg, "mask_whole_words", False) \
                or getattr(task_cfg, "mask_multiple_length", 1) != 1 \
                or getattr(task_cfg, "mask_stdev", 0.0) != 0.0:
            return None
        unmask = (float(getattr(task_cfg, "leave_unmasked_prob", 0.1))
                  + float(getattr(task_cfg, "random_token_prob", 0.1)))
        return cls(float(mask_prob), min(max(unmask, 0.0), 1.0))

    def corrupted_per_row(self, length: int) -> int:
        """At most this many corrupted tokens (and [MASK]s) in a row of ``length`` tokens."""
        return min(math.floor(self.mask_prob * length) + 1, length)

    def predicted_total(self, rows: int, length: int) -> int:
        """At most this many corrupted (predicted) tokens in a ``(rows, length)`` batch,
        rounded up to a multiple of :data:`ROW_BUCKET`."""
        return round_up(rows * self.corrupted_per_row(length), ROW_BUCKET, rows * length)

    def masks_per_row(self, length: int) -> int:
        """At most this many ``<mask>`` tokens in a row, rounded up to :data:`ROW_BUCKET`."""
        return max(round_up(self.corrupted_per_row(length), ROW_BUCKET, length), 1)

    def _surely_masked(self, rows: int, length: int, probability: float) -> int:
        """``k``: fewer than ``k + 1`` ``<mask>`` tokens in ``rows`` full rows has probability
        at most ``probability``."""
        corrupted = math.floor(self.mask_prob * length)
        return max(binomial_lower_bound(rows * corrupted, 1.0 - self.unmask_prob, probability), 0)

    def kept_per_row(self, rows: int, length: int) -> int:
        """Kept tokens per row: exceeded by some row of a ``(rows, length)`` batch with
        probability at most half of :data:`OVERFLOW_PROBABILITY`."""
        surely = self._surely_masked(1, length, OVERFLOW_PROBABILITY / 2 / max(rows, 1))
        return max(round_up(length - surely, ROW_BUCKET, length), 1)

    def kept_total(self, rows: int, length: int) -> int:
        """Kept tokens in a ``(rows, length)`` batch: exceeded with probability at most half of
        :data:`OVERFLOW_PROBABILITY`; at most ``rows`` x :meth:`kept_per_row`."""
        surely = self._surely_masked(rows, length, OVERFLOW_PROBABILITY / 2)
        return max(round_up(rows * length - surely, TOTAL_BUCKET,
                            rows * self.kept_per_row(rows, length)), 1)
