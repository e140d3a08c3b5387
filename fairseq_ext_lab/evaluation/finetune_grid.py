"""The fine-tuning grid of Artetxe et al. (2022), "On the Role of Bidirectionality in Language
Model Pre-Training" (§3.2 "Fine-tuning", Tables 9-10, Appendix B): read the runs of
``recipes/bidirectional/finetune_grid.sh`` and report the best dev accuracy per task.

The paper runs lr {5e-6, 1e-5, 2e-5, 5e-5} x batch {16, 32, 64} for each task, fine-tunes
"both with fully unidirectional attention (r_bidir = 0) and fully bidirectional attention
(r_bidir = 1)", and reports "the best development accuracy" over the grid: Table 9 the average
over the six tasks for each r_bidir, Table 10 the per-task figures of one r_bidir per model (0
for NxtUni, MskUni, HybUni; 1 for the rest). One run, one score: the best of the dev accuracies
fairseq logged during the run (every validation, as ``checkpoint_best.pt`` is picked).

Layout (what the grid script writes)::

    SAVE_ROOT/<TASK>/r<R>_lr<LR>_bs<BATCH>/train.log   the recipe's stdout: the printed
                                                       command, then fairseq's json records

A run directory without a parsable validation record counts as missing (a run still going, or
one that failed); the report says how many runs each cell has.

``python -m fairseq_ext_lab.evaluation.finetune_grid SAVE_ROOT`` prints the tables (markdown); ``--tsv FILE``
also writes every run's score there (never over an existing file without ``--force``; the grid
recipe, which rewrites its own ``SAVE_ROOT/grid.tsv`` as runs are added, passes it).
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fairseq_ext.training.output_files import OutputError, atomic_file, error_line, refuse_existing
from fairseq_ext_lab.reporting.log_records import parse_json_record

#: Table 10's tasks, in its column order.
PAPER_TASKS = ("CoLA", "MNLI", "MRPC", "QNLI", "RTE", "SST-2")
#: Appendix B's grid.
PAPER_LRS = ("5e-06", "1e-05", "2e-05", "5e-05")
PAPER_BATCHES = (16, 32, 64)
PAPER_R_BIDIR = ("0", "1")
#: A run's directory name.
RUN_NAME = re.compile(r"^r(?P<r_bidir>[0-9.]+)_lr(?P<lr>[^_/]+)_bs(?P<batch>[0-9]+)$")
#: fairseq's json records of training (``train_inner`` has no prefix; ``train`` has).
TRAIN_SUBSETS = frozenset({"train", "train_inner"})


@dataclass(frozen=True)
class GridRun:
    """One point of the grid: its settings and the best dev score of each validation subset
    (``valid``; MNLI also ``valid1``, the mismatched dev set), ``{}`` when none was logged."""

    task: str
    r_bidir: str
    lr: str
    batch: int
    scores: Dict[str, float]
    path: Path

    def score(self, subset: str = "valid") -> Optional[float]:
        return self.scores.get(subset)


def best_scores(lines: Iterable[str], metric: str = "accuracy",
                maximize: bool = True) -> Dict[str, float]:
    """The best ``metric`` of each validation subset in fairseq ``--log-format json`` lines
    (any logging prefix): ``{subset: best}``. A validation record carries ``<subset>_loss``
    and ``<subset>_<metric>``; fairseq's running best (``<subset>_best_<metric>``) and training
    records are not scores of a validation, so they are skipped."""
    best: Dict[str, float] = {}
    suffix = f"_{metric}"
    for line in lines:
        record = parse_json_record(line)
        if not record:
            continue
        for key, value in record.items():
            if not key.endswith(suffix):
                continue
            subset = key[: -len(suffix)]
            if subset in TRAIN_SUBSETS or f"{subset}_loss" not in record:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if math.isnan(number):
                continue
            if subset not in best or (number > best[subset] if maximize else number < best[subset]):
                best[subset] = number
    return best


def read_run(path: Path, task: str, metric: str = "accuracy") -> Optional[GridRun]:
    """The :class:`GridRun` of run directory ``path`` (named ``r<R>_lr<LR>_bs<B>``), or
    ``None`` when the name is not a grid point's."""
    match = RUN_NAME.match(path.name)
    if not match:
        return None
    log = path / "train.log"
    scores: Dict[str, float] = {}
    if log.is_file():
        with open(log, errors="replace") as f:
            scores = best_scores(f, metric)
    return GridRun(task=task, r_bidir=match["r_bidir"], lr=match["lr"],
                   batch=int(match["batch"]), scores=scores, path=path)


def collect(root: Path, tasks: Optional[Sequence[str]] = None,
            metric: str = "accuracy") -> List[GridRun]:
    """Every run under ``root/<TASK>/`` (``tasks``: those only; default: every task folder)."""
    root = Path(root)
    folders = ([root / task for task in tasks] if tasks is not None
               else sorted(p for p in root.iterdir() if p.is_dir()))
    runs = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            run = read_run(path, folder.name, metric) if path.is_dir() else None
            if run is not None:
                runs.append(run)
    return runs


@dataclass(frozen=True)
class Cell:
    """The best run of a set of runs (one task, one r_bidir, or one task over the whole grid):
    its score, the run, and how many runs of the set have a score."""

    score: float
    run: GridRun
    scored: int
    total: int


def best_run(runs: Sequence[GridRun], subset: str = "valid") -> Optional[Cell]:
    """The run with the highest ``subset`` score (ties: the first in grid order), or ``None``
    when no run has one."""
    scored = [run for run in runs if run.score(subset) is not None]
    if not scored:
        return None
    top = max(scored, key=lambda run: run.score(subset))
    return Cell(top.score(subset), top, len(scored), len(runs))


