"""The masked-LM kind: its report (per-model [MASK] loss rows, claims, reach claims along a curve).

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
import json
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    mean_over_seeds,
)
from fairseq_ext_lab.recipe_runs import RecipeRun
from fairseq_ext_lab.recipe_training import (
    checkpoint_key,
    checkpoints_to_score,
    cost_to_reach,
    curve_points,
    score_run,
    train,
)
from fairseq_ext_lab.reporting.curves import CurvePoint
from fairseq_ext_lab.run_store import RESULT
from fairseq_ext_lab.studies.kinds.base import Kind
from fairseq_ext_lab.studies.spec import (
    MASKED_LM,
    REACH_AXES,
    SHORTER_TRAINING,
    Claim,
    Study,
)
from fairseq_ext_lab.studies.verdicts import (
    analytic_pflops,
    claim_fields,
    claim_outcome,
    estimate_fields,
    field,
    fmt,
    interval_fields,
    number,
    verdict,
)


def masked_lm_scores_of(result: dict):
    """``{updates: SequenceScores}`` of a finished masked-LM run."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import SequenceScores

    run_dir = Path(result["run_dir"])
    scores = json.loads((run_dir / result["scores_file"]).read_text())["scores"]
    # keys and checkpoint files both as checkpoints/<file>: wherever the runs directory is now
    by_key = {checkpoint_key(path): updates
              for updates, path in result["checkpoint_files"].items()}
    return {int(by_key[checkpoint_key(path)]): SequenceScores.from_json(record)
            for path, record in scores.items() if checkpoint_key(path) in by_key}


def final_scores(result: dict):
    scores = masked_lm_scores_of(result)
    if not scores:
        raise SystemExit(f"error: {Path(result['run_dir']) / result['scores_file']} scores none "
                         f"of the run's checkpoints {sorted(result['checkpoint_files'].values())}; "
                         "remove the run's result.json to score it again")
    return scores[max(scores)]


