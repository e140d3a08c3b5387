"""Training and scoring one recipe run, shared by the demo and the studies: :func:`train` (a recipe's
fairseq-train run, its progress and its PFLOPs), :func:`score_run` (its checkpoints' [MASK] loss,
:mod:`fairseq_ext_lab.evaluation.masked_lm_scores`) and the curve they make.

May import: see :mod:`fairseq_ext_lab` (of its other modules,
:mod:`~fairseq_ext_lab.recipe_runs` and :mod:`~fairseq_ext_lab.budget`).
"""
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from fairseq_ext.training.fairseq_bin import python_executable
from fairseq_ext.training.output_files import write_text
from fairseq_ext_lab.budget import analytic_pflops_per_update
from fairseq_ext_lab.recipe_runs import (
    CURVE_POINTS,
    ONE_THREAD,
    REPO_ROOT,
    SCORING_MASK_PROB,
    RecipeRun,
    recipe_env,
    say,
    stream,
)
from fairseq_ext_lab.reporting.log_records import parse_json_record

if TYPE_CHECKING:  # imported where used: fairseq and matplotlib load slowly
    from fairseq_ext_lab.evaluation.masked_lm_scores import SequenceScores
    from fairseq_ext_lab.reporting.curves import CurvePoint


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
            sys.stdout.flush()
        else:
            say(text)

    def close(self) -> None:
        if self.interactive:
            sys.stdout.write("\n")


def train(run: RecipeRun, data: Path, run_dir: Path, updates: Optional[int],
          extra_args: Sequence[str] = (), log_interval: Optional[int] = None,
          extra_env: Optional[Dict[str, str]] = None, concurrent: bool = False) -> dict:
    """Train one demo model through its recipe for ``updates`` updates (``extra_args`` appended
    to its fairseq-train command); return its train-side figures. ``concurrent``: other runs
    print beside this one, so progress goes out as whole lines, never as a redrawn bar."""
    env = recipe_env(run, data, SAVE_DIR=str(run_dir / "checkpoints"), **(extra_env or {}))
    if updates is not None:  # else the recipe's own
        env["TOTAL_UPDATES"] = str(updates)
    if log_interval is not None:
        env["LOG_INTERVAL"] = str(log_interval)
    cmd = ["bash", str(REPO_ROOT / run.recipe), "--log-format", "json", "--no-progress-bar",
           "--no-epoch-checkpoints", "--skip-invalid-size-inputs-valid-test", *run.args,
           *extra_args]
    progress = Progress(run.name, interactive=not concurrent)
    records: List[dict] = []
    final_updates = 0  # from every record, the epoch summaries' `train_num_updates` included
    command: List[str] = []
    start = time.time()
    for line in stream(cmd, env, run_dir / "train.log"):
        if line.startswith("+ "):
            if not concurrent:
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
        # counted by the training criterion from the batches' actual shapes
        "train_pflops": total_pflops_of(run_dir / "train.log"),
        "analytic_pflops_per_update": analytic_pflops_per_update(command),
    }


def total_pflops_of(log: Path) -> Optional[float]:
    """The training PFLOPs the criterion counted over the whole run: the last ``total_pflops``
    of a training record (the final epoch summary's ``train_total_pflops`` included)."""
    total = None
    for line in log.read_text().splitlines():
        record = parse_json_record(line)
        for key in ("total_pflops", "train_total_pflops"):
            if record and key in record:
                total = float(record[key])
    return total


def checkpoints_to_score(run_dir: Path, final_updates: int) -> Dict[int, Path]:
    """``{updates: checkpoint}`` of a run: the interval checkpoints (``checkpoint_E_U.pt``) and
    the last one, at ``final_updates``."""
    checkpoints = {}
    for path in (run_dir / "checkpoints").glob("checkpoint_*_*.pt"):
        updates = path.stem.rsplit("_", 1)[-1]
        if updates.isdigit():
            checkpoints[int(updates)] = path
    checkpoints[final_updates] = run_dir / "checkpoints" / "checkpoint_last.pt"
    return dict(sorted(checkpoints.items()))


def score_run(data: Path, run_dir: Path, final_updates: int, device: str = "cpu",
              max_sequences: Optional[int] = None) -> Dict[int, "SequenceScores"]:
    """Every checkpoint of a run scored on the valid split (or ``max_sequences`` of its
    sequences spread over it) at :data:`SCORING_MASK_PROB`
    (:mod:`fairseq_ext_lab.evaluation.masked_lm_scores`, one process; on the CPU one thread, or on
    ``device`` ``cuda``), by updates."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import SequenceScores

    checkpoints = checkpoints_to_score(run_dir, final_updates)
    out = run_dir / "scores.json"
    cmd = [python_executable(), "-m", "fairseq_ext_lab.evaluation.masked_lm_scores", str(data),
           *map(str, checkpoints.values()), "--mask-prob", str(SCORING_MASK_PROB),
           "--device", device, "--out", str(out),
           *(["--max-sequences", str(max_sequences)] if max_sequences is not None else [])]
    env = dict(os.environ, **ONE_THREAD) if device == "cpu" else dict(os.environ)
    for _ in stream(cmd, env, run_dir / "scores.log"):
        pass
    written = json.loads(out.read_text())
    scores = written["scores"]
    by_updates = {updates: SequenceScores.from_json(scores[str(path)])
                  for updates, path in checkpoints.items()}
    # keyed by the checkpoint's path relative to the run: the run directory can be moved
    written["scores"] = {checkpoint_key(path): record for path, record in scores.items()}
    write_text(out, json.dumps(written), force=True)
    return by_updates


def checkpoint_key(path) -> str:
    """A scored checkpoint's key in ``scores.json``: ``checkpoints/<file>``, relative to its run
    directory (older files keyed by the absolute path map to the same key)."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}"


def curve_points(run_dir: Path, scores: Dict[int, "SequenceScores"]) -> List["CurvePoint"]:
    """The run's [MASK]-loss curve: each scored checkpoint at the training PFLOPs, wall time and
    tokens of its update, as the criterion logged them (:mod:`fairseq_ext_lab.reporting.curves`)."""
    from fairseq_ext_lab.reporting import curves

    log = curves.read_log(run_dir / "train.log")
    return curves.map_valid_to_train(log.train, [
        curves.ValidPoint(updates, score.loss_bits().value) for updates, score in scores.items()])


def cost_to_reach(curve: Sequence["CurvePoint"], target: float,
                   axis: str = "pflops") -> Optional[float]:
    """Training PFLOPs (``axis="wall"``: seconds of training) at which a [MASK]-loss curve
    first reaches ``target`` (bits), linearly interpolated between the scored checkpoints
    around the crossing; ``None`` when it never gets there. Before the first checkpoint the
    curve is not known, so a first point already below the target gives that point's value (an
    upper bound)."""
    previous = None
    for point in curve:
        if point.valid_loss <= target:
            if previous is None or previous.valid_loss == point.valid_loss:
                return getattr(point, axis)
            share = (previous.valid_loss - target) / (previous.valid_loss - point.valid_loss)
            before, after = getattr(previous, axis), getattr(point, axis)
            return before + share * (after - before)
        previous = point
    return None


def curve_intervals(updates: int) -> tuple:
    """``(save interval, log interval)`` of a masked-LM run: :data:`CURVE_POINTS` checkpoints,
    and training records at each of them (the curve's FLOPs)."""
    interval = max(1, updates // CURVE_POINTS)
    return interval, (interval // 2 if interval % 2 == 0 else interval)
