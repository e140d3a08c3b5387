"""Rendering a study's report: the text tables, the docs' markdown rows, the figures for
``--compare`` and the curve plot.

May import: see :mod:`fairseq_ext_lab`.
"""
import math
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    mean_over_seeds,
)
from fairseq_ext_lab.reporting import figures
from fairseq_ext_lab.reporting.text_tables import ascii_table
from fairseq_ext_lab.run_store import SELECTION_SEED
from fairseq_ext_lab.studies.kinds import kind_of
from fairseq_ext_lab.studies.power import UNDERPOWERED, minimum_detectable_effect
from fairseq_ext_lab.studies.spec import (
    EQUAL_TOKENS,
    FINETUNE_METRIC,
    NOT_TESTABLE,
    OUR_QUESTION,
    TITLE_WIDTH,
    Study,
)
from fairseq_ext_lab.studies.verdicts import field, fmt


def format_report(study: Study, report: dict) -> str:
    """The study's two tables: models, then claims."""
    seeds = len(study.seeds)
    budget = "equal training tokens" if study.budget == EQUAL_TOKENS else (
        "equal analytic training FLOPs")
    # where the runs trained, as the report recorded it (a report without a device field: the study's)
    device = report.get("device", study.device)
    lines = [f"{study.title}: {seeds} seeds, {budget}, trained on {device}; mean ± SE "
             f"over seeds (* the 95% t interval over seeds excludes 0)"]
    header, table = kind_of(study).model_table(study, report)
    lines.append(ascii_table(header, table))
    if report.get("lr_selection"):
        lines.append("peak learning rates, each model's best on held-out training data (seed "
                     f"{SELECTION_SEED}; the compared figures' valid split not used): " + "; ".join(
                         f"{name} {entry['lr']} ("
                         + ", ".join(f"{lr}: {loss:.3f}" for lr, loss in entry["scores"].items())
                         + ")" for name, entry in report["lr_selection"].items()))
    if report.get("baseline_gaps"):
        lines.append(ascii_table(
            ["infilling model", "column", f"minus always {report['piece']!r}, paired", "in SEs"],
            [[gap["model"], gap["column"].replace(":", " R="),
              fmt(Estimate(gap["gap"], gap["gap_se"]), 2, True),
              f"{gap['standard_errors']:.1f}"] for gap in report["baseline_gaps"]]))
    lines.append(ascii_table(["claim", "source (metric)", "paper", "ours: a - b, paired "
                              "(± SE over seeds) [95% t interval]", "verdict"],
                             [claim_row(c) for c in report["claims"]]))
    differs = [f"  {c['claim']}: {c['differs']}" for c in report["claims"] if c.get("differs")]
    if differs:
        lines += ["what differs from the paper:", *differs]
    untestable = [f"  {c['claim']}: {c['untestable_by_proxy']}" for c in report["claims"]
                  if c["verdict"] == NOT_TESTABLE]
    if untestable:
        lines += [f"{NOT_TESTABLE} (its figures are shown; no verdict is read from them):",
                  *untestable]
    lines.append(f"verdicts read the 95% t interval over {seeds} seeds ({seeds - 1} degrees of "
                 "freedom): holds / fails when it excludes 0 (on_par: lies within / beyond the "
                 "margin), unresolved otherwise")
    if any(has_power(claim) for claim in report["claims"]):
        lines.append(POWER_NOTE)
    return "\n".join(lines)


def claim_source(claim: dict) -> str:
    """Where a claim comes from, as the tables print it."""
    if claim.get("source", OUR_QUESTION) == OUR_QUESTION:
        return OUR_QUESTION
    proxy = "; proxy: we measure " + metric_name(claim) if claim.get("proxy") else ""
    return f"{claim['source']} ({claim['paper_metric']}{proxy})"


def metric_name(claim: dict) -> str:
    metric = claim.get("metric", "mask_loss")
    if metric == "mask_loss":
        return "valid [MASK] loss"
    if metric == FINETUNE_METRIC:
        return "dev accuracy after fine-tuning, average of the downstream suite's tasks"
    return {"full": "full-document ppl", "suffix": "suffix ppl",
            "infill": "infilling accuracy"}[metric.partition(":")[0]]


