"""What pre-training buys as it goes on: fine-tuned dev accuracy against pre-training updates,
beside the same architecture at random initialisation (``scripts/transfer_curve.py``,
docs/transfer.md, issue 55).

Every checkpoint given (a run's ``checkpoint_E_U.pt`` files, across runs and corpora) is
fine-tuned on one task of a downstream suite exactly as ``make demo`` fine-tunes (the demo's
protocol, :data:`fairseq_ext.experiments.finetuning.DEMO_PROTOCOL`: its recipe, lr, epochs and
batch, 3 fine-tuning seeds), through the fine-tuning stage
(:func:`fairseq_ext.experiments.finetuning.run_stage`, finished runs read back), and so is the
random-init control of each architecture among them (a fresh draw per fine-tuning seed). Each
point is the mean over fine-tuning seeds ± its SE, and its difference to its architecture's
random init paired on the seed (the same batches and head draw), marked beyond 2 SE.

A 3ML checkpoint is fine-tuned through its exported encoder, as the demo does. The points'
pre-training updates are read off each checkpoint (``optimizer_history``).

May import: see :mod:`fairseq_ext.experiments`.
"""
import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_ext.experiments import finetuning, recipe_runs
from fairseq_ext.reporting.uncertainty import mean_over_seeds, paired_over_seeds
from fairseq_ext.training.output_files import write_text

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


def curve(checkpoints: Sequence[Tuple[str, Path]], suite: Path, runs_dir: Path,
          task: str = finetuning.DEMO_TASK, seeds: Sequence[int] = finetuning.FINETUNE_SEEDS,
          printer=print) -> dict:
    """The curve (module docstring): ``checkpoints`` as ``(label, path)``, a label per
    pre-training run (its points are told apart by their updates)."""
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
    protocol = dataclasses.replace(
        finetuning.DEMO_PROTOCOL, seeds=tuple(seeds), export_recipes=(THREE_ML_RECIPE,),
        arms=tuple(finetuning.FinetuneArm(name, name) for name in models))
    # the architecture a point fine-tunes (3ML: its exported encoder's): its fine-tuning flags
    from fairseq_ext.experiments.finetuning import prepare_checkpoint, safe

    for point in points:
        out = runs_dir / finetuning.FINETUNE_DIR / "exports" / safe(point["name"]) / "seed1"
        _, flags = prepare_checkpoint(Path(point["checkpoint"]),
                                      out, models[point["name"]].recipe == THREE_ML_RECIPE)
        point["finetune_args"] = " ".join(flags)
        controls.setdefault(point["finetune_args"], point["name"])
    arms = list(protocol.arms) + [finetuning.FinetuneArm(f"random init {index}", name,
                                                         random_init=True)
                                  for index, name in enumerate(controls.values(), 1)]
    protocol = dataclasses.replace(protocol, arms=tuple(arms))
    raw = finetuning.run_stage(protocol, models, (1,), paths, suite, runs_dir, printer=printer,
                               only=[task])
    control_arm = {flags: f"random init {index}"
                   for index, flags in enumerate(controls, 1)}

    def scores(arm: str) -> List[float]:
        return list(raw["accuracy"][arm][task][1])

    for point in points:
        mine, random_arm = scores(point["name"]), control_arm[point["finetune_args"]]
        theirs = scores(random_arm)
        estimate, difference = mean_over_seeds(mine), paired_over_seeds(mine, theirs)
        point.update({"accuracy": estimate.value, "accuracy_se": estimate.standard_error,
                      "per_seed": mine, "random_arm": random_arm,
                      "vs_random": difference.value, "vs_random_se": difference.standard_error,
                      "beyond_2se": bool(abs(difference.value)
                                         > 2 * difference.standard_error)})
    randoms = []
    for flags, arm in control_arm.items():
        estimate = mean_over_seeds(scores(arm))
        randoms.append({"name": arm, "finetune_args": flags, "accuracy": estimate.value,
                        "accuracy_se": estimate.standard_error, "per_seed": scores(arm)})
    baselines = {key: finetuning.baseline_estimate(entry).__dict__
                 for key, entry in raw["baselines"][task].items()
                 if key in ("majority", "bow_logreg")}
    return {"task": task, "seeds": list(seeds), "lr": finetuning.DEMO_LR,
            "epochs": protocol.epochs, "batch": protocol.batch, "points": points,
            "random_init": randoms, "baselines": baselines,
            "wall_seconds": raw["wall_seconds"]}


def format_curve(result: dict) -> str:
    from fairseq_ext.reporting.text_tables import ascii_table

    def shown(value, error, signed=False):
        if value is None or not math.isfinite(value):
            return "-"
        return f"{value:{'+' if signed else ''}.2f} ± {error:.2f}"

    rows = [[r["name"], "0", shown(r["accuracy"], r["accuracy_se"]), "-"]
            for r in result["random_init"]]
    for point in sorted(result["points"], key=lambda p: (p["label"], p["updates"])):
        rows.append([point["label"], f"{point['updates']:,}",
                     shown(point["accuracy"], point["accuracy_se"]),
                     shown(point["vs_random"], point["vs_random_se"], True)
                     + (" *" if point["beyond_2se"] else "")])
    for key, estimate in result["baselines"].items():
        rows.append([key, "-", shown(estimate["value"], estimate["standard_error"]), "-"])
    return "\n".join([
        f"fine-tuned dev accuracy on {result['task']} against pre-training updates (the demo's "
        f"fine-tuning: lr {result['lr']}, {result['epochs']} epochs of batch {result['batch']}, "
        f"seeds {result['seeds']}); ± SE over the seeds; vs random init of the same "
        "architecture paired on the seed (* beyond 2 SE)",
        ascii_table(["pre-training", "updates", "dev accuracy %", "vs random init"], rows)])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="transfer_curve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs="+", action="append", required=True,
                        metavar=("LABEL", "CHECKPOINT"),
                        help="a pre-training run's label and its checkpoints (repeat --run for "
                             "other runs)")
    parser.add_argument("--suite", type=Path, required=True,
                        help="the downstream suite (scripts/prepare_downstream.sh)")
    parser.add_argument("--task", default=finetuning.DEMO_TASK)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(finetuning.FINETUNE_SEEDS))
    parser.add_argument("--runs-dir", type=Path, required=True,
                        help="where the fine-tuning runs go (finished ones are read back)")
    parser.add_argument("--out", type=Path, default=None, help="the curve as JSON")
    args = parser.parse_args(argv)
    checkpoints = []
    for run in args.run:
        if len(run) < 2:
            parser.error(f"--run {' '.join(run)}: give a label, then its checkpoints")
        for path in run[1:]:
            if not Path(path).is_file():
                parser.error(f"--run {run[0]}: {path}: no such checkpoint")
            checkpoints.append((run[0], Path(path).resolve()))
    result = curve(checkpoints, args.suite.resolve(), args.runs_dir.resolve(), args.task,
                   args.seeds, printer=recipe_runs.say)
    print(format_curve(result))
    if args.out is not None:
        write_text(args.out, json.dumps(result, indent=2), force=True)
        print(f"curve: {args.out}")
    return 0
