"""Lei et al.'s recipes: pre-training (Table 3), fine-tuning (Table 4, App. B) and its grid, and
the SwishRNN-BERT demo run, which trains and gives the same losses in its shell and YAML forms."""
import math
import os
import shlex
import subprocess

import pytest
from recipe_checks import dry_run, hydra_demo

from conftest import REPO_ROOT, TINY_HYDRA_OVERRIDES, TINY_SHELL_ENV, json_log_records, run_cli


@pytest.mark.parametrize("arch, batch, lr", [
    ("swishrnn_bert_base", 1024, "0.0003"), ("swishrnn_bert_large", 4096, "0.0002"),
    ("bert_rab_base", 1024, "0.0003"), ("bert_orig_large", 4096, "0.0002"),
])
def test_swishrnn_pretraining_follows_table_3(arch, batch, lr):
    """Lei et al., Table 3: batch 1024 / lr 3e-4 (base), 4096 / 2e-4 (large); both 20K warmup
    updates, 300K updates, linear decay, Adam (0.9, 0.98), wd 0.01, dropout 0.1, 512 tokens, 15%
    masking (80/10/10); the model flags of each arch only; the effective batch on 16 GPUs."""
    gpus = 16
    _, flags = dry_run(REPO_ROOT / "recipes/swishrnn/pretrain.sh", ARCH=arch, NUM_GPUS=str(gpus))
    assert int(flags["--batch-size"]) * int(flags["--update-freq"]) * gpus == batch
    expected = {
        "--arch": arch, "--task": "masked_lm", "--criterion": "masked_lm_flops", "--lr": lr,
        "--warmup-updates": "20000", "--max-update": "300000", "--total-num-update": "300000",
        "--lr-scheduler": "polynomial_decay", "--power": "1", "--adam-betas": "(0.9,0.98)",
        "--adam-eps": "1e-06", "--weight-decay": "0.01", "--dropout": "0.1",
        "--attention-dropout": "0.1", "--tokens-per-sample": "512", "--max-positions": "512",
        "--mask-prob": "0.15", "--leave-unmasked-prob": "0.1", "--random-token-prob": "0.1",
        "--save-dir": f"checkpoints/swishrnn/{arch}",
    }
    assert {f: flags.get(f) for f in expected} == expected
    relative_bias = not arch.startswith("bert_orig")
    assert (flags.get("--rab-num-buckets"), flags.get("--rab-max-distance")) == (
        ("32", "128") if relative_bias else (None, None))
    assert flags.get("--swishrnn-step-sizes") == ("1,2,4" if arch.startswith("swishrnn") else None)
    # the environment wins over the arch's defaults
    _, flags = dry_run(REPO_ROOT / "recipes/swishrnn/pretrain.sh", ARCH=arch, BATCH_SIZE="32",
                       PEAK_LR="0.001")
    assert (flags["--update-freq"], flags["--lr"]) == ("2", "0.001")