def r_bidir_values(runs: Sequence[GridRun]) -> List[str]:
    return sorted({run.r_bidir for run in runs}, key=float)


def task_names(runs: Sequence[GridRun], tasks: Optional[Sequence[str]] = None) -> List[str]:
    """``tasks``, else the paper's tasks present in ``runs`` in Table 10's order, then others."""
    if tasks is not None:
        return list(tasks)
    present = {run.task for run in runs}
    return [t for t in PAPER_TASKS if t in present] + sorted(present - set(PAPER_TASKS))


def grid_table(runs: Sequence[GridRun], tasks: Optional[Sequence[str]] = None,
               subset: str = "valid") -> Dict[Tuple[str, str], Optional[Cell]]:
    """``{(r_bidir, task): best cell over lr x batch}``, and ``("best", task)``: the best over
    the whole grid (both attention settings)."""
    table: Dict[Tuple[str, str], Optional[Cell]] = {}
    for task in task_names(runs, tasks):
        of_task = [run for run in runs if run.task == task]
        for r_bidir in r_bidir_values(runs):
            table[(r_bidir, task)] = best_run([run for run in of_task if run.r_bidir == r_bidir],
                                              subset)
        table[("best", task)] = best_run(of_task, subset)
    return table


def average(cells: Sequence[Optional[Cell]]) -> Optional[float]:
    """The mean of the cells' scores, ``None`` unless every cell has one (Table 9's average
    is over all six tasks)."""
    if not cells or any(cell is None for cell in cells):
        return None
    return sum(cell.score for cell in cells) / len(cells)


def format_report(runs: Sequence[GridRun], tasks: Optional[Sequence[str]] = None,
                  subset: str = "valid", metric: str = "accuracy") -> str:
    """Markdown: best dev ``metric`` per task for each r_bidir (Table 9's average in the last
    column; Table 10 reports the row of the attention a model was pre-trained with) and over
    both; then each cell's lr and batch and how many of its runs were scored."""
    names = task_names(runs, tasks)
    if not runs or not names:
        return "no runs found\n"
    table = grid_table(runs, names, subset)
    rows = r_bidir_values(runs) + ["best"]
    lines = [f"Best dev {metric} ({subset}) over lr x batch:", "",
             "| r_bidir | " + " | ".join(names) + " | avg |",
             "|---" * (len(names) + 2) + "|"]
    for row in rows:
        cells = [table[(row, task)] for task in names]
        figures = [f"{cell.score:.1f}" if cell else "-" for cell in cells]
        mean = average(cells)
        lines.append(f"| {row} | " + " | ".join(figures)
                     + f" | {'-' if mean is None else f'{mean:.1f}'} |")
    lines += ["", "Best settings (lr, batch[, r_bidir]) and scored runs / runs:", "",
              "| r_bidir | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for row in rows:
        entries = []
        for task in names:
            cell = table[(row, task)]
            if cell is None:
                total = sum(1 for run in runs if run.task == task
                            and (row == "best" or run.r_bidir == row))
                entries.append(f"- (0/{total})")
                continue
            setting = f"{cell.run.lr}, {cell.run.batch}"
            if row == "best":
                setting += f", r{cell.run.r_bidir}"
            entries.append(f"{setting} ({cell.scored}/{cell.total})")
        lines.append(f"| {row} | " + " | ".join(entries) + " |")
    return "\n".join(lines) + "\n"


def write_tsv(runs: Sequence[GridRun], path: Path, subset: str = "valid",
              force: bool = False) -> None:
    """One row per run: task, r_bidir, lr, batch, best dev score (``nan``: none logged); an
    existing ``path`` is replaced only with ``force``."""
    with atomic_file(path, force) as f:
        f.write("task\tr_bidir\tlr\tbatch\tscore\n")
        for run in runs:
            score = run.score(subset)
            f.write(f"{run.task}\t{run.r_bidir}\t{run.lr}\t{run.batch}\t"
                    f"{'nan' if score is None else score}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext_lab.evaluation.finetune_grid",
        description="Best dev accuracy per task of a fine-tuning grid of "
                    "recipes/bidirectional/finetune_grid.sh (Artetxe et al. 2022, Tables 9-10).")
    parser.add_argument("save_root", type=Path, help="the grid's SAVE_ROOT (<TASK>/r*_lr*_bs*/)")
    parser.add_argument("--tasks", nargs="+", help="tasks (folders) to report, in this order "
                        "(default: every task folder, Table 10's order)")
    parser.add_argument("--subset", default="valid",
                        help="validation subset (default valid; MNLI mismatched: valid1)")
    parser.add_argument("--metric", default="accuracy",
                        help="the logged metric to report (default accuracy, as Table 10)")
    parser.add_argument("--tsv", type=Path, help="also write every run's score to this file")
    parser.add_argument("--force", action="store_true", help="overwrite --tsv if it exists")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.save_root.is_dir():
        print(error_line(parser.prog, f"{args.save_root}: no such directory"), file=sys.stderr)
        return 2
    try:
        refuse_existing([args.tsv], args.force)  # before the logs are read
        runs = collect(args.save_root, args.tasks, args.metric)
        if not runs:
            print(error_line(parser.prog, f"no runs (<TASK>/r<R>_lr<LR>_bs<BATCH>/) under "
                                          f"{args.save_root}"), file=sys.stderr)
            return 1
        sys.stdout.write(format_report(runs, args.tasks, args.subset, args.metric))
        if args.tsv is not None:
            write_tsv(runs, args.tsv, args.subset, args.force)
    except OutputError as error:
        print(error_line(parser.prog, error), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
