"""Recipe conventions shared by every paper (recipes/lib/common.sh, the shell and YAML forms of
each recipe agreeing, the RoBERTa demo run to the loss at every update). Each paper's own recipe
tests live with it: test_three_ml_recipes.py, test_swishrnn_recipes.py."""
import fnmatch
import os
import re
import subprocess

import pytest
import torch
from omegaconf import OmegaConf
from recipe_checks import dry_run, hydra_demo

from conftest import (
    REPO_ROOT,
    TINY_HYDRA_OVERRIDES,
    USER_DIR,
    json_log_records,
    run_cli,
    train_with_hydra_recipe,
)
from fairseq_ext.training.hydra_config import register_resolvers

register_resolvers()  # the YAMLs' ${fairseq_ext.user_dir:}, which fairseq-hydra-train registers

SHELL_RECIPES = sorted(p for p in (REPO_ROOT / "recipes").rglob("*.sh") if p.parent.name != "lib")
YAML_RECIPES = sorted((REPO_ROOT / "recipes/config").rglob("*.yaml"))
# Masked-LM pre-training recipes: all but the fine-tuning ones (named finetune*) and the
# generalized-bidirectionality ones (another task, batches in tokens; checked by
# tests/test_bidirectional_recipes.py).
MLM_PAPERS_EXCLUDED = {"bidirectional"}
# recipes/studies/ run scripts/study.py, which trains through the recipes checked here
PRETRAIN_SHELL = [p for p in SHELL_RECIPES if not p.name.startswith("finetune")
                  and p.parent.name not in MLM_PAPERS_EXCLUDED | {"studies"}]
PRETRAIN_YAML = [p for p in YAML_RECIPES if not p.name.startswith("finetune")
                 and p.parent.name not in MLM_PAPERS_EXCLUDED]

# Each shell recipe (relative to recipes/) and its hydra twin (relative to recipes/config/).
PAIRS = [
    ("roberta/pretrain.sh", "roberta/pretrain.yaml"),
    ("roberta/demo.sh", "roberta/demo.yaml"),
    ("roberta/english_prose.sh", "roberta/english_prose.yaml"),
    ("roberta/english.sh", "roberta/english.yaml"),
    ("3ml/pretrain_efficient.sh", "3ml/pretrain_efficient.yaml"),
    ("3ml/pretrain_longer.sh", "3ml/pretrain_longer.yaml"),
    ("3ml/baseline_24hbert.sh", "3ml/baseline_24hbert.yaml"),
    ("3ml/baseline_roberta.sh", "3ml/baseline_roberta.yaml"),
    ("3ml/demo.sh", "3ml/demo.yaml"),
    ("3ml/english.sh", "3ml/english.yaml"),
    ("swishrnn/pretrain.sh", "swishrnn/pretrain_base.yaml"),
    ("swishrnn/pretrain.sh", "swishrnn/pretrain_large.yaml"),
    ("swishrnn/demo.sh", "swishrnn/demo.yaml"),
]
# The environment under which a shell recipe has its twin's values (by YAML), when not its own
# defaults: pretrain.sh picks Table 3's large column from the arch.
PAIR_ENV = {"swishrnn/pretrain_large.yaml": {"ARCH": "swishrnn_bert_large"}}

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
    # model flags (an empty default: the flag is not passed, and the YAML sets nothing)
    "RAB_NUM_BUCKETS": ["model.rab_num_buckets"],
    "RAB_MAX_DISTANCE": ["model.rab_max_distance"],
    "SWISHRNN_STEP_SIZES": ["model.swishrnn_step_sizes"],
    "NORMALIZATION": ["model.normalization"],
    "DATA_BUFFER_SIZE": ["dataset.data_buffer_size"],
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
    "--rab-num-buckets": "model.rab_num_buckets", "--rab-max-distance": "model.rab_max_distance",
    "--swishrnn-step-sizes": "model.swishrnn_step_sizes",
    "--normalization": "model.normalization",
    "--data-buffer-size": "dataset.data_buffer_size",
    "--no-save-on-signal": "checkpoint.no_save_on_signal",
    "--encoder-normalize-before": "model.encoder_normalize_before",
    "--layernorm-embedding": "model.layernorm_embedding",
    "--log-format": "common.log_format", "--log-file": "common.log_file",
    "--decoder-layers": "model.decoder_layers", "--decoder-embed-dim": "model.decoder_embed_dim",
    "--decoder-ffn-embed-dim": "model.decoder_ffn_embed_dim",
    "--decoder-attention-heads": "model.decoder_attention_heads",
}
# YAML keys with no flag of their own: the data (a required override), and what differs by
# form only (the plugin path, hydra's own settings).
YAML_ONLY = ("hydra.", "task.data", "common.user_dir")


