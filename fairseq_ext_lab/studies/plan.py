"""Planning a study: its runs (:class:`PlannedRun`), their directories and updates.

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
from pathlib import Path
from typing import List, Optional, Sequence

from fairseq_ext_lab.budget import equal_flops_updates
from fairseq_ext_lab.studies.spec import EQUAL_TOKENS, Study, StudyModel


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    model: StudyModel
    seed: int
    updates: int

    @property
    def key(self) -> str:
        return f"{self.model.name}/seed{self.seed}"

    @property
    def lr(self) -> Optional[str]:
        return self.model.env.get("PEAK_LR")

    @property
    def key_with_lr(self) -> str:
        """The key of a learning-rate selection run: one per (model, lr)."""
        return f"{self.model.name}/lr{self.lr}/seed{self.seed}"


def run_dir_of(runs_dir: Path, model_name: str, seed: int, lr: Optional[str] = None) -> Path:
    """``<runs-dir>/<model>/seed<S>``; a selection run's ``<runs-dir>/<model>/lr<lr>/seed<S>``."""
    model_dir = runs_dir / model_name.replace("%", "pct")
    return (model_dir if lr is None else model_dir / f"lr{lr}") / f"seed{seed}"


def plan_study(study: Study, data: Path, baseline_updates: Optional[int] = None,
               seeds: Optional[Sequence[int]] = None) -> List[PlannedRun]:
    """Every (model, seed) at the baseline's analytic training FLOPs
    (:func:`~fairseq_ext_lab.budget.equal_flops_updates`: the seed does not change a
    model's FLOPs per update)."""
    budget = baseline_updates or study.baseline_updates
    if study.budget == EQUAL_TOKENS:  # the same batch: the same tokens for every model
        updates = [budget] * len(study.models)
    else:
        runs = [model.run() for model in study.models]
        updates = equal_flops_updates(runs, data, budget)
    return [PlannedRun(model, seed, count) for model, count in zip(study.models, updates)
            for seed in (seeds or study.seeds)]


def with_lr(model: StudyModel, lr: str) -> StudyModel:
    """The model trained at peak learning rate ``lr`` (the recipes' ``PEAK_LR``)."""
    return dataclasses.replace(model, env={**model.env, "PEAK_LR": lr})
