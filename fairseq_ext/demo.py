"""`make demo` (``scripts/demo.py``): prepare the embedded corpus, pre-train the demo models,
validate, summarize. It drives the repository's recipes, so it runs from a checkout.

1. ``scripts/prepare_corpus.sh`` turns the Python 3.11 documentation (Debian's
   ``python3.11-doc``) into a data-bin; a re-run reuses it.
2. Each entry of :data:`DEMO_RUNS` is trained through its bash recipe (the same script a user
   runs on a cluster) on the CPU, with a progress display, **at equal training FLOPs**: the
   first run (the RoBERTa-15% baseline) takes its recipe's updates, and every other run as
   many updates as buy the same analytic FLOPs (:mod:`fairseq_ext.flops`, from the command its
   recipe prints with ``DRY_RUN=1``), as the 3ML paper compares models (Table 3).
3. ``fairseq-validate`` scores each final checkpoint on the valid split.
4. A table compares valid loss/ppl overall and per corrupted-token category ([MASK], replaced,
   unchanged: the 3ML paper's Table 2c "PPL"), updates, and seconds per update measured side by
   side, with each run's speedup over the first (the RoBERTa-15% baseline).
5. Generalized bidirectionality (Artetxe et al. 2022): one ``bidir_lm_mini`` run per variant
   family of Table 1 (:data:`BIDIRECTIONAL_RUNS`: NxtUni, MskBi, HybPre), each trained for the
   same tokens through ``recipes/bidirectional/demo.sh`` on whole documents (the data-bin's
   blank-line documents) and scored by stock ``fairseq-validate --eval-mode`` runs
   (:mod:`fairseq_ext.evaluation.bidirectional_report`): full-document ppl (Table 3), suffix ppl
   and single-token infilling accuracy at R = 0 and 1 (Tables 4-5), each ± its standard error,
   and each model's paired difference to the best. These runs report quality, not speed, so
   they run :data:`BIDIRECTIONAL_WORKERS` at a time, one thread each.
6. The wall time of every stage (the concurrent runs' own times indented under theirs).

Adding a model to the comparison is one line in :data:`DEMO_RUNS`. Every run writes into a fresh
``runs/demo/<timestamp>/<name>/`` (logs, checkpoints, ``summary.json``); nothing earlier is
overwritten.
"""
import argparse
import contextlib
import dataclasses
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from fairseq_ext.log_records import parse_json_record
from fairseq_ext.output_files import write_text
from fairseq_ext.text_tables import ascii_table

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: recipes/, scripts/
BIN_DIR = Path(sys.executable).parent
DEFAULT_DATA = REPO_ROOT / "data-bin" / "python-docs-spm8000"
#: Validations during training (the loss-vs-compute curves' points) per baseline run.
VALIDATIONS_PER_RUN = 4


@dataclasses.dataclass(frozen=True)
class DemoRun:
    """One model of the comparison: a recipe and the environment overrides it runs with."""

    name: str
    recipe: str  # path relative to the repository root
    env: Dict[str, str] = dataclasses.field(default_factory=dict)


DEMO_RUNS: List[DemoRun] = [
    DemoRun("roberta-15%", "recipes/roberta/demo.sh", {"MASK_PROB": "0.15"}),
    DemoRun("roberta-40%", "recipes/roberta/demo.sh", {"MASK_PROB": "0.4"}),
    DemoRun("3ml-self-40%", "recipes/3ml/demo.sh", {"MASK_PROB": "0.4"}),
]
#: The generalized-bidirectionality comparison: one variant per family of Table 1 (next-token,
#: masked, hybrid), equal tokens (the recipe's updates and batch), scored by the evaluation modes.
BIDIRECTIONAL_RUNS: List[DemoRun] = [
    DemoRun("nxt_uni", "recipes/bidirectional/demo.sh", {"VARIANT": "nxt_uni"}),
    DemoRun("msk_bi", "recipes/bidirectional/demo.sh", {"VARIANT": "msk_bi"}),
    DemoRun("hyb_pre", "recipes/bidirectional/demo.sh", {"VARIANT": "hyb_pre"}),
]
#: R values of the demo's suffix-ppl and infilling columns.
BIDIRECTIONAL_R_VALUES = "0,1"
#: Masked positions per document in the demo's infilling columns (``--infill-positions``).
BIDIRECTIONAL_INFILL_POSITIONS = 8
#: Bidirectional runs trained and scored at the same time, one torch thread each.
BIDIRECTIONAL_WORKERS = 2
#: What the demo writes into its runs directory besides one directory per run.
SUMMARY, PLOT = "summary.json", "curves.png"


