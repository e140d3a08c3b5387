"""Old import paths of modules that moved into subpackages, kept importable for one release.

Until the 0.2 release, ``import fairseq_ext.hf_export``, ``from fairseq_ext.curves import main``,
``python -m fairseq_ext.memory_plan ...`` and a YAML's ``_target_:
fairseq_ext.hydra_config.RegisterResolvers`` keep working: each gives the module at its new home
(the very module object, so attributes and monkeypatching are shared) and warns once with a
:class:`DeprecationWarning` that names the new path. :data:`MOVED_MODULES` is the one table of
what moved where; :func:`install` (called by ``fairseq_ext/__init__.py``) puts the finder on
``sys.meta_path``. ``fairseq_ext.export``, once a module and now the package of both exports,
answers its old attributes (``from fairseq_ext.export import finetune_args``) the same way
(``fairseq_ext/export/__init__.py``).

This package imports nothing from ``fairseq_ext`` (it sits below every layer: the package root
installs its finder, ``fairseq_ext.export`` uses its warning), and a deprecated path costs
nothing until it is imported.

May import: nothing of fairseq_ext.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from typing import Dict, Optional

#: Old dotted module name -> its home now. Remove an entry one release after it was added.
MOVED_MODULES: Dict[str, str] = {
    "fairseq_ext.checkpoint_loading": "fairseq_ext.training.checkpoint_loading",
    "fairseq_ext.output_files": "fairseq_ext.training.output_files",
    "fairseq_ext.model_building": "fairseq_ext.training.model_building",
    "fairseq_ext.fused_kernels": "fairseq_ext.training.fused_kernels",
    "fairseq_ext.hydra_config": "fairseq_ext.training.hydra_config",
    "fairseq_ext.memory_plan": "fairseq_ext.flops.memory_plan",
    "fairseq_ext.log_records": "fairseq_ext.reporting.log_records",
    "fairseq_ext.curves": "fairseq_ext.reporting.curves",
    "fairseq_ext.text_tables": "fairseq_ext.reporting.text_tables",
    "fairseq_ext.evaluation.uncertainty": "fairseq_ext.reporting.uncertainty",
    "fairseq_ext.evaluation.eval_scores": "fairseq_ext.reporting.eval_scores",
    "fairseq_ext.finetune_grid": "fairseq_ext.evaluation.finetune_grid",
    "fairseq_ext.demo": "fairseq_ext.experiments.demo",
    "fairseq_ext.hf_export": "fairseq_ext.export.huggingface",
    # issue 57: the bench module is named as its script, scripts/bench_step.py (it still
    # answers TrainerStep, which now lives in fairseq_ext.training.trainer_step)
    "fairseq_ext.benchmarks.train_step": "fairseq_ext.benchmarks.bench_step",
}
#: The release that drops the old paths.
REMOVED_IN = "0.2"


def deprecation_message(old: str, new: str) -> str:
    return (f"{old} moved to {new}; the old name is removed in fairseq-ext {REMOVED_IN}: "
            f"import {new} instead")


def warn_moved(old: str, new: str, stacklevel: int = 2) -> None:
    """The :class:`DeprecationWarning` of an old path ``old`` that now lives at ``new``."""
    warnings.warn(deprecation_message(old, new), DeprecationWarning, stacklevel=stacklevel + 1)


class MovedModuleLoader(importlib.abc.Loader):
    """Loads an old module name as the module at its new home (warning once), and gives
    ``python -m OLD`` the new module's code to run."""

    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def create_module(self, spec):
        warn_moved(self.old, self.new, stacklevel=4)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        """Nothing to run: the module at its new home ran when it was imported."""

    def get_code(self, fullname: str):
        """``python -m OLD`` (runpy asks for the code to run as ``__main__``): a command typed at
        a terminal, where Python hides DeprecationWarnings, so the note is printed too."""
        warn_moved(self.old, self.new, stacklevel=4)
        print(f"note: python -m {self.old}: {deprecation_message(self.old, self.new)}",
              file=sys.stderr)
        new_spec = importlib.util.find_spec(self.new)
        return new_spec.loader.get_code(self.new)

    def is_package(self, fullname: str) -> bool:
        return False


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED_MODULES` (and nothing else)."""

    def __init__(self, moved: Dict[str, str]):
        self.moved = dict(moved)

    def find_spec(self, fullname: str, path=None, target=None) -> Optional[importlib.machinery.ModuleSpec]:
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, MovedModuleLoader(fullname, new),
                                               origin=f"moved to {new}")


def install() -> None:
    """Put the finder of the moved modules on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(MOVED_MODULES))
