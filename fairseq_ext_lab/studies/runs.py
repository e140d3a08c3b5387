"""Running a study: the learning-rate selection, the resumable run store (a run is finished when
its ``result.json`` exists), training and evaluating each run, the worker pool.

May import: see :mod:`fairseq_ext_lab`.
"""
import json
import math
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_ext_lab.recipe_runs import ONE_THREAD, WORKERS, in_parallel, say
from fairseq_ext_lab.recipe_training import (
    curve_intervals,
)
from fairseq_ext_lab.reporting.text_tables import ascii_table
from fairseq_ext_lab.run_store import RESULT, SELECTION_SEED, write_result
from fairseq_ext_lab.studies.kinds import kind_of
from fairseq_ext_lab.studies.plan import PlannedRun, run_dir_of, with_lr
from fairseq_ext_lab.studies.spec import (
    GPU_RUN_ENV,
    HELDOUT_SHARE,
    SELECTION_DIR,
    Study,
)


def select_learning_rates(study: Study, data: Path, runs_dir: Path, plan: Sequence[PlannedRun],
                          workers: int = WORKERS, printer: Callable[[str], None] = print,
                          train: bool = True) -> Tuple[Dict[str, dict], int]:
    """Each model's peak learning rate, the best of ``study.lr_grid`` on held-out training
    data: every (model, lr) trains once (seed :data:`SELECTION_SEED`, the model's planned
    updates) on the training split without its last :data:`HELDOUT_SHARE`
    (:func:`fairseq_ext.corpus.heldout.heldout_data_bin`) and is scored on those lines: the
    final [MASK] loss (masked LMs) or the training objective's loss (bidirectional LMs). The
    valid split, on which the study's figures are measured, is never looked at. Finished
    selection runs are read back like the study's (``train=False``: only read back,
    :func:`run_study`). Returns ``({model: {"lr": chosen, "scores": {lr: loss}}}, runs trained
    now)``."""
    from fairseq_ext.corpus.heldout import heldout_data_bin

    if not study.lr_grid:
        return {}, 0
    selection_dir = runs_dir / SELECTION_DIR
    heldout = heldout_data_bin(data, selection_dir / "heldout-data-bin", HELDOUT_SHARE)
    updates = {planned.model.name: planned.updates for planned in plan}
    selection_plan = [PlannedRun(with_lr(model, lr), SELECTION_SEED, updates[model.name])
                      for model in study.models for lr in study.lr_grid]
    printer(f"== learning rates: {len(selection_plan)} runs, {', '.join(study.lr_grid)} for each "
            f"model, scored on the {HELDOUT_SHARE:.0%} of the training split held out "
            f"({heldout})")
    results, trained = run_study(study, heldout, selection_dir, selection_plan, workers,
                                 evaluate=False, lr_dirs=True, train=train)
    scores_of: Dict[str, Dict[str, float]] = {model.name: {} for model in study.models}
    for planned in selection_plan:
        scores_of[planned.model.name][planned.lr] = heldout_loss(results[planned.key_with_lr])
    chosen: Dict[str, dict] = {}
    for model in study.models:
        scores = scores_of[model.name]
        finite = {lr: loss for lr, loss in scores.items() if math.isfinite(loss)}
        if not finite:
            raise SystemExit(f"error: {model.name}: no learning rate of {study.lr_grid} trained "
                             "to a finite held-out loss")
        chosen[model.name] = {"lr": min(finite, key=finite.get), "scores": scores,
                              "metric": kind_of(study).selection_metric}
    printer(ascii_table(["model"] + [f"lr {lr}" for lr in study.lr_grid] + ["chosen"],
                        [[name] + [f"{entry['scores'][lr]:.3f}" for lr in study.lr_grid]
                         + [entry["lr"]] for name, entry in chosen.items()]))
    return chosen, trained


def heldout_loss(result: dict) -> float:
    """A selection run's score: its last curve point's loss (the final checkpoint's [MASK] loss
    for a masked LM, fairseq's validation of the training objective for a bidirectional LM);
    NaN for a run that diverged."""
    curve = result.get("curve") or []
    if not curve:
        return math.nan
    value = curve[-1]["valid_loss"]
    return float(value) if value is not None and math.isfinite(value) else math.nan


def load_result(run_dir: Path, planned: PlannedRun) -> Optional[dict]:
    """The finished run's figures, or ``None`` when it is not finished. A finished run planned
    with other updates belongs to another plan: refused, never replaced."""
    path = run_dir / RESULT
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if result.get("planned_updates") != planned.updates:
        raise SystemExit(
            f"error: {path} holds a finished run of {result.get('planned_updates')} updates, this "
            f"plan has {planned.updates}; choose another --runs-dir (finished runs are never "
            "replaced)")
    if result.get("peak_lr") != planned.lr:
        def shown(lr: Optional[str]) -> str:
            return "the recipe's peak lr" if lr is None else f"peak lr {lr}"

        raise SystemExit(
            f"error: {path} holds a finished run at {shown(result.get('peak_lr'))}, this plan "
            f"has {shown(planned.lr)}; choose another --runs-dir (finished runs are never "
            "replaced)")
    return result