def seconds_per_update(train_inner: List[dict]) -> float:
    """Mean seconds per update from fairseq's per-interval ``ups`` (updates per second).

    The first interval (model build, first batches, thread warm-up) is left out when there are
    others; each interval is weighted by the updates it covers.
    """
    intervals = []
    previous = 0
    for record in train_inner:
        updates = int(record["num_updates"])
        intervals.append((updates - previous, float(record["ups"])))
        previous = updates
    if len(intervals) > 1:
        intervals = intervals[1:]
    # fairseq rounds ups to 2 decimals: a slow interval can log 0, which says nothing
    intervals = [(n, ups) for n, ups in intervals if ups > 0]
    total_updates = sum(n for n, _ in intervals)
    if total_updates == 0:
        return math.nan
    return sum(n / ups for n, ups in intervals) / total_updates


def stream(cmd: List[str], env: dict, log_path: Path) -> Iterator[str]:
    """Run ``cmd``, tee stdout+stderr into ``log_path``, yield its lines; raise on failure."""
    with open(log_path, "w") as log, subprocess.Popen(
        cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        bufsize=1,
    ) as proc:
        tail: List[str] = []
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line])[-40:]
            yield line
        if proc.wait() != 0:
            sys.stdout.write("".join(tail))
            raise SystemExit(f"error: {cmd[0]} failed (exit {proc.returncode}); full log: {log_path}")


class Progress:
    """A one-line progress bar on a terminal; one line per fairseq log record otherwise."""

    def __init__(self, name: str, interactive: bool = True):
        self.name, self.total = name, 0
        self.interactive = interactive and sys.stdout.isatty()

    def set_total_from_command(self, printed_command: str) -> None:
        """The recipe prints its fairseq command first; its ``--max-update`` is our total."""
        words = printed_command.split()
        if "--max-update" in words:
            self.total = int(words[words.index("--max-update") + 1])

    def update(self, record: dict) -> None:
        done = int(record["num_updates"])
        ups = float(record["ups"])
        pace = f"{1.0 / ups:.2f} s/update" if ups > 0 else "- s/update"
        text = f"{self.name:<14} update {done:>5}/{self.total}  loss {record['loss']:>6}  {pace}"
        if self.interactive:
            filled = int(30 * done / max(self.total, 1))
            sys.stdout.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}")
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        if self.interactive:
            sys.stdout.write("\n")


def recipe_env(run: DemoRun, data: Path, **extra: str) -> dict:
    env = dict(os.environ, DATA=str(data), **run.env, **extra)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    return env


def planned_command(run: DemoRun, data: Path, updates: Optional[int] = None) -> List[str]:
    """The fairseq-train command ``run``'s recipe would run (``DRY_RUN=1``)."""
    extra = {"DRY_RUN": "1", "SAVE_DIR": "unused"}
    if updates is not None:
        extra["TOTAL_UPDATES"] = str(updates)
    proc = subprocess.run(["bash", str(REPO_ROOT / run.recipe)], env=recipe_env(run, data, **extra),
                          cwd=REPO_ROOT, capture_output=True, text=True)
    printed = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    if proc.returncode != 0 or not printed:
        raise SystemExit(f"error: {run.recipe} (DRY_RUN=1) failed: {proc.stderr.strip()}")
    return shlex.split(printed[-1][2:])