# `NAME="${NAME:-default}"` or `export NAME=...`; the default may name other variables (`${ARCH}`).
ASSIGNMENT = r'(?:export\s+)?(\w+)="\$\{\1:-((?:[^}$]|\$\{\w+\})*)\}"'
# `if [[ "${ARCH}" == PATTERN [|| "${ARCH}" == PATTERN] ]]; then ASSIGNMENTS; fi`, on one
# line or more: defaults that depend on the arch.
ARCH_DEFAULTS = re.compile(
    r'^if \[\[ ((?:"\$\{ARCH\}" == \S+(?: \|\| )?)+) \]\]; then(.*?)\bfi$', re.M | re.S)


def shell_defaults(path, arch=None):
    """The assignments of a recipe at the start of a line, and for ARCH=`arch` those of its
    `if [[ "${ARCH}" == ... ]]` blocks, which come first in the script, so win."""
    text = path.read_text()
    defaults = dict(re.findall("^" + ASSIGNMENT, text, re.M))
    for condition, body in ARCH_DEFAULTS.findall(text):
        if arch and any(fnmatch.fnmatchcase(arch, p) for p in re.findall(r"== (\S+)", condition)):
            defaults.update(re.findall(ASSIGNMENT, body))
    return defaults


def same_value(shell_value, yaml_value):
    try:
        return float(shell_value) == float(yaml_value)
    except (TypeError, ValueError):
        return str(shell_value).replace(" ", "") == str(yaml_value).replace(" ", "")


@pytest.mark.parametrize("recipe", SHELL_RECIPES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shell_recipe_conventions(recipe):
    text = recipe.read_text()
    assert "set -euo pipefail" in text
    # The fine-tuning grid trains, then reports through evaluation.finetune_grid.
    if re.search(r"fairseq_ext\.evaluation\.(?!finetune_grid\b)|fairseq-validate", text):
        # an evaluation recipe: it scores checkpoints with the criterion they were trained with
        assert "fairseq-train" not in text and "--criterion" not in text
        return
    if re.search(r'"\$\{RECIPES_DIR\}/[\w/]+\.sh"', text) and "exec " not in text:
        # a driver of other recipes (compare_variants.sh): those name their criterion
        return
    # Every training recipe names its criterion (directly, or through the recipe it wraps).
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


def resolved_defaults(recipe, env=None):
    """The environment defaults of a recipe and the recipes it wraps (a wrapper's own win), under
    `env` (which wins; its ARCH picks the arch-dependent defaults), with the derived ones
    computed: `${VAR}` in a default, WARMUP_UPDATES (empty) = WARMUP_PROPORTION of TOTAL_UPDATES."""
    env, chain = env or {}, wrapped_chain(recipe)
    arch = env.get("ARCH") or next(
        (shell_defaults(p)["ARCH"] for p in reversed(chain) if "ARCH" in shell_defaults(p)), None)
    defaults = {}
    for path in chain:  # later files (the wrappers) override the recipe they wrap
        defaults.update(shell_defaults(path, arch))
    defaults.update(env)
    for var, value in defaults.items():
        defaults[var] = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], value)
    if defaults.get("WARMUP_UPDATES") == "":
        defaults["WARMUP_UPDATES"] = str(
            int(int(defaults["TOTAL_UPDATES"]) * float(defaults["WARMUP_PROPORTION"]) + 0.5))
    return defaults


@pytest.mark.parametrize("shell, yaml", PAIRS, ids=[y for _, y in PAIRS])
def test_shell_and_yaml_have_the_same_hyperparameters(shell, yaml):
    defaults = resolved_defaults(REPO_ROOT / "recipes" / shell, PAIR_ENV.get(yaml))
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    for var, keys in SHELL_TO_YAML.items():
        for key in keys:
            if defaults.get(var, "") != "":
                assert same_value(defaults[var], OmegaConf.select(cfg, key)), (var, key)
            else:  # the YAML sets nothing the shell recipe leaves to fairseq
                assert OmegaConf.select(cfg, key) is None, (var, key)
    # effective batch = per-GPU batch x update_freq on one GPU
    assert int(defaults["BATCH_SIZE"]) == cfg.dataset.batch_size * cfg.optimization.update_freq[0]


