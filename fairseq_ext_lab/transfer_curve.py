"""What pre-training buys as it goes on: fine-tuned dev accuracy against pre-training updates,
beside the same architecture at random initialisation (``scripts/transfer_curve.py``,
docs/transfer.md).

Every checkpoint given (a run's ``checkpoint_E_U.pt`` files, across runs and corpora) is
fine-tuned on one task of a downstream suite as ``make demo`` fine-tunes (the demo's
protocol, :data:`fairseq_ext_lab.finetuning.DEMO_PROTOCOL`: its recipe and batch, 3
fine-tuning seeds), with the head, lr and epochs of :class:`CurveSettings` (by default the ones
the levers chose), through the fine-tuning stage
(:func:`fairseq_ext_lab.finetuning.run_stage`, finished runs read back), and so is the
random-init control of each architecture among them (a fresh draw per fine-tuning seed). Each
point is the mean over fine-tuning seeds ± its SE, and its difference to its architecture's
random init paired on the seed (the same batches and head draw), marked beyond 2 SE.

A 3ML checkpoint is fine-tuned through its exported encoder, as the demo does. The points'
pre-training updates are read off each checkpoint (``optimizer_history``).

May import: see :mod:`fairseq_ext_lab`.
"""
import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_ext.reporting.uncertainty import mean_over_seeds, paired_over_seeds
from fairseq_ext.training.output_files import write_text
from fairseq_ext_lab import finetuning, recipe_runs

THREE_ML_RECIPE = "recipes/3ml/demo.sh"


@dataclasses.dataclass(frozen=True)
class CurveModel:
    """A checkpoint as the fine-tuning stage sees a model: its name and the recipe its run came
    from (which says whether it is exported first)."""

    name: str
    recipe: str
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    args: Tuple[str, ...] = ()