def equal_flops_updates(runs: List[DemoRun], data: Path,
                        baseline_updates: Optional[int] = None) -> List[int]:
    """Updates of each run at the analytic training FLOPs of the first run: its recipe's
    ``--max-update`` (or ``baseline_updates``), and for the others the updates that buy the
    same FLOPs, rounded down (``python -m fairseq_ext.flops --budget-of``'s rule)."""
    baseline = planned_command(runs[0], data, baseline_updates)
    updates = int(command_option(baseline, "--max-update"))
    budget = updates * analytic_pflops_per_update(baseline, data)
    return [updates] + [max(1, math.floor(budget / analytic_pflops_per_update(
        planned_command(run, data), data))) for run in runs[1:]]


def train(run: DemoRun, data: Path, run_dir: Path, updates: Optional[int], validate_every: int,
          log_interval: Optional[int] = None, masked_lm: bool = True,
          extra_env: Optional[Dict[str, str]] = None, concurrent: bool = False) -> dict:
    """Train one demo model through its recipe for ``updates`` updates, validating every
    ``validate_every``; return its train-side figures. ``concurrent``: other runs print beside
    this one, so progress goes out as whole lines, never as a redrawn bar."""
    env = recipe_env(run, data, SAVE_DIR=str(run_dir / "checkpoints"), **(extra_env or {}))
    if updates is not None:  # else the recipe's own
        env["TOTAL_UPDATES"] = str(updates)
    if log_interval is not None:
        env["LOG_INTERVAL"] = str(log_interval)
    cmd = ["bash", str(REPO_ROOT / run.recipe), "--log-format", "json", "--no-progress-bar",
           "--validate-interval-updates", str(validate_every),
           "--skip-invalid-size-inputs-valid-test"]
    progress = Progress(run.name, interactive=not concurrent)
    records: List[dict] = []
    final_updates = 0  # from every record, the epoch summaries' `train_num_updates` included
    command: List[str] = []
    start = time.time()
    for line in stream(cmd, env, run_dir / "train.log"):
        if line.startswith("+ "):
            print(line.rstrip())
            progress.set_total_from_command(line)
            command = shlex.split(line[2:])
        record = parse_json_record(line)
        for key in ("num_updates", "train_num_updates"):
            if record and key in record:
                final_updates = max(final_updates, int(record[key]))
        if record and "train_inner" in line and {"ups", "loss", "num_updates"} <= set(record):
            records.append(record)
            progress.update(record)
    progress.close()
    if not records:
        raise SystemExit(f"error: {run.name} logged no training progress; see {run_dir / 'train.log'}")
    return {
        "updates": final_updates,
        "train_loss": float(records[-1]["loss"]),
        "sec_per_update": seconds_per_update(records),
        "train_wall_sec": time.time() - start,
        # counted by the masked_lm_flops criterion from the batches' actual shapes
        "train_pflops": float(records[-1]["total_pflops"]) if "total_pflops" in records[-1] else None,
        "analytic_pflops_per_update": (analytic_pflops_per_update(command, data) if masked_lm
                                       else None),
    }


def command_option(command: List[str], flag: str, default: Optional[str] = None) -> Optional[str]:
    """The value of ``flag`` in a fairseq command line (the last one wins, as in argparse)."""
    values = [command[i + 1] for i, word in enumerate(command[:-1]) if word == flag]
    return values[-1] if values else default