def masked_lm_report(study: Study, results: Dict[str, dict]) -> dict:
    """Model rows and claim rows of a masked-LM study (module docstring, point 3)."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import paired_difference_bits

    seeds = study.seeds
    finals = {(m.name, s): final_scores(results[f"{m.name}/seed{s}"])
              for m in study.models for s in seeds}
    first = finals[(study.models[0].name, seeds[0])]
    unigram = first.loss_bits(unigram=True)
    rows = [{"name": "unigram (train counts)", "mask_loss": unigram.value,
             "mask_loss_se": unigram.standard_error, "note": "± SE over sequences"}]
    baseline = study.models[0].name
    for model in study.models:
        per_seed = [results[f"{model.name}/seed{s}"] for s in seeds]
        losses = [finals[(model.name, s)].loss_bits().value for s in seeds]
        below = [finals[(model.name, s)].below_unigram_bits().value for s in seeds]
        row = {"name": model.name, "updates": per_seed[0]["updates"],
               "analytic_pflops": analytic_pflops(per_seed[0]),
               "counted_pflops": mean_over_seeds([r["train_pflops"] or math.nan
                                                  for r in per_seed]).value,
               "sec_per_update": mean_over_seeds([r["sec_per_update"] for r in per_seed]).value,
               "train_seconds": (mean_over_seeds([r["curve"][-1]["wall"] for r in per_seed]).value
                                 if all(r["curve"] and "wall" in r["curve"][-1] for r in per_seed)
                                 else None),
               "per_seed": {str(s): {"mask_loss": loss, "below_unigram": b}
                            for s, loss, b in zip(seeds, losses, below)}}
        row.update(estimate_fields("mask_loss", mean_over_seeds(losses)))
        row.update(estimate_fields("below_unigram", mean_over_seeds(below)))
        if model.name != baseline:
            differences = [paired_difference_bits(finals[(model.name, s)], finals[(baseline, s)])
                           for s in seeds]
            row.update(estimate_fields("vs_baseline", mean_over_seeds(
                [d.value for d in differences])))
            for s, d in zip(seeds, differences):
                row["per_seed"][str(s)]["vs_baseline"] = d.value
                row["per_seed"][str(s)]["vs_baseline_se_over_sequences"] = d.standard_error
        rows.append(row)
    claims = []
    for claim in study.claims:
        if claim.kind in REACH_AXES:
            claims.append(reach_claim(claim, seeds, finals, results))
        elif claim.kind == SHORTER_TRAINING:
            claims.append(training_time_claim(claim, seeds, results))
        else:
            values = [paired_difference_bits(finals[(claim.a, s)], finals[(claim.b, s)]).value
                      for s in seeds]
            difference = mean_over_seeds(values)  # each value already paired within its seed
            claims.append({**claim_fields(claim),
                           "measured": f"{claim.a} - {claim.b}: {fmt(difference, 3, True)} bits",
                           **claim_outcome(claim, verdict(difference, claim.kind, claim.margin),
                                           difference),
                           "difference": difference.value, "difference_se":
                           difference.standard_error, **interval_fields(difference),
                           "unit": "bits",
                           "per_seed": dict(zip(map(str, seeds), values))})
    return {"models": rows, "claims": claims}


def reach_claim(claim: Claim, seeds: Sequence[int], finals: dict, results: Dict[str, dict]) -> dict:
    """A ``fewer_flops`` or ``less_time`` claim: per seed, the PFLOPs (seconds) at which
    ``a``'s curve first reaches the same seed's final [MASK] loss of ``b``, over ``b``'s whole
    run; the mean ratio ± SE over seeds, which holds when its interval lies below 1. A seed
    where ``a`` never gets there makes the claim fail (no seed reaches it) or unresolved."""
    axis, unit = REACH_AXES[claim.kind]
    ratios, reached_values, budgets = [], [], []
    for s in seeds:
        target = finals[(claim.b, s)].loss_bits().value
        budget = getattr(stored_curve(results[f"{claim.b}/seed{s}"], axis)[-1], axis)
        reached = cost_to_reach(stored_curve(results[f"{claim.a}/seed{s}"], axis), target,
                                     axis)
        budgets.append(budget)
        reached_values.append(math.inf if reached is None else reached)
        ratios.append(math.inf if reached is None or not budget > 0 else reached / budget)
    finite = [r for r in ratios if math.isfinite(r)]
    name = "time" if axis == "wall" else "FLOP"
    if not all(budget > 0 for budget in budgets):  # fairseq logs whole seconds: a tiny run's 0
        ratio, outcome = Estimate(math.nan, math.nan), "unresolved"
        text = f"{claim.b}'s run logged no {'seconds' if axis == 'wall' else 'PFLOPs'} to compare with"
    elif len(finite) == len(ratios):
        ratio = mean_over_seeds(ratios)
        outcome = verdict(dataclasses.replace(ratio, value=ratio.value - 1.0))
        text = f"{name} ratio to reach it {fmt(ratio, 3)}"
        if axis == "wall":
            text += (f" ({claim.a} {fmt(mean_over_seeds(reached_values), 1)} s, {claim.b}'s "
                     f"whole run {fmt(mean_over_seeds(budgets), 1)} s)")
    else:
        ratio, outcome = Estimate(math.nan, math.nan), ("fails" if not finite else "unresolved")
        text = (f"not reached within the budget in {len(ratios) - len(finite)} of "
                f"{len(ratios)} seeds")
    fields = ratio_claim_fields(claim, text, outcome, ratio, unit, seeds, ratios)
    if axis == "wall":
        fields["seconds_to_reach"] = dict(zip(map(str, seeds), reached_values))
        fields["baseline_seconds"] = dict(zip(map(str, seeds), budgets))
    return fields


def training_time_claim(claim: Claim, seeds: Sequence[int], results: Dict[str, dict]) -> dict:
    """A ``shorter_training`` claim: per seed, ``a``'s whole pre-training wall time over
    ``b``'s (each run's last logged ``wall``: fairseq's seconds since its trainer started,
    checkpoint saves included); the mean ratio ± SE over seeds, which holds when its 95%
    interval lies below 1 and fails when it lies above. A run that logged 0 s (fairseq's whole
    seconds, a tiny run) leaves it unresolved."""
    seconds_a, seconds_b = ([stored_curve(results[f"{name}/seed{s}"], "wall")[-1].wall
                             for s in seeds] for name in (claim.a, claim.b))
    if not all(b > 0 for b in seconds_b):
        ratio, outcome = Estimate(math.nan, math.nan), "unresolved"
        ratios = [math.nan] * len(seeds)
        text = f"{claim.b}'s run logged no seconds to compare with"
    else:
        ratios = [a / b for a, b in zip(seconds_a, seconds_b)]
        ratio = mean_over_seeds(ratios)
        outcome = verdict(dataclasses.replace(ratio, value=ratio.value - 1.0))
        text = (f"time ratio of the whole runs {fmt(ratio, 3)} ({claim.a} "
                f"{fmt(mean_over_seeds(seconds_a), 1)} s, {claim.b} "
                f"{fmt(mean_over_seeds(seconds_b), 1)} s)")
    return {**ratio_claim_fields(claim, text, outcome, ratio, "time ratio", seeds, ratios),
            "seconds": dict(zip(map(str, seeds), seconds_a)),
            "baseline_seconds": dict(zip(map(str, seeds), seconds_b))}


def ratio_claim_fields(claim: Claim, text: str, outcome: str, ratio: Estimate, unit: str,
                       seeds: Sequence[int], ratios: Sequence[float]) -> dict:
    """The ``study.json`` entry of a claim read as a ratio of ``a`` to ``b`` (the reach claims,
    ``shorter_training``): its text, verdict and power, the mean ratio ± SE and its interval,
    each seed's ratio."""
    return {**claim_fields(claim), "measured": text, **claim_outcome(claim, outcome, ratio),
            "ratio": ratio.value, "ratio_se": ratio.standard_error, "ratio_unit": unit,
            **interval_fields(ratio), "per_seed": dict(zip(map(str, seeds), ratios))}