def prepare_run_dir(run_dir: Path) -> None:
    """Make way for a run: a directory without :data:`RESULT` is a run the study was killed
    in (half-trained, or trained and not evaluated); it is removed and redone."""
    if run_dir.exists():
        say(f"== {run_dir}: an unfinished run (no {RESULT}); removing it and starting again")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)


def run_environment(device: str) -> Dict[str, str]:
    """What a run's recipe gets beside its model's environment: on the CPU one torch thread
    (two runs share the 2 cores), on the GPU :data:`GPU_RUN_ENV`."""
    return dict(ONE_THREAD) if device == "cpu" else dict(GPU_RUN_ENV)


def check_device(device: str) -> None:
    """Refuse a GPU study where torch sees no GPU, before anything is planned or trained."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("error: this study trains on a GPU (device cuda) and torch sees no "
                             "CUDA device here: run it on a GPU machine (scripts/gpu_suite.sh "
                             "--stages \"setup study\"), or add --device cpu to try it on the "
                             "CPU (slow at the study's shape)")


def train_and_evaluate(study: Study, planned: PlannedRun, data: Path, run_dir: Path,
                       keep_checkpoints: bool = False, evaluate: bool = True) -> dict:
    """Train one (model, seed) through its recipe and evaluate it; write :data:`RESULT`.
    ``evaluate=False`` (a learning-rate selection run of a bidirectional LM): only fairseq's
    validation curve, no evaluation modes."""
    prepare_run_dir(run_dir)
    run = planned.model.run(planned.seed)
    save_every, log_every = curve_intervals(planned.updates)
    label = planned.key if planned.lr is None else planned.key_with_lr
    say(f"== {label}: training {planned.updates} updates ({run.recipe}, {study.device})")
    row = kind_of(study).train_and_evaluate(study, run, data, run_dir, planned.updates,
                                           save_every, log_every,
                                           run_environment(study.device), evaluate)
    if not keep_checkpoints:  # the interval checkpoints were scored: keep the last one only
        for path in (run_dir / "checkpoints").glob("checkpoint_*_*.pt"):
            path.unlink()
    row.update({"study": study.name, "model": planned.model.name, "seed": planned.seed,
                "planned_updates": planned.updates, "peak_lr": planned.lr})
    write_result(run_dir, row)
    return row


def run_study(study: Study, data: Path, runs_dir: Path, plan: Sequence[PlannedRun],
              workers: int = WORKERS, keep_checkpoints: bool = False,
              evaluate: bool = True, lr_dirs: bool = False,
              train: bool = True) -> Tuple[Dict[str, dict], int]:
    """Every planned run, ``workers`` at a time, finished ones read back: ``({key: result}``
    with each result's ``run_dir``, the number of runs trained now). ``lr_dirs``: learning-rate
    selection runs, one directory and key per (model, lr). ``train=False`` (``--report-only``):
    nothing is trained; a run that is not finished is an error naming it."""
    def directory(planned: PlannedRun) -> Path:
        return run_dir_of(runs_dir, planned.model.name, planned.seed,
                          planned.lr if lr_dirs else None)

    def key(planned: PlannedRun) -> str:
        return planned.key_with_lr if lr_dirs else planned.key

    results: Dict[str, dict] = {}
    pending: List[PlannedRun] = []
    for planned in plan:
        result = load_result(directory(planned), planned)
        if result is None:
            pending.append(planned)
        else:
            say(f"== {key(planned)}: finished earlier ({directory(planned) / RESULT}); "
                     "not retrained")
            results[key(planned)] = result
    if pending and not train:
        raise SystemExit(
            f"error: --report-only: {len(pending)} planned run(s) in {runs_dir} are not finished "
            f"(no {RESULT}): " + ", ".join(key(planned) for planned in pending)
            + "; run the study without --report-only to train them")
    # model by model, as planned: at equal FLOPs the runs take about the same time
    lock = threading.Lock()

    def one(planned: PlannedRun) -> None:
        start = time.time()
        result = train_and_evaluate(study, planned, data, directory(planned), keep_checkpoints,
                                    evaluate)
        say(f"== {key(planned)}: done in {time.time() - start:.0f} s "
                 f"(training {result['train_wall_sec']:.0f} s)")
        with lock:
            results[key(planned)] = result

    in_parallel(one, pending, workers)
    for planned in plan:  # where the run is now: the runs directory may have moved
        results[key(planned)]["run_dir"] = str(directory(planned))
    return results, len(pending)