def analytic_pflops_per_update(command: List[str], data: Path) -> Optional[float]:
    """Training PFLOPs of one update by the Appendix D formulas (:mod:`fairseq_ext.flops`), for
    the arch, length, masking and batch in the command the recipe printed."""
    from fairseq_ext import flops

    arch = command_option(command, "--arch")
    if arch is None:
        return None
    overrides = {name.replace("-", "_"): int(command_option(command, f"--{name}"))
                 for name in ("encoder-layers", "encoder-embed-dim", "encoder-ffn-embed-dim",
                              "decoder-layers", "decoder-embed-dim", "decoder-ffn-embed-dim")
                 if command_option(command, f"--{name}") is not None}
    spec = flops.spec_for_arch(arch, **overrides)
    mask_fraction = (1.0 - float(command_option(command, "--leave-unmasked-prob", "0.1"))
                     - float(command_option(command, "--random-token-prob", "0.1")))
    vocab = flops.vocab_size_of(argparse.Namespace(data=str(data), vocab_size=None))
    per_sequence = flops.training_flops_per_sequence(
        spec, int(command_option(command, "--tokens-per-sample", "512")),
        float(command_option(command, "--mask-prob", "0.15")), vocab, mask_fraction)
    sequences = int(command_option(command, "--batch-size", "1")) * int(
        command_option(command, "--update-freq", "1"))
    return per_sequence * sequences / 1e15


def validate(run: DemoRun, data: Path, run_dir: Path) -> dict:
    """fairseq-validate on the final checkpoint (criterion as saved in the checkpoint)."""
    cmd = [str(BIN_DIR / "fairseq-validate"), str(data), "--user-dir", str(REPO_ROOT / "fairseq_ext"),
           "--task", "masked_lm", "--path", str(run_dir / "checkpoints" / "checkpoint_last.pt"),
           "--valid-subset", "valid", "--batch-size", "16", "--cpu", "--log-format", "json",
           "--skip-invalid-size-inputs-valid-test"]
    result = None
    for line in stream(cmd, dict(os.environ), run_dir / "validate.log"):
        record = parse_json_record(line)
        if record and "valid_loss" in record:
            result = record
    if result is None:
        raise SystemExit(f"error: fairseq-validate printed no result; see {run_dir / 'validate.log'}")
    return {key: float(value) for key, value in result.items()
            if key.startswith(("valid_loss", "valid_ppl"))}


