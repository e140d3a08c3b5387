"""3ML's recipes (Liao et al., Table 4): the longer recipe's updates per variant, and the demo
run in its shell and YAML forms giving the same losses. The GLUE fine-tuning recipes are tested
with the export they fine-tune, in test_three_ml_export.py."""
import pytest
from recipe_checks import dry_run, hydra_demo

from conftest import REPO_ROOT, json_log_records, run_cli


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


def test_shell_and_yaml_3ml_demo_give_the_same_losses(tiny_data_bin, tmp_path):
    """The 3ML demo run (3ml_self_mini, 40% masking, demo sizes) cut to a few updates, in both
    forms, same seed: the same loss (and per-category losses) at every update. (Also catches the
    3ML decoder layers being built from a DictConfig's vars() under fairseq-hydra-train.)"""
    updates = 4
    shell = run_cli(
        [REPO_ROOT / "recipes/3ml/demo.sh", "--log-format", "json", "--no-progress-bar",
         "--no-save"],
        env={"DATA": str(tiny_data_bin), "SAVE_DIR": str(tmp_path / "shell"),
             "TOTAL_UPDATES": str(updates), "LOG_INTERVAL": "1"},
    )
    hydra = hydra_demo("3ml", tiny_data_bin, tmp_path / "hydra", [
        "checkpoint.no_save=true", f"optimization.max_update={updates}",
        f"lr_scheduler.total_num_update={updates}", "common.log_interval=1"])
    assert shell.stdout.startswith("+ ") and "--arch 3ml_self_mini" in shell.stdout.splitlines()[0]
    keys = ("loss", "loss_mask", "loss_replaced", "loss_unchanged")

    def losses(proc):
        return {int(r["num_updates"]): tuple(r.get(k) for k in keys)
                for r in json_log_records(proc.stdout + proc.stderr) if "loss" in r}

    shell_losses, hydra_losses = losses(shell), losses(hydra)
    assert sorted(shell_losses) == list(range(1, updates + 1))
    assert shell_losses == hydra_losses
