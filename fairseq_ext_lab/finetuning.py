"""A study's fine-tuning stage: the papers' own headline metric, dev accuracy after fine-tuning,
on the downstream suite of ``scripts/prepare_downstream.sh`` (docs/downstream.md), averaged
over its tasks as GLUE's score is (``scripts/study.py --downstream DIR``, docs/studies.md).

Each paper judges pre-training by fine-tuning: 3ML by the GLUE dev average at equal compute
(Table 3), SwishRNN by GLUE and SuperGLUE (Tables 1-2), the bidirectionality paper by GLUE
fine-tuning with unidirectional and bidirectional attention (Tables 9-10). A study's
:class:`FinetuneProtocol` fine-tunes every pre-trained checkpoint of the study through its
family's own recipe (``recipes/<paper>/finetune_glue.sh``: the paper's schedule shape,
fairseq's stock ``sentence_prediction`` task and criterion), each :class:`FinetuneArm` (a study
model, possibly with other recipe settings, such as the bidirectional LMs' attention type
``R_BIDIR``) on every task of the suite:

1. **runs**: every (arm, pre-training seed, task, learning rate of
   :attr:`FinetuneProtocol.lrs`, fine-tuning seed of :attr:`FinetuneProtocol.seeds`) fine-tunes
   for :attr:`FinetuneProtocol.epochs` epochs of batch :attr:`FinetuneProtocol.batch` on the
   task's training split, and is scored at the end of training (the final model, not the best
   of several validations) on the dev split (``valid``) and on the selection split
   (``valid1``: 500 held-out rows of the train pool, disjoint from train and dev,
   ``scripts/prepare_downstream.sh``);
2. **learning rate, per (arm, pre-training seed, task)**: the rate with the best selection
   accuracy, averaged over the fine-tuning seeds (ties: the first in the grid), chosen apart for
   every pre-training seed so that the choice's noise is in the spread over seeds;
   the dev split is never looked at. The seed's dev figure is its runs' at that rate. A
   protocol with one rate (the demo) has no selection: its runs validate on dev alone;
3. **figures** (:func:`arm_task_estimate`, :func:`arm_average_estimate`): a pre-training seed's
   figure is the mean over its fine-tuning seeds; the arm's figure is the mean over
   pre-training seeds ± the standard error over pre-training seeds (the spread of the per-seed
   means holds both the pre-training and the fine-tuning noise), with the mean within-seed
   standard error over fine-tuning seeds beside it; the average over tasks is taken per
   (pre-training seed) before the statistics, as GLUE averages per model; claims pair two arms
   on the same pre-training seed (same dev rows, same fine-tuning seeds) and read the 95% t
   interval over pre-training seeds.

Outside a study, :func:`fine_tune_checkpoint` fine-tunes one checkpoint (or its random-init
draw) once on one data-bin through the same recipe run, and can score the final model on other
splits with ``fairseq-validate`` (the transfer diagnosis's train accuracy).

Layout, under the study's runs directory (a run is finished when its ``result.json`` exists;
it is never redone, and one fine-tuned with other settings is refused)::

    finetune/exports/<model>/seed<S>/finetune_args.txt, [encoder.pt]  (arch read off the checkpoint)
    finetune/<arm>/seed<S>/<TASK>/lr<LR>/ft<F>/{train.log,result.json}
    finetune/wall.json                                               the stage's wall time
    finetune/wall.live.json                                          the same while it runs

May import: see :mod:`fairseq_ext_lab` (nothing of :mod:`~fairseq_ext_lab.studies`,
which imports this one).
"""
import contextlib
import dataclasses
import json
import math
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_ext.corpus.downstream import SELECTION_SPLIT  # runs with an lr grid validate on it
from fairseq_ext.reporting.uncertainty import Estimate, mean_over_seeds, paired_over_seeds
from fairseq_ext.training.fairseq_bin import python_executable
from fairseq_ext.training.output_files import write_text
from fairseq_ext_lab import recipe_runs
from fairseq_ext_lab.evaluation.fairseq_validate import validate_command
from fairseq_ext_lab.reporting.log_records import parse_json_record
from fairseq_ext_lab.run_store import RESULT, write_result

#: The suite's summary, written by ``scripts/prepare_downstream.sh``.
SUITE_JSON = "downstream.json"
#: The stage's directory under the study's runs directory (its runs finish with
#: :data:`~fairseq_ext_lab.run_store.RESULT`).
FINETUNE_DIR = "finetune"
#: The stage's wall time while it runs (:func:`recipe_runs.wall_heartbeat`), until booked.
LIVE_WALL = "wall.live.json"
#: The fine-tuning learning rates every arm chooses from (3x steps; the models are small).
FINETUNE_LRS = ("3e-4", "1e-3", "3e-3")
FINETUNE_SEEDS = (1, 2, 3)
#: Where a study's fine-tuning runs (the study's device) and the recipe settings that put them
#: there: fp32 on both (the recipes' default; fine-tuning accuracy, not speed, is measured, so
#: the GPU study's fp16 stays with pre-training, whose wall clock it reads).
DEVICE_ENV = {"cpu": {"CPU": "1"}, "cuda": {"CPU": "0"}}
#: Fine-tuning runs at a time on one GPU: accuracy does not depend on sharing the device, and
#: a small model's run leaves most of it idle (its Python start-up and data loading dominate).
GPU_WORKERS = 4


@dataclasses.dataclass(frozen=True)
class FinetuneArm:
    """One row of the fine-tuning table: the checkpoints of study model ``model``, fine-tuned
    with the protocol's recipe and ``env`` on top (e.g. ``{"R_BIDIR": "0"}``).

    ``random_init``: the control that says what pre-training buys: the same architecture at
    random initialisation (:mod:`fairseq_ext.export.random_init`, the model's own init), a
    new draw for every (pre-training seed, fine-tuning seed), fine-tuned exactly as ``model``'s
    checkpoints are (same recipe, flags, schedule and lr grid)."""

    name: str
    model: str
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    random_init: bool = False


def random_init_arm(model: str, env: Optional[Dict[str, str]] = None) -> FinetuneArm:
    """``model``'s random-init control arm, named ``<model> (random init)``."""
    return FinetuneArm(f"{model} {RANDOM_INIT_SUFFIX}", model, dict(env or {}), random_init=True)