#: The summary table: (title, row key, format). Appending a tuple adds a column.
TABLE_COLUMNS = [
    ("model", "name", "{}"),
    ("updates", "updates", "{:d}"),
    ("valid loss", "valid_loss", "{:.3f}"),
    ("ppl", "valid_ppl", "{:.1f}"),
    ("ppl [MASK]", "valid_ppl_mask", "{:.1f}"),
    ("ppl replaced", "valid_ppl_replaced", "{:.1f}"),
    ("ppl unchanged", "valid_ppl_unchanged", "{:.1f}"),
    ("train PFLOPs", "train_pflops", "{:.4f}"),
    ("s/update", "sec_per_update", "{:.3f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("analytic speedup", "analytic_speedup", "{:.2f}x"),
]


def add_speedups(rows: List[dict]) -> None:
    """Speedups over the first run (the RoBERTa-15% baseline): measured (seconds per update)
    and analytic (training FLOPs per update, Appendix D), side by side."""
    baseline = rows[0]
    for row in rows:
        measured = (baseline["sec_per_update"], row["sec_per_update"])
        row["speedup"] = (measured[0] / measured[1] if all(math.isfinite(t) and t > 0 for t in measured)
                          else math.nan)
        if row.get("analytic_pflops_per_update") and baseline.get("analytic_pflops_per_update"):
            row["analytic_speedup"] = (baseline["analytic_pflops_per_update"]
                                       / row["analytic_pflops_per_update"])


def format_table(rows: List[dict]) -> str:
    """The summary table (losses in bits, as fairseq logs them); '-' where a run has no value."""
    cells = [[fmt.format(row[key]) if row.get(key) is not None and row[key] == row[key] else "-"
              for _, key, fmt in TABLE_COLUMNS] for row in rows]
    return ascii_table([title for title, _, _ in TABLE_COLUMNS], cells)


def plot_curves(rows: List[dict], runs_dir: Path) -> Optional[Path]:
    """:mod:`fairseq_ext.curves` (``scripts/plot_curves.py``) over the runs' logs: valid loss
    against cumulative train FLOPs and against wall time, one line per run."""
    from fairseq_ext import curves

    out = runs_dir / PLOT
    logs = [runs_dir / row["name"].replace("%", "pct") / "train.log" for row in rows]
    try:
        curves.plot([curves.curve_of(curves.read_log(log)) for log in logs],
                    [row["name"] for row in rows], out)
    except curves.CurveError as error:
        print(f"note: no loss-vs-compute plot: {error}")
        return None
    return out


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
        print(f"== {name}: {seconds:.0f} s", flush=True)

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
                        help="the baseline's updates instead of its recipe's TOTAL_UPDATES (the "
                             "other runs get the same FLOPs), e.g. for a quick check")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where runs go (default: runs/demo/<timestamp>)")
    parser.add_argument("--only", nargs="*", default=None,
                        help="names of DEMO_RUNS and BIDIRECTIONAL_RUNS to run")
    args = parser.parse_args(argv)
    # the recipes run from the repository root: paths the user gave are theirs, from here
    args.data = args.data.resolve() if args.data is not None else None
    args.runs_dir = args.runs_dir.resolve() if args.runs_dir is not None else None
    if not (REPO_ROOT / "recipes").is_dir():
        raise SystemExit(f"error: the demo runs the recipes of a fairseq-ext checkout; "
                         f"{REPO_ROOT} has none (run `make demo` in a clone)")

    if args.data is not None and not (args.data / "dict.txt").is_file():
        raise SystemExit(f"error: --data {args.data} has no dict.txt: point --data at a fairseq "
                         "data-bin, or leave --data out to prepare the embedded corpus "
                         "(scripts/prepare_corpus.sh)")
    runs = [r for r in DEMO_RUNS if args.only is None or r.name in args.only]
    bidirectional_runs = [r for r in BIDIRECTIONAL_RUNS if args.only is None or r.name in args.only]
    if not runs and not bidirectional_runs:
        raise SystemExit(f"error: --only matched none of "
                         f"{[r.name for r in DEMO_RUNS + BIDIRECTIONAL_RUNS]}")
    runs_dir = args.runs_dir or REPO_ROOT / "runs" / "demo" / time.strftime("%Y%m%d-%H%M%S")
    refuse_earlier_outputs([*(run_dir_of(runs_dir, run) for run in runs + bidirectional_runs),
                            runs_dir / SUMMARY, runs_dir / PLOT])  # before anything is trained
    clock = StageClock()
    data = args.data
    if data is None:
        data = DEFAULT_DATA
        print(f"== preparing the embedded corpus into {data.relative_to(REPO_ROOT)}", flush=True)
        with clock.stage("corpus (cached after the first run)"):
            subprocess.run(["bash", str(REPO_ROOT / "scripts/prepare_corpus.sh"), "--destdir",
                            str(data)], cwd=REPO_ROOT, check=True)
    rows = run_masked_lm_comparison(runs, data, runs_dir, args.updates, clock) if runs else []
    bidirectional_rows = (run_bidirectional_comparison(bidirectional_runs, data, runs_dir,
                                                       args.updates, clock)
                          if bidirectional_runs else [])
    if rows:
        with clock.stage("plot"):
            plot = plot_curves(rows, runs_dir)
        print()
        print(format_table(rows))
        if plot is not None:
            print(f"valid loss against train FLOPs and wall time: {plot}")
    if bidirectional_rows:
        from fairseq_ext.evaluation.bidirectional_report import format_report

        print()
        print("generalized bidirectionality (bidir_lm_mini, equal tokens; full-document ppl, "
              "suffix ppl and infilling accuracy % at R = n_bidir / context):")
        print(format_report(bidirectional_rows, BIDIRECTIONAL_R_VALUES,
                            names=[row["name"] for row in bidirectional_rows]))
    write_text(runs_dir / SUMMARY, json.dumps(
        {"masked_lm": rows, "bidirectional": bidirectional_rows}, indent=2, default=str),
        force=False)
    print(f"runs, logs and checkpoints: {runs_dir}")
    print(clock.summary())
    print(f"demo wall time: {(time.time() - clock.started) / 60:.1f} min")