def interval_text(claim: dict) -> str:
    """A claim's 95% t interval as both renderings print it after the measured figure (empty
    where it has none)."""
    if claim.get("ci_low") is not None and math.isfinite(claim["ci_low"]):
        return f" [{claim['ci_low']:+.3g}, {claim['ci_high']:+.3g}]"
    return ""


def has_power(claim: dict) -> bool:
    """Whether a claim has a minimum detectable effect to print: a stored one, or
    a stored SE to compute it from (a claim without an ``mde`` field)."""
    return "mde" in claim or claim.get("difference_se") is not None


def claim_mde(claim: dict) -> Optional[float]:
    """A claim's minimum detectable effect: the stored one, or for a claim without an
    ``mde`` field the same formula on its stored SE and degrees of freedom; None for a
    claim with neither (not testable, or never measured)."""
    if "mde" in claim:
        return claim["mde"]
    if claim.get("difference_se") is None:
        return None
    return minimum_detectable_effect(claim["difference_se"], claim.get("dof"))


def power_text(claim: dict) -> str:
    """A claim's minimum detectable effect beside the paper's own effect (:mod:`.power`), as
    both renderings print it after the interval (empty for a claim without an SE)."""
    if not has_power(claim):
        return ""
    mde = claim_mde(claim)
    text = "; MDE " + (f"{mde:.3g}" if mde is not None and math.isfinite(mde) else "-")
    if claim.get("paper_effect") is not None:
        text += f" vs the paper's {abs(claim['paper_effect']):.3g}"
        if claim.get("excludes_paper_effect"):
            text += ", which the interval excludes"
    return text


def claim_row(claim: dict) -> List[str]:
    """A claim as the text report's claims table shows it."""
    interval = interval_text(claim)
    margin = (f" (margin ± {claim['margin']:g})" if claim.get("kind") == "on_par"
              and claim.get("margin") else "")
    return [claim["claim"], claim_source(claim), claim.get("paper_figure") or "-",
            claim["measured"] + interval + margin + power_text(claim), claim["verdict"]]


#: The footnote of a claims table whose claims carry their power.
POWER_NOTE = ("MDE: the minimum detectable effect, the true difference the 95% t interval "
              "would resolve with 80% power, (t(0.975) + t(0.8)) x SE; underpowered: "
              "unresolved, and the MDE exceeds the paper's own effect, so the study could not "
              "have seen it; 'which the interval excludes': a's advantage is surely smaller "
              "than the paper's effect, whatever the verdict on its sign")


def markdown_claims(report: dict) -> str:
    """The claims as docs/studies.md's "Paper vs ours" rows: claim, the paper (source, metric,
    its figures), ours (a - b ± SE over seeds, the 95% t interval), verdict, what differs."""
    lines = ["| claim | paper | ours: a − b (± SE) [95% t interval] | verdict | what differs |",
             "| --- | --- | --- | --- | --- |"]
    for claim in [*report["claims"], *(report.get("finetune") or {}).get("claims", [])]:
        if claim.get("source", OUR_QUESTION) == OUR_QUESTION:
            paper = f"*{OUR_QUESTION}*"
        else:
            paper = f"{claim['source']}, {claim['paper_metric']}: {claim['paper_figure']}"
            if claim.get("proxy"):
                paper += f" (**proxy**: we measure {metric_name(claim)})"
        interval = interval_text(claim)
        margin = (f"; on par = within ±{claim['margin']:g}" if claim.get("kind") == "on_par"
                  else "")
        verdict_text = claim["verdict"] if claim["verdict"] in ("unresolved", UNDERPOWERED) else (
            f"**{claim['verdict']}**")
        if claim["verdict"] == NOT_TESTABLE:  # the reason beside it, never holds or fails
            verdict_text = f"{NOT_TESTABLE}: {claim['untestable_by_proxy']}"
        lines.append(f"| {claim['claim']} | {paper} | {claim['measured']}{interval}{margin}"
                     f"{power_text(claim)} | "
                     f"{verdict_text} | {claim.get('differs') or '-'} |")
    return "\n".join(lines)


