"""Verdicts: a claim's verdict from its t interval, and the fields of ``study.json`` each figure
and claim carries; the fine-tuning section's figures and verdicts.

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
import math
from typing import Dict, Optional

from fairseq_ext.reporting.uncertainty import (
    CONFIDENCE,
    Estimate,
)
from fairseq_ext_lab import finetuning
from fairseq_ext_lab.studies.power import judged
from fairseq_ext_lab.studies.spec import NOT_TESTABLE, Claim, Study


def fmt(estimate: Estimate, digits: int = 3, signed: bool = False) -> str:
    if not math.isfinite(estimate.value):
        return "-"
    sign = "+" if signed else ""
    error = ("?" if not math.isfinite(estimate.standard_error)
             else f"{estimate.standard_error:.{digits}f}")
    mark = " *" if signed and estimate.resolved() else ""
    return f"{estimate.value:{sign}.{digits}f} ± {error}{mark}"


def field(row: dict, prefix: str, digits: int = 3, signed: bool = False) -> str:
    if prefix not in row:
        return "-"
    return fmt(Estimate(row[prefix], row.get(f"{prefix}_se", math.nan), row.get(f"{prefix}_dof")),
               digits, signed)


def number(row: dict, key: str, digits: int) -> str:
    """A figure without an error (PFLOPs, seconds) to ``digits`` places; "-" where the row has
    none (a baseline row, or no analytic FLOPs on whole documents)."""
    value = row.get(key)
    return "-" if value is None else f"{value:.{digits}f}"


def verdict(difference: Estimate, kind: str = "better", margin: Optional[float] = None) -> str:
    """A claim's verdict from ``a - b`` expressed so that **negative means a is better**, read
    from its 95% interval (:meth:`~fairseq_ext.reporting.uncertainty.Estimate.interval`: a t
    interval over seeds):

    * ``better``: ``holds`` when the interval lies below 0, ``fails`` when above, else
      ``unresolved``;
    * ``on_par``: ``holds`` when the interval lies within ``± margin``, ``fails`` when it lies
      wholly beyond it, else ``unresolved`` (a difference resolved from 0 but small enough to
      be inside the margin is on par; one the seeds cannot place is not a fail).

    A standard error of 0 (every seed gave the same difference: with 2-3 seeds and whole-row
    accuracies it happens) or a non-finite one is no evidence of precision: ``unresolved``."""
    if (not math.isfinite(difference.value) or not math.isfinite(difference.standard_error)
            or difference.standard_error <= 0):
        return "unresolved"
    low, high = difference.interval()
    if not (math.isfinite(low) and math.isfinite(high)):
        return "unresolved"
    if kind == "on_par":
        if margin is None or margin <= 0:
            raise ValueError("an on_par verdict needs a positive margin")
        if -margin < low and high < margin:
            return "holds"
        return "fails" if (low >= margin or high <= -margin) else "unresolved"
    if high < 0:
        return "holds"
    return "fails" if low > 0 else "unresolved"


def claim_verdict(claim: Claim, outcome: str) -> Dict[str, str]:
    """The verdict fields of a claim's ``study.json`` entry: ``outcome`` (what :func:`verdict`
    read from the figures), or, for a claim its proxy cannot test, :data:`NOT_TESTABLE` and
    the reason (``Claim.untestable_by_proxy``), never holds or fails; the entry keeps its
    figures either way."""
    if not claim.untestable_by_proxy:
        return {"verdict": outcome}
    return {"verdict": NOT_TESTABLE, "untestable_by_proxy": claim.untestable_by_proxy}


def claim_outcome(claim: Claim, outcome: str, oriented: Estimate) -> dict:
    """Every verdict field of a claim's ``study.json`` entry: its power beside the paper's
    effect (:func:`~fairseq_ext_lab.studies.power.judged`: ``underpowered`` in place of
    ``unresolved`` where the study could not have seen the paper's effect; whether the interval
    excludes the paper's effect), then :func:`claim_verdict` (a claim its proxy cannot test).
    ``oriented``: the claim's difference as :func:`verdict` reads it, negative when ``a`` is
    better."""
    fields = judged(outcome, oriented, claim.paper_effect)
    return {**fields, **claim_verdict(claim, fields["verdict"])}


def interval_fields(estimate: Estimate) -> Dict[str, float]:
    """The interval's ends and its degrees of freedom, for ``study.json``."""
    low, high = estimate.interval()
    return {"ci_low": low, "ci_high": high, "dof": estimate.degrees_of_freedom,
            "ci_level": CONFIDENCE}


def claim_fields(claim: Claim) -> dict:
    """What ``study.json`` says of a claim besides its figures: its text and where it comes
    from (:class:`Claim`)."""
    return {"claim": claim.text, "kind": claim.kind, "a": claim.a, "b": claim.b,
            "metric": claim.metric, "metric_b": claim.metric_b or claim.metric,
            "source": claim.source, "paper_metric": claim.paper_metric,
            "paper_figure": claim.paper_figure, "proxy": claim.proxy, "differs": claim.differs,
            "margin": claim.margin, "per_task": claim.per_task}


def lower_is_better(column: str) -> bool:
    return not column.startswith("infill")


def analytic_pflops(result: dict) -> Optional[float]:
    """A run's analytic training PFLOPs (its updates times the Appendix D figure per update),
    or ``None`` where there is no analytic figure (a bidirectional run on whole documents:
    :func:`fairseq_ext_lab.budget.bidirectional_predicted_per_sequence`)."""
    per_update = result.get("analytic_pflops_per_update")
    return None if per_update is None else result["updates"] * per_update


def estimate_fields(prefix: str, estimate: Estimate) -> Dict[str, float]:
    fields = {prefix: estimate.value, f"{prefix}_se": estimate.standard_error}
    if estimate.degrees_of_freedom is not None:
        fields[f"{prefix}_dof"] = estimate.degrees_of_freedom
    return fields


def finetune_report(study: Study, raw: dict) -> dict:
    """The fine-tuning section of ``study.json``: per arm and task the dev accuracy (%) over
    pre-training seeds (each the mean over its fine-tuning seeds) ± SE over pre-training seeds,
    the within-seed SE over fine-tuning seeds beside it, the chosen lr, the task average; the
    suite's baselines; the fine-tuning claims, paired on the pre-training seed
    (:mod:`fairseq_ext_lab.finetuning`, point 3)."""
    protocol, tasks = study.finetune, raw["tasks"]
    rows = []
    for arm in protocol.arms:
        per_task = raw["accuracy"][arm.name]
        row = {"name": arm.name, "model": arm.model, "env": dict(arm.env),
               "lr": {task: finetuning.chosen_lrs(raw["lr"][arm.name][task]) for task in tasks},
               "per_seed": {task: {str(seed): values for seed, values in per_task[task].items()}
                            for task in tasks}}
        for task in tasks:
            row.update(estimate_fields(task, finetuning.arm_task_estimate(per_task[task])))
            row[f"{task}_ft_se"] = finetuning.within_seed_standard_error(per_task[task])
        row.update(estimate_fields("average", finetuning.arm_average_estimate(per_task)))
        rows.append(row)
    baselines = []
    for key, label in (("majority", "majority class (train)"),
                       ("bow_logreg", "bag of words, logistic regression")):
        row = {"name": label}
        estimates = []
        for task in tasks:
            entry = raw["baselines"][task].get(key)
            if entry is not None:
                estimate = finetuning.baseline_estimate(entry)
                row.update(estimate_fields(task, estimate))
                estimates.append(estimate)
        if len(estimates) == len(tasks):  # independent dev sets: the errors add in quadrature
            row.update(estimate_fields("average", Estimate(
                sum(e.value for e in estimates) / len(estimates),
                math.sqrt(sum(e.standard_error ** 2 for e in estimates)) / len(estimates))))
        baselines.append(row)
    by_arm = {arm.name: raw["accuracy"][arm.name] for arm in protocol.arms}
    claims = []
    for claim in study.finetune_claims:
        for task in [None, *(tasks if claim.per_task else [])]:
            difference = finetuning.paired_average_difference(by_arm[claim.a], by_arm[claim.b],
                                                              task)
            a_better_negative = dataclasses.replace(difference, value=-difference.value)
            if task is None:
                per_seed_a = finetuning.average_per_seed(by_arm[claim.a])
                per_seed_b = finetuning.average_per_seed(by_arm[claim.b])
            else:
                per_seed_a = finetuning.seed_means(by_arm[claim.a][task])
                per_seed_b = finetuning.seed_means(by_arm[claim.b][task])
            fields = claim_fields(claim)
            if task is not None:
                fields["claim"] = f"{claim.text} (on {task})"
            claims.append({**fields, "task": task,
                           "measured": f"{claim.a} - {claim.b}"
                                       f"{'' if task is None else ' on ' + task}: "
                                       f"{fmt(difference, 2, True)} points",
                           **claim_outcome(claim, verdict(a_better_negative, claim.kind,
                                                          claim.margin), a_better_negative),
                           "difference": difference.value, "difference_se":
                           difference.standard_error, **interval_fields(difference),
                           "unit": "accuracy points",
                           "per_seed": {str(seed): per_seed_a[seed] - per_seed_b[seed]
                                        for seed in sorted(per_seed_a)}})
    return {"tasks": tasks, "arms": rows, "baselines": baselines, "claims": claims,
            "lr_selection": {arm: {task: {str(seed): entry for seed, entry in per_seed.items()}
                                   for task, per_seed in per_task.items()}
                             for arm, per_task in raw["lr"].items()},
            "lr_per_seed": True, "lrs": list(protocol.lrs),
            "finetune_seeds": list(protocol.seeds), "epochs": protocol.epochs,
            "batch": protocol.batch, "recipe": protocol.recipe, "schedule": protocol.schedule,
            "suite": raw["suite"], "wall_seconds": raw["wall_seconds"],
            "run_seconds": raw["run_seconds"]}