#: The name suffix of a random-init arm (:func:`random_init_arm`).
RANDOM_INIT_SUFFIX = "(random init)"


def random_init_draw(seed: int, ft_seed: int) -> int:
    """The random-init draw of a run: one per (pre-training seed, fine-tuning seed), none of
    them a pre-training seed's own (``1000 * seed + ft_seed``)."""
    return 1000 * seed + ft_seed


@dataclasses.dataclass(frozen=True)
class FinetuneProtocol:
    """How a study fine-tunes:

    * the family's recipe and the environment variable that takes the checkpoint;
    * whether the fine-tuning arch and shape are read off the checkpoint
      (``scripts/export_encoder.py --print-finetune-args``), and which pre-training recipes'
      checkpoints are exported first (3ML's: the decoder dropped, the encoder as fairseq's
      ``roberta``; a RoBERTa checkpoint is fine-tuned as it is);
    * the recipe settings of every run, and which of the study model's settings carry over (its
      environment keys, its pre-training flags when they are model flags the recipe needs);
    * the schedule: ``epochs`` of batch ``batch``, the total updates and a ``warmup_share`` of
      them passed to the recipe as ``TOTAL_UPDATES`` / ``WARMUP_UPDATES``;
    * the arms, the lr grid, the fine-tuning seeds, and where the schedule comes from."""

    recipe: str
    checkpoint_env: str
    arms: Tuple[FinetuneArm, ...]
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    arch_from_checkpoint: bool = False
    export_recipes: Tuple[str, ...] = ()
    model_env_keys: Tuple[str, ...] = ()
    model_args: bool = False
    extra_args: Tuple[str, ...] = ()
    batch: int = 16
    epochs: int = 2
    warmup_share: float = 0.06
    lrs: Tuple[str, ...] = FINETUNE_LRS
    seeds: Tuple[int, ...] = FINETUNE_SEEDS
    schedule: str = ""
    #: score every run on the selection split too, even with one learning rate (the transfer
    #: curve judges its levers there, never on dev)
    score_selection: bool = False

    def arm(self, name: str) -> FinetuneArm:
        return next(arm for arm in self.arms if arm.name == name)


def not_positive(rates: Sequence[str]) -> List[str]:
    """The learning rates of ``rates`` that are not positive numbers."""
    def positive(rate: str) -> bool:
        try:
            return float(rate) > 0
        except ValueError:
            return False

    return [rate for rate in rates if not positive(rate)]


def baseline_estimate(entry: dict) -> Estimate:
    """A suite baseline's dev accuracy (%) ± its SE over dev rows, as downstream.json records
    it (a fraction, or a percentage, with ``se`` in the same unit)."""
    value, error = float(entry["accuracy"]), float(entry.get("se", math.nan))
    scale = 100.0 if value <= 1.0 else 1.0
    return Estimate(value * scale, error * scale)


def check_protocol(protocol: FinetuneProtocol, model_names: Sequence[str]) -> List[str]:
    """What is wrong with a protocol, as lines for the study's one error."""
    problems = []
    names = [arm.name for arm in protocol.arms]
    if len(set(names)) != len(names):
        problems.append(f"fine-tuning arm names repeat: {names}")
    for arm in protocol.arms:
        if arm.model not in model_names:
            problems.append(f"fine-tuning arm {arm.name!r} names model {arm.model!r}, not one of "
                            f"{list(model_names)}")
    if len(protocol.seeds) < 1 or len(set(protocol.seeds)) != len(protocol.seeds):
        problems.append(f"fine-tuning seeds must be distinct, at least one: {protocol.seeds}")
    for lr in not_positive(protocol.lrs):
        problems.append(f"fine-tuning lr {lr!r} is not a positive learning rate")
    if protocol.batch < 1 or protocol.epochs < 1:
        problems.append(f"fine-tuning batch {protocol.batch} and epochs {protocol.epochs} must "
                        "be positive")
    if not 0 <= protocol.warmup_share < 1:
        problems.append(f"warmup_share {protocol.warmup_share} must be in [0, 1)")
    return problems


# ----------------------------------------------------------------------------------------------
# The suite

@dataclasses.dataclass(frozen=True)
class SuiteTask:
    """One task of the suite as the study needs it: its data-bin, training and selection sizes
    and baselines."""

    name: str
    data: Path
    train_examples: int
    selection_examples: int
    baselines: Dict[str, dict]


def load_suite(suite_dir: Path,
               only: Optional[Sequence[str]] = None) -> Tuple[List[SuiteTask], dict]:
    """The tasks of a suite built by ``scripts/prepare_downstream.sh`` (its ``downstream.json``;
    ``only``: those tasks) and the summary itself; a one-line error naming the command when it
    is not one."""
    path = suite_dir / SUITE_JSON
    if not path.is_file():
        raise SystemExit(f"error: {suite_dir} has no {SUITE_JSON}: build the suite with "
                         f"scripts/prepare_downstream.sh DATA_BIN {suite_dir}")
    summary = json.loads(path.read_text())
    entries = summary["tasks"]
    tasks = []
    for entry in (entries.values() if isinstance(entries, dict) else entries):
        name = entry["name"]
        if only is not None and name not in only:
            continue
        data = suite_dir / f"{name}-bin"
        if not (data / "input0" / "train.idx").is_file():
            raise SystemExit(f"error: {data} is not a finished data-bin: rebuild the suite "
                             f"with scripts/prepare_downstream.sh DATA_BIN {suite_dir}")
        sizes = entry["sizes"]
        if "selection" not in sizes or not (data / "input0" / f"{SELECTION_SPLIT}.idx").is_file():
            raise SystemExit(f"error: {data} has no selection split ({SELECTION_SPLIT}): it was "
                             "built by an older scripts/prepare_downstream.sh; rebuild the suite "
                             f"with scripts/prepare_downstream.sh DATA_BIN {suite_dir} --force")
        tasks.append(SuiteTask(name, data, int(sizes["train"]), int(sizes["selection"]),
                               entry.get("baselines", {})))
    from fairseq_ext.corpus.downstream import TASKS

    order = {name: index for index, name in enumerate(TASKS)}  # the builder's, as built or not
    tasks.sort(key=lambda task: (order.get(task.name, len(order)), task.name))
    if not tasks:
        raise SystemExit(f"error: {path} lists no tasks"
                         + ("" if only is None else f" of {', '.join(only)}"))
    return tasks, summary


