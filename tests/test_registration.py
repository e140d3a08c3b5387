"""Importing fairseq_ext registers its components; the CLIs see them through --user-dir."""
import importlib
import json
import pkgutil
import re
import subprocess
import sys

import pytest
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.optim import OPTIMIZER_REGISTRY
from fairseq.tasks import TASK_REGISTRY

import fairseq_ext
from conftest import REPO_ROOT, USER_DIR, fairseq_cli, run_cli

OUR_ARCHS = {"roberta_small": "roberta", "roberta_mini": "roberta", "roberta_tiny": "roberta",
             "roberta_large_prenorm": "roberta", "3ml_self_base": "3ml_self",
             "3ml_self_mini": "3ml_self", "3ml_cross_large": "3ml_cross",
             "bert_orig_base": "roberta", "bert_rab_large": "bert_rab",
             "swishrnn_bert_base": "swishrnn_bert", "bidir_lm_mini": "bidirectional_lm",
             "bidir_lm_125m": "bidirectional_lm"}
OUR_OPTIMIZERS = {"fused_adamw"}
OUR_CRITERIA = {"masked_lm_categories", "masked_lm_flops", "bidirectional_lm"}
OUR_TASKS = {"bidirectional_lm"}


def test_architectures_and_optimizers_are_registered():
    for arch, model in OUR_ARCHS.items():
        assert ARCH_MODEL_REGISTRY[arch] is ARCH_MODEL_REGISTRY[model]
    assert OUR_OPTIMIZERS <= set(OPTIMIZER_REGISTRY)
    assert OUR_CRITERIA <= set(CRITERION_REGISTRY)
    assert OUR_TASKS <= set(TASK_REGISTRY)


def test_importing_the_package_imports_every_registering_module():
    """A module that registers components but is not imported would be invisible to fairseq."""
    expected = set()
    for sub in fairseq_ext.REGISTERING_SUBPACKAGES:
        package = importlib.import_module(f"fairseq_ext.{sub}")
        expected |= {m.name for m in pkgutil.walk_packages(package.__path__, f"fairseq_ext.{sub}.")}
    code = "import json, sys, fairseq_ext; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert expected and expected <= imported, expected - imported


PARSE_EVERY_ARCH = r"""
import sys
from fairseq import options
user_dir, runs = sys.argv[1], sys.argv[2:]
parsed = []
for run in runs:  # ARCH:TASK:CRITERION
    arch, task, criterion = run.split(":")
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--user-dir", user_dir, "--task", task, "--criterion", criterion,
        "--arch", arch])
    parsed.append(args.arch)
print(" ".join(parsed))
"""


def _assert_help_lists_our_components(user_dir, cwd):
    """fairseq's --help enumerates criteria and optimizers; archs appear in its choices error."""
    train = fairseq_cli("fairseq-train")  # served from the repo root; a copy runs for real
    text = run_cli([train, "--user-dir", user_dir, "--help"], cwd=cwd).stdout
    optimizer_choices = re.search(r"--optimizer \{([^}]*)\}", text).group(1).split(",")
    assert OUR_OPTIMIZERS <= set(optimizer_choices)
    criterion_choices = re.search(r"--criterion \{([^}]*)\}", text).group(1).split(",")
    assert OUR_CRITERIA <= set(criterion_choices)
    # every arch accepted: fairseq-train's own parser (options.parse_args_and_arch, which
    # imports --user-dir and adds the arch's flags) over all of them in one process (fairseq
    # 0.12 prints no per-arch flags under --help, so a --help per arch showed no more)
    runs = [f"{arch}:bidirectional_lm:bidirectional_lm" if model == "bidirectional_lm"
            else f"{arch}:masked_lm:masked_lm_categories" for arch, model in OUR_ARCHS.items()]
    parsed = run_cli([sys.executable, "-c", PARSE_EVERY_ARCH, str(user_dir), *runs], cwd=cwd)
    assert parsed.stdout.strip().splitlines()[-1] == " ".join(OUR_ARCHS)
    bad = run_cli([train, "--user-dir", user_dir, "--arch", "no_such_arch", "--help"], cwd=cwd,
                  check=False)
    assert bad.returncode != 0 and all(arch in bad.stderr for arch in OUR_ARCHS)


@pytest.mark.slow
def test_fairseq_train_help_lists_our_components_from_repo_root():
    _assert_help_lists_our_components("fairseq_ext", cwd=REPO_ROOT)


@pytest.mark.real_processes  # another copy of the plugin: never served
def test_fairseq_train_help_from_an_installed_copy(tmp_path):
    """`pip install .` (not editable) into a separate target, used from another directory."""
    target = tmp_path / "site"
    run_cli([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
             "--target", target, REPO_ROOT], env={"FAIRSEQ_EXT_NATIVE": "0"})  # no op compile
    installed = target / "fairseq_ext"
    assert (installed / "__init__.py").exists() and installed.resolve() != USER_DIR.resolve()
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    _assert_help_lists_our_components(installed, cwd=workdir)