def yaml_values(cfg, resolve=False):
    """{dotted key: value} of the YAML's values (list items as key.0; `???` as such), with its
    interpolations (`${checkpoint.save_dir}/train.log`) resolved if `resolve`."""
    def walk(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{key}.{k}" if key else k)
        elif isinstance(value, list):
            for j, v in enumerate(value):
                yield from walk(v, f"{key}.{j}")
        else:
            yield key, value
    return dict(walk(OmegaConf.to_container(cfg, resolve=resolve), ""))


def yaml_leaves(cfg):
    """Dotted keys of the YAML's values (list items as key.0)."""
    return set(yaml_values(cfg))


def assert_command_is_the_yaml(flags, cfg, flag_to_yaml, required=(), name="the YAML"):
    """Each flag of a printed command has its value in the YAML (under one key or several), and
    the YAML sets nothing else but YAML_ONLY keys; `required` keys are `???` in the YAML (the
    overrides a user must give, e.g. the checkpoint to restore)."""
    values = yaml_values(cfg, resolve=True)
    flags = dict(flags)
    flags.pop("--user-dir")
    unknown = set(flags) - set(flag_to_yaml)
    assert not unknown, f"add {unknown} to the flag -> YAML mapping"
    covered = set()
    for flag, value in flags.items():
        keys = flag_to_yaml[flag]
        for key in [keys] if isinstance(keys, str) else keys:
            covered.add(key)
            if key in required:
                assert values.get(key) == "???", (flag, key)
            else:
                assert same_value(value, values.get(key)), (flag, value, key)
    # a null key sets nothing: the arch's default applies, as when its flag is not passed
    extra = {k for k, v in values.items()
             if k not in covered and v is not None and not k.startswith(YAML_ONLY)}
    assert not extra, f"{name} sets {extra}, which the shell recipe does not pass"


@pytest.mark.parametrize("shell, yaml", PAIRS, ids=[y for _, y in PAIRS])
def test_printed_command_and_yaml_agree(shell, yaml):
    """What the shell recipe really runs on one GPU (derived values included: --update-freq,
    --warmup-updates) is, flag for flag, what the YAML sets, and the other way round."""
    _, flags = dry_run(REPO_ROOT / "recipes" / shell, **PAIR_ENV.get(yaml, {}))
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    assert_command_is_the_yaml(flags, cfg, FLAG_TO_YAML, name=yaml)


# Fine-tuning recipes and their twins, with the environment that gives the twin's values.
FINETUNE_PAIRS = [
    ("swishrnn/finetune_glue.sh", "swishrnn/finetune_glue.yaml", {"TASK": "RTE"}),
]
FINETUNE_FLAG_TO_YAML = {
    **FLAG_TO_YAML,
    "--max-positions": ("model.max_positions", "task.max_positions"),
    "--restore-file": "checkpoint.restore_file",
    "--reset-optimizer": "checkpoint.reset_optimizer",
    "--reset-dataloader": "checkpoint.reset_dataloader",
    "--reset-meters": "checkpoint.reset_meters",
    "--reset-lr-scheduler": "checkpoint.reset_lr_scheduler",
    "--num-classes": "task.num_classes", "--init-token": "task.init_token",
    "--separator-token": "task.separator_token", "--shorten-method": "task.shorten_method",
    "--regression-target": "task.regression_target",
    "--required-batch-size-multiple": "dataset.required_batch_size_multiple",
    "--find-unused-parameters": "distributed_training.find_unused_parameters",
    "--valid-subset": "dataset.valid_subset",
    "--validate-interval": "dataset.validate_interval",
    "--validate-interval-updates": "dataset.validate_interval_updates",
    "--save-interval": "checkpoint.save_interval",
    "--best-checkpoint-metric": "checkpoint.best_checkpoint_metric",
    "--maximize-best-checkpoint-metric": "checkpoint.maximize_best_checkpoint_metric",
    "--no-last-checkpoints": "checkpoint.no_last_checkpoints",
    "--max-epoch": "optimization.max_epoch",
}


@pytest.mark.parametrize("shell, yaml, env", FINETUNE_PAIRS, ids=[y for _, y, _ in FINETUNE_PAIRS])
def test_finetune_command_and_yaml_agree(shell, yaml, env, tmp_path):
    """As test_printed_command_and_yaml_agree for a fine-tuning recipe (its checkpoint to restore
    is the YAML's required override)."""
    pretrained = tmp_path / "checkpoint_last.pt"
    pretrained.touch()  # the recipe checks that it exists
    _, flags = dry_run(REPO_ROOT / "recipes" / shell, PRETRAINED=str(pretrained), **env)
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config" / yaml)
    assert_command_is_the_yaml(flags, cfg, FINETUNE_FLAG_TO_YAML,
                               required=("checkpoint.restore_file",), name=yaml)


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


def fairseq_train_args(argv):
    """The arguments fairseq-train would run with, parsed by its own parser."""
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), input_args=argv[1:])