def baseline_cells(row: dict, tasks: Sequence[str]) -> List[str]:
    """A fine-tuning baseline's cells, per task then the average (``-`` where it has none), in
    the text table and the markdown one alike."""
    return [field(row, task, 2) if task in row else "-" for task in [*tasks, "average"]]


def ft_cell(standard_error: float) -> str:
    """The SE over fine-tuning seeds within a pre-training seed, where there are several."""
    return f"ft {standard_error:.2f}; " if math.isfinite(standard_error) else ""


def lr_cell(chosen) -> str:
    """An arm's fine-tuning lr on a task: one rate (a study.json with one rate for every
    seed, or every seed chose the same), else each rate with the number of pre-training seeds
    that chose it."""
    if isinstance(chosen, str):
        return chosen
    counts: Dict[str, int] = {}
    for lr in chosen.values():
        counts[lr] = counts.get(lr, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{lr} x{n}" for lr, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def format_finetune(report: dict, seeds: int) -> str:
    """The fine-tuning tables: arms and baselines by task and average, then the claims."""
    tasks = report["tasks"]
    lines = [f"fine-tuning on the downstream suite ({report['recipe']}; {report['schedule']}; "
             f"{report['epochs']} epochs of batch {report['batch']}): dev accuracy (%), mean over "
             f"{seeds} pre-training seeds of the mean over fine-tuning seeds "
             f"{report['finetune_seeds']}, ± SE over pre-training seeds (ft: the SE over "
             "fine-tuning seeds within a pre-training seed); lr chosen per task "
             + ("and pre-training seed on the selection split (x N: chosen by N seeds)"
                if report.get("lr_per_seed") else "on held-out training data")]
    table = []
    for row in report["arms"]:
        table.append([row["name"]] + [
            f"{field(row, task, 2)} ({ft_cell(row[f'{task}_ft_se'])}lr {lr_cell(row['lr'][task])})"
            for task in tasks] + [field(row, "average", 2)])
    for row in report["baselines"]:
        table.append([row["name"]] + baseline_cells(row, tasks))
    lines.append(ascii_table(["arm"] + tasks + ["average"], table))
    helps = pretraining_verdict(report["claims"])
    if helps:
        lines.append(helps)
    if report["claims"]:
        lines.append(ascii_table(["fine-tuning claim", "source (metric)", "paper", "ours: a - b, "
                                  "paired (± SE over seeds) [95% t interval]", "verdict"],
                                 [claim_row(c) for c in report["claims"]]))
        if any(has_power(claim) for claim in report["claims"]):
            lines.append(POWER_NOTE)
    lines.append(f"fine-tuning wall time: {report['wall_seconds'] / 60:.1f} min (the runs' own "
                 f"time summed: {report['run_seconds'] / 60:.1f} min)")
    return "\n".join(lines)


def pretraining_verdict(claims: Sequence[dict]) -> str:
    """The line that opens a fine-tuning report: for which arms "pre-training helps" holds on
    the suite's average, and, when it does not hold for every one, how to read the rest."""
    averages = [c for c in claims if c.get("per_task") and c.get("task") is None]
    if not averages:
        return ""
    by_verdict: Dict[str, List[str]] = {}
    for claim in averages:
        by_verdict.setdefault(claim["verdict"], []).append(claim["a"])
    text = "pre-training helps (suite average, each arm against its random init): " + "; ".join(
        f"{verdict_text} for {', '.join(arms)}" for verdict_text, arms in by_verdict.items())
    if set(by_verdict) != {"holds"}:
        text += (". Where it does not hold, pre-training has not been shown to improve on "
                 "random initialisation at this scale, and every other fine-tuning claim "
                 "below compares such models: read their differences in that light "
                 "(docs/transfer.md)")
    return text + "."


def markdown_finetune(report: dict) -> str:
    """The fine-tuning table as docs/studies.md shows it: dev accuracy (%) per arm and task and
    the average, mean over pre-training seeds ± SE over them, the chosen lr per task; the
    suite's baselines; the stage's wall time."""
    finetune = report["finetune"]
    tasks = finetune["tasks"]
    lines = ["| arm | " + " | ".join(tasks) + " | average |",
             "| --- | " + " | ".join("---" for _ in tasks) + " | --- |"]
    for row in finetune["arms"]:
        lines.append(f"| {row['name']} | " + " | ".join(
            f"{field(row, task, 2)} (lr {lr_cell(row['lr'][task])})" for task in tasks)
            + f" | {field(row, 'average', 2)} |")
    for row in finetune["baselines"]:
        lines.append(f"| *{row['name']}* | " + " | ".join(baseline_cells(row, tasks)) + " |")
    lines.append("")
    lines.append(f"Fine-tuning wall time {finetune['wall_seconds'] / 60:.1f} min "
                 f"({len(finetune['arms'])} arms, {len(report['seeds'])} pre-training seeds x "
                 f"{len(finetune['finetune_seeds'])} fine-tuning seeds x {len(tasks)} tasks, and "
                 f"{len(finetune['lrs'])} learning rates per arm and task).")
    return "\n".join(lines)


def study_figures(study: Study, report: dict) -> Dict[str, dict]:
    """The study's figures for a later run to be compared with
    (:mod:`fairseq_ext_lab.reporting.figures`): per model its updates and each column's mean over
    seeds (± SE over seeds, their degrees of freedom), per claim its measured difference or
    FLOP ratio."""
    out: Dict[str, dict] = {}
    kind = kind_of(study)
    columns = kind.figure_columns(report)
    for row in report["models"]:
        if "updates" in row:
            out[f"{row['name']}/updates"] = figures.exact(row["updates"], "updates")
        for column in columns:
            if column in row:
                unit = kind.figure_unit(column)
                out[f"{row['name']}/{column}"] = figures.figure(
                    Estimate(row[column], row[f"{column}_se"], row.get(f"{column}_dof")), unit)
    for index, claim in enumerate(report["claims"], 1):
        for key, unit in (("difference", claim.get("unit", "")),
                          ("ratio", claim.get("ratio_unit", "FLOP ratio"))):
            if claim.get(key) is not None and math.isfinite(claim[key]):
                out[f"claim {index}/{key}"] = figures.figure(
                    Estimate(claim[key], claim[f"{key}_se"], claim.get("dof")), unit)
    finetune = report.get("finetune")
    if finetune:
        for row in finetune["arms"]:
            for column in [*finetune["tasks"], "average"]:
                out[f"finetune {row['name']}/{column}"] = figures.figure(
                    Estimate(row[column], row[f"{column}_se"], row.get(f"{column}_dof")), "%")
        for index, claim in enumerate(finetune["claims"], 1):
            out[f"finetune claim {index}/difference"] = figures.figure(
                Estimate(claim["difference"], claim["difference_se"], claim.get("dof")),
                "accuracy points")
    return out


def plot_study(study: Study, results: Dict[str, dict], out: Path,
               report: Optional[dict] = None) -> Optional[Path]:
    """Valid loss against training PFLOPs per model: the mean over seeds at each curve point
    (PFLOPs averaged too) with a ±1 SE band (:func:`fairseq_ext_lab.reporting.curves.plot_bands`)."""
    from fairseq_ext_lab.reporting.curves import plot_bands

    bands = {}
    for model in study.models:
        curves = [results[f"{model.name}/seed{s}"]["curve"] for s in study.seeds]
        points = min(len(curve) for curve in curves)
        if points == 0:
            continue
        bands[model.name] = [
            (mean_over_seeds([c[i]["pflops"] for c in curves]).value,
             mean_over_seeds([c[i]["valid_loss"] for c in curves]))
            for i in range(points)]
    if not bands:
        return None
    kind = kind_of(study)
    reference = None if report is None else kind.plot_reference(report)
    title = textwrap.fill(study.title, TITLE_WIDTH)  # a long title runs off the figure
    plot_bands(bands, out, f"{title}\n(mean over {len(study.seeds)} seeds, ±1 SE)",
               kind.curve_ylabel, reference=reference)
    return out
