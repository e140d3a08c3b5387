"""``fairseq-train --torch-compile`` itself, for every pairing a user can make.

Each (architecture, criterion) pairing trains through the real ``fairseq-train`` with a cold
cache, one batch shape, 12 updates, a log interval and a validation inside, under
``--torch-compile-backend aot_eager``: TorchDynamo's graphs and guards, and AOT autograd's
joint forward and backward graph, exactly as inductor gets them, without inductor's code
generation (a recompile is a guard's verdict, not a backend's; seconds a run instead of half a
minute). The variable-length runs, each family's demo recipe and the hydra demo compile with
inductor itself; the patched trainer logs every compile with
the batch shape it was for (fairseq patch item 7c), and TorchDynamo's own recompile log
(``TORCH_LOGS=recompiles``) names each guard that failed. A pairing passes when every compile
came at the first step of its (split, shape) and at most one guard failure is not a new
shape, gradient mode or training mode (fairseq's masked_lm criterion passes
``masked_tokens=None`` on the CPU for a batch with nothing masked: a second variant).

Variable lengths (``--sample-break-mode eos`` and ``complete``, as the recipes use them):
``--torch-compile`` chooses ``--required-seq-len-multiple`` (logged), every batch's length is
a multiple of it, and each padded length compiles once, at most 8 of them.

The inductor runs (1-3 min each on 2 cores, 10 of a fresh clone's suite between them) are
``heavy``: ``make test-fresh`` runs them, ``make test`` does not (docs/testing.md);
the aot_eager pairings, which check the same compile-once-per-shape on every pairing, stay in
``make test``.
"""
import re
from pathlib import Path

import pytest

from conftest import fairseq_cli, json_log_records, run_cli

pytestmark = pytest.mark.slow

USER_DIR = Path(__file__).resolve().parents[1] / "fairseq_ext"
MLM_CRITERIA = ("masked_lm", "masked_lm_flops", "masked_lm_categories")
#: every architecture family we register, and fairseq's RoBERTa, with each criterion it takes
PAIRINGS = [(arch, criterion)
            for arch in ("roberta_base", "3ml_self_base", "3ml_cross_base", "bert_rab_base",
                         "swishrnn_bert_base")
            for criterion in MLM_CRITERIA] + [("bidir_lm_125m", "bidirectional_lm")]
COMPILE_LINE = re.compile(r"torch\.compile: \d+ graph\(s\) for (train|valid) batches of shape "
                          r"(\([^)]*\))")
BUCKET_LINE = re.compile(r"--torch-compile: batches padded to a multiple of (\d+) tokens")
#: guard failures that are a new batch shape or mode, not a value read from the data
EXPECTED_GUARDS = ("size mismatch", "GLOBAL_STATE changed: grad_mode", "___check_obj_id",
                   "training", "stride mismatch")


