"""The bidirectional kind: its report (per-column rows against the commonest-piece baseline,
claims).

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
import math
from pathlib import Path
from typing import Dict, List, Tuple

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    mean_over_seeds,
    paired_over_seeds,
    perplexity,
)
from fairseq_ext_lab.recipe_runs import BIDIRECTIONAL_INFILL_POSITIONS, ONE_THREAD, RecipeRun
from fairseq_ext_lab.recipe_training import train
from fairseq_ext_lab.studies.kinds.base import Kind
from fairseq_ext_lab.studies.spec import BIDIRECTIONAL, CURVE_VALID_BATCHES, R_VALUES, Study
from fairseq_ext_lab.studies.verdicts import (
    analytic_pflops,
    claim_fields,
    claim_outcome,
    claim_verdict,
    estimate_fields,
    field,
    fmt,
    interval_fields,
    lower_is_better,
    number,
    verdict,
)


def column_rows(result: dict, column: str) -> Dict[tuple, dict]:
    """``{(split, document, position): row}`` of a bidirectional run in ``column``
    (``full``, ``suffix:R``, ``infill:R``), from its ``--eval-scores-out`` file."""
    from fairseq_ext.data.bidirectional_eval_dataset import r_label
    from fairseq_ext_lab.evaluation.bidirectional_report import scores_of

    mode, _, r = column.partition(":")
    mode = {"full": "full_doc_ppl", "suffix": "suffix_ppl", "infill": "infill"}[mode]
    path = (result.get("scores") or {}).get(mode)
    if path is None:
        return {}
    label = "full" if mode == "full_doc_ppl" else r_label(float(r))
    _settings, rows = scores_of(Path(result["run_dir"]) / path)  # parsed once per file
    return {key[:3]: row for key, row in rows.items() if key[3] == label}


def column_figure(rows: Dict[tuple, dict], column: str) -> float:
    """The column's figure over ``rows``: ppl (``exp`` of the token-weighted mean loss) or
    infilling accuracy in %."""
    if column.startswith("infill"):
        return 100.0 * sum(row["correct"] for row in rows.values()) / len(rows)
    return math.exp(sum(row["loss"] for row in rows.values())
                    / sum(row["tokens"] for row in rows.values()))


def unigram_perplexity(data: Path, split: str = "valid") -> Estimate:
    """Perplexity of the training split's unigram (:class:`~fairseq_ext_lab.evaluation.
    masked_lm_scores.Unigram`: add-one smoothed counts) over every token of
    ``split``, each line's ``</s>`` included: the context-free baseline beside full-document ppl
    (over all tokens, not exactly the tokens ``full_doc_ppl`` scores, which leaves out each
    document's first), ± its delta-method error over lines
    (:func:`~fairseq_ext.reporting.uncertainty.perplexity`)."""
    import numpy as np
    from fairseq.data import Dictionary, data_utils

    from fairseq_ext.data.data_bin import special_ids
    from fairseq_ext_lab.evaluation.masked_lm_scores import Unigram, split_token_counts

    dictionary = Dictionary.load(str(Path(data) / "dict.txt"))
    train, scored = (data_utils.load_indexed_dataset(str(Path(data) / name), dictionary,
                                                     combine=False) for name in ("train", split))
    unigram = Unigram.from_counts(split_token_counts(train, len(dictionary)),
                                  never_targets=[dictionary.pad()],
                                  specials=special_ids(dictionary))
    lines = [np.asarray(scored[i], dtype=np.int64) for i in range(len(scored))]
    return perplexity([-unigram.log_probs[line].sum() for line in lines],
                      [len(line) for line in lines])


def infill_baseline(result: dict, column: str, piece: int) -> Tuple[Estimate, Estimate]:
    """``(accuracy % of always guessing piece, model - that in points)`` on the positions a
    bidirectional run filled in ``column`` (``infill:R``), paired over them
    (:func:`~fairseq_ext_lab.evaluation.bidirectional_report.constant_guess_baseline`)."""
    from fairseq_ext.data.bidirectional_eval_dataset import r_label
    from fairseq_ext_lab.evaluation.bidirectional_report import constant_guess_baseline

    path = Path(result["run_dir"]) / result["scores"]["infill"]
    label = r_label(float(column.partition(":")[2]))
    baseline, difference, note = constant_guess_baseline({"scores": {"infill": path}}, label, piece)
    if baseline is None:
        raise SystemExit(f"error: no infilling baseline for {path}: {note}")
    return baseline, difference


def bidirectional_report(study: Study, results: Dict[str, dict], data: Path) -> dict:
    """Model rows (each column's figure, mean ± SE over seeds, and the commonest-piece
    infilling baseline) and claim rows (paired over the same rows within a seed, then over
    seeds) of the bidirectional study."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import commonest_piece

    seeds = study.seeds
    columns = ["full"] + [f"{mode}:{float(r):g}" for mode in ("suffix", "infill")
                          for r in R_VALUES.split(",")]
    piece, symbol = commonest_piece(data)
    rows = []
    baseline_values: Dict[str, List[float]] = {}
    for model in study.models:
        row: Dict[str, object] = {"name": model.name, "per_seed": {}}
        first = results[f"{model.name}/seed{seeds[0]}"]
        row["updates"] = first["updates"]
        row["analytic_pflops"] = analytic_pflops(first)
        for column in columns:
            values = []
            for s in seeds:
                scored = column_rows(results[f"{model.name}/seed{s}"], column)
                if not scored:
                    break
                values.append(column_figure(scored, column))
                row["per_seed"].setdefault(str(s), {})[column] = values[-1]
                if column.startswith("infill"):
                    guessed, _ = infill_baseline(results[f"{model.name}/seed{s}"], column, piece)
                    baseline_values.setdefault(column, []).append(guessed.value)
            if len(values) == len(seeds):
                row.update(estimate_fields(column, mean_over_seeds(values)))
        rows.append(row)
    baseline_row = {"name": f"unigram ppl; always {symbol!r} (commonest piece)",
                    **estimate_fields("full", unigram_perplexity(data))}
    for column, values in baseline_values.items():
        baseline_row.update(estimate_fields(column, mean_over_seeds(values)))
    gaps = []
    for model in study.models:
        for column in (c for c in columns if c.startswith("infill")):
            differences = []
            for s in seeds:
                if not column_rows(results[f"{model.name}/seed{s}"], column):
                    break
                _, gap = infill_baseline(results[f"{model.name}/seed{s}"], column, piece)
                differences.append(gap.value)
            if len(differences) == len(seeds):
                gap = mean_over_seeds(differences)
                gaps.append({"model": model.name, "column": column, "gap": gap.value,
                             "gap_se": gap.standard_error,
                             "standard_errors": (gap.value / gap.standard_error
                                                 if gap.standard_error > 0 else math.nan),
                             "per_seed": dict(zip(map(str, seeds), differences))})
    claims = []
    for claim in study.claims:
        column_a, column_b = claim.metric, claim.metric_b or claim.metric
        figures_a, figures_b = [], []
        for s in seeds:
            rows_a = column_rows(results[f"{claim.a}/seed{s}"], column_a)
            rows_b = column_rows(results[f"{claim.b}/seed{s}"], column_b)
            shared = sorted(set(rows_a) & set(rows_b))
            if not shared:
                break
            figures_a.append(column_figure({k: rows_a[k] for k in shared}, column_a))
            figures_b.append(column_figure({k: rows_b[k] for k in shared}, column_b))
        differences = [a - b for a, b in zip(figures_a, figures_b)]
        if len(differences) < len(seeds):
            claims.append({**claim_fields(claim), "measured": "not measured: no shared rows",
                           **claim_verdict(claim, "unresolved")})
            continue
        difference = paired_over_seeds(figures_a, figures_b)
        # a's figure minus b's, signed so that negative means a is better
        signed = difference if lower_is_better(column_a) else dataclasses.replace(
            difference, value=-difference.value)
        unit = "points" if column_a.startswith("infill") else "ppl"
        claims.append({**claim_fields(claim),
                       "measured": f"{claim.a} {column_a} - {claim.b} {column_b}: "
                                   f"{fmt(difference, 2, True)} {unit}",
                       **claim_outcome(claim, verdict(signed, claim.kind, claim.margin),
                                       signed),
                       "difference": difference.value,
                       "difference_se": difference.standard_error,
                       **interval_fields(difference), "unit": unit,
                       "per_seed": dict(zip(map(str, seeds), differences))})
    return {"models": rows, "baseline": baseline_row, "columns": columns, "claims": claims,
            "piece": symbol, "baseline_gaps": gaps}


def train_and_evaluate(study: Study, run: RecipeRun, data: Path, run_dir: Path, updates: int,
                       save_every: int, log_every: int, env: Dict[str, str],
                       evaluate: bool = True) -> dict:
    """Train one run through its recipe and evaluate it: its result row."""
    from fairseq_ext_lab.evaluation.bidirectional_report import evaluate_checkpoint
    from fairseq_ext_lab.reporting import curves

    row = train(run, data, run_dir, updates,
                ["--validate-interval-updates", str(save_every), "--save-interval-updates",
                 str(save_every), "--keep-interval-updates", "1",
                 "--max-valid-steps", str(CURVE_VALID_BATCHES)], log_every,
                extra_env=env, concurrent=True)
    log = curves.read_log(run_dir / "train.log")
    row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "wall": p.wall,
                     "valid_loss": p.valid_loss}
                    for p in curves.map_valid_to_train(log.train, log.valid)]
    if evaluate:
        on_cpu = study.device == "cpu"
        evaluation = evaluate_checkpoint(
            data, run_dir / "checkpoints" / "checkpoint_last.pt", R_VALUES, cpu=on_cpu,
            log_dir=run_dir, infill_positions=BIDIRECTIONAL_INFILL_POSITIONS,
            env=ONE_THREAD if on_cpu else {})
        evaluation["scores"] = {
            mode: None if path is None else str(Path(path).relative_to(run_dir))
            for mode, path in evaluation["scores"].items()}
        evaluation["checkpoint"] = str(Path(evaluation["checkpoint"]).relative_to(run_dir))
        row.update(evaluation)
    return row


def model_table(study: Study, report: dict) -> Tuple[List[str], List[List[str]]]:
    """The models' table of the text report: its header and rows."""
    header = ["model", "updates", "analytic PFLOPs"] + [
        column.replace(":", " R=") for column in report["columns"]]
    table = [[row["name"], str(row.get("updates", "-")),
              number(row, "analytic_pflops", 4)]
             + [field(row, column, 2) for column in report["columns"]]
             for row in [*report["models"], report["baseline"]]]
    return header, table


KIND = Kind(
    name=BIDIRECTIONAL, train_and_evaluate=train_and_evaluate, report=bidirectional_report,
    model_table=model_table, figure_columns=lambda report: report["columns"],
    figure_unit=lambda column: "%" if column.startswith("infill") else "ppl",
    curve_ylabel="valid loss of the training objective (bits)",
    plot_reference=lambda report: None,
    selection_metric="held-out loss of the training objective (bits)")