@pytest.mark.parametrize("recipe", ["roberta/demo.sh", "swishrnn/finetune_glue.sh"])
def test_recipes_log_json_to_save_dir_unless_the_user_says_otherwise(recipe, tmp_path):
    """By default a recipe's JSON records go to SAVE_DIR/train.log (what plot_curves.py reads);
    a --log-format / --log-file given after the recipe is what fairseq-train takes, and
    LOG_FILE= (empty) leaves the records on stdout only."""
    pretrained = tmp_path / "checkpoint_last.pt"
    pretrained.touch()
    env = {"TASK": "RTE", "PRETRAINED": str(pretrained), "SAVE_DIR": str(tmp_path / "run")}
    args = fairseq_train_args(dry_run(REPO_ROOT / "recipes" / recipe, **env)[0])
    assert (args.log_format, args.log_file) == ("json", str(tmp_path / "run/train.log"))
    assert not (tmp_path / "run").exists()  # DRY_RUN=1 makes no folder

    argv, _ = dry_run(REPO_ROOT / "recipes" / recipe, "--log-format", "simple",
                      "--log-file", str(tmp_path / "mine.log"), **env)
    args = fairseq_train_args(argv)
    assert (args.log_format, args.log_file) == ("simple", str(tmp_path / "mine.log"))

    argv, flags = dry_run(REPO_ROOT / "recipes" / recipe, LOG_FILE="", **env)
    assert "--log-file" not in flags and flags["--log-format"] == "json"


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


FAKE_FINETUNE_RUN = r"""#!/usr/bin/env bash
# Stands in for finetune_glue.sh: logs a command line and fairseq json records whose scores
# follow LR and SEED (matched: 80 + seed + 10 lr/1e-5 at the second validation; mismatched: 10 less).
echo "+ fairseq-train DATA --valid-subset valid,valid1 --best-checkpoint-metric accuracy" \
  "--maximize-best-checkpoint-metric $*"
m=$(awk -v lr="$LR" -v s="$SEED" 'BEGIN { printf "%g", 80 + s + 10 * lr / 1e-5 }')
echo "{\"epoch\": 1, \"valid_loss\": \"0.9\", \"valid_accuracy\": \"50\"}"
echo "{\"epoch\": 1, \"valid1_loss\": \"0.9\", \"valid1_accuracy\": \"40\"}"
echo "{\"epoch\": 2, \"valid_loss\": \"0.5\", \"valid_accuracy\": \"$m\"}"
mm=$(awk -v m="$m" 'BEGIN { print m - 10 }')
echo "{\"epoch\": 2, \"valid1_loss\": \"0.5\", \"valid1_accuracy\": \"$mm\"}"
"""


@pytest.mark.parametrize("grid, env, expected", [
    # 3ML (Table 5): per seed the best over the grid (lr 3e-5 wins: 80 + seed + 30), then the
    # median over the seeds 1..3: seed 2 -> 112 matched, 102 mismatched
    ("3ml/finetune_glue_grid.sh",
     {"LRS": "1e-05 3e-05", "BATCH_SIZES": "32", "EPOCHS_LIST": "3", "SEEDS": "1 2 3"},
     ["valid: median over 3 seeds: 112", "valid1: median over 3 seeds: 102"]),
    # SwishRNN (Lei et al.): per lr the mean over the seeds, then the best lr: 3e-5, mean 112
    ("swishrnn/finetune_glue_grid.sh", {"LRS": "1e-05 3e-05", "SEEDS": "1 2 3"},
     ["valid: best lr 3e-05: 112.0000 (mean of 3 runs)",
      "valid1: best lr 3e-05: 102.0000 (mean of 3 runs)"]),
])
def test_grid_scores_mnli_matched_and_mismatched(grid, env, expected, tmp_path):
    """fairseq logs MNLI's second dev set (valid1, mismatched) as valid1_*: the grids score it
    beside the matched one, with the paper's aggregate for each."""
    fake = tmp_path / "fake_finetune.sh"
    fake.write_text(FAKE_FINETUNE_RUN)
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "recipes" / grid)], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "TASK": "mnli", "FINETUNE_RECIPE": str(fake),
             "SAVE_ROOT": str(tmp_path / "grid"), **env})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for line in expected:
        assert line in lines, proc.stdout
    rows = [r.split("\t") for r in (tmp_path / "grid/results.tsv").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 3  # (lr x seed) runs x (valid, valid1)
    assert {r[-2] for r in rows} == {"valid", "valid1"}
    # every run is marked done: a second call resumes without running anything again
    again = subprocess.run(
        ["bash", str(REPO_ROOT / "recipes" / grid)], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "TASK": "mnli", "FINETUNE_RECIPE": str(fake),
             "SAVE_ROOT": str(tmp_path / "grid"), **env})
    assert again.stdout.count("done already") == 6 and again.returncode == 0


