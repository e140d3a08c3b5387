"""Generalized-bidirectionality recipes (Artetxe et al. 2022, §3.1 and Table 2): the commands
they print with DRY_RUN=1."""
import pytest
from recipe_checks import dry_run

from conftest import REPO_ROOT

PRETRAIN = REPO_ROOT / "recipes/bidirectional/pretrain.sh"
DEMO = REPO_ROOT / "recipes/bidirectional/demo.sh"

#: Table 2: size -> (layers, dim, heads, batch in tokens, peak lr); "0.5M" tokens = 512 x 1024.
TABLE_2 = {
    "125m": (12, 768, 12, 512 * 1024, 6e-4),
    "355m": (24, 1024, 16, 512 * 1024, 3e-4),
    "1_3b": (24, 2048, 32, 1024 * 1024, 2e-4),
    "2_7b": (32, 2560, 32, 1024 * 1024, 1.6e-4),
    "6_7b": (32, 4096, 32, 2048 * 1024, 1.2e-4),
}


@pytest.mark.parametrize("size", sorted(TABLE_2))
@pytest.mark.parametrize("gpus", ["1", "8"])
def test_pretrain_follows_table_2_and_section_3_1(size, gpus):
    _, _, _, batch_tokens, lr = TABLE_2[size]
    _, flags = dry_run(PRETRAIN, VARIANT="msk_bi", SIZE=size, NUM_GPUS=gpus)
    assert flags["--arch"] == f"bidir_lm_{size}"
    assert flags["--task"] == "bidirectional_lm" and flags["--variant"] == "msk_bi"
    assert flags["--criterion"] == "bidirectional_lm"
    assert float(flags["--lr"]) == lr
    # the batch in tokens: per-GPU tokens x GPUs x update_freq
    assert int(flags["--max-tokens"]) * int(gpus) * int(flags["--update-freq"]) == batch_tokens
    # 100B tokens, sequences of 1024 with whole documents (footnote 3), 375M warmup tokens
    assert int(flags["--max-update"]) == int(flags["--total-num-update"]) == 10**11 // batch_tokens
    assert int(flags["--warmup-updates"]) == round(375e6 / batch_tokens)
    assert flags["--tokens-per-sample"] == "1024"
    assert flags["--sample-break-mode"] == "complete"
    assert flags["--mask-prob"] == "0.15" and flags["--plain-lm-prob"] == "0.1"
    assert flags["--adam-betas"] == "(0.9,0.98)" and flags["--lr-scheduler"] == "polynomial_decay"
    # 2.7B and 6.7B recompute activations to fit 80 GB (tests/test_memory_plan.py)
    assert flags.get("--checkpoint-activations", False) is (size in ("2_7b", "6_7b"))


def test_checkpoint_activations_can_be_switched():
    _, flags = dry_run(PRETRAIN, SIZE="6_7b", CHECKPOINT_ACTIVATIONS="0")
    assert "--checkpoint-activations" not in flags
    _, flags = dry_run(PRETRAIN, SIZE="125m", CHECKPOINT_ACTIVATIONS="1")
    assert flags["--checkpoint-activations"] is True
    import subprocess

    proc = subprocess.run(["bash", str(PRETRAIN)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "DATA": "D",
                               "NUM_GPUS": "1", "CHECKPOINT_ACTIVATIONS": "yes"})
    assert proc.returncode == 2 and proc.stderr == (
        "error: CHECKPOINT_ACTIVATIONS=yes: use 1 (recompute every layer's activations in the "
        "backward pass) or 0\n")