@pytest.mark.parametrize("task, updates, classes, metric", [
    ("MNLI", 200000, 3, "accuracy"), ("mrpc", 20000, 2, "acc_and_f1"),
    ("boolq", 50000, 2, "accuracy"), ("MultiRC", 50000, 2, "f1"),
    ("STS-B", 30000, 1, "pearson_and_spearman"),
])
def test_swishrnn_finetuning_follows_table_4(task, updates, classes, metric, tmp_path):
    """Lei et al., App. B: batch 32, Adam without weight decay, a fixed lr of the grid after
    1000 warmup updates, Table 4's updates for the task, evaluation (and the best checkpoint by
    the task's metric) every 1000 updates; the pre-training checkpoint restored with fresh
    optimizer, schedule, data loader and meters, into the pre-training arch."""
    pretrained = tmp_path / "checkpoint_last.pt"
    pretrained.touch()
    recipe = REPO_ROOT / "recipes/swishrnn/finetune_glue.sh"
    _, flags = dry_run(recipe, TASK=task, PRETRAINED=str(pretrained), NUM_GPUS="2")
    assert int(flags["--batch-size"]) * int(flags["--update-freq"]) * 2 == 32
    expected = {
        "--task": "sentence_prediction", "--criterion": "sentence_prediction",
        "--max-update": str(updates), "--num-classes": str(classes), "--lr": "1e-05",
        "--lr-scheduler": "fixed", "--warmup-updates": "1000", "--weight-decay": "0.0",
        "--optimizer": "fused_adamw", "--validate-interval-updates": "1000",
        "--save-interval-updates": "1000", "--best-checkpoint-metric": metric,
        "--maximize-best-checkpoint-metric": True, "--restore-file": str(pretrained),
        "--reset-optimizer": True, "--reset-dataloader": True, "--reset-meters": True,
        "--reset-lr-scheduler": True, "--arch": "swishrnn_bert_base", "--max-positions": "512",
        "--swishrnn-step-sizes": "1,2,4", "--rab-num-buckets": "32", "--rab-max-distance": "128",
    }
    assert {f: flags.get(f) for f in expected} == expected
    assert "--total-num-update" not in flags and "--max-epoch" not in flags
    assert ("--regression-target" in flags) == (classes == 1)
    # a baseline: its arch, without the SwishRNN / relative-bias flags
    _, flags = dry_run(recipe, TASK=task, PRETRAINED=str(pretrained), ARCH="bert_orig_base",
                       LR="2e-06", SEED="3")
    assert flags["--arch"] == "bert_orig_base" and flags["--lr"] == "2e-06"
    assert not {"--swishrnn-step-sizes", "--rab-num-buckets", "--rab-max-distance"} & set(flags)
    assert flags["--save-dir"].startswith("checkpoints/glue/bert_orig_base/")
    assert flags["--save-dir"].endswith("/lr2e-06_seed3")
    assert "--classification-pooling" not in flags  # the model's default: <s>
    _, flags = dry_run(recipe, TASK=task, PRETRAINED=str(pretrained), POOLING="mean")
    assert flags["--classification-pooling"] == "mean"
    _, flags = dry_run(recipe, TASK=task, PRETRAINED=str(pretrained), POOLING="mean",
                       ARCH="bert_orig_base")
    assert (flags["--arch"], flags["--classification-pooling"]) == ("bert_orig_pooled_base", "mean")


def test_swishrnn_finetuning_rejects_unknown_task_and_missing_checkpoint(tmp_path):
    recipe = REPO_ROOT / "recipes/swishrnn/finetune_glue.sh"
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "DATA": "DATA", "NUM_GPUS": "1"}
    proc = subprocess.run(["bash", str(recipe)], capture_output=True, text=True,
                          env=dict(env, TASK="WNLI", PRETRAINED=str(recipe)))
    assert proc.returncode == 2 and "BoolQ" in proc.stderr and "MultiRC" in proc.stderr
    proc = subprocess.run(["bash", str(recipe)], capture_output=True, text=True,
                          env=dict(env, TASK="RTE", PRETRAINED=str(tmp_path / "none.pt")))
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = subprocess.run(["bash", str(recipe)], capture_output=True, text=True,
                          env=dict(env, TASK="RTE", PRETRAINED=str(recipe), POOLING="max"))
    assert proc.returncode == 2 and "POOLING=max: one of first or mean" in proc.stderr