# --- hydra: plain model overrides, any working directory -----------------------------------

# fairseq's size flags: every YAML lists them, so that model.encoder_layers=N works as written.
SIZE_KEYS = {"encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
             "encoder_attention_heads"}
# The YAMLs whose model is a pre-training arch; 3ml/finetune_glue.yaml fine-tunes an export,
# whose sizes scripts/export_encoder.py --print-finetune-args gives.
MODEL_YAMLS = [p for p in YAML_RECIPES if p.relative_to(REPO_ROOT / "recipes/config").as_posix()
               != "3ml/finetune_glue.yaml"]


def flags_of(model_class):
    """The dests of the flags a fairseq model declares in add_args."""
    import argparse

    parser = argparse.ArgumentParser()
    model_class.add_args(parser)
    return set(vars(parser.parse_args([])))


def plugin_model_keys(arch):
    """The model keys fairseq_ext adds for `arch` to those of fairseq's RoBERTa."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.roberta import RobertaModel

    return flags_of(ARCH_MODEL_REGISTRY[arch]) - flags_of(RobertaModel)


def test_plugin_model_keys_are_the_flags_our_models_add():
    assert plugin_model_keys("3ml_cross_base") == {
        "decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads",
        "cross_memory_positions", "normalization", "static_sizes"}
    assert plugin_model_keys("roberta_base") == set()


@pytest.mark.parametrize("config", MODEL_YAMLS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_yaml_lists_every_model_key(config):
    """Our models take argparse flags (add_args), so fairseq's hydra schema for `model` has only
    the keys the YAML has, and `model.KEY=VALUE` on any other key fails (`Key 'decoder_layers'
    is not in struct`). Each YAML lists the sizes and every flag our model adds; null ones take
    the arch's default (fairseq's safe_getattr treats None as unset)."""
    model = OmegaConf.load(config).model
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.roberta import RobertaModel

    # the encoder sizes of RoBERTa-family models (a decoder-only model's are among its flags)
    sizes = SIZE_KEYS if issubclass(ARCH_MODEL_REGISTRY[model._name], RobertaModel) else set()
    missing = (sizes | plugin_model_keys(model._name)) - set(model)
    assert not missing, f"add {sorted(missing)} (null: the arch's default) to {config}'s model"


def layer_indices(state, prefix):
    return {int(k[len(prefix):].split(".")[0]) for k in state if k.startswith(prefix)}


TINY_HYDRA = [o for o in TINY_HYDRA_OVERRIDES if not o.startswith("model._name=")] + [
    "optimization.max_update=2", "lr_scheduler.total_num_update=2",
    "lr_scheduler.warmup_updates=1", "dataset.num_workers=0"]


@pytest.mark.parametrize("paper", ["3ml", "swishrnn"])
def test_hydra_yaml_takes_plain_model_overrides_from_any_directory(paper, tiny_data_bin,
                                                                   tmp_path):
    """`model.decoder_layers=3` as fairseq users write it (no `+`), run from a directory outside
    the repository with nothing set: the built model has the overridden sizes, and the
    checkpoint names the installed plugin as its user dir."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    save_dir = tmp_path / "checkpoints"
    if paper == "3ml":
        overrides = ["model._name=3ml_self_tiny", "model.encoder_layers=1",
                     "model.decoder_layers=3", "model.decoder_embed_dim=16",
                     "model.decoder_attention_heads=2"]
    else:
        overrides = ["model._name=swishrnn_bert_tiny", "model.encoder_layers=3",
                     "model.rab_shared_across_layers=true"]
    hydra_demo(paper, tiny_data_bin, save_dir, [*TINY_HYDRA, *overrides], cwd=outside)

    checkpoint = torch.load(save_dir / "checkpoint_last.pt", weights_only=False)
    cfg, state = checkpoint["cfg"], checkpoint["model"]
    assert cfg["common"]["user_dir"] == str(USER_DIR)
    encoder_layers = layer_indices(state, "encoder.sentence_encoder.layers.")
    if paper == "3ml":
        assert (cfg["model"]["encoder_layers"], cfg["model"]["decoder_layers"]) == (1, 3)
        assert encoder_layers == {0} and layer_indices(state, "mask_decoder.layers.") == {0, 1, 2}
        # the decoder FFN follows the overridden dim (4 x 16): the null keys took the arch's rule
        assert state["mask_decoder.layers.0.fc1.weight"].shape == (64, 16)
        assert cfg["model"]["normalization"] == "pre-ln"  # the demo's (the arch's is post-LN)
    else:
        assert cfg["model"]["rab_shared_across_layers"] is True
        assert encoder_layers == {0, 1, 2}
        tables = [v for k, v in state.items() if k.endswith("position_bias.relative_attention_bias.weight")]
        assert len(tables) == 3 and all(torch.equal(t, tables[0]) for t in tables)
    assert not list(outside.iterdir())  # nothing written where it ran