def checkpoint_facts(path: Path) -> Tuple[int, str, str]:
    """``(pre-training updates, arch, model family)`` of a checkpoint."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_ext.export.checkpoints import load_checkpoint, model_name, plain_config

    state = load_checkpoint(path)
    arch = model_name(plain_config(state["cfg"]).get("model") or {})
    updates = int(((state.get("optimizer_history") or [{}])[-1]).get("num_updates", 0) or 0)
    family = getattr(ARCH_MODEL_REGISTRY.get(arch), "__name__", arch)
    return updates, arch, family


def point_name(label: str, updates: int) -> str:
    return f"{label}@{updates}"


#: The fine-tuning rate the curve uses unless told (:data:`finetuning.CHOSEN_LR`).
CHOSEN_LR = finetuning.CHOSEN_LR


@dataclasses.dataclass(frozen=True)
class CurveSettings:
    """How the points are fine-tuned (the levers of the fine-tuning protocol): ``pooling``
    (the recipe's ``POOLING``; by default the mean of the tokens, the lever that lifted every
    pre-trained point of the English corpus by 8-13 points, docs/transfer.md), ``epochs``, a
    learning-rate grid (more than one rate: chosen per point on the selection split; by
    default :data:`CHOSEN_LR`), the warm-up share (the demo's by default), and the layer-wise
    lr decay (the recipe's ``LAYER_LR_DECAY``; none by default); every arm, random init
    included, fine-tunes the same way."""

    pooling: str = finetuning.CHOSEN_POOLING
    epochs: int = finetuning.CHOSEN_EPOCHS
    lrs: Tuple[str, ...] = (CHOSEN_LR,)
    warmup_share: float = finetuning.DEMO_PROTOCOL.warmup_share
    layer_lr_decay: Optional[float] = None

    def describe(self) -> str:
        rates = "/".join(self.lrs) + (" (chosen on selection)" if len(self.lrs) > 1 else "")
        decay = (f", layer-wise lr decay {self.layer_lr_decay:g}"
                 if self.layer_lr_decay is not None else "")
        return (f"pooling {self.pooling}, lr {rates}, {self.epochs} epochs, warm-up "
                f"{self.warmup_share:.0%}{decay}")

    def recipe_env(self) -> Dict[str, str]:
        """What the fine-tuning recipe is told beyond its defaults."""
        env = {} if self.pooling == "first" else {"POOLING": self.pooling}
        if self.layer_lr_decay is not None:
            env["LAYER_LR_DECAY"] = f"{self.layer_lr_decay:g}"
        return env

    def as_dict(self) -> dict:
        """The settings a curve records (without a decay that was not set, so that curves
        made before the decay existed still merge with those made after)."""
        fields = dataclasses.asdict(self)
        if fields["layer_lr_decay"] is None:
            del fields["layer_lr_decay"]
        return fields


def curve(checkpoints: Sequence[Tuple[str, Path]], suite: Path, runs_dir: Path,
          task: str = finetuning.DEMO_TASK, seeds: Sequence[int] = finetuning.FINETUNE_SEEDS,
          printer=print, settings: CurveSettings = CurveSettings(),
          tasks: Optional[Sequence[str]] = None) -> dict:
    """The curve (module docstring): ``checkpoints`` as ``(label, path)``, a label per
    pre-training run (its points are told apart by their updates), on ``task`` (or each of
    ``tasks``), fine-tuned as ``settings`` say. Each point carries its dev and selection
    accuracy per task and its paired differences to its random init on both splits."""
    tasks = list(tasks or [task])
    models: Dict[str, CurveModel] = {}
    paths: Dict[Tuple[str, int], Path] = {}
    points: List[dict] = []
    controls: Dict[str, str] = {}  # architecture key -> the point whose draws control it
    for label, path in checkpoints:
        updates, arch, family = checkpoint_facts(path)
        name = point_name(label, updates)
        if name in models:
            raise SystemExit(f"error: two checkpoints of {label} at {updates} updates")
        three_ml = family.startswith("ThreeML")
        models[name] = CurveModel(name, THREE_ML_RECIPE if three_ml else "recipes/roberta/demo.sh")
        paths[(name, 1)] = path
        points.append({"label": label, "updates": updates, "name": name, "arch": arch,
                       "checkpoint": str(path)})
    env = settings.recipe_env()
    protocol = dataclasses.replace(
        finetuning.DEMO_PROTOCOL, seeds=tuple(seeds), export_recipes=(THREE_ML_RECIPE,),
        arms=tuple(finetuning.FinetuneArm(name, name, dict(env)) for name in models),
        epochs=settings.epochs, lrs=tuple(settings.lrs), warmup_share=settings.warmup_share,
        score_selection=True)
    # the architecture a point fine-tunes (3ML: its exported encoder's): its fine-tuning flags
    from fairseq_ext_lab.finetuning import prepare_checkpoint, safe

    for point in points:
        out = runs_dir / finetuning.FINETUNE_DIR / "exports" / safe(point["name"]) / "seed1"
        _, flags = prepare_checkpoint(Path(point["checkpoint"]),
                                      out, models[point["name"]].recipe == THREE_ML_RECIPE)
        point["finetune_args"] = " ".join(flags)
        controls.setdefault(point["finetune_args"], point["name"])
    arms = list(protocol.arms) + [finetuning.FinetuneArm(f"random init {index}", name, dict(env),
                                                         random_init=True)
                                  for index, name in enumerate(controls.values(), 1)]
    protocol = dataclasses.replace(protocol, arms=tuple(arms))
    raw = finetuning.run_stage(protocol, models, (1,), paths, suite, runs_dir, printer=printer,
                               only=tasks)
    control_arm = {flags: f"random init {index}"
                   for index, flags in enumerate(controls, 1)}

    def scores(arm: str, on: str, split: str = "accuracy") -> List[float]:
        return list(raw.get(split, {}).get(arm, {}).get(on, {}).get(1, []))

    def figures(mine: List[float], theirs: List[float], prefix: str = "") -> dict:
        if not mine:
            return {}
        estimate, difference = mean_over_seeds(mine), paired_over_seeds(mine, theirs)
        return {f"{prefix}accuracy": estimate.value, f"{prefix}accuracy_se": estimate.standard_error,
                f"{prefix}per_seed": mine, f"{prefix}vs_random": difference.value,
                f"{prefix}vs_random_se": difference.standard_error,
                f"{prefix}beyond_2se": bool(abs(difference.value)
                                            > 2 * difference.standard_error)}

    for point in points:
        random_arm = control_arm[point["finetune_args"]]
        point["random_arm"] = random_arm
        point["tasks"] = {
            name: {**figures(scores(point["name"], name), scores(random_arm, name)),
                   **figures(scores(point["name"], name, "selection_accuracy"),
                             scores(random_arm, name, "selection_accuracy"), "selection_")}
            for name in tasks}
        point.update(point["tasks"][tasks[0]])  # the first task's figures, at the top
    randoms = []
    for flags, arm in control_arm.items():
        entry = {"name": arm, "finetune_args": flags, "tasks": {}}
        for name in tasks:
            entry["tasks"][name] = {}
            for split, prefix in (("accuracy", ""), ("selection_accuracy", "selection_")):
                values = scores(arm, name, split)
                if values:
                    estimate = mean_over_seeds(values)
                    entry["tasks"][name].update({
                        f"{prefix}accuracy": estimate.value,
                        f"{prefix}accuracy_se": estimate.standard_error,
                        f"{prefix}per_seed": values})
        entry.update(entry["tasks"][tasks[0]])
        randoms.append(entry)
    baselines_by_task = {name: {key: finetuning.baseline_estimate(entry).__dict__
                                for key, entry in raw["baselines"][name].items()
                                if key in ("majority", "bow_logreg")} for name in tasks}
    return {"task": tasks[0], "tasks": tasks, "seeds": list(seeds), "lr": "/".join(settings.lrs),
            "epochs": protocol.epochs, "batch": protocol.batch,
            "settings": settings.as_dict(), "points": points,
            "random_init": randoms, "baselines": baselines_by_task[tasks[0]],
            "baselines_by_task": baselines_by_task, "wall_seconds": raw["wall_seconds"]}


def format_curve(result: dict) -> str:
    """One table per task: each point's selection and dev accuracy, each beside its
    architecture's random init (paired on the seed, * beyond 2 SE); the levers are judged on
    the selection split, dev is shown for the record."""
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    def shown(entry, prefix="", key="accuracy", signed=False):
        value, error = entry.get(f"{prefix}{key}"), entry.get(f"{prefix}{key}_se")
        if value is None or not math.isfinite(value):
            return "-"
        text = f"{value:{'+' if signed else ''}.2f} ± {error:.2f}"
        return text + (" *" if key == "vs_random" and entry.get(f"{prefix}beyond_2se") else "")

    settings = result.get("settings") or {}
    how = (CurveSettings(**{**settings, "lrs": tuple(settings["lrs"])}).describe() if settings
           else f"the demo's fine-tuning: lr {result['lr']}, {result['epochs']} epochs")
    blocks = []
    for task in result.get("tasks", [result["task"]]):
        rows = []
        for random_arm in result["random_init"]:
            entry = random_arm.get("tasks", {}).get(task, random_arm)
            rows.append([random_arm["name"], "0", shown(entry, "selection_"), "-", shown(entry),
                         "-"])
        for point in sorted(result["points"], key=lambda p: (p["label"], p["updates"])):
            entry = point.get("tasks", {}).get(task, point)
            rows.append([point["label"], f"{point['updates']:,}", shown(entry, "selection_"),
                         shown(entry, "selection_", "vs_random", True), shown(entry),
                         shown(entry, "", "vs_random", True)])
        baselines = result.get("baselines_by_task", {}).get(task, result["baselines"])
        for key, estimate in baselines.items():
            value = f"{estimate['value']:.2f} ± {estimate['standard_error']:.2f}"
            rows.append([key, "-", "-", "-", value, "-"])
        blocks += [f"{task}: fine-tuned accuracy against pre-training updates ({how}, batch "
                   f"{result['batch']}, seeds {result['seeds']}); ± SE over the seeds; vs random "
                   "init of the same architecture paired on the seed (* beyond 2 SE); "
                   "baselines on dev",
                   ascii_table(["pre-training", "updates", "selection %", "vs random init",
                                "dev %", "vs random init (dev)"], rows)]
    return "\n".join(blocks)


def _named_arms(curve_result: dict) -> Dict[str, dict]:
    named = {point["name"]: point for point in curve_result["points"]}
    named.update({entry["name"]: entry for entry in curve_result["random_init"]})
    return named


def _paired_row(arm: str, task: str, a: dict, b: dict) -> dict:
    """``a - b`` of one task's figures, paired on the fine-tuning seed, selection and dev."""
    row = {"arm": arm, "task": task}
    for prefix in ("selection_", ""):
        if a.get(f"{prefix}per_seed") and b.get(f"{prefix}per_seed"):
            difference = paired_over_seeds(a[f"{prefix}per_seed"], b[f"{prefix}per_seed"])
            row[f"{prefix}difference"] = difference.value
            row[f"{prefix}difference_se"] = difference.standard_error
            row[f"{prefix}beyond_2se"] = bool(abs(difference.value)
                                              > 2 * difference.standard_error)
    return row


def _tasks(curve_result: dict) -> List[str]:
    return list(curve_result.get("tasks", [curve_result["task"]]))


def lever_difference(changed: dict, baseline: dict) -> List[dict]:
    """A fine-tuning lever's effect: ``changed`` minus ``baseline`` (two curves of the same
    checkpoints and fine-tuning seeds, one setting apart) for every point and random init they
    share, on each task they share, paired on the fine-tuning seed, on the selection split (the
    split levers are judged on) and on dev."""
    mine, theirs = _named_arms(changed), _named_arms(baseline)
    return [_paired_row(name, task, mine[name]["tasks"][task], theirs[name]["tasks"][task])
            for name in mine if name in theirs
            for task in _tasks(changed) if task in _tasks(baseline)]


def points_difference(result: dict, first: str, second: str) -> List[dict]:
    """A pre-training lever's effect within one curve: point ``first`` minus point ``second``
    (e.g. two corpora at the same updates), on each task, paired on the fine-tuning seed."""
    named = _named_arms(result)
    for name in (first, second):
        if name not in named:
            raise SystemExit(f"error: the curve has no point {name!r}; it has {sorted(named)}")
    return [_paired_row(f"{first} - {second}", task, named[first]["tasks"][task],
                        named[second]["tasks"][task]) for task in _tasks(result)]


def crossed_seeds(values: Sequence[Sequence[float]]) -> Tuple[float, float]:
    """The mean of ``values[r][s]`` (pre-training run ``r`` by fine-tuning seed ``s``) ± its
    standard error with both seeds random, crossed: ``sqrt(var_r(row means) / R + var_s(column
    means) / S)``. Each variance of means also holds the residual, so the error is a little
    wide (conservative), never narrow; a single run or seed contributes no term of its own."""
    table = [list(row) for row in values]
    runs, seeds = len(table), len(table[0])

    def variance_of_mean(means: List[float]) -> float:
        error = mean_over_seeds(means).standard_error
        return error ** 2 if math.isfinite(error) else 0.0

    rows = [sum(row) / seeds for row in table]
    columns = [sum(row[s] for row in table) / runs for s in range(seeds)]
    return sum(rows) / runs, math.sqrt(variance_of_mean(rows) + variance_of_mean(columns))


def merge_curves(results: Sequence[dict], sources: Sequence[str]) -> dict:
    """Several curves as one, so that :func:`pooled_points` can pool runs fine-tuned in
    different sessions. They must share tasks, settings and fine-tuning seeds. A later curve's
    random init that gave the same accuracies as the first's (the same draws on the same
    suite, fine-tuned the same way) is that one; one that did not (another suite build, CPU
    or fine-tuning path) stays its own control, named after its curve, and that curve's
    points keep being measured against it."""
    first = results[0]
    merged_points: List[dict] = []
    controls = list(first["random_init"])
    for result, source in zip(results, sources):
        for key in ("tasks", "seeds", "settings"):
            if result.get(key) != first.get(key):
                raise SystemExit(f"error: {source} has other {key} ({result.get(key)}) than "
                                 f"{sources[0]} ({first.get(key)}): pool curves of one protocol")
        renamed = {}
        for entry in result["random_init"]:
            same = [c for c in controls if c["finetune_args"] == entry["finetune_args"]
                    and c["tasks"] == entry["tasks"]]
            if same:
                renamed[entry["name"]] = same[0]["name"]
            else:
                own = {**entry, "name": f"{entry['name']} ({Path(source).name})"}
                controls.append(own)
                renamed[entry["name"]] = own["name"]
        names = {point["name"] for point in merged_points}
        for point in result["points"]:
            if point["name"] in names:
                raise SystemExit(f"error: point {point['name']} is in two curves; give the runs "
                                 "distinct labels")
            merged_points.append({**point, "random_arm": renamed[point["random_arm"]]})
    return {**first, "points": merged_points, "random_init": controls}


def pooled_points(result: dict, names: Sequence[str]) -> List[dict]:
    """Points of several pre-training runs of one recipe (its seeds, at the same updates) as
    one: their mean and its difference to their random init on each task, on the selection
    split and on dev, ± the crossed error of :func:`crossed_seeds` (pre-training seeds and
    fine-tuning seeds both random), beside each run's own paired difference. Each run is
    paired with its own control (one for all, unless :func:`merge_curves` kept several); the
    controls must fine-tune one architecture."""
    named = _named_arms(result)
    for name in names:
        if name not in named or name.startswith("random init"):
            raise SystemExit(f"error: the curve has no point {name!r}; it has "
                             f"{sorted(n for n in named if not n.startswith('random init'))}")
    controls = [named[named[name]["random_arm"]] for name in names]
    if len({control.get("finetune_args", control["name"]) for control in controls}) != 1:
        raise SystemExit(f"error: {', '.join(names)} fine-tune different architectures "
                         f"({', '.join(sorted({c['name'] for c in controls}))}): pool the runs "
                         "of one recipe")
    rows = []
    for task in _tasks(result):
        row = {"arm": " + ".join(names), "task": task, "runs": len(names),
               "controls": sorted({control["name"] for control in controls})}
        for prefix in ("selection_", ""):
            bases = [control["tasks"][task].get(f"{prefix}per_seed") for control in controls]
            if not all(bases):
                continue
            table = [named[name]["tasks"][task][f"{prefix}per_seed"] for name in names]
            accuracy, accuracy_se = crossed_seeds(table)
            difference, difference_se = crossed_seeds(
                [[a - b for a, b in zip(run, base)] for run, base in zip(table, bases)])
            control_accuracy, _ = crossed_seeds(bases)
            row.update({f"{prefix}accuracy": accuracy, f"{prefix}accuracy_se": accuracy_se,
                        f"{prefix}random_init": control_accuracy,
                        f"{prefix}difference": difference,
                        f"{prefix}difference_se": difference_se,
                        f"{prefix}beyond_2se": bool(abs(difference) > 2 * difference_se),
                        f"{prefix}per_run": [named[name]["tasks"][task][f"{prefix}vs_random"]
                                             for name in names]})
        rows.append(row)
    return rows


def format_pooled(rows: List[dict]) -> str:
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    def shown(row, prefix, key, signed=False):
        if f"{prefix}{key}" not in row:
            return "-"
        text = f"{row[f'{prefix}{key}']:{'+' if signed else ''}.2f} ± {row[f'{prefix}{key}_se']:.2f}"
        return text + (" *" if key == "difference" and row[f"{prefix}beyond_2se"] else "")

    def per_run(row, prefix):
        return ", ".join(f"{value:+.2f}" for value in row.get(f"{prefix}per_run", [])) or "-"

    table = [[row["task"], shown(row, "selection_", "accuracy"),
              shown(row, "selection_", "difference", True), per_run(row, "selection_"),
              shown(row, "", "accuracy"), shown(row, "", "difference", True), per_run(row, "")]
             for row in rows]
    controls = rows[0].get("controls", [])
    against = (f"; each run against its own curve's random init: {', '.join(controls)}"
               if len(controls) > 1 else "")
    return "\n".join([
        f"{rows[0]['arm']}: the mean over {rows[0]['runs']} pre-training runs, minus their random "
        "init (paired on the fine-tuning seed; ± SE with pre-training and fine-tuning seeds both "
        f"random, * beyond 2 SE; each run's own difference beside it{against})",
        ascii_table(["task", "selection %", "vs random init", "per run", "dev %",
                     "vs random init (dev)", "per run (dev)"], table)])


def format_lever(rows: List[dict], changed: str, baseline: str) -> str:
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    def shown(row, prefix):
        if f"{prefix}difference" not in row:
            return "-"
        return (f"{row[f'{prefix}difference']:+.2f} ± {row[f'{prefix}difference_se']:.2f}"
                + (" *" if row[f"{prefix}beyond_2se"] else ""))

    table = [[row["arm"], row["task"], shown(row, "selection_"), shown(row, "")] for row in rows]
    return "\n".join([f"{changed} minus {baseline}, paired on the fine-tuning seed (± SE, * beyond "
                      "2 SE)", ascii_table(["arm", "task", "selection", "dev"], table)])


def merged_curves_and_points(items: Sequence[str]) -> Tuple[Optional[dict], List[str]]:
    """``--points`` / ``--pool`` arguments: the ``*.json`` curves read and merged
    (:func:`merge_curves`; ``None`` when none is given) and the point names among them."""
    curves = [item for item in items if item.endswith(".json")]
    names = [item for item in items if not item.endswith(".json")]
    if not curves:
        return None, names
    return merge_curves([json.loads(Path(path).read_text()) for path in curves], curves), names


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="transfer_curve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lever", nargs=2, type=Path, metavar=("CHANGED.json", "BASELINE.json"),
                        help="print a lever's effect from two curves (--out files) one setting "
                             "apart, and exit")
    parser.add_argument("--points", nargs="+", metavar=("CURVE.json", "POINT"),
                        help="print point A minus point B (e.g. prose@3000 broad@3000) of one "
                             "curve or several of one protocol, paired on the fine-tuning seed, "
                             "and exit")
    parser.add_argument("--pool", nargs="+", metavar=("CURVE.json", "POINT"),
                        help="print the mean of several runs' points (pre-training seeds, e.g. "
                             "s1@12000 s2@12000) of one curve or several, each run against its "
                             "curve's random init, and exit")
    parser.add_argument("--run", nargs="+", action="append",
                        metavar=("LABEL", "CHECKPOINT"),
                        help="a pre-training run's label and its checkpoints (repeat --run for "
                             "other runs)")
    parser.add_argument("--suite", type=Path,
                        help="the downstream suite (scripts/prepare_downstream.sh)")
    parser.add_argument("--task", nargs="+", default=[finetuning.DEMO_TASK],
                        help="the suite's tasks (default: %(default)s)")
    parser.add_argument("--pooling", choices=("first", "mean"), default=CurveSettings.pooling,
                        help="the classification head: <s> (first) or the mean of the tokens "
                             "(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=CurveSettings.epochs)
    parser.add_argument("--lr", nargs="+", default=list(CurveSettings.lrs),
                        help="one rate, or a grid chosen per point on the selection split")
    parser.add_argument("--warmup-share", type=float, default=CurveSettings.warmup_share)
    parser.add_argument("--layer-lr-decay", type=float, default=None, metavar="D",
                        help="fine-tune every arm with layer-wise lr decay D in (0, 1] "
                             "(the recipe's LAYER_LR_DECAY; default: none)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(finetuning.FINETUNE_SEEDS))
    parser.add_argument("--runs-dir", type=Path,
                        help="where the fine-tuning runs go (finished ones are read back)")
    parser.add_argument("--out", type=Path, default=None, help="the curve as JSON")
    args = parser.parse_args(argv)
    if args.lever:
        changed, baseline = (json.loads(path.read_text()) for path in args.lever)
        print(format_lever(lever_difference(changed, baseline), args.lever[0].name,
                           args.lever[1].name))
        return 0
    if args.points:
        result, names = merged_curves_and_points(args.points)
        if not result or len(names) != 2:
            parser.error("--points CURVE.json [CURVE.json...] POINT_A POINT_B: give the curves "
                         "and two points")
        print(format_lever(points_difference(result, *names), *names))
        return 0
    if args.pool:
        result, names = merged_curves_and_points(args.pool)
        if not result or len(names) < 2:
            parser.error("--pool CURVE.json [CURVE.json...] POINT POINT...: give the curves and "
                         "two or more points")
        print(format_pooled(pooled_points(result, names)))
        return 0
    if not args.run or args.runs_dir is None or args.suite is None:
        parser.error("give --run LABEL CHECKPOINT..., --suite and --runs-dir (or --lever A.json "
                     "B.json)")
    checkpoints = []
    for run in args.run:
        if len(run) < 2:
            parser.error(f"--run {' '.join(run)}: give a label, then its checkpoints")
        for path in run[1:]:
            if not Path(path).is_file():
                parser.error(f"--run {run[0]}: {path}: no such checkpoint")
            checkpoints.append((run[0], Path(path).resolve()))
    if args.epochs < 1 or not 0 <= args.warmup_share < 1 or finetuning.not_positive(args.lr):
        parser.error("--epochs must be positive, --warmup-share in [0, 1), --lr positive rates")
    if args.layer_lr_decay is not None and not 0 < args.layer_lr_decay <= 1:
        parser.error(f"--layer-lr-decay must be in (0, 1]; got {args.layer_lr_decay}")
    settings = CurveSettings(args.pooling, args.epochs, tuple(args.lr), args.warmup_share,
                             args.layer_lr_decay)
    result = curve(checkpoints, args.suite.resolve(), args.runs_dir.resolve(), args.task[0],
                   args.seeds, printer=recipe_runs.say, settings=settings, tasks=args.task)
    print(format_curve(result))
    if args.out is not None:
        write_text(args.out, json.dumps(result, indent=2), force=True)
        print(f"curve: {args.out}")
    return 0
