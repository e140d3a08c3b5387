"""What a study can decide: each claim's minimum detectable effect (MDE) beside the paper's own
effect (``Claim.paper_effect``), before the runs from a reference run's seed spread and after
them from the study's own.

The MDE of a paired difference with standard error ``SE`` over ``S`` seeds is the true
difference that the study's 95% two-sided t interval excludes from 0 with probability 80%:
``(t_{0.975, S-1} + t_{0.80, S-1}) x SE`` (the usual power approximation; the noncentral t
would add a little). A claim whose MDE exceeds the paper's effect is **underpowered**: its
interval could not have resolved the effect the paper reports, so "unresolved" would say
nothing about the paper. Resolved claims keep their verdict: an effect larger than the
paper's resolved anyway.

May import: see :mod:`fairseq_ext_lab`.
"""
import math
from typing import Dict, List, Optional, Sequence

from fairseq_ext.reporting.uncertainty import CONFIDENCE, Estimate, mean_over_seeds, t_critical

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
    sd = mean_over_seeds(values).standard_error * math.sqrt(len(values))
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


def excludes_paper_effect(oriented: Estimate, paper_effect: float) -> bool:
    """Whether the claim's 95% interval rules out an advantage of ``a`` as large as the
    paper's: ``oriented`` is negative when ``a`` is better, so ``a``'s advantage is at most
    ``-low``; below ``|paper_effect|``, the paper's effect is not what this study measured
    (whatever the verdict on its sign)."""
    low, _high = oriented.interval()
    return bool(math.isfinite(low) and oriented.standard_error > 0
                and -low < abs(paper_effect))


def power_fields(difference: Estimate, paper_effect: Optional[float]) -> Dict[str, object]:
    """What ``study.json`` keeps of a claim's power: its MDE (the unit of its difference) and
    the paper's effect beside it, whether the MDE is within that effect, and whether the
    interval excludes it (``difference`` oriented as :func:`excludes_paper_effect` reads it)."""
    mde = minimum_detectable_effect(difference.standard_error, difference.degrees_of_freedom)
    fields: Dict[str, object] = {"mde": mde, "paper_effect": paper_effect, "power": POWER}
    if paper_effect is not None and math.isfinite(mde):
        fields["detects_paper_effect"] = bool(mde <= abs(paper_effect))
        fields["excludes_paper_effect"] = excludes_paper_effect(difference, paper_effect)
    return fields


def judged(verdict: str, difference: Estimate, paper_effect: Optional[float]) -> Dict[str, object]:
    """A claim's ``verdict`` and power fields for ``study.json``: :func:`power_fields`, and the
    verdict through :func:`with_power` (``difference``: negative when ``a`` is better)."""
    fields = power_fields(difference, paper_effect)
    return {**fields, "verdict": with_power(verdict, fields["mde"], paper_effect)}


def design_rows(claims: Sequence, reference: dict, seeds: int) -> List[dict]:
    """Before the runs: for each of ``claims`` (a study's :class:`~.spec.Claim`\\ s) that the
    reference ``study.json`` measured (matched on the claim's text), the reference's per-seed
    differences, its MDE at its own seeds, the MDE planned at ``seeds`` seeds from that
    spread, the paper's effect, whether the plan detects it and the seeds that would."""
    measured = {entry["claim"]: entry for entry in
                [*reference.get("claims", []), *(reference.get("finetune") or {}).get("claims", [])]}
    rows = []
    for claim in claims:
        entry = measured.get(claim.text)
        if entry is None or not entry.get("per_seed"):
            rows.append({"claim": claim.text, "paper_effect": claim.paper_effect,
                         "measured": False, "ours": claim.ours})
            continue
        per_seed = [float(v) for v in entry["per_seed"].values()]
        planned = planned_mde(per_seed, seeds)
        row = {"claim": claim.text, "measured": True, "ours": claim.ours,
               "reference_seeds": len(per_seed),
               "reference_mde": planned_mde(per_seed, len(per_seed)), "planned_seeds": seeds,
               "planned_mde": planned, "paper_effect": claim.paper_effect,
               "unit": entry.get("unit", "")}
        if claim.paper_effect is not None:
            row["detects_paper_effect"] = bool(math.isfinite(planned)
                                               and planned <= abs(claim.paper_effect))
            row["seeds_needed"] = seeds_needed(per_seed, claim.paper_effect)
        rows.append(row)
    return rows


def design_text(study_name: str, rows: Sequence[dict], reference_path: str) -> str:
    """:func:`design_rows` as the table ``scripts/study.py STUDY --power REF`` prints."""
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    def number(value) -> str:
        return "-" if value is None or not math.isfinite(value) else f"{value:.3g}"

    table = []
    for row in rows:
        if not row["measured"]:
            table.append([row["claim"], "-", "-", "-", number(row["paper_effect"]),
                          "not in the reference"])
            continue
        if row["paper_effect"] is None:
            decides = ("our question: no paper effect" if row["ours"]
                       else "the paper's effect is in another unit")
        elif row["detects_paper_effect"]:
            decides = "yes"
        else:
            needed = row["seeds_needed"]
            decides = ("underpowered: " + (f"{needed} seeds would do" if needed
                                           else "no number of seeds up to 64 would do"))
        table.append([row["claim"], f"{number(row['reference_mde'])} ({row['reference_seeds']})",
                      number(row["planned_mde"]), row["unit"] or "-",
                      number(row["paper_effect"]), decides])
    seeds = next((row["planned_seeds"] for row in rows if row["measured"]), None)
    return "\n".join([
        f"power of {study_name} before its runs: each claim's minimum detectable effect (MDE: "
        f"the true difference its 95% t interval resolves with {POWER:.0%} power) from the "
        f"per-seed spread of {reference_path}, at that run's seeds and planned at {seeds} seeds, "
        "beside the paper's effect",
        ascii_table(["claim", "MDE (seeds) of the reference", f"planned MDE ({seeds} seeds)",
                     "unit", "paper effect", "decides the paper's effect?"], table),
        "the plan assumes the reference's per-seed spread: a design that changes the noise per "
        "seed (a larger dev split lowers it; fewer fine-tuning seeds per seed raise it) moves "
        "the MDE the runs will measure, which the report prints beside the paper's effect"])
