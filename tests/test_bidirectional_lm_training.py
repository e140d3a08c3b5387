"""Generalized bidirectionality end to end: a tiny model of every Table 1
variant trains with ``fairseq-train --task bidirectional_lm --variant V``, the demo YAML trains
through ``fairseq-hydra-train`` with the shell recipe's losses. Exact resume (HybPre, bit for
bit) is in ``tests/test_exact_resume.py`` with the other families."""
import math

import pytest

from conftest import REPO_ROOT, USER_DIR, fairseq_cli, json_log_records, run_cli
from fairseq_ext.data.bidirectional_sampling import VARIANTS

TINY = ["--arch", "bidir_lm_tiny", "--tokens-per-sample", "64", "--max-tokens", "512",
        "--optimizer", "adam", "--lr", "1e-3", "--log-interval", "1", "--log-format", "json",
        "--no-progress-bar", "--cpu", "--num-workers", "0", "--seed", "3",
        "--no-epoch-checkpoints"]


def train(data, save_dir, *extra, updates=3):
    proc = run_cli([fairseq_cli("fairseq-train"), data, "--user-dir", USER_DIR,
                    "--task", "bidirectional_lm", "--criterion", "bidirectional_lm", *TINY,
                    "--max-update", str(updates), "--save-dir", save_dir, *extra])
    return json_log_records(proc.stdout + proc.stderr)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_trains(variant, tiny_data_bin, tmp_path):
    records = train(tiny_data_bin, tmp_path / "ckpt", "--variant", variant, "--mask-prob", "0.3")
    assert [int(r["num_updates"]) for r in records] == [1, 2, 3]
    for record in records:
        assert math.isfinite(float(record["loss"])) and float(record["pflops"]) > 0
        masks = variant.startswith(("msk", "hyb"))
        next_tokens = not variant.startswith("msk")
        # the categories a variant predicts are the ones it logs
        assert ("loss_mask" in record) == masks, record
        assert ("loss_next" in record) == next_tokens, record
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").is_file()


def test_hydra_demo_yaml_gives_the_shell_recipes_losses(tiny_data_bin, tmp_path):
    updates, sizes = 4, {"TOKENS_PER_SAMPLE": "64", "MAX_TOKENS": "512", "BATCH_TOKENS": "512"}
    shell = run_cli([REPO_ROOT / "recipes/bidirectional/demo.sh", "--log-format", "json",
                     "--no-progress-bar", "--log-interval", "1", "--arch", "bidir_lm_tiny"],
                    env={"DATA": str(tiny_data_bin), "SAVE_DIR": str(tmp_path / "shell"),
                         "TOTAL_UPDATES": str(updates), "WARMUP_UPDATES": "2", **sizes})
    hydra = run_cli([fairseq_cli("fairseq-hydra-train"), "--config-dir",
                     REPO_ROOT / "recipes/config/bidirectional", "--config-name", "demo",
                     f"task.data={tiny_data_bin}", f"checkpoint.save_dir={tmp_path / 'hydra'}",
                     "model._name=bidir_lm_tiny", "task.tokens_per_sample=64",
                     "model.max_target_positions=64", "dataset.max_tokens=512",
                     f"optimization.max_update={updates}",
                     f"lr_scheduler.total_num_update={updates}",
                     "lr_scheduler.warmup_updates=2", "common.log_interval=1"], cwd=REPO_ROOT)
    shell_losses = [r["loss"] for r in json_log_records(shell.stdout + shell.stderr)]
    hydra_losses = [r["loss"] for r in json_log_records(hydra.stdout + hydra.stderr)]
    assert len(shell_losses) == updates and shell_losses == hydra_losses