def run_dir_of(runs_dir: Path, run: DemoRun) -> Path:
    return runs_dir / run.name.replace("%", "pct")


def refuse_earlier_outputs(paths: List[Path]) -> None:
    """The demo never overwrites earlier runs: stop if one of ``paths`` (a run's directory, the
    summary or the plot, in a ``--runs-dir`` given again) exists."""
    for path in paths:
        if path.exists():
            raise SystemExit(f"error: {path} already exists; choose another --runs-dir "
                             "(the demo never overwrites earlier runs)")


def new_run_dir(runs_dir: Path, run: DemoRun) -> Path:
    run_dir = run_dir_of(runs_dir, run)
    refuse_earlier_outputs([run_dir])
    run_dir.mkdir(parents=True)
    return run_dir


def run_masked_lm_comparison(runs: List[DemoRun], data: Path, runs_dir: Path,
                             baseline_updates: Optional[int], clock: StageClock) -> List[dict]:
    """Steps 2-4 of the module docstring: the equal-FLOPs masked-LM runs and their rows."""
    budgets = equal_flops_updates(runs, data, baseline_updates)
    validate_every = max(1, budgets[0] // VALIDATIONS_PER_RUN)
    log_interval = None if baseline_updates is None else max(1, baseline_updates // 10)
    print("== equal training FLOPs: " + ", ".join(
        f"{run.name} {n} updates" for run, n in zip(runs, budgets)), flush=True)
    rows = []
    for run, updates in zip(runs, budgets):
        run_dir = new_run_dir(runs_dir, run)
        print(f"== {run.name}: training ({run.recipe})", flush=True)
        with clock.stage(f"{run.name}: train"):
            row = {"name": run.name, **train(run, data, run_dir, updates, validate_every,
                                             log_interval)}
        print(f"== {run.name}: fairseq-validate", flush=True)
        with clock.stage(f"{run.name}: fairseq-validate"):
            row.update(validate(run, data, run_dir))
        row["train_min"] = row["train_wall_sec"] / 60
        rows.append(row)
    add_speedups(rows)
    return rows


def run_bidirectional_comparison(runs: List[DemoRun], data: Path, runs_dir: Path,
                                 updates: Optional[int], clock: StageClock) -> List[dict]:
    """Step 5 of the module docstring: one run per variant family at equal tokens (the recipe's
    updates, or ``updates``), each scored by the evaluation modes it can serve, runs
    :data:`BIDIRECTIONAL_WORKERS` at a time on one torch thread each."""
    from fairseq_ext.evaluation.bidirectional_report import evaluate_checkpoint

    log_interval = None if updates is None else max(1, updates // 10)
    run_dirs = [new_run_dir(runs_dir, run) for run in runs]
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def train_and_evaluate(run: DemoRun, run_dir: Path) -> dict:
        print(f"== {run.name}: training ({run.recipe}, VARIANT={run.env['VARIANT']})", flush=True)
        with clock.part(f"{run.name}: train"):
            row = {"name": run.name, **train(run, data, run_dir, updates, 10 ** 9, log_interval,
                                             masked_lm=False, extra_env=one_thread,
                                             concurrent=True)}
        print(f"== {run.name}: fairseq-validate --eval-mode ...", flush=True)
        with clock.part(f"{run.name}: evaluate"):
            row.update(evaluate_checkpoint(data, run_dir / "checkpoints" / "checkpoint_last.pt",
                                           BIDIRECTIONAL_R_VALUES, cpu=True, log_dir=run_dir,
                                           infill_positions=BIDIRECTIONAL_INFILL_POSITIONS,
                                           env=one_thread))
        return row

    workers = min(BIDIRECTIONAL_WORKERS, len(runs))
    with clock.stage(f"bidirectional: {len(runs)} runs, {workers} at a time", concurrent=True):
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(train_and_evaluate, runs, run_dirs))

