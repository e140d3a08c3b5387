"""The modules' old import paths (issue 32, ``fairseq_ext/compat``): each still imports, as the
very module at its new home, with a DeprecationWarning that names the new path; ``python -m`` of
an old path runs the new module; the hydra callback of YAMLs written before the move still
builds; ``fairseq_ext.export``'s old attributes resolve from the encoder export. pytest.ini turns
these warnings into errors everywhere else, so no code or test of ours uses an old path."""
import importlib
import subprocess
import sys
import warnings

import pytest

import fairseq_ext  # noqa: F401  (installs the finder)
from conftest import REPO_ROOT
from fairseq_ext.compat import MOVED_MODULES, MovedModuleFinder


def forget(name: str) -> None:
    """Drop the old name from sys.modules (and the parent's attribute) so it imports afresh."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)


@pytest.mark.parametrize("old,new", sorted(MOVED_MODULES.items()))
def test_old_path_is_the_new_module_with_a_deprecation_warning(old, new):
    forget(old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}\b") as record:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new
    assert any(new in str(w.message) for w in record)


def test_from_import_of_a_name_through_an_old_path():
    forget("fairseq_ext.curves")
    with pytest.warns(DeprecationWarning, match="fairseq_ext.reporting.curves"):
        from fairseq_ext.curves import main  # noqa: PLC0415
    from fairseq_ext.reporting.curves import main as new_main
    assert main is new_main


def test_the_finder_answers_only_the_moved_names():
    finder = MovedModuleFinder(MOVED_MODULES)
    assert finder.find_spec("fairseq_ext.reporting.curves") is None
    assert finder.find_spec("fairseq_ext.no_such_module") is None
    assert finder.find_spec("fairseq_ext.curves").loader.new == "fairseq_ext.reporting.curves"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fairseq_ext.no_such_module")


def test_old_export_attributes_resolve_from_the_encoder_export_once_warned():
    import fairseq_ext.export as export_package
    from fairseq_ext.export import encoder

    vars(export_package).pop("finetune_args", None)
    with pytest.warns(DeprecationWarning, match="fairseq_ext.export.encoder.finetune_args"):
        from fairseq_ext.export import finetune_args  # noqa: PLC0415
    assert finetune_args is encoder.finetune_args
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert export_package.finetune_args is encoder.finetune_args  # warned once
    with pytest.raises(AttributeError):
        export_package.no_such_name  # noqa: B018


def test_python_dash_m_of_an_old_path_runs_the_new_module():
    proc = subprocess.run([sys.executable, "-m", "fairseq_ext.memory_plan", "--help"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m fairseq_ext.flops.memory_plan")
    assert ("note: python -m fairseq_ext.memory_plan: fairseq_ext.memory_plan moved to "
            "fairseq_ext.flops.memory_plan") in proc.stderr


def test_a_yaml_written_before_the_move_still_builds_its_hydra_callback():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from fairseq_ext.training.hydra_config import USER_DIR_RESOLVER, RegisterResolvers

    forget("fairseq_ext.hydra_config")
    with pytest.warns(DeprecationWarning, match="fairseq_ext.training.hydra_config"):
        callback = instantiate({"_target_": "fairseq_ext.hydra_config.RegisterResolvers"})
    assert isinstance(callback, RegisterResolvers)
    assert OmegaConf.has_resolver(USER_DIR_RESOLVER)
    config = OmegaConf.create({"user_dir": "${" + USER_DIR_RESOLVER + ":}"})
    assert config.user_dir == fairseq_ext.__path__[0]
