"""What a study can decide: each claim's minimum detectable effect (MDE) beside the paper's own
effect (``Claim.paper_effect``), before the runs from a reference run's seed spread and after
them from the study's own (issue 58).

The MDE of a paired difference with standard error ``SE`` over ``S`` seeds is the true
difference that the study's 95% two-sided t interval excludes from 0 with probability 80%:
``(t_{0.975, S-1} + t_{0.80, S-1}) x SE`` (the usual power approximation; the noncentral t
would add a little). A claim whose MDE exceeds the paper's effect is **underpowered**: its
interval could not have resolved the effect the paper reports, so "unresolved" would say
nothing about the paper. Resolved claims keep their verdict: an effect larger than the
paper's resolved anyway.

May import: see :mod:`fairseq_ext.experiments`.
"""
import math
from typing import Dict, Optional, Sequence

from fairseq_ext.reporting.uncertainty import CONFIDENCE, Estimate, t_critical

#: The probability that a claim with a true difference of its MDE resolves.
POWER = 0.8
UNDERPOWERED = "underpowered"


def power_quantile(degrees_of_freedom: Optional[float], power: float = POWER) -> float:
    """``t_{power, df}`` (the normal quantile for an error from many rows, ``None``)."""
    from scipy import stats

    if degrees_of_freedom is None:
        return float(stats.norm.ppf(power))
    if degrees_of_freedom < 1:
        return math.nan
    return float(stats.t.ppf(power, degrees_of_freedom))


def minimum_detectable_effect(standard_error: float, degrees_of_freedom: Optional[float],
                              confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """``(t_{(1 + confidence) / 2, df} + t_{power, df}) x SE``; NaN where the error is not
    known (one seed, or a non-finite or zero SE: a zero SE is no evidence of precision)."""
    if not (math.isfinite(standard_error) and standard_error > 0):
        return math.nan
    return (t_critical(degrees_of_freedom, confidence)
            + power_quantile(degrees_of_freedom, power)) * standard_error


def planned_mde(per_seed_differences: Sequence[float], seeds: int) -> float:
    """The MDE a study with ``seeds`` seeds would have, if its per-seed differences spread as
    ``per_seed_differences`` (a reference run's) do: ``sd / sqrt(seeds)`` as the SE."""
    values = [float(v) for v in per_seed_differences if math.isfinite(float(v))]
    if len(values) < 2 or seeds < 2:
        return math.nan
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return minimum_detectable_effect(sd / math.sqrt(seeds), seeds - 1)


def seeds_needed(per_seed_differences: Sequence[float], effect: float,
                 most: int = 64) -> Optional[int]:
    """The fewest seeds (2..``most``) whose planned MDE is at most ``|effect|``; None if even
    ``most`` would not do."""
    for seeds in range(2, most + 1):
        mde = planned_mde(per_seed_differences, seeds)
        if math.isfinite(mde) and mde <= abs(effect):
            return seeds
    return None


def with_power(verdict: str, mde: float, paper_effect: Optional[float]) -> str:
    """``underpowered`` in place of ``unresolved`` when the MDE exceeds the paper's effect;
    every other verdict (and a claim without a comparable paper effect) as it is."""
    if (verdict == "unresolved" and paper_effect is not None and math.isfinite(mde)
            and mde > abs(paper_effect)):
        return UNDERPOWERED
    return verdict


def power_fields(difference: Estimate, paper_effect: Optional[float]) -> Dict[str, object]:
    """What ``study.json`` keeps of a claim's power: its MDE (the unit of its difference) and
    the paper's effect beside it, and whether the MDE is within that effect."""
    mde = minimum_detectable_effect(difference.standard_error, difference.degrees_of_freedom)
    fields: Dict[str, object] = {"mde": mde, "paper_effect": paper_effect, "power": POWER}
    if paper_effect is not None and math.isfinite(mde):
        fields["detects_paper_effect"] = bool(mde <= abs(paper_effect))
    return fields


def judged(verdict: str, difference: Estimate, paper_effect: Optional[float]) -> Dict[str, object]:
    """A claim's ``verdict`` and power fields for ``study.json``: :func:`power_fields`, and the
    verdict through :func:`with_power`."""
    fields = power_fields(difference, paper_effect)
    return {**fields, "verdict": with_power(verdict, fields["mde"], paper_effect)}
