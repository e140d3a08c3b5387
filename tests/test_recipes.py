"""Recipe conventions, and the shell and YAML forms of each recipe agreeing (the demo runs: to
the loss at every update)."""
import os
import re
import shlex
import subprocess

import pytest
from omegaconf import OmegaConf

from conftest import REPO_ROOT, fairseq_cli, json_log_records, run_cli, train_with_hydra_recipe

SHELL_RECIPES = sorted(p for p in (REPO_ROOT / "recipes").rglob("*.sh") if p.parent.name != "lib")
YAML_RECIPES = sorted((REPO_ROOT / "recipes/config").rglob("*.yaml"))
# Pre-training recipes: all but the fine-tuning ones (named finetune*).
PRETRAIN_SHELL = [p for p in SHELL_RECIPES if not p.name.startswith("finetune")]
PRETRAIN_YAML = [p for p in YAML_RECIPES if not p.name.startswith("finetune")]

# Each shell recipe (relative to recipes/) and its hydra twin (relative to recipes/config/).
PAIRS = [
    ("roberta/pretrain.sh", "roberta/pretrain.yaml"),
    ("roberta/demo.sh", "roberta/demo.yaml"),
    ("3ml/pretrain_efficient.sh", "3ml/pretrain_efficient.yaml"),
    ("3ml/pretrain_longer.sh", "3ml/pretrain_longer.yaml"),
    ("3ml/baseline_24hbert.sh", "3ml/baseline_24hbert.yaml"),
    ("3ml/baseline_roberta.sh", "3ml/baseline_roberta.yaml"),
    ("3ml/demo.sh", "3ml/demo.yaml"),
]

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
    "LR_POWER": ["lr_scheduler.power"],  # a recipe without it leaves fairseq's default (1.0)
}

# fairseq-train flag -> the same setting in the hydra YAML (flags without a value: True).
FLAG_TO_YAML = {
    "--task": "task._name", "--criterion": "criterion", "--arch": "model._name",
    "--max-positions": "model.max_positions", "--tokens-per-sample": "task.tokens_per_sample",
    "--sample-break-mode": "task.sample_break_mode", "--mask-prob": "task.mask_prob",
    "--leave-unmasked-prob": "task.leave_unmasked_prob",
    "--random-token-prob": "task.random_token_prob",
    "--dropout": "model.dropout", "--attention-dropout": "model.attention_dropout",
    "--optimizer": "optimizer._name", "--adam-betas": "optimizer.adam_betas",
    "--adam-eps": "optimizer.adam_eps", "--weight-decay": "optimizer.weight_decay",
    "--clip-norm": "optimization.clip_norm", "--lr-scheduler": "lr_scheduler._name",
    "--power": "lr_scheduler.power", "--lr": "optimization.lr.0",
    "--warmup-updates": "lr_scheduler.warmup_updates",
    "--total-num-update": "lr_scheduler.total_num_update",
    "--max-update": "optimization.max_update", "--batch-size": "dataset.batch_size",
    "--update-freq": "optimization.update_freq.0", "--seed": "common.seed",
    "--num-workers": "dataset.num_workers", "--log-interval": "common.log_interval",
    "--skip-invalid-size-inputs-valid-test": "dataset.skip_invalid_size_inputs_valid_test",
    "--save-dir": "checkpoint.save_dir",
    "--save-interval-updates": "checkpoint.save_interval_updates",
    "--keep-interval-updates": "checkpoint.keep_interval_updates",
    "--no-epoch-checkpoints": "checkpoint.no_epoch_checkpoints", "--cpu": "common.cpu",
}
# YAML keys with no flag of their own: the data (a required override), and what differs by
# form only (the plugin path, hydra's own settings, the log format).
YAML_ONLY = ("hydra.", "task.data", "common.user_dir", "common.log_format")


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
    assert "--criterion" in text or "exec " in text or re.search(r"^CRITERION=", text, re.M)


@pytest.mark.parametrize("config", YAML_RECIPES, ids=lambda p: p.name)
def test_yaml_recipe_names_its_criterion(config):
    assert OmegaConf.load(config).get("criterion") not in (None, "cross_entropy")


def wrapped_chain(recipe):
    """The recipe and those it wraps (`exec "$(dirname ...)/NAME.sh"`), innermost first."""
    chain = [recipe]
    while True:
        match = re.search(r'^exec "\$\(dirname "\$\{BASH_SOURCE\[0\]\}"\)/([\w.]+\.sh)"',
                          chain[0].read_text(), re.M)
        if not match:
            return chain
        chain.insert(0, chain[0].parent / match.group(1))


