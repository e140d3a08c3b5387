"""Standard errors of the evaluation figures of generalized bidirectionality (Tables 3-6 of
Artetxe et al. 2022), and of differences between two models scored on the same rows.

A perplexity is ``exp(R)``, ``R = sum_d l_d / sum_d n_d`` the token-weighted mean loss over the
scored documents ``d`` (the sampled units), whose error is the delta method's: with residuals
``e_d = l_d - R n_d``, ``SE(R) = sqrt(D / (D - 1) * sum_d e_d^2) / sum_d n_d`` and
``SE(exp R) = exp(R) SE(R)``, from five sums that add up across batches and workers
(:func:`ratio_standard_error_from_sums`). Accuracy has the binomial error over positions
(:func:`binomial_standard_error`); two models scored on the same rows are paired (the delta
method on the linearised difference for losses and perplexities); a difference is resolved
beyond :data:`RESOLVED_AT` standard errors, or Student's t quantile for an estimate over ``S``
seeds (:func:`mean_over_seeds`, :func:`t_critical`). Each estimator and its caveats:
docs/bidirectional.md, "Error bars"; over seeds: docs/studies.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

#: A difference counts as resolved when larger than this many standard errors of it (an error
#: estimated from many rows; one from few seeds uses :func:`t_critical` instead).
RESOLVED_AT = 2.0
#: The two-sided coverage of the intervals of estimates with few degrees of freedom.
CONFIDENCE = 0.95


def t_critical(degrees_of_freedom: Optional[float], confidence: float = CONFIDENCE) -> float:
    """How many standard errors a two-sided ``confidence`` interval spans on each side: Student's
    t quantile ``t_{(1 + confidence) / 2, df}`` (scipy), e.g. 12.71 for 1 degree of freedom,
    4.30 for 2, 2.78 for 4; :data:`RESOLVED_AT` for an error estimated from many rows
    (``None``); NaN for 0 degrees of freedom (one value has no error)."""
    if degrees_of_freedom is None:
        return RESOLVED_AT
    if degrees_of_freedom < 1:
        return math.nan
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2.0, degrees_of_freedom))


def ratio_standard_error_from_sums(rows: float, total: float, count: float, total_sq: float,
                                   count_sq: float, total_count: float) -> float:
    """Delta-method standard error (nats) of ``R = total / count`` over ``rows`` units, from
    ``sum l``, ``sum n``, ``sum l^2``, ``sum n^2`` and ``sum l n`` (module docstring); NaN for
    fewer than 2 rows or no tokens."""
    if rows < 2 or count <= 0:
        return math.nan
    ratio = total / count
    residual_sq = total_sq - 2.0 * ratio * total_count + ratio * ratio * count_sq
    return math.sqrt(max(residual_sq, 0.0) * rows / (rows - 1)) / count


def binomial_standard_error(successes: float, trials: float) -> float:
    """``sqrt(p (1 - p) / N)`` of the share ``p = successes / trials``; NaN without trials."""
    if trials <= 0:
        return math.nan
    share = successes / trials
    return math.sqrt(share * (1.0 - share) / trials)


@dataclass(frozen=True)
class Estimate:
    """A figure and its standard error, in the figure's units; ``degrees_of_freedom`` where the
    error was estimated from few values (``S - 1`` over ``S`` seeds), ``None`` where it comes
    from many rows (sequences, documents, positions)."""

    value: float
    standard_error: float
    degrees_of_freedom: Optional[float] = None

    @property
    def critical(self) -> float:
        """Standard errors on each side of the 95% interval (:func:`t_critical`)."""
        return t_critical(self.degrees_of_freedom)

    def interval(self) -> Tuple[float, float]:
        """The two-sided interval ``value ± critical * standard_error`` (NaN ends when the error
        is unknown)."""
        half = self.critical * self.standard_error
        return (self.value - half, self.value + half)

    def resolved(self) -> bool:
        """Whether a *difference* lies outside its interval's half-width from 0: more than
        :data:`RESOLVED_AT` standard errors for a many-row error, more than the t quantile for a
        few-seed one (a Python bool: JSON writes it as true/false). A zero or unknown error
        resolves nothing: it is no evidence of precision."""
        if not (math.isfinite(self.standard_error) and self.standard_error > 0):
            return False
        return bool(abs(self.value) > self.critical * self.standard_error)


def perplexity(losses: Sequence[float], tokens: Sequence[float]) -> Estimate:
    """``exp(sum l / sum n)`` over documents (losses in nats) with its delta-method error."""
    losses, tokens = np.asarray(losses, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    ratio = losses.sum() / tokens.sum()
    error = ratio_standard_error_from_sums(len(losses), losses.sum(), tokens.sum(),
                                           (losses ** 2).sum(), (tokens ** 2).sum(),
                                           (losses * tokens).sum())
    return Estimate(math.exp(ratio), math.exp(ratio) * error)


def accuracy(correct: Sequence[float]) -> Estimate:
    """Share of correct positions, in %, with the binomial error."""
    correct = np.asarray(correct, dtype=np.float64)
    return Estimate(100.0 * correct.mean(),
                    100.0 * binomial_standard_error(correct.sum(), len(correct)))


def paired_accuracy_difference(correct_a: Sequence[float], correct_b: Sequence[float]) -> Estimate:
    """``acc_A - acc_B`` in points over the same positions, with ``sd(c_A - c_B) / sqrt(N)``."""
    difference = np.asarray(correct_a, dtype=np.float64) - np.asarray(correct_b, dtype=np.float64)
    if len(difference) < 2:
        return Estimate(100.0 * float(difference.mean()) if len(difference) else math.nan, math.nan)
    return Estimate(100.0 * difference.mean(),
                    100.0 * difference.std(ddof=1) / math.sqrt(len(difference)))


def paired_perplexity_difference(losses_a: Sequence[float], losses_b: Sequence[float],
                                 tokens: Sequence[float]) -> Estimate:
    """``ppl_A - ppl_B`` over the same documents (same predicted tokens ``tokens``), with the
    delta-method error of the linearised difference ``u_d = exp(R_A) e_{A,d} - exp(R_B) e_{B,d}``
    over documents."""
    losses_a = np.asarray(losses_a, dtype=np.float64)
    losses_b = np.asarray(losses_b, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    total = tokens.sum()
    ratio_a, ratio_b = losses_a.sum() / total, losses_b.sum() / total
    ppl_a, ppl_b = math.exp(ratio_a), math.exp(ratio_b)
    linearised = ppl_a * (losses_a - ratio_a * tokens) - ppl_b * (losses_b - ratio_b * tokens)
    rows = len(tokens)
    if rows < 2:
        return Estimate(ppl_a - ppl_b, math.nan)
    error = math.sqrt((linearised ** 2).sum() * rows / (rows - 1)) / total
    return Estimate(ppl_a - ppl_b, error)


def mean_loss(losses: Sequence[float], tokens: Sequence[float]) -> Estimate:
    """``R = sum l / sum n`` over rows (the loss per token, in the losses' units) with its
    delta-method error over rows (module docstring)."""
    losses, tokens = np.asarray(losses, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    if tokens.sum() <= 0:
        return Estimate(math.nan, math.nan)
    error = ratio_standard_error_from_sums(len(losses), losses.sum(), tokens.sum(),
                                           (losses ** 2).sum(), (tokens ** 2).sum(),
                                           (losses * tokens).sum())
    return Estimate(float(losses.sum() / tokens.sum()), error)


def paired_mean_loss_difference(losses_a: Sequence[float], tokens_a: Sequence[float],
                                losses_b: Sequence[float], tokens_b: Sequence[float]) -> Estimate:
    """``R_A - R_B`` (loss per token) over the same rows, each row's tokens possibly different
    for the two (two masking rates pick different positions of a sequence), with the delta
    method on the linearised difference ``u_d = e_{A,d} / N_A - e_{B,d} / N_B``
    (``e_{X,d} = l_{X,d} - R_X n_{X,d}``, ``N_X = sum_d n_{X,d}``):
    ``SE = sqrt(D / (D - 1) * sum_d u_d^2)``. With equal tokens it pairs position sets exactly."""
    arrays = [np.asarray(values, dtype=np.float64)
              for values in (losses_a, tokens_a, losses_b, tokens_b)]
    losses_a, tokens_a, losses_b, tokens_b = arrays
    if len({len(values) for values in arrays}) != 1:
        raise ValueError("paired differences need the same rows for both models")
    total_a, total_b = tokens_a.sum(), tokens_b.sum()
    if total_a <= 0 or total_b <= 0:
        return Estimate(math.nan, math.nan)
    ratio_a, ratio_b = losses_a.sum() / total_a, losses_b.sum() / total_b
    linearised = ((losses_a - ratio_a * tokens_a) / total_a
                  - (losses_b - ratio_b * tokens_b) / total_b)
    rows = len(linearised)
    if rows < 2:
        return Estimate(float(ratio_a - ratio_b), math.nan)
    return Estimate(float(ratio_a - ratio_b),
                    math.sqrt((linearised ** 2).sum() * rows / (rows - 1)))


def mean_over_seeds(values: Sequence[float]) -> Estimate:
    """The mean of one figure over training seeds, ± its standard error over seeds
    ``sd(x) / sqrt(S)`` (``ddof=1``): the error a new seed would see, training noise and the
    evaluation's sampling noise together, with ``S - 1`` degrees of freedom (its interval is a
    t interval). NaN error for fewer than 2 seeds."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return Estimate(math.nan, math.nan)
    if len(values) < 2:
        return Estimate(float(values.mean()), math.nan, 0)
    return Estimate(float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values))),
                    len(values) - 1)


def paired_over_seeds(values_a: Sequence[float], values_b: Sequence[float]) -> Estimate:
    """``mean_s (a_s - b_s)`` over seeds ``s`` trained for both (seed ``s`` of A beside seed
    ``s`` of B), ± ``sd(a_s - b_s) / sqrt(S)``. Each ``a_s - b_s`` is itself paired over the same
    evaluation rows, so what is left in the spread is what changes from seed to seed."""
    values_a = np.asarray(values_a, dtype=np.float64)
    values_b = np.asarray(values_b, dtype=np.float64)
    if values_a.shape != values_b.shape:
        raise ValueError("paired differences over seeds need the same seeds for both models")
    return mean_over_seeds(values_a - values_b)