def test_swishrnn_finetuning_grid(tmp_path):
    """The paper's grid: lr {1e-5, 5e-6, 3e-6, 2e-6} x 3 seeds, one save dir each; a dry run
    only prints the commands (and creates nothing)."""
    pretrained = tmp_path / "checkpoint_last.pt"
    pretrained.touch()
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "recipes/swishrnn/finetune_glue_grid.sh")], cwd=work,
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "DRY_RUN": "1", "DATA": "DATA", "NUM_GPUS": "1",
             "TASK": "cola", "PRETRAINED": str(pretrained)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "12 runs" and len(lines) == 13
    points = set()
    for line in lines[:-1]:
        argv = shlex.split(line[2:])
        flag = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
        assert flag["--max-update"] == "50000" and flag["--best-checkpoint-metric"] == "mcc"
        assert argv[-2:] == ["--log-format", "json"]
        points.add((flag["--lr"], flag["--seed"], flag["--save-dir"]))
    assert {(lr, seed) for lr, seed, _ in points} == {
        (lr, seed) for lr in ("1e-05", "5e-06", "3e-06", "2e-06") for seed in "123"}
    assert len({d for _, _, d in points}) == 12
    assert not any(work.iterdir())


# The SwishRNN demo at tiny size (conftest's TINY_SHELL_ENV, swishrnn_bert_tiny), a few updates.
SWISHRNN_UPDATES = 4
SWISHRNN_TINY_ENV = dict(TINY_SHELL_ENV, ARCH="swishrnn_bert_tiny",
                         TOTAL_UPDATES=str(SWISHRNN_UPDATES), LOG_INTERVAL="1")
SWISHRNN_KEYS = ("loss", "loss_mask", "loss_replaced", "loss_unchanged", "pflops")


def per_update(proc, keys=SWISHRNN_KEYS):
    return {int(r["num_updates"]): tuple(r.get(k) for k in keys)
            for r in json_log_records(proc.stdout + proc.stderr) if "loss" in r}


@pytest.fixture(scope="module")
def swishrnn_demo_shell(tiny_data_bin, tmp_path_factory):
    """recipes/swishrnn/demo.sh, tiny, run for real (fairseq-train)."""
    return run_cli(
        [REPO_ROOT / "recipes/swishrnn/demo.sh", "--log-format", "json", "--no-progress-bar",
         "--no-save"],
        env=dict(SWISHRNN_TINY_ENV, DATA=str(tiny_data_bin),
                 SAVE_DIR=str(tmp_path_factory.mktemp("swishrnn_demo"))),
    )


def test_swishrnn_demo_trains(swishrnn_demo_shell):
    """The SwishRNN-BERT demo trains: a finite loss at every update and its training FLOPs."""
    first_line = swishrnn_demo_shell.stdout.splitlines()[0]
    assert first_line.startswith("+ ") and "fairseq-train" in first_line
    argv = shlex.split(first_line[2:])
    flags = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
    assert (flags["--arch"], flags["--swishrnn-step-sizes"], flags["--criterion"]) == (
        "swishrnn_bert_tiny", "1,2,4", "masked_lm_flops")
    records = per_update(swishrnn_demo_shell)
    assert sorted(records) == list(range(1, SWISHRNN_UPDATES + 1))
    for loss, *_, pflops in records.values():
        assert math.isfinite(float(loss)) and float(pflops) > 0


def test_shell_and_yaml_swishrnn_demo_give_the_same_losses(swishrnn_demo_shell, tiny_data_bin,
                                                            tmp_path):
    """The same tiny run through fairseq-hydra-train on recipes/config/swishrnn/demo.yaml, same
    seed: the same loss, per-category losses and FLOPs at every update."""
    replaced = ("model._name=", "optimization.max_update=", "lr_scheduler.total_num_update=",
                "common.log_interval=")
    sizes = [o for o in TINY_HYDRA_OVERRIDES if not o.startswith(replaced)]
    hydra = hydra_demo("swishrnn", tiny_data_bin, tmp_path, [
        "model._name=swishrnn_bert_tiny", *sizes, "checkpoint.no_save=true",
        f"optimization.max_update={SWISHRNN_UPDATES}",
        f"lr_scheduler.total_num_update={SWISHRNN_UPDATES}", "common.log_interval=1"])
    assert per_update(hydra) == per_update(swishrnn_demo_shell)