def suite_fingerprint(summary: dict) -> str:
    """What a finished run's score depends on in the suite: its settings and sizes."""
    from hashlib import sha256

    from fairseq_ext.corpus.downstream import TASKS

    entries = summary["tasks"]
    entries = entries.values() if isinstance(entries, dict) else entries
    # in the builder's task order, whatever order the tasks were built in
    order = {name: index for index, name in enumerate(TASKS)}
    entries = sorted(entries, key=lambda t: (order.get(t["name"], len(order)), t["name"]))
    key = {"settings": summary.get("settings"),
           "tasks": [(t["name"], t["sizes"]["train"], t["sizes"]["dev"], t["sizes"]["selection"])
                     for t in entries]}
    return sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stage_wall_seconds(runs_dir: Path) -> float:
    """The fine-tuning stage's wall time over earlier invocations on ``runs_dir`` (0 without
    one), a killed or failed one's included (:func:`recipe_runs.spent_seconds`)."""
    path = runs_dir / FINETUNE_DIR / "wall.json"
    booked = float(json.loads(path.read_text())["wall_seconds"]) if path.is_file() else 0.0
    return recipe_runs.spent_seconds(runs_dir / FINETUNE_DIR / LIVE_WALL, booked)


# ----------------------------------------------------------------------------------------------
# Plan

@dataclasses.dataclass(frozen=True)
class FinetuneRun:
    """One fine-tuning run: an arm's checkpoint of pre-training seed ``seed`` on ``task`` at
    ``lr`` with fine-tuning seed ``ft_seed``; ``select``: also scored on the selection split."""

    arm: FinetuneArm
    seed: int
    task: SuiteTask
    lr: str
    ft_seed: int
    select: bool = True

    @property
    def train_examples(self) -> int:
        return self.task.train_examples

    def directory(self, runs_dir: Path) -> Path:
        return (runs_dir / FINETUNE_DIR / safe(self.arm.name) / f"seed{self.seed}"
                / self.task.name / f"lr{self.lr}" / f"ft{self.ft_seed}")


def safe(name: str) -> str:
    """A directory name for a model or arm name (``3ml-self-40%``, ``msk_bi r=0``)."""
    return name.replace("%", "pct").replace(" ", "_").replace("=", "")


def schedule(protocol: FinetuneProtocol, train_examples: int) -> Tuple[int, int]:
    """(total updates, warmup updates): ``epochs`` passes over the training examples in batches
    of ``batch`` (the last one partial), and ``warmup_share`` of them, rounded."""
    total = protocol.epochs * math.ceil(train_examples / protocol.batch)
    return total, int(total * protocol.warmup_share + 0.5)


# ----------------------------------------------------------------------------------------------
# Run

def prepare_checkpoint(checkpoint: Path, out_dir: Path,
                       export: bool) -> Tuple[Path, List[str]]:
    """The checkpoint to fine-tune and its fine-tuning flags (``--arch ... --max-positions N``,
    as ``scripts/export_encoder.py --print-finetune-args`` prints them, kept in
    ``out_dir/finetune_args.txt``); ``export``: first export the encoder into
    ``out_dir/encoder.pt`` (a 3ML checkpoint). Done once: a later call reads it back."""
    source = out_dir / "encoder.pt" if export else checkpoint
    args_file = out_dir / "finetune_args.txt"
    if not args_file.is_file():
        if not checkpoint.is_file():
            raise missing_checkpoint(checkpoint)
        out_dir.mkdir(parents=True, exist_ok=True)
        script = str(recipe_runs.REPO_ROOT / "scripts" / "export_encoder.py")
        env = recipe_runs.recipe_environment(Path("."), recipe_runs.ONE_THREAD)
        if export:
            source.unlink(missing_ok=True)  # a half-done export: the args file is written last
            done = subprocess.run([python_executable(), script, str(checkpoint), str(source)],
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"error: exporting {checkpoint} failed: {done.stderr[-2000:]}")
        done = subprocess.run([python_executable(), script, "--print-finetune-args", str(source)],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"error: reading {source}'s arch failed: {done.stderr[-2000:]}")
        write_text(args_file, done.stdout.strip().splitlines()[-1] + "\n", force=True)
    return source, shlex.split(args_file.read_text())


def random_init_checkpoint(source: Path, out_dir: Path, draw: int) -> Path:
    """``source``'s architecture at random initialisation, draw ``draw``
    (``python -m fairseq_ext.export.random_init``), written once into
    ``out_dir/random-init/draw<D>.pt`` and read back after."""
    out = out_dir / "random-init" / f"draw{draw}.pt"
    with _DRAW_LOCKS_GUARD:  # runs of one draw (the lr grid's) ask for it from several threads
        lock = _DRAW_LOCKS.setdefault(out, threading.Lock())
    with lock:
        if not out.is_file():
            _write_random_init(source, out, draw)
    return out


_DRAW_LOCKS: Dict[Path, threading.Lock] = {}
_DRAW_LOCKS_GUARD = threading.Lock()