def compile_argv(data_bin, arch, criterion, save_dir, *extra, seq_len=32, backend="inductor"):
    side = "decoder" if criterion == "bidirectional_lm" else "encoder"
    argv = [fairseq_cli("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", arch,
            "--criterion", criterion, "--cpu", "--optimizer", "adam", "--lr", "1e-4",
            "--tokens-per-sample", str(seq_len), f"--{side}-layers", "2",
            f"--{side}-embed-dim", "16", f"--{side}-ffn-embed-dim", "32",
            f"--{side}-attention-heads", "1", "--dropout", "0", "--attention-dropout", "0",
            "--num-workers", "0", "--log-format", "json",
            "--log-interval", "2", "--max-update", "12", "--validate-interval-updates", "6",
            "--max-valid-steps", "2", "--save-dir", save_dir, "--no-save", "--seed", "1",
            "--skip-invalid-size-inputs-valid-test", "--torch-compile"]
    if backend != "inductor":
        argv += ["--torch-compile-backend", backend]
    if criterion == "bidirectional_lm":
        argv += ["--task", "bidirectional_lm", "--document-format", "lines",
                 "--attention-impl", "sdpa", "--max-tokens", "128"]
    elif arch.startswith("3ml"):
        argv += ["--task", "masked_lm", "--batch-size", "4", "--mask-prob", "0.5",
                 "--decoder-layers", "1", "--decoder-embed-dim", "16",
                 "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "1"]
    else:
        argv += ["--task", "masked_lm", "--batch-size", "4", "--mask-prob", "0.15"]
    return argv + list(extra)


def compiled_run(data_bin, tmp_path, arch, criterion, *extra, backend="inductor"):
    """Train with --torch-compile; return (log, [(split, shape) of each compile], the guard
    failures that were not a new shape or mode)."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCH_LOGS": "recompiles",
           "OMP_NUM_THREADS": "1"}
    proc = run_cli(compile_argv(data_bin, arch, criterion, tmp_path / "ckpt", *extra,
                                backend=backend), env=env, timeout=900)
    log = proc.stdout + proc.stderr
    compiles = COMPILE_LINE.findall(log)
    guards = [line.split("] - ", 1)[-1] if "] - " in line else line
              for line in log.splitlines() if "[__recompiles]" in line and " - " in line]
    unexpected = [g for g in guards if not any(k in g for k in EXPECTED_GUARDS)]
    return log, compiles, unexpected


def assert_one_compile_per_shape(log, compiles, unexpected, variants=2):
    """No recompile (:func:`assert_no_recompile`, each shape compiled at most ``variants``
    times), no guard failure beyond one that is not a new shape or mode, and the run trained
    its 12 updates and validated."""
    assert_no_recompile(log, compiles, variants)
    assert len(unexpected) <= 1, unexpected
    records = [r for r in json_log_records(log) if "loss" in r]
    assert records and int(records[-1]["num_updates"]) == 12
    assert any("valid_loss" in r for r in json_log_records(log, "valid_loss"))


@pytest.mark.heavy
@pytest.mark.parametrize("arch,criterion", PAIRINGS)
def test_every_pairing_compiles_once_per_batch_shape(tiny_data_bin, tmp_path, arch, criterion):
    """One batch shape (--sample-break-mode none): one train compile and one valid compile
    (a second variant at most), never again over 12 updates and a validation."""
    mode = "complete" if criterion == "bidirectional_lm" else "none"
    log, compiles, unexpected = compiled_run(tiny_data_bin, tmp_path, arch, criterion,
                                             "--sample-break-mode", mode, backend="aot_eager")
    assert "backend: aot_eager" in log
    # rows of 31 tokens: a batch with nothing masked (fairseq's second variant) has
    # probability below 1e-8, so each shape compiles exactly once
    assert_one_compile_per_shape(log, compiles, unexpected, variants=1)
    if criterion != "bidirectional_lm":  # fixed-length rows: one shape per split
        assert {split for split, _ in compiles} == {"train", "valid"}
        assert len({shape for split, shape in compiles if split == "train"}) == 1


@pytest.mark.heavy
@pytest.mark.parametrize("arch,criterion,mode", [
    ("3ml_self_base", "masked_lm", "eos"),  # eos rows: a length of their own per batch
    ("bidir_lm_125m", "bidirectional_lm", "complete"),
])
def test_variable_lengths_compile_once_per_bucket(tiny_data_bin, tmp_path, arch, criterion,
                                                  mode):
    log, compiles, unexpected = compiled_run(tiny_data_bin, tmp_path, arch, criterion,
                                             "--sample-break-mode", mode)
    assert_one_compile_per_shape(log, compiles, unexpected)
    multiple = int(BUCKET_LINE.search(log).group(1))
    assert multiple == 8  # --tokens-per-sample 32: at most 4 lengths, multiples of 8
    lengths = {int(shape.strip("()").split(",")[1]) for _, shape in compiles}
    assert lengths and all(length % multiple == 0 and length <= 32 for length in lengths)
    for split in ("train", "valid"):
        assert len({shape for s, shape in compiles if s == split}) <= 8


REPO_ROOT = USER_DIR.parent
#: each family's demo recipe, cut to tiny sizes (its own batching and break mode kept); 3ML's
#: is its hydra twin (test_hydra_demo_config_compiles_once_per_bucket)
RECIPES = {
    "recipes/roberta/demo.sh": {"ARCH": "roberta_tiny", "BATCH_SIZE": "8", "MAX_SENTENCES": "8"},
    "recipes/swishrnn/demo.sh": {"ARCH": "swishrnn_bert_tiny", "BATCH_SIZE": "8",
                                 "MAX_SENTENCES": "8"},
    "recipes/bidirectional/demo.sh": {"SIZE": "tiny", "MAX_TOKENS": "256",
                                      "BATCH_TOKENS": "256"},
}


@pytest.mark.heavy
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_familys_demo_recipe_compiles_once_per_bucket(tiny_data_bin, tmp_path, recipe):
    """A user's `recipes/*/demo.sh ... --torch-compile`: the recipe's own variable lengths
    (eos or complete rows) compile once per padded length, never again, so the run costs
    eager's time plus one compile per bucket."""
    env = {**RECIPES[recipe], "DATA": str(tiny_data_bin), "SAVE_DIR": str(tmp_path / "ckpt"),
           "TOKENS_PER_SAMPLE": "32", "TOTAL_UPDATES": "10", "WARMUP_UPDATES": "2",
           "LOG_INTERVAL": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_LOGS": "recompiles"}
    proc = run_cli([REPO_ROOT / recipe, "--log-format", "json", "--no-progress-bar",
                    "--torch-compile"], env=env, timeout=900)
    log = proc.stdout + proc.stderr
    compiles = COMPILE_LINE.findall(log)
    assert_no_recompile(log, compiles)
    assert int(BUCKET_LINE.search(log).group(1)) == 8
    lengths = {int(shape.strip("()").split(",")[1]) for _, shape in compiles}
    assert lengths <= {8, 16, 24, 32}
    records = [r for r in json_log_records(log) if "loss" in r]
    assert records and int(records[-1]["num_updates"]) == 10


@pytest.mark.heavy
def test_hydra_demo_config_compiles_once_per_bucket(tiny_data_bin, tmp_path):
    """The 3ML demo YAML with common.torch_compile=true compiles once per length bucket, not
    once per update (its eos rows have their own lengths)."""
    proc = run_cli(
        [fairseq_cli("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "recipes/config/3ml",
         "--config-name", "demo", f"task.data={tiny_data_bin}",
         f"checkpoint.save_dir={tmp_path / 'ckpt'}", "common.log_format=json",
         "common.no_progress_bar=true", "common.torch_compile=true", "model._name=3ml_self_tiny",
         "task.tokens_per_sample=32", "model.max_positions=32", "dataset.batch_size=8",
         "optimization.max_update=10", "lr_scheduler.total_num_update=10",
         "lr_scheduler.warmup_updates=2", "common.log_interval=2"],
        cwd=REPO_ROOT, timeout=900,
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCH_LOGS": "recompiles"})
    log = proc.stdout + proc.stderr
    compiles = COMPILE_LINE.findall(log)
    assert_no_recompile(log, compiles)
    assert int(BUCKET_LINE.search(log).group(1)) == 8


def assert_no_recompile(log, compiles, variants=2):
    """Compiles were logged, none was a recompile (each (split, shape) at most ``variants``
    times: fairseq's criterion may add a second), and at most 8 shapes a split."""
    assert compiles, "no compile was logged: --torch-compile did not compile"
    assert "compiled for" not in log and "runs eagerly from now on" not in log, log[-3000:]
    keys = [(split, shape) for split, shape in compiles]
    assert all(keys.count(key) <= variants for key in keys), keys
    for split in ("train", "valid"):
        assert len({shape for s, shape in compiles if s == split}) <= 8
