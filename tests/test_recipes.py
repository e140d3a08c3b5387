"""Recipe conventions, and the shell and YAML forms of the demo run agreeing."""
import re
import subprocess

import pytest
from omegaconf import OmegaConf

from conftest import REPO_ROOT, json_log_records, run_cli, train_with_hydra_recipe

SHELL_RECIPES = sorted(p for p in (REPO_ROOT / "recipes").rglob("*.sh") if p.parent.name != "lib")
YAML_RECIPES = sorted((REPO_ROOT / "recipes/config").rglob("*.yaml"))

# Shell variable -> where the same hyperparameter lives in the hydra YAML.
SHELL_TO_YAML = {
    "ARCH": ["model._name"],
    "TOKENS_PER_SAMPLE": ["task.tokens_per_sample", "model.max_positions"],
    "SAMPLE_BREAK_MODE": ["task.sample_break_mode"],
    "MASK_PROB": ["task.mask_prob"],
    "LEAVE_UNMASKED_PROB": ["task.leave_unmasked_prob"],
    "RANDOM_TOKEN_PROB": ["task.random_token_prob"],
    "MAX_SENTENCES": ["dataset.batch_size"],
    "PEAK_LR": ["optimization.lr.0"],
    "TOTAL_UPDATES": ["optimization.max_update", "lr_scheduler.total_num_update"],
    "WARMUP_UPDATES": ["lr_scheduler.warmup_updates"],
    "ADAM_BETAS": ["optimizer.adam_betas"],
    "ADAM_EPS": ["optimizer.adam_eps"],
    "WEIGHT_DECAY": ["optimizer.weight_decay"],
    "CLIP_NORM": ["optimization.clip_norm"],
    "DROPOUT": ["model.dropout"],
    "ATTENTION_DROPOUT": ["model.attention_dropout"],
    "CRITERION": ["criterion"],
    "OPTIMIZER": ["optimizer._name"],
    "SEED": ["common.seed"],
    "LOG_INTERVAL": ["common.log_interval"],
    "SAVE_DIR": ["checkpoint.save_dir"],
    "SAVE_INTERVAL_UPDATES": ["checkpoint.save_interval_updates"],
    "NUM_WORKERS": ["dataset.num_workers"],
}


def shell_defaults(path):
    """`NAME="${NAME:-default}"` assignments and `export NAME="${NAME:-default}"` of a recipe."""
    pattern = re.compile(r'^(?:export\s+)?(\w+)="\$\{\1:-([^}]*)\}"', re.M)
    return dict(pattern.findall(path.read_text()))


def same_value(shell_value, yaml_value):
    try:
        return float(shell_value) == float(yaml_value)
    except (TypeError, ValueError):
        return str(shell_value).replace(" ", "") == str(yaml_value).replace(" ", "")


@pytest.mark.parametrize("recipe", SHELL_RECIPES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shell_recipe_conventions(recipe):
    text = recipe.read_text()
    assert "set -euo pipefail" in text
    # Every recipe names its criterion (directly, or through the recipe it wraps).
    assert "--criterion" in text or "exec " in text


@pytest.mark.parametrize("config", YAML_RECIPES, ids=lambda p: p.name)
def test_yaml_recipe_names_its_criterion(config):
    assert OmegaConf.load(config).get("criterion") not in (None, "cross_entropy")


@pytest.mark.parametrize("shell, yaml", [
    (["roberta/pretrain.sh"], "roberta/pretrain.yaml"),
    (["roberta/pretrain.sh", "roberta/demo.sh"], "roberta/demo.yaml"),
])
def test_shell_and_yaml_have_the_same_hyperparameters(shell, yaml):
    defaults = {}
    for recipe in shell:  # later files (the wrappers) override the recipe they wrap
        defaults.update(shell_defaults(REPO_ROOT / "recipes" / recipe))
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    for var, keys in SHELL_TO_YAML.items():
        for key in keys:
            assert same_value(defaults[var], OmegaConf.select(cfg, key)), (var, key)
    # effective batch = per-GPU batch x update_freq on one GPU
    assert int(defaults["BATCH_SIZE"]) == cfg.dataset.batch_size * cfg.optimization.update_freq[0]


def test_shell_and_yaml_demo_give_the_same_losses(tiny_data_bin, tmp_path):
    """The demo run itself (demo sizes), cut to a few updates, in both forms, same seed."""
    updates = 4
    shell = run_cli(
        [REPO_ROOT / "recipes/roberta/demo.sh", "--log-format", "json", "--no-progress-bar"],
        env={"DATA": str(tiny_data_bin), "SAVE_DIR": str(tmp_path / "shell"),
             "TOTAL_UPDATES": str(updates), "LOG_INTERVAL": "1"},
    )
    hydra = train_with_hydra_recipe(
        tiny_data_bin, tmp_path / "hydra",
        extra_overrides=[f"optimization.max_update={updates}",
                         f"lr_scheduler.total_num_update={updates}", "common.log_interval=1"],
        sizes=(),
    )

    def losses(proc):
        return {int(r["num_updates"]): r["loss"]
                for r in json_log_records(proc.stdout + proc.stderr) if "loss" in r}

    shell_losses, hydra_losses = losses(shell), losses(hydra)
    assert sorted(shell_losses) == list(range(1, updates + 1))
    assert shell_losses == hydra_losses


def test_recipe_prints_the_full_command_first(shell_trained):
    _, proc = shell_trained
    first_line = proc.stdout.splitlines()[0]
    assert first_line.startswith("+ ") and "fairseq-train" in first_line
    assert "--criterion masked_lm" in first_line and "--arch roberta_tiny" in first_line


def _update_freq(effective, per_gpu, **env):
    script = f'source "{REPO_ROOT}/recipes/lib/common.sh"; update_freq {effective} {per_gpu}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env})


@pytest.mark.parametrize("gpus, nodes, expected", [(1, 1, 512), (8, 1, 64), (8, 4, 16)])
def test_update_freq_keeps_the_effective_batch(gpus, nodes, expected):
    proc = _update_freq(8192, 16, NUM_GPUS=str(gpus), NNODES=str(nodes))
    assert proc.returncode == 0 and int(proc.stdout) == expected


def test_update_freq_rejects_a_batch_that_does_not_divide():
    proc = _update_freq(100, 16, NUM_GPUS="1")
    assert proc.returncode != 0 and "BATCH_SIZE=100" in proc.stderr