def _write_random_init(source: Path, out: Path, draw: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    env = recipe_runs.recipe_environment(Path("."), recipe_runs.ONE_THREAD)
    done = subprocess.run([python_executable(), "-m", "fairseq_ext.export.random_init",
                           str(source), str(out), "--seed", str(draw)],
                          env=env, cwd=recipe_runs.REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the random-init control of {source} failed: "
                         f"{done.stderr[-2000:]}")


def recipe_inputs(protocol: FinetuneProtocol, run: FinetuneRun, model, checkpoint: Path,
                  export_args: Sequence[str] = (), device: str = "cpu",
                  save_dir: Optional[Path] = None) -> Tuple[Dict[str, str], List[str]]:
    """The recipe's environment and extra flags for one run (``model``: the study's
    :class:`~fairseq_ext_lab.studies.StudyModel`) on ``device`` (:data:`DEVICE_ENV`);
    ``save_dir``: where the run keeps its final model (the recipe's best checkpoint of its one
    validation), else it saves nothing."""
    total, warmup = schedule(protocol, run.train_examples)
    env = {**protocol.env,
           **{key: model.env[key] for key in protocol.model_env_keys if key in model.env},
           **run.arm.env,
           "TASK": run.task.name, "DATA": str(run.task.data),
           "VALID_SUBSET": f"valid,{SELECTION_SPLIT}" if run.select else "valid",
           protocol.checkpoint_env: str(checkpoint), "LR": run.lr, "SEED": str(run.ft_seed),
           "BATCH_SIZE": str(protocol.batch), "BATCH": str(protocol.batch),
           "MAX_SENTENCES": str(protocol.batch), "EPOCHS": str(protocol.epochs),
           "TOTAL_UPDATES": str(total), "WARMUP_UPDATES": str(warmup),
           "EVAL_INTERVAL_UPDATES": str(total), **DEVICE_ENV[device], "NUM_WORKERS": "0",
           "LOG_INTERVAL": str(max(1, total // 4)), "LOG_FILE": "", **recipe_runs.ONE_THREAD}
    args = list(protocol.extra_args) + (list(model.args) if protocol.model_args else [])
    # --arch A [shape flags] --max-positions N, as export_encoder.py prints, for the <s> head;
    # a mean-pooling head (the suite tasks' default) needs other flags (roberta_pooled), which
    # the recipe reads off the checkpoint itself
    if export_args and env.get("POOLING") == "first":
        words = list(export_args)
        env["ARCH"] = words[words.index("--arch") + 1]
        env["MAX_POSITIONS"] = words[words.index("--max-positions") + 1]
        args += [w for i, w in enumerate(words)
                 if w not in ("--arch", "--max-positions")
                 and (i == 0 or words[i - 1] not in ("--arch", "--max-positions"))]
    # only the last validation is read (final_accuracy): the epochs before it skip theirs
    # (fairseq re-seeds every update, so the training path is the same either way)
    if save_dir is None:
        args.append("--no-save")
    else:
        env["SAVE_DIR"] = str(save_dir)
        env["NO_SAVE"] = "0"  # a recipe that can skip saving (the bidirectional one) keeps it
    args += ["--log-format", "json", "--no-progress-bar", "--validate-interval", str(protocol.epochs)]
    return env, args


def final_accuracy(lines: Sequence[str], subset: str = "valid") -> Optional[float]:
    """The accuracy of the last validation fairseq logged (``--log-format json``), in %."""
    score = None
    for line in lines:
        record = parse_json_record(line)
        if record and f"{subset}_accuracy" in record and f"{subset}_loss" in record:
            score = float(record[f"{subset}_accuracy"])
    return score


def run_settings(protocol: FinetuneProtocol, run: FinetuneRun, fingerprint: str,
                 device: str = "cpu") -> dict:
    """What a finished run must have been run with to be read back (the device where it is
    not the CPU: the runs of every study before the GPU one have no such key)."""
    total, warmup = schedule(protocol, run.train_examples)
    settings = {"recipe": protocol.recipe, "arm_env": run.arm.env, "lr": run.lr,
                "ft_seed": run.ft_seed, "seed": run.seed, "task": run.task.name,
                "select": run.select, "total_updates": total, "warmup_updates": warmup,
                "batch": protocol.batch, "suite": fingerprint}
    if run.arm.random_init:
        settings["random_init_draw"] = random_init_draw(run.seed, run.ft_seed)
    if device != "cpu":
        settings["device"] = device
    return settings


def load_run(path: Path, settings: dict) -> Optional[dict]:
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if result.get("settings") != settings:
        raise SystemExit(f"error: {path} holds a fine-tuning run with other settings "
                         f"({result.get('settings')}); this plan has {settings}: choose another "
                         "--runs-dir, or remove that run to redo it (finished runs are never "
                         "replaced)")
    return result


def missing_checkpoint(checkpoint: Path) -> SystemExit:
    """The error for a run whose pre-trained checkpoint is gone (a GPU call leaves checkpoints
    on the machine and brings the runs' results back: a later call reads a finished
    pre-training run back without its checkpoint)."""
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None
    return SystemExit(
        f"error: {checkpoint} is missing, and a fine-tuning run still needs it: the "
        "pre-training run finished elsewhere (a GPU call keeps no checkpoints) or its checkpoint "
        "was removed; remove that run's result.json"
        + (f" ({run_dir / RESULT})" if run_dir else "")
        + " to pre-train it again, or fine-tune it where its checkpoint is")


def fine_tune(protocol: FinetuneProtocol, run: FinetuneRun, model, checkpoint: Path,
              export_args: Sequence[str], run_dir: Path, settings: dict,
              device: str = "cpu", score: Sequence[str] = ()) -> dict:
    """One run through the family's recipe on ``device``; writes and returns its
    ``result.json``. ``score``: other splits of the task's data-bin (``train``) the final model
    is scored on (:func:`validate_accuracy`; the model kept in ``run_dir/checkpoints``), as
    ``<split>_accuracy`` (%) and ``<split>_rows``."""
    if not checkpoint.is_file():
        raise missing_checkpoint(checkpoint)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished run (no result.json): redone
    run_dir.mkdir(parents=True)
    save_dir = run_dir / "checkpoints" if score else None
    env, args = recipe_inputs(protocol, run, model, checkpoint, export_args, device, save_dir)
    full_env = recipe_runs.recipe_environment(Path(env["DATA"]), env)
    start = time.time()
    command = ["bash", str(recipe_runs.REPO_ROOT / protocol.recipe), *args]
    lines = list(recipe_runs.stream(command, full_env, run_dir / "train.log"))
    seconds = time.time() - start
    accuracy = final_accuracy(lines)
    selection = final_accuracy(lines, SELECTION_SPLIT) if run.select else None
    if accuracy is None or (run.select and selection is None):
        raise SystemExit(f"error: {run_dir / 'train.log'} logged no dev"
                         f"{' or selection' if run.select else ''} accuracy")
    result = {"accuracy": accuracy, "selection_accuracy": selection, "seconds": seconds,
              "settings": settings}
    for split in score:
        result[f"{split}_accuracy"], result[f"{split}_rows"] = validate_accuracy(
            save_dir / FINAL_MODEL, run.task.data, split, run_dir / f"validate-{split}.log", device)
    write_result(run_dir, result)
    return result


#: The model a run kept (``score``): the recipe keeps the best of its validations, and a run
#: validates once, after its last update (``--validate-interval`` its epochs).
FINAL_MODEL = "checkpoint_best.pt"


def validate_accuracy(checkpoint: Path, data: Path, split: str, log: Path,
                      device: str = "cpu") -> Tuple[float, int]:
    """``(accuracy %, rows)`` of a fine-tuned ``checkpoint`` on ``split`` of its data-bin: stock
    ``fairseq-validate`` with the ``sentence_prediction`` task and criterion it was trained with
    (eval mode; the accuracy fairseq-train logs for dev, rounded to 0.1)."""
    cmd = validate_command(data, checkpoint, "sentence_prediction", split, 64, device == "cpu",
                           "--criterion", "sentence_prediction", "--num-workers", "0",
                           "--no-progress-bar")
    env = recipe_runs.recipe_environment(data, recipe_runs.ONE_THREAD)
    records = [record for record in map(parse_json_record, recipe_runs.stream(cmd, env, log))
               if record and f"{split}_accuracy" in record and f"{split}_bsz" in record]
    if not records:
        raise SystemExit(f"error: {log}: fairseq-validate logged no {split} accuracy")
    # one record over the whole split: its batch size is the split's rows
    return float(records[-1][f"{split}_accuracy"]), int(round(float(records[-1][f"{split}_bsz"])))


def fine_tune_checkpoint(protocol: FinetuneProtocol, checkpoint: Path, data: Path, task: str,
                         seed: int, exports: Path, run_dir: Path,
                         env: Optional[Dict[str, str]] = None, random_init: Optional[int] = None,
                         score: Sequence[str] = (), export: bool = False,
                         device: str = "cpu") -> dict:
    """One checkpoint fine-tuned once on one data-bin, as the stage fine-tunes a run: the
    protocol's recipe, schedule and first learning rate, ``env`` on top (``{"POOLING":
    "first"}``), the recipe's ``TASK`` ``task`` on ``data``, fine-tuning seed ``seed``; with
    ``protocol.arch_from_checkpoint`` the arch read off the checkpoint (:func:`prepare_checkpoint`
    into ``exports``; ``export``: a 3ML checkpoint's encoder first), else the checkpoint as it is,
    its arch and model flags in the protocol's ``env`` and ``extra_args``. ``random_init``: the
    checkpoint's random-init draw of that number (:func:`random_init_checkpoint`, into
    ``exports``) fine-tuned in its place. Returns the run's ``result.json`` (:func:`fine_tune`,
    written into ``run_dir``): dev accuracy (%) and the ``score`` splits'."""
    data = data.resolve()
    if protocol.arch_from_checkpoint:
        source, export_args = prepare_checkpoint(checkpoint, exports, export)
    elif not checkpoint.is_file():
        raise missing_checkpoint(checkpoint)
    else:
        source, export_args = checkpoint, []
    if random_init is not None:
        source = random_init_checkpoint(source, exports, random_init)
    run = checkpoint_run(protocol, data, task, seed, env, random_init is not None)
    settings = run_settings(protocol, run, str(data), device)
    settings.pop("random_init_draw", None)
    if random_init is not None:
        settings["random_init_draw"] = random_init
    return fine_tune(protocol, run, None, source, export_args, run_dir, settings, device, score)


def checkpoint_run(protocol: FinetuneProtocol, data: Path, task: str, seed: int,
                   env: Optional[Dict[str, str]] = None,
                   random_init: bool = False) -> FinetuneRun:
    """The run :func:`fine_tune_checkpoint` fine-tunes: an arm named ``task`` with ``env``, at
    the protocol's first rate, on ``data``'s whole ``train`` split, scored on dev alone."""
    arm = FinetuneArm(task, task, dict(env or {}), random_init=random_init)
    return FinetuneRun(arm, 1, SuiteTask(task, data, split_rows(data, "train"), 0, {}),
                       protocol.lrs[0], seed, select=False)


def split_rows(data: Path, split: str) -> int:
    """The rows of ``split`` of a ``sentence_prediction`` data-bin (``input0/<split>``)."""
    from fairseq.data import data_utils

    found = data_utils.load_indexed_dataset(str(data / "input0" / split), None)
    if found is None:
        raise SystemExit(f"error: {data / 'input0' / split}.bin: not found; {data} must be a "
                         "sentence_prediction data-bin (input0/, label/)")
    return len(found)


def run_stage(protocol: FinetuneProtocol, models: Dict[str, object], seeds: Sequence[int],
              checkpoints: Dict[Tuple[str, int], Path], suite_dir: Path, runs_dir: Path,
              workers: int = recipe_runs.WORKERS,
              printer: Callable[[str], None] = print,
              only: Optional[Sequence[str]] = None, train: bool = True,
              device: str = "cpu") -> dict:
    """The whole stage (module docstring): exports, learning rates, runs, in ``workers``
    parallel runs of one torch thread each, on ``device`` (:data:`DEVICE_ENV`; the exports and
    random-init draws are made on the CPU); finished runs read back. ``checkpoints``: the
    last checkpoint of each (model, pre-training seed). Returns the stage's raw results:
    ``{"lr": {arm: {task: {seed: {"lr", "selection", "dev"}}}}, "accuracy": {arm: {task: {seed:
    [dev acc per ft seed at the chosen lr]}}}, "selection_accuracy": (the same on the selection
    split; empty lists when it was not scored), "wall_seconds", "runs_now"}``. ``only``: those
    tasks of the suite. A protocol with one learning rate fine-tunes at it, scored on dev
    alone. ``train=False``
    (``--report-only``): finished runs are read back, nothing is exported or trained, and a run
    that is not finished is an error naming it."""
    tasks, summary = load_suite(suite_dir, only)
    fingerprint = suite_fingerprint(summary)
    start = time.time()
    stage_dir = runs_dir / FINETUNE_DIR
    stage_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    ran = [0]

    earlier = stage_wall_seconds(runs_dir)
    live = stage_dir / LIVE_WALL
    # the stage's wall time stays on disk while it runs, should this invocation be killed
    with (recipe_runs.wall_heartbeat(live, earlier) if train else contextlib.nullcontext()):
        # 0. what each (model, seed) fine-tunes: its checkpoint, or its exported encoder
        needed = sorted({(arm.model, seed) for arm in protocol.arms for seed in seeds})
        sources: Dict[Tuple[str, int], Tuple[Path, List[str]]] = {}
        if protocol.arch_from_checkpoint and train:  # (--report-only exports nothing)
            def prepare(key):
                out = stage_dir / "exports" / safe(key[0]) / f"seed{key[1]}"
                export = models[key[0]].recipe in protocol.export_recipes
                sources[key] = prepare_checkpoint(checkpoints[key], out, export)

            recipe_runs.in_parallel(prepare, needed, workers)
        else:
            sources = {key: (checkpoints[key], []) for key in needed}

        def source_of(run: FinetuneRun) -> Tuple[Path, List[str]]:
            """What a run fine-tunes: the (exported) checkpoint, or its random-init draw."""
            checkpoint, export_args = sources[(run.arm.model, run.seed)]
            if run.arm.random_init:
                out = stage_dir / "exports" / safe(run.arm.model) / f"seed{run.seed}"
                checkpoint = random_init_checkpoint(checkpoint, out,
                                                    random_init_draw(run.seed, run.ft_seed))
            return checkpoint, export_args

        def one(run: FinetuneRun) -> Tuple[FinetuneRun, dict]:
            settings = run_settings(protocol, run, fingerprint, device)
            run_dir = run.directory(runs_dir)
            result = load_run(run_dir / RESULT, settings)
            if result is None and not train:
                raise SystemExit(f"error: --report-only: the fine-tuning run {run_dir} is not "
                                 f"finished (no {RESULT}); run the study without --report-only")
            if result is None:
                checkpoint, export_args = source_of(run)
                result = fine_tune(protocol, run, models[run.arm.model], checkpoint, export_args,
                                   run_dir, settings, device)
                with lock:
                    ran[0] += 1
                recipe_runs.say(f"== fine-tune {run.arm.name} seed{run.seed} {run.task.name} "
                                f"lr {run.lr} ft{run.ft_seed}: dev {result['accuracy']:.1f}%"
                                + (f", selection {result['selection_accuracy']:.1f}%"
                                   if run.select else "") + f" in {result['seconds']:.0f} s")
            return run, result

        # 1. every (arm, seed, task, lr, fine-tuning seed), scored on dev and on the selection split
        select = len(protocol.lrs) > 1 or protocol.score_selection
        runs = [FinetuneRun(arm, seed, task, lr, ft_seed, select=select)
                for arm in protocol.arms for seed in seeds for task in tasks
                for lr in protocol.lrs for ft_seed in protocol.seeds]
        printer(f"== fine-tuning: {len(runs)} runs ({len(protocol.arms)} arms x {len(seeds)} "
                f"pre-training seeds x {len(tasks)} tasks x {len(protocol.lrs)} learning rates x "
                f"{len(protocol.seeds)} fine-tuning seeds)"
                + (f"; each seed's rate chosen on the tasks' {SELECTION_SPLIT} split"
                   if len(protocol.lrs) > 1 else
                   f"; scored on the tasks' {SELECTION_SPLIT} split too" if select else ""))
        scores: Dict[Tuple[str, str, int, str], Dict[str, List[float]]] = {}
        seconds = 0.0
        for run, result in recipe_runs.in_parallel(one, runs, workers):
            entry = scores.setdefault((run.arm.name, run.task.name, run.seed, run.lr),
                                      {"dev": [], "selection": []})
            entry["dev"].append(result["accuracy"])
            if select:
                entry["selection"].append(result["selection_accuracy"])
            seconds += result["seconds"]

    # 2. each (arm, task, pre-training seed)'s rate: the best mean selection accuracy
    chosen: Dict[str, Dict[str, Dict[int, dict]]] = {
        arm.name: {task.name: {} for task in tasks} for arm in protocol.arms}
    accuracy: Dict[str, Dict[str, Dict[int, List[float]]]] = {
        arm.name: {task.name: {} for task in tasks} for arm in protocol.arms}
    selection: Dict[str, Dict[str, Dict[int, List[float]]]] = {
        arm.name: {task.name: {} for task in tasks} for arm in protocol.arms}
    for arm in protocol.arms:
        for task in tasks:
            for seed in seeds:
                entry = choose_lr(protocol.lrs, {lr: scores[(arm.name, task.name, seed, lr)]
                                                 for lr in protocol.lrs})
                chosen[arm.name][task.name][seed] = entry
                accuracy[arm.name][task.name][seed] = list(
                    scores[(arm.name, task.name, seed, entry["lr"])]["dev"])
                selection[arm.name][task.name][seed] = list(
                    scores[(arm.name, task.name, seed, entry["lr"])]["selection"])

    this_time = time.time() - start
    wall = earlier + (this_time if ran[0] else 0.0)
    write_text(stage_dir / "wall.json", json.dumps({"wall_seconds": wall}), force=True)
    live.unlink(missing_ok=True)  # booked
    return {"lr": chosen, "accuracy": accuracy, "selection_accuracy": selection,
            "tasks": [task.name for task in tasks],
            "baselines": {task.name: task.baselines for task in tasks},
            "wall_seconds": wall, "runs_now": ran[0], "run_seconds": seconds,
            "suite": {"dir": str(suite_dir), "fingerprint": fingerprint,
                      "settings": summary.get("settings")}}


def choose_lr(lrs: Sequence[str], scores: Dict[str, Dict[str, List[float]]]) -> dict:
    """One (arm, task, pre-training seed)'s learning rate from its runs' ``scores`` ({lr:
    {"selection": [...], "dev": [...]}} over fine-tuning seeds): the best mean selection
    accuracy (ties: the first in ``lrs``; one rate: that one). Returns ``{"lr", "selection":
    {lr: mean}, "dev": {lr: mean}}``: every rate's means are kept (study.json), but only the
    selection means choose."""
    selection = {lr: float(np.mean(scores[lr]["selection"])) for lr in lrs
                 if scores[lr]["selection"]}
    best = lrs[0] if len(lrs) == 1 else max(lrs, key=lambda lr: (selection[lr], -lrs.index(lr)))
    return {"lr": best, "selection": selection,
            "dev": {lr: float(np.mean(scores[lr]["dev"])) for lr in lrs}}


def chosen_lrs(raw_lr: dict) -> Dict[str, str]:
    """{pre-training seed: lr} of one (arm, task)'s entry of the stage's ``lr``; an entry of
    the one-rate format (one ``{"lr", "scores"}`` for every seed) as ``{"all": lr}``."""
    if "lr" in raw_lr:
        return {"all": raw_lr["lr"]}
    return {str(seed): entry["lr"] for seed, entry in raw_lr.items()}


# ----------------------------------------------------------------------------------------------
# Figures

def seed_means(per_seed: Dict[int, Sequence[float]]) -> Dict[int, float]:
    """Each pre-training seed's figure: the mean over its fine-tuning seeds."""
    return {seed: float(np.mean(values)) for seed, values in per_seed.items()}


def within_seed_standard_error(per_seed: Dict[int, Sequence[float]]) -> float:
    """The mean over pre-training seeds of the standard error over fine-tuning seeds
    (``sd(ddof=1) / sqrt(F)``): the fine-tuning noise alone; NaN with one fine-tuning seed."""
    errors = [float(np.std(values, ddof=1) / math.sqrt(len(values)))
              for values in per_seed.values() if len(values) > 1]
    return float(np.mean(errors)) if errors else math.nan


def arm_task_estimate(per_seed: Dict[int, Sequence[float]]) -> Estimate:
    """One arm on one task: the mean over pre-training seeds of the per-seed means over
    fine-tuning seeds, ± the standard error over pre-training seeds."""
    means = seed_means(per_seed)
    return mean_over_seeds([means[seed] for seed in sorted(means)])


def average_per_seed(per_task: Dict[str, Dict[int, Sequence[float]]]) -> Dict[int, float]:
    """Each pre-training seed's average over tasks (GLUE's score) of its per-task means."""
    seeds = sorted(next(iter(per_task.values())))
    return {seed: float(np.mean([seed_means(per_seed)[seed] for per_seed in per_task.values()]))
            for seed in seeds}


def arm_average_estimate(per_task: Dict[str, Dict[int, Sequence[float]]]) -> Estimate:
    averages = average_per_seed(per_task)
    return mean_over_seeds([averages[seed] for seed in sorted(averages)])


def paired_average_difference(per_task_a: Dict[str, Dict[int, Sequence[float]]],
                              per_task_b: Dict[str, Dict[int, Sequence[float]]],
                              task: Optional[str] = None) -> Estimate:
    """``a - b`` of the task average (or of one ``task``), paired on the pre-training seed,
    ± the standard error over pre-training seeds."""
    if task is None:
        a, b = average_per_seed(per_task_a), average_per_seed(per_task_b)
    else:
        a, b = seed_means(per_task_a[task]), seed_means(per_task_b[task])
    seeds = sorted(a)
    return paired_over_seeds([a[s] for s in seeds], [b[s] for s in seeds])


# ----------------------------------------------------------------------------------------------
# The demo's table

#: The small-scale fine-tuning protocol the levers chose on the English corpus's selection
#: split (docs/transfer.md): the mean of the tokens as the head's input (it lifted every
#: pre-trained 2 x 128 point by 8-13 points over ``<s>``), at lr 3e-3 (over 1e-3 it lifted the
#: pre-trained model by 0.7-3.4 points at 3,000 and 12,000 updates and left random init level),
#: for 10 epochs (after GCIDE pre-training, on a held-out 6-class topic task, the pre-trained
#: model was 8.3 points below random init after 5 epochs, 2.4 after 10 and 1.6 after 20;
#: epochs beyond 10 are not measured on the English corpus).
#: ``recipes/3ml/finetune_glue.sh`` defaults the suite's tasks to them (GLUE keeps Table 5's
#: defaults and the ``<s>`` head); the studies' 3ML stage fine-tunes with the chosen head.
CHOSEN_POOLING = "mean"
CHOSEN_LR = "3e-3"
CHOSEN_EPOCHS = 10
#: ``make demo``'s fine-tuning table: RoBERTa-15% and 3ML-self-40% (its exported encoder), each
#: against the same encoder at random initialisation (a new draw per fine-tuning seed: what
#: pre-training buys), on one task of the suite, one the demo can fetch without root
#: (the ``fortunes`` package), with the chosen head and lr (no selection), 3 fine-tuning seeds
#: of each model's one pre-trained checkpoint. The two demo models share their encoder's
#: architecture, so one random-init arm controls both (``demo.py`` checks that their
#: fine-tuning flags agree).
DEMO_TASK = "FortuneTopic"
#: Fewer epochs than :data:`CHOSEN_EPOCHS`: each epoch of the 10-layer 3ML group's encoder
#: takes about 15 s of one thread, and the demo's minutes cannot afford 10 of them for 9 runs
DEMO_EPOCHS = 2
DEMO_RANDOM_INIT = "random init"
_DEMO_HEAD = {"POOLING": CHOSEN_POOLING}
DEMO_PROTOCOL = FinetuneProtocol(
    recipe="recipes/3ml/finetune_glue.sh", checkpoint_env="PRETRAINED",
    arms=(FinetuneArm("roberta-15%", "roberta-15%", dict(_DEMO_HEAD)),
          FinetuneArm("3ml-self-40%", "3ml-self-40%", dict(_DEMO_HEAD)),
          FinetuneArm(DEMO_RANDOM_INIT, "roberta-15%", dict(_DEMO_HEAD), random_init=True)),
    arch_from_checkpoint=True, export_recipes=("recipes/3ml/demo.sh",), lrs=(CHOSEN_LR,),
    epochs=DEMO_EPOCHS,
    schedule="3ML App. B (Table 5) shape: AdamW, weight decay 0.1, warmup 6%, linear decay")
#: The transfer diagnosis's fixed fine-tune (:mod:`fairseq_ext_lab.transfer_diagnosis`): the
#: demo's batch and warm-up share with the lr and epochs the levers chose
#: (:data:`CHOSEN_LR`, :data:`CHOSEN_EPOCHS`), as the transfer curve fine-tunes; each checkpoint
#: takes this schedule through its family's recipe, as its study fine-tunes it
#: (``transfer_diagnosis.FAMILY_FINETUNE``; RoBERTa and 3ML: the demo's). Each of its runs is one
#: :func:`fine_tune_checkpoint`.
DIAGNOSIS_PROTOCOL = dataclasses.replace(DEMO_PROTOCOL, arms=(), epochs=CHOSEN_EPOCHS)


def suite_dir_for(data: Path) -> Path:
    """Where the suite of a pre-training data-bin goes: beside it, ``<data-bin>-downstream``
    (its texts are encoded with that data-bin's sentencepiece model and dictionary)."""
    return data.with_name(f"{data.name}-downstream")


def build_suite(data: Path, suite_dir: Path, tasks: Sequence[str], log: Path) -> None:
    """``scripts/prepare_downstream.sh DATA SUITE TASKS --fetch`` (finished tasks are skipped;
    a missing fortunes or WordNet package is downloaded into ``data/cache``, no root)."""
    command = ["bash", str(recipe_runs.REPO_ROOT / "scripts" / "prepare_downstream.sh"),
               str(data), str(suite_dir), *tasks, "--fetch",
               "--cache-dir", str(recipe_runs.REPO_ROOT / "data" / "cache")]
    for line in recipe_runs.stream(command, recipe_runs.recipe_environment(data, {}), log):
        if not line.startswith(("INFO", "WARNING")) and "Warning" not in line:
            recipe_runs.say(line.rstrip())


def demo_table(raw: dict, task: str = DEMO_TASK,
               protocol: FinetuneProtocol = DEMO_PROTOCOL) -> Tuple[List[dict], str]:
    """The demo's rows and the table's text: each arm's dev accuracy, mean ± SE over its
    fine-tuning seeds; each pre-trained arm minus the random-init arm (``vs_random``) and the
    second pre-trained arm minus the first (``vs_first``), both paired over the fine-tuning
    seeds, with their t verdicts (2 degrees of freedom for 3 seeds) and the 2-SE rule; then the
    suite's majority and bag-of-words baselines."""
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    arms = [arm for arm in protocol.arms if arm.name in raw["accuracy"]]
    names = [arm.name for arm in arms]
    pretrained = [arm.name for arm in arms if not arm.random_init]
    random_name = next((arm.name for arm in arms if arm.random_init), None)
    per_seed = {name: [value for seed in sorted(raw["accuracy"][name][task])
                       for value in raw["accuracy"][name][task][seed]] for name in names}
    rows = []
    for name in names:
        estimate = mean_over_seeds(per_seed[name])
        row = {"name": name, "accuracy": estimate.value, "accuracy_se": estimate.standard_error,
               "accuracy_dof": estimate.degrees_of_freedom, "per_seed": per_seed[name],
               "lr": sorted(set(chosen_lrs(raw["lr"][name][task]).values()))[0],
               "random_init": name == random_name}
        pairs = [("vs_random", random_name)] if name in pretrained and random_name else []
        if pretrained and name in pretrained[1:]:
            pairs.append(("vs_first", pretrained[0]))
        for key, other in pairs:
            difference = paired_over_seeds(per_seed[name], per_seed[other])
            row.update({key: difference.value, f"{key}_se": difference.standard_error,
                        f"{key}_dof": difference.degrees_of_freedom,
                        f"{key}_beyond_2se": bool(abs(difference.value)
                                                  > 2 * difference.standard_error),
                        f"{key}_resolved": difference.resolved()})
        rows.append(row)
    baselines = []
    for key, label in (("majority", "majority class (train)"),
                       ("bow_logreg", "bag of words, logistic regression")):
        entry = raw["baselines"][task].get(key)
        if entry is not None:
            estimate = baseline_estimate(entry)
            baselines.append({"name": label, "accuracy": estimate.value,
                              "accuracy_se": estimate.standard_error})

    def shown(value, error, signed=False, row=None, key=None):
        if value is None or not math.isfinite(value):
            return "-"
        sign = "+" if signed else ""
        mark = ""
        if row is not None and row.get(f"{key}_resolved"):
            mark = " **"
        elif row is not None and row.get(f"{key}_beyond_2se"):
            mark = " *"
        return f"{value:{sign}.2f} ± {error:.2f}{mark}"

    table = [[row["name"], shown(row["accuracy"], row["accuracy_se"]),
              shown(row.get("vs_random"), row.get("vs_random_se"), True, row, "vs_random"),
              shown(row.get("vs_first"), row.get("vs_first_se"), True, row, "vs_first")]
             for row in rows]
    table += [[row["name"], shown(row["accuracy"], row["accuracy_se"]), "-", "-"]
              for row in baselines]
    seeds = len(per_seed[names[0]])
    lines = [
        f"fine-tuning on {task} (scripts/prepare_downstream.sh; docs/downstream.md): dev "
        f"accuracy %, mean ± SE over {seeds} fine-tuning seeds of each pre-trained model (its "
        f"pre-training noise is not in the error); lr {rows[0]['lr']} fixed, {protocol.epochs} "
        f"epochs of batch {protocol.batch}, the head on "
        f"{'the mean of the tokens' if arms[0].env.get('POOLING') == 'mean' else '<s>'}; "
        f"'{random_name}': the same encoder with fresh "
        "weights (a new draw per seed); the baselines ± SE over dev rows",
        ascii_table(["model", "dev accuracy", f"vs {random_name}, paired",
                     f"vs {pretrained[0] if pretrained else '-'}, paired"], table),
        f"paired over the {seeds} seeds: * beyond 2 SE; ** beyond the 95% t interval "
        f"({seeds - 1} degrees of freedom)."]
    if random_name is not None:
        helped = [row["name"] for row in rows if row.get("vs_random_beyond_2se")
                  and row["vs_random"] > 0]
        hurt = [row["name"] for row in rows if row.get("vs_random_beyond_2se")
                and row["vs_random"] < 0]
        verdict = []
        if helped:
            verdict.append(f"pre-training helps {', '.join(helped)} (beyond 2 SE)")
        if hurt:
            verdict.append(f"pre-training HURTS {', '.join(hurt)}: the pre-trained model "
                           f"fine-tunes worse than its {random_name} control (docs/transfer.md)")
        rest = [name for name in pretrained if name not in helped + hurt]
        if rest:
            verdict.append(f"not told apart from {random_name}: {', '.join(rest)}")
        lines.append("pre-training at this scale: " + "; ".join(verdict) + ".")
    return rows + baselines, "\n".join(lines)
