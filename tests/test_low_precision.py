"""Low precision on the CPU: 300 updates of a tiny model of every family in bf16 and
in fp16, each through its recipe's YAML twin and ``fairseq-hydra-train``; every logged loss is
finite, the loss goes down, and the weights were trained in the precision asked for (so the run
did not quietly train in fp32).

What fairseq 0.12 allows on the CPU (docs/scaling.md):

* **bf16** only through ``fairseq-hydra-train common.bf16=true``: ``fairseq-train --bf16`` sets
  ``--tpu`` and the trainer then asks torch_xla for its device, on any machine (the shell
  recipes refuse ``PRECISION=--bf16`` and say so, ``test_recipes_refuse_bf16``).
* **fp16** as ``--memory-efficient-fp16`` with fairseq's ``adam`` (our ``fused_adamw`` wraps
  ``torch.optim.AdamW``, which fairseq's memory-efficient wrapper does not take), or ``--fp16
  --fp16-no-flatten-grads``; plain ``--fp16`` builds its flat fp32 copy with
  ``torch.cuda.current_device()`` and stops on a CPU. The memory-efficient form is the one the
  6.7B recipe needs (no fp32 copy of the weights), so it is the one tested.
"""
import math

import pytest
import torch
from recipe_checks import dry_run

import fairseq_ext  # noqa: F401  (the allow-list: torch.load of fairseq checkpoints)
from conftest import REPO_ROOT, json_log_records

UPDATES, LOG_INTERVAL = 300, 25

MLM_SIZES = ["model.max_positions=32", "task.tokens_per_sample=32", "dataset.batch_size=4"]
#: family -> (the directory of its demo YAML under recipes/config, overrides for a tiny model).
FAMILIES = {
    "roberta": ("roberta", ["model._name=roberta_tiny", *MLM_SIZES]),
    "3ml_self": ("3ml", ["model._name=3ml_self_tiny", *MLM_SIZES]),
    "3ml_cross": ("3ml", ["model._name=3ml_cross_tiny", *MLM_SIZES]),
    "bert_rab": ("swishrnn", ["model._name=bert_rab_tiny", *MLM_SIZES]),
    "swishrnn_bert": ("swishrnn", ["model._name=swishrnn_bert_tiny", *MLM_SIZES]),
    "bidirectional_lm": ("bidirectional", ["model._name=bidir_lm_tiny",
                                           "model.max_target_positions=32",
                                           "task.tokens_per_sample=32", "dataset.max_tokens=128",
                                           "task.variant=hyb_pre"]),
}
#: precision -> (overrides, dtype of the trained weights)
PRECISIONS = {
    "bf16": (["common.bf16=true"], torch.bfloat16),
    "fp16": (["common.fp16=true", "common.memory_efficient_fp16=true", "optimizer._name=adam"],
             torch.float16),
}


@pytest.mark.heavy
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_300_updates_without_nan(family, precision, served_cli, tiny_data_bin, tmp_path):
    config_dir, model = FAMILIES[family]
    overrides, dtype = PRECISIONS[precision]
    output = served_cli.run("fairseq-hydra-train", [
        "--config-dir", REPO_ROOT / "recipes/config" / config_dir, "--config-name", "demo",
        f"task.data={tiny_data_bin}", f"checkpoint.save_dir={tmp_path}", "common.log_file=null",
        "common.log_format=json", "common.no_progress_bar=true",
        f"common.log_interval={LOG_INTERVAL}", "dataset.disable_validation=true", *model,
        f"optimization.max_update={UPDATES}", f"lr_scheduler.total_num_update={UPDATES}",
        *overrides], tmp_path / "train.log")
    records = [r for r in json_log_records(output) if "loss" in r]
    assert [int(r["num_updates"]) for r in records] == list(
        range(LOG_INTERVAL, UPDATES + 1, LOG_INTERVAL))
    losses = [float(r["loss"]) for r in records]
    assert all(math.isfinite(loss) for loss in losses), losses
    assert max(losses[-2:]) < losses[0] - 0.2, losses  # it learned
    if precision == "fp16":  # fairseq's loss scaler ran (and never hit its minimum)
        assert all(float(r["loss_scale"]) > 1e-4 for r in records), records
    # fairseq saves fp32 copies; weights trained in `dtype` are exactly representable in it
    # (an fp32 run's would not be: the updates are not rounded to 8 or 11 significant bits).
    weights = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu")["model"]
    for name, weight in weights.items():
        if weight.is_floating_point():
            assert torch.equal(weight.to(dtype).float(), weight), name


@pytest.mark.parametrize("recipe", ["roberta/pretrain.sh", "bidirectional/pretrain.sh"])
def test_recipes_refuse_bf16(recipe):
    """fairseq-train's --bf16 would fail deep in the trainer (no torch_xla); the recipe stops
    first and names the way that works."""
    import subprocess

    proc = subprocess.run(["bash", str(REPO_ROOT / "recipes" / recipe)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "DATA": "D",
                                          "NUM_GPUS": "8", "PRECISION": "--bf16"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: PRECISION=--bf16: fairseq-train 0.12 makes --bf16 TPU "
                                  "training") and "common.bf16=true" in proc.stderr
    _, flags = dry_run(REPO_ROOT / "recipes" / recipe, PRECISION="--fp16")
    assert flags["--fp16"] is True