def test_the_3ml_english_recipe_spends_the_flops_of_the_roberta_english_recipe(tmp_path):
    """recipes/3ml/english.sh's updates are those that buy RoBERTa-15%'s 24,000 updates of
    recipes/roberta/english.sh (both read as their commands print them, on the English
    corpus's 8,000-piece vocabulary), and its warm-up the same 5% share."""
    from fairseq_ext_lab.budget import command_option, equal_flops_updates, planned_command
    from fairseq_ext_lab.recipe_runs import RecipeRun

    (tmp_path / "dict.txt").write_text("".join(f"piece{i} 1\n" for i in range(7997)))
    roberta = RecipeRun("roberta-15%", "recipes/roberta/english.sh")
    three_ml = RecipeRun("3ml-self-40%", "recipes/3ml/english.sh")
    roberta_updates, three_ml_updates = equal_flops_updates([roberta, three_ml], tmp_path)
    command = planned_command(three_ml, tmp_path)
    assert roberta_updates == 24000
    assert int(command_option(command, "--max-update")) == three_ml_updates == 19591
    baseline = planned_command(roberta, tmp_path)
    share = int(command_option(baseline, "--warmup-updates")) / roberta_updates
    assert int(command_option(command, "--warmup-updates")) == round(share * three_ml_updates)


#: A pre-training recipe of each family and the fine-tuning one (recipes/lib/common.sh's
#: add_pretraining_flags and run_sentence_prediction).
SIGNAL_RECIPES = ["roberta/demo.sh", "roberta/pretrain.sh", "3ml/pretrain_efficient.sh",
                  "swishrnn/demo.sh", "bidirectional/pretrain.sh", "swishrnn/finetune_glue.sh"]


@pytest.mark.parametrize("recipe", SIGNAL_RECIPES)
def test_recipes_save_on_a_signal_unless_save_on_signal_0(recipe, tmp_path):
    """fairseq-train saves and exits 75 on SIGTERM/SIGUSR1 by default (docs/scaling.md,
    "Preemption"); SAVE_ON_SIGNAL=0 passes --no-save-on-signal."""
    pretrained = tmp_path / "model.pt"
    pretrained.touch()  # the recipe checks that it exists
    env = {"TASK": "RTE", "PRETRAINED": str(pretrained)} if "finetune" in recipe else {}
    _, flags = dry_run(REPO_ROOT / "recipes" / recipe, **env)
    assert "--no-save-on-signal" not in flags
    _, flags = dry_run(REPO_ROOT / "recipes" / recipe, SAVE_ON_SIGNAL="0", **env)
    assert flags["--no-save-on-signal"] is True


def test_save_on_signal_takes_0_or_1_and_says_so():
    proc = subprocess.run(["bash", REPO_ROOT / "recipes" / "roberta" / "demo.sh"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "DRY_RUN": "1", "DATA": "DATA",
                               "SAVE_ON_SIGNAL": "yes"})
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip() == ("error: SAVE_ON_SIGNAL=yes must be 1 (save and exit 75 on "
                                   "SIGTERM/SIGUSR1) or 0 (--no-save-on-signal)")