def resolved_defaults(recipe):
    """The environment defaults of a recipe and the recipes it wraps (a wrapper's own win), with
    the derived ones computed: WARMUP_UPDATES (empty) = WARMUP_PROPORTION of TOTAL_UPDATES."""
    defaults = {}
    for path in wrapped_chain(recipe):  # later files (the wrappers) override the recipe they wrap
        defaults.update(shell_defaults(path))
    if defaults.get("WARMUP_UPDATES") == "":
        defaults["WARMUP_UPDATES"] = str(
            int(int(defaults["TOTAL_UPDATES"]) * float(defaults["WARMUP_PROPORTION"]) + 0.5))
    return defaults


@pytest.mark.parametrize("shell, yaml", PAIRS, ids=[y for _, y in PAIRS])
def test_shell_and_yaml_have_the_same_hyperparameters(shell, yaml):
    defaults = resolved_defaults(REPO_ROOT / "recipes" / shell)
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    for var, keys in SHELL_TO_YAML.items():
        for key in keys:
            if var in defaults:
                assert same_value(defaults[var], OmegaConf.select(cfg, key)), (var, key)
            else:  # the YAML sets nothing the shell recipe leaves to fairseq
                assert OmegaConf.select(cfg, key) is None, (var, key)
    # effective batch = per-GPU batch x update_freq on one GPU
    assert int(defaults["BATCH_SIZE"]) == cfg.dataset.batch_size * cfg.optimization.update_freq[0]