def stored_curve(result: dict, axis: str = "pflops") -> List[CurvePoint]:
    """A finished run's stored curve as :class:`~fairseq_ext_lab.reporting.curves.CurvePoint` s, to
    read along ``axis`` (``pflops``, ``wall``); a run recorded before the curves kept their
    wall times is refused, saying how to redo it."""
    curve = result["curve"]
    if any(axis not in point for point in curve):
        raise SystemExit(f"error: {Path(result['run_dir']) / RESULT} has no {axis!r} in its curve "
                         "(a run recorded before the studies kept it): remove that result.json "
                         "to train and score the run again")
    return [CurvePoint(p["updates"], p["pflops"], p.get("wall", math.nan), p["valid_loss"],
                       p["updates"]) for p in curve]


def train_and_evaluate(study: Study, run: RecipeRun, data: Path, run_dir: Path, updates: int,
                       save_every: int, log_every: int, env: Dict[str, str],
                       evaluate: bool = True) -> dict:
    """Train one run through its recipe and evaluate it: its result row."""
    row = train(run, data, run_dir, updates,
                ["--disable-validation", "--save-interval-updates", str(save_every),
                 "--keep-interval-updates", "-1"], log_every,
                extra_env=env, concurrent=True)
    scores = score_run(data, run_dir, row["updates"], study.device)
    row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "wall": p.wall,
                     "valid_loss": p.valid_loss}
                    for p in curve_points(run_dir, scores)]
    row["scores_file"] = "scores.json"
    row["checkpoint_files"] = {str(updates): str(path.relative_to(run_dir)) for updates, path
                               in checkpoints_to_score(run_dir, row["updates"]).items()}
    return row


def model_table(study: Study, report: dict) -> Tuple[List[str], List[List[str]]]:
    """The models' table of the text report: its header and rows."""
    header = ["model", "updates", "analytic PFLOPs", "counted PFLOPs", "s/update",
              "training s", "[MASK] loss (bits)", "below unigram",
              f"vs {study.models[0].name}, paired"]
    table = [[row["name"], str(row.get("updates", "-")),
              number(row, "analytic_pflops", 4),
              number(row, "counted_pflops", 4),
              number(row, "sec_per_update", 3),
              number(row, "train_seconds", 0),
              field(row, "mask_loss"), field(row, "below_unigram", 3, True),
              field(row, "vs_baseline", 3, True)] for row in report["models"]]
    return header, table


KIND = Kind(
    name=MASKED_LM, train_and_evaluate=train_and_evaluate, report=lambda study, results, data:
    masked_lm_report(study, results), model_table=model_table,
    figure_columns=lambda report: ["mask_loss", "below_unigram", "vs_baseline"],
    figure_unit=lambda column: "bits", curve_ylabel="valid [MASK] loss (bits, 15% positions)",
    plot_reference=lambda report: ("unigram (train counts)", report["models"][0]["mask_loss"]),
    selection_metric="held-out [MASK] loss (bits)")