def test_pretrain_refuses_an_unknown_size_and_an_uneven_batch():
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "DATA": "D", "NUM_GPUS": "1"}
    proc = subprocess.run(["bash", str(PRETRAIN)], env={**env, "SIZE": "7b"},
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "SIZE=7b" in proc.stderr
    proc = subprocess.run(["bash", str(PRETRAIN)], env={**env, "MAX_TOKENS": "3000"},
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "BATCH_TOKENS=524288 is not a multiple of MAX_TOKENS=3000" in proc.stderr


def test_demo_is_a_cpu_sized_pretrain():
    _, flags = dry_run(DEMO)
    assert flags["--arch"] == "bidir_lm_mini" and flags["--variant"] == "hyb_pre"
    assert flags["--cpu"] is True and flags["--max-update"] == "600"
    assert flags["--tokens-per-sample"] == "64" and flags["--update-freq"] == "1"
    assert flags["--document-format"] == "lines"  # one line of text per document (README)


#: Each environment variable of pretrain.sh and the flag it sets.
ENV_TO_FLAG = {
    "VARIANT": "--variant", "ARCH": "--arch", "TOKENS_PER_SAMPLE": "--tokens-per-sample",
    "SAMPLE_BREAK_MODE": "--sample-break-mode", "DOCUMENT_FORMAT": "--document-format",
    "MASK_PROB": "--mask-prob",
    "PLAIN_LM_PROB": "--plain-lm-prob", "MAX_TOKENS": "--max-tokens", "PEAK_LR": "--lr",
    "TOTAL_UPDATES": "--max-update", "WARMUP_UPDATES": "--warmup-updates",
    "LR_POWER": "--power", "ADAM_BETAS": "--adam-betas", "ADAM_EPS": "--adam-eps",
    "WEIGHT_DECAY": "--weight-decay", "CLIP_NORM": "--clip-norm", "DROPOUT": "--dropout",
    "ATTENTION_DROPOUT": "--attention-dropout", "CRITERION": "--criterion",
    "OPTIMIZER": "--optimizer", "SEED": "--seed", "LOG_INTERVAL": "--log-interval",
    "SAVE_INTERVAL_UPDATES": "--save-interval-updates", "NUM_WORKERS": "--num-workers",
    "SAVE_DIR": "--save-dir", "DATA_BUFFER_SIZE": "--data-buffer-size",
}


@pytest.mark.parametrize("recipe", [PRETRAIN, DEMO], ids=["pretrain", "demo"])
def test_every_hyperparameter_is_an_environment_variable(recipe):
    env = {var: f"v{i}" for i, var in enumerate(ENV_TO_FLAG)}
    env.update(MAX_TOKENS="1024", BATCH_TOKENS="8192", CPU="1")
    argv, flags = dry_run(recipe, "--extra", "appended", **env)
    for var, flag in ENV_TO_FLAG.items():
        assert flags[flag] == env[var], (var, flag)
    assert flags["--total-num-update"] == env["TOTAL_UPDATES"]
    assert flags["--update-freq"] == "8" and flags["--cpu"] is True
    assert argv[-2:] == ["--extra", "appended"]


#: fairseq-train flag of the shell recipes -> the hydra key of their YAML twins.
FLAG_TO_YAML = {
    "--task": "task._name", "--variant": "task.variant", "--criterion": "criterion",
    "--arch": "model._name", "--max-target-positions": "model.max_target_positions",
    "--tokens-per-sample": "task.tokens_per_sample",
    "--sample-break-mode": "task.sample_break_mode", "--mask-prob": "task.mask_prob",
    "--document-format": "task.document_format",
    "--plain-lm-prob": "task.plain_lm_prob", "--dropout": "model.dropout",
    "--attention-dropout": "model.attention_dropout", "--optimizer": "optimizer._name",
    "--adam-betas": "optimizer.adam_betas", "--adam-eps": "optimizer.adam_eps",
    "--weight-decay": "optimizer.weight_decay", "--clip-norm": "optimization.clip_norm",
    "--lr-scheduler": "lr_scheduler._name", "--power": "lr_scheduler.power",
    "--lr": "optimization.lr.0", "--warmup-updates": "lr_scheduler.warmup_updates",
    "--total-num-update": "lr_scheduler.total_num_update",
    "--max-update": "optimization.max_update", "--max-tokens": "dataset.max_tokens",
    "--update-freq": "optimization.update_freq.0", "--seed": "common.seed",
    "--num-workers": "dataset.num_workers", "--log-interval": "common.log_interval",
    "--save-dir": "checkpoint.save_dir",
    "--save-interval-updates": "checkpoint.save_interval_updates",
    "--keep-interval-updates": "checkpoint.keep_interval_updates",
    "--log-format": "common.log_format", "--log-file": "common.log_file",
}


@pytest.mark.parametrize("recipe, config", [(PRETRAIN, "pretrain_125m.yaml"), (DEMO, "demo.yaml")],
                         ids=["pretrain_125m", "demo"])
def test_yaml_twin_holds_the_shell_recipes_values(recipe, config):
    from omegaconf import OmegaConf

    from fairseq_ext.training.hydra_config import register_resolvers

    register_resolvers()
    cfg = OmegaConf.load(REPO_ROOT / "recipes/config/bidirectional" / config)
    _, flags = dry_run(recipe)
    for flag, key in FLAG_TO_YAML.items():
        shell, yaml = flags[flag], OmegaConf.select(cfg, key)
        try:
            assert float(shell) == float(yaml), (flag, key)
        except ValueError:
            assert str(shell).replace(" ", "") == str(yaml).replace(" ", ""), (flag, key)
    assert flags.get("--cpu", False) is bool(OmegaConf.select(cfg, "common.cpu"))
    # the demo's prefetch setting (the paper recipe leaves fairseq's default to both forms)
    buffer = OmegaConf.select(cfg, "dataset.data_buffer_size")
    assert flags.get("--data-buffer-size") == (None if buffer is None else str(buffer))
    for switch, key in (("--no-epoch-checkpoints", "checkpoint.no_epoch_checkpoints"),
                        ("--skip-invalid-size-inputs-valid-test",
                         "dataset.skip_invalid_size_inputs_valid_test")):
        assert flags[switch] is True and OmegaConf.select(cfg, key) is True
    # every flag our model adds can be overridden as model.KEY=VALUE (null: the arch's default)
    from test_recipes import plugin_model_keys

    assert plugin_model_keys(cfg.model._name) <= set(cfg.model)