def dry_run(recipe, *args, **env):
    """The fairseq-train command a recipe prints with DRY_RUN=1, on one GPU, in a clean
    environment (none of the caller's ARCH, BATCH_SIZE, ...): (argv, {flag: value or True})."""
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
             "DRY_RUN": "1", "DATA": "DATA", "NUM_GPUS": "1", "NNODES": "1", **env}
    proc = subprocess.run(["bash", str(recipe), *args], capture_output=True, text=True,
                          env=clean, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("+ "), proc.stdout
    argv = shlex.split(lines[0][2:])
    assert argv[0].endswith("fairseq-train") and argv[1] == env.get("DATA", "DATA")
    flags, i = {}, 2
    while i < len(argv):
        assert argv[i].startswith("--"), argv[i:]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            flags[argv[i]], i = argv[i + 1], i + 2
        else:
            flags[argv[i]], i = True, i + 1
    return argv, flags


def yaml_leaves(cfg):
    """Dotted keys of the YAML's values (list items as key.0)."""
    def walk(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{key}.{k}" if key else k)
        elif isinstance(value, list):
            for j, v in enumerate(value):
                yield from walk(v, f"{key}.{j}")
        else:
            yield key
    return set(walk(OmegaConf.to_container(cfg, resolve=False), ""))


@pytest.mark.parametrize("shell, yaml", PAIRS, ids=[y for _, y in PAIRS])
def test_printed_command_and_yaml_agree(shell, yaml):
    """What the shell recipe really runs on one GPU (derived values included: --update-freq,
    --warmup-updates) is, flag for flag, what the YAML sets, and the other way round."""
    _, flags = dry_run(REPO_ROOT / "recipes" / shell)
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    flags.pop("--user-dir")
    unknown = set(flags) - set(FLAG_TO_YAML)
    assert not unknown, f"add {unknown} to FLAG_TO_YAML"
    for flag, value in flags.items():
        assert same_value(value, OmegaConf.select(cfg, FLAG_TO_YAML[flag])), (flag, value)
    covered = {FLAG_TO_YAML[f] for f in flags}
    extra = {k for k in yaml_leaves(cfg) if k not in covered and not k.startswith(YAML_ONLY)}
    assert not extra, f"{yaml} sets {extra}, which the shell recipe does not pass"


def test_every_pretraining_recipe_has_a_checked_yaml_twin():
    checked = {REPO_ROOT / "recipes" / s for s, _ in PAIRS}
    assert set(PRETRAIN_SHELL) <= checked
    assert set(PRETRAIN_YAML) <= {REPO_ROOT / "recipes/config" / y for _, y in PAIRS}


@pytest.mark.parametrize("recipe", PRETRAIN_SHELL, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_hyperparameter_is_an_environment_variable(recipe):
    """Each SHELL_TO_YAML variable reaches its flag(s) through every wrapper; extra arguments
    are appended."""
    yaml_to_flag = {key: flag for flag, key in FLAG_TO_YAML.items()}
    defaults = resolved_defaults(recipe)
    env = {var: f"v{i}" for i, var in enumerate(SHELL_TO_YAML) if var in defaults}
    env.update(BATCH_SIZE="64", MAX_SENTENCES="8", CPU="1")
    argv, flags = dry_run(recipe, "--extra", "appended", **env)
    for var, value in env.items():
        for key in SHELL_TO_YAML.get(var, ()):
            assert flags[yaml_to_flag[key]] == value, (var, key)
    assert flags["--update-freq"] == "8" and flags["--cpu"] is True
    assert argv[-2:] == ["--extra", "appended"]


@pytest.mark.parametrize("arch, updates, warmup", [
    ("3ml_self_base", 153000, 9180), ("3ml_cross_base", 160000, 9600),
])
def test_longer_recipe_picks_its_updates_from_the_arch(arch, updates, warmup):
    """Table 4: 153K updates for 3ML-self, 160K for 3ML-cross; warmup 6% of them."""
    recipe = REPO_ROOT / "recipes/3ml/pretrain_longer.sh"
    _, flags = dry_run(recipe, ARCH=arch)
    assert (flags["--max-update"], flags["--total-num-update"], flags["--warmup-updates"]) == (
        str(updates), str(updates), str(warmup))
    _, flags = dry_run(recipe, ARCH=arch, TOTAL_UPDATES="1000")  # the environment wins
    assert (flags["--max-update"], flags["--warmup-updates"]) == ("1000", "60")
    _, flags = dry_run(recipe, ARCH=arch, WARMUP_UPDATES="7")
    assert flags["--warmup-updates"] == "7"


def test_update_freq_of_a_recipe_follows_the_gpus():
    """The effective batch stays the paper's 4096: 32 per GPU x 16 GPUs x 8 updates, or
    32 x 8 GPUs x 2 nodes x 8."""
    recipe = REPO_ROOT / "recipes/3ml/pretrain_efficient.sh"
    assert dry_run(recipe, NUM_GPUS="16")[1]["--update-freq"] == "8"
    assert dry_run(recipe, NUM_GPUS="8", NNODES="2")[1]["--update-freq"] == "8"


@pytest.mark.parametrize("recipe", PRETRAIN_SHELL + PRETRAIN_YAML,
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_pretraining_recipes_do_not_use_the_cross_entropy_criterion(recipe):
    """fairseq's default criterion, cross_entropy, divides the masked-LM loss by all tokens."""
    if recipe.suffix == ".sh":
        _, flags = dry_run(recipe)
        task, criterion = flags.get("--task"), flags.get("--criterion")
    else:
        cfg = OmegaConf.load(recipe)
        task, criterion = OmegaConf.select(cfg, "task._name"), cfg.get("criterion")
        if not isinstance(criterion, str) and criterion is not None:
            criterion = criterion.get("_name")
    assert task == "masked_lm"
    assert criterion not in (None, "cross_entropy")


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


def test_shell_and_yaml_3ml_demo_give_the_same_losses(tiny_data_bin, tmp_path):
    """The 3ML demo run (3ml_self_small, 40% masking, demo sizes) cut to a few updates, in both
    forms, same seed: the same loss (and per-category losses) at every update. (Also catches the
    3ML decoder layers being built from a DictConfig's vars() under fairseq-hydra-train.)"""
    updates = 4
    shell = run_cli(
        [REPO_ROOT / "recipes/3ml/demo.sh", "--log-format", "json", "--no-progress-bar",
         "--no-save"],
        env={"DATA": str(tiny_data_bin), "SAVE_DIR": str(tmp_path / "shell"),
             "TOTAL_UPDATES": str(updates), "LOG_INTERVAL": "1"},
    )
    hydra = run_cli(
        [fairseq_cli("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "recipes/config/3ml",
         "--config-name", "demo", f"task.data={tiny_data_bin}",
         f"checkpoint.save_dir={tmp_path / 'hydra'}", "common.log_format=json",
         "common.no_progress_bar=true", "checkpoint.no_save=true",
         f"optimization.max_update={updates}",
         f"lr_scheduler.total_num_update={updates}", "common.log_interval=1"],
        cwd=REPO_ROOT,
    )
    assert shell.stdout.startswith("+ ") and "--arch 3ml_self_small" in shell.stdout.splitlines()[0]
    keys = ("loss", "loss_mask", "loss_replaced", "loss_unchanged")

    def losses(proc):
        return {int(r["num_updates"]): tuple(r.get(k) for k in keys)
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
