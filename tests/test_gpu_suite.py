"""scripts/gpu_suite.sh, the GPU checks of issue 14, as far as a CPU machine can check it: the
stages run in order, each timed into stages.tsv with its own log; the first failing stage stops
the suite with its log's tail and a non-zero exit; timeouts, the budget, --tar, --dry-run (the
commands each stage would run) and, with the wheel this machine's `make install` built, the
real setup stage (wheels into an environment beside this interpreter's torch). The train stage:
its fairseq-hydra-train commands (bf16 as hydra's common.bf16), its check of fairseq's json logs
on canned logs of a stand-in CLI (overflow, NaN, a loss that did not fall, ...), and a real run
on the CPU at a tiny size.

Stages are replaced by shell commands through GPU_SUITE_CMD_<stage>."""
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT

SUITE = REPO_ROOT / "scripts" / "gpu_suite.sh"
WHEELS = REPO_ROOT / "scripts" / "gpu_wheels.sh"
STAGES = ["setup", "build", "tests", "bench_swishrnn", "bench_3ml", "bench_bidir", "train"]


def run_suite(tmp_path, *args, env=None, timeout=60):
    """Run the suite with every GPU_SUITE_* / STAGES variable of the caller's environment
    cleared, the scratch paths under tmp_path, and `env` on top."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("GPU_SUITE_", "TRAIN_", "BENCH_")) and k not in (
                    "STAGES", "DRY_RUN", "GPU_ENV", "GPU_PYTHON", "WHEEL_DIR")}
    full_env.update(GPU_ENV=str(tmp_path / "env"), GPU_SUITE_WORK=str(tmp_path / "work"))
    full_env.update(env or {})
    return subprocess.run(["bash", str(SUITE), *map(str, args)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def stage_rows(outdir: Path):
    lines = (outdir / "stages.tsv").read_text().splitlines()
    assert lines[0] == "stage\tseconds\tstatus"
    rows = [line.split("\t") for line in lines[1:]]
    for _, seconds, _ in rows:
        assert float(seconds) >= 0
    return [(name, status) for name, _, status in rows]


def every_stage(command):
    return {f"GPU_SUITE_CMD_{name}": command for name in STAGES}


def test_all_stages_run_in_order_each_timed_with_its_log(tmp_path):
    out = tmp_path / "out"
    env = every_stage('echo "stage body ran"')
    proc = run_suite(tmp_path, out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stage_rows(out) == [(name, "ok") for name in STAGES]
    for name in STAGES:
        assert "stage body ran" in (out / f"{name}.log").read_text()
    assert "all stages passed" in proc.stdout


def test_the_first_failing_stage_stops_the_suite_with_its_log_tail(tmp_path):
    out, marker = tmp_path / "out", tmp_path / "tests-ran"
    env = every_stage("true")
    env.update(GPU_SUITE_CMD_build="echo 'compiling the kernels'; echo 'nvcc: error 42' >&2; exit 3",
               GPU_SUITE_CMD_tests=f"touch {marker}")
    proc = run_suite(tmp_path, "--stages", "setup build tests", out, env=env)
    assert proc.returncode == 3
    assert stage_rows(out) == [("setup", "ok"), ("build", "failed(3)")]
    assert not marker.exists() and not (out / "tests.log").exists()
    log = (out / "build.log").read_text()
    assert "compiling the kernels" in log and "nvcc: error 42" in log
    assert "nvcc: error 42" in proc.stdout  # the log's tail is printed
    assert "stopped at build" in proc.stdout


def test_keep_going_runs_the_later_stages_and_exits_with_the_first_failure(tmp_path):
    out, marker = tmp_path / "out", tmp_path / "tests-ran"
    env = every_stage("true")
    env.update(GPU_SUITE_CMD_build="echo 'nvcc: error 42' >&2; exit 3",
               GPU_SUITE_CMD_tests=f"touch {marker}", GPU_SUITE_CMD_bench_3ml="exit 5")
    proc = run_suite(tmp_path, "--keep-going", "--stages", "setup build tests bench_3ml train",
                     out, env=env)
    assert proc.returncode == 3
    assert stage_rows(out) == [("setup", "ok"), ("build", "failed(3)"), ("tests", "ok"),
                               ("bench_3ml", "failed(5)"), ("train", "ok")]
    assert marker.exists()
    assert "nvcc: error 42" in proc.stdout and "some stages failed" in proc.stdout


def test_a_stage_timeout_of_its_own_caps_that_stage_only(tmp_path):
    out = tmp_path / "out"
    env = {"GPU_SUITE_CMD_setup": "sleep 60", "GPU_SUITE_TIMEOUT_setup": "1",
           "GPU_SUITE_CMD_build": "sleep 2"}
    proc = run_suite(tmp_path, "--keep-going", "--stages", "setup build", out, env=env, timeout=40)
    assert proc.returncode == 124
    assert stage_rows(out) == [("setup", "timeout"), ("build", "ok")]
    assert "(limit 1 s" in proc.stdout and "build (limit 580 s" in proc.stdout


def test_a_failing_stage_is_the_stages_own_process_with_errexit(tmp_path):
    """A stage body stops at its first failing command, and the next stage does not run."""
    out = tmp_path / "out"
    env = {"GPU_SUITE_CMD_setup": "set -e; false; printf '%s-%s' not reached",
           "GPU_SUITE_CMD_build": "echo build"}
    proc = run_suite(tmp_path, "--stages", "setup,build", out, env=env)
    assert proc.returncode == 1
    assert stage_rows(out) == [("setup", "failed(1)")]
    assert "not-reached" not in (out / "setup.log").read_text()


def test_a_stage_past_its_timeout_fails_as_timeout(tmp_path):
    out = tmp_path / "out"
    env = {"GPU_SUITE_CMD_setup": "sleep 60", "GPU_SUITE_STAGE_TIMEOUT": "1"}
    proc = run_suite(tmp_path, "--stages", "setup", out, env=env, timeout=30)
    assert proc.returncode == 124
    assert stage_rows(out) == [("setup", "timeout")]
    assert float((out / "stages.tsv").read_text().splitlines()[1].split("\t")[1]) < 15


def test_a_stage_that_does_not_fit_the_budget_is_not_started(tmp_path):
    out, marker = tmp_path / "out", tmp_path / "ran"
    env = {"GPU_SUITE_CMD_setup": f"touch {marker}"}
    proc = run_suite(tmp_path, "--budget", "3", "--stages", "setup", out, env=env)
    assert proc.returncode == 124
    assert stage_rows(out) == [("setup", "timeout")]
    assert not marker.exists()
    assert "no time left" in proc.stdout


def test_tar_packs_the_output_folder_also_after_a_failure(tmp_path):
    out, tar = tmp_path / "out", tmp_path / "back" / "suite.tgz"
    env = {"GPU_SUITE_CMD_setup": "echo fine", "GPU_SUITE_CMD_build": "echo broken; false"}
    proc = run_suite(tmp_path, "--tar", tar, "--stages", "setup build", out, env=env)
    assert proc.returncode == 1
    with tarfile.open(tar) as archive:
        names = set(archive.getnames())
    assert {"out/stages.tsv", "out/setup.log", "out/build.log"} <= names


def test_stage_lists_aliases_and_usage_errors(tmp_path):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, out, env={**every_stage("true"), "STAGES": "setup,bench"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [name for name, _ in stage_rows(out)] == [
        "setup", "bench_swishrnn", "bench_3ml", "bench_bidir"]
    assert run_suite(tmp_path, "--stages", "setup,fly", tmp_path / "o2").returncode == 2
    assert run_suite(tmp_path).returncode == 2  # no OUTDIR
    assert run_suite(tmp_path, "--bogus", tmp_path / "o3").returncode == 2
    proc = run_suite(tmp_path, "--help")
    assert proc.returncode == 0 and "bench_swishrnn" in proc.stdout


def test_dry_run_prints_every_stages_commands_and_runs_none(tmp_path):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stage_rows(out) == [(name, "dry-run") for name in STAGES]
    assert not (tmp_path / "env").exists() and not (tmp_path / "work").exists()
    logs = {name: (out / f"{name}.log").read_text() for name in STAGES}
    assert "-m pip install" in logs["setup"] and "nvidia-smi" in logs["setup"]
    assert "setup.py -q build_ext --inplace" in logs["build"]
    for test_file in ("tests/test_swish_recurrence_op.py", "tests/test_cuda_source.py",
                      "tests/test_swish_rnn.py", "tests/test_swishrnn_bert.py"):
        assert test_file in logs["tests"]
    assert "tests/test_gpu_suite.py" not in logs["tests"]
    assert "--junitxml=" in logs["tests"]
    assert "bench_swishrnn.py --part a" in logs["bench_swishrnn"]
    assert ("bench_swishrnn.py --part c --device cuda --dtype bf16 --arch-size base --seq-len 512"
            in logs["bench_swishrnn"])
    assert "--size base --seq-len 512 --batch-size 32 --device cuda --dtype bf16" in logs["bench_3ml"]
    assert "--size large --seq-len 128 --batch-size 128 --device cuda --dtype bf16" in logs["bench_3ml"]
    assert "--arch-size 125m --seq-len 1024 --batch-size 8 --device cuda --dtype bf16" in logs["bench_bidir"]
    # train: fairseq-hydra-train on each recipe's YAML twin, bf16 as hydra's common.bf16
    # (fairseq-train's --bf16 is TPU training in fairseq 0.12), 300 updates of 32 x 512 tokens.
    configs = {"3ml_self_base": "3ml --config-name pretrain_efficient",
               "3ml_cross_base": "3ml --config-name pretrain_efficient",
               "swishrnn_bert_base": "swishrnn --config-name pretrain_base",
               "bidir_lm_125m": "bidirectional --config-name pretrain_125m"}
    for arch, config in configs.items():
        argv = train_argv(out, arch)
        assert argv[0] == str(tmp_path / "env" / "bin" / "fairseq-hydra-train")
        assert " ".join(argv[1:5]) == f"--config-dir {REPO_ROOT}/recipes/config/{config}"
        overrides = dict(arg.split("=", 1) for arg in argv[5:])
        assert overrides["model._name"] == arch and overrides["common.bf16"] == "true"
        assert overrides["optimization.max_update"] == "300"
        assert overrides["lr_scheduler.total_num_update"] == "300"
        assert overrides["task.tokens_per_sample"] == "512"
        assert overrides["checkpoint.no_save"] == "true"
        assert overrides["common.log_format"] == "json"
        assert overrides["common.log_file"] == "null"  # the records go to train-ARCH.log
        if arch.startswith("bidir_lm"):  # batched by tokens
            assert overrides["dataset.max_tokens"] == str(32 * 512)
            assert overrides["model.max_target_positions"] == "512"
        else:
            assert overrides["dataset.batch_size"] == "32"
            assert overrides["model.max_positions"] == "512"
        assert not any("fp16" in key for key in overrides)


def train_argv(outdir: Path, arch: str) -> list:
    """The fairseq-hydra-train command the train stage printed (x) as train-ARCH.log's first line."""
    first = (outdir / f"train-{arch}.log").read_text().splitlines()[0]
    assert first.startswith("+ ")
    return shlex.split(first[2:])


@pytest.mark.parametrize("precision,wanted,unwanted", [
    ("fp16", {"common.fp16": "true", "common.memory_efficient_fp16": "true",
              "optimizer._name": "adam"}, ["common.bf16"]),
    ("fp32", {}, ["common.bf16", "common.fp16", "common.memory_efficient_fp16"]),
])
def test_train_precision_is_a_hydra_override(tmp_path, precision, wanted, unwanted):
    out = tmp_path / "out"
    env = {"TRAIN_PRECISION": precision, "TRAIN_ARCHS": "3ml_self_tiny"}
    proc = run_suite(tmp_path, "--dry-run", "--stages", "train", out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    overrides = dict(arg.split("=", 1) for arg in train_argv(out, "3ml_self_tiny")[5:])
    assert {key: overrides.get(key) for key in wanted} == wanted
    assert not set(unwanted) & set(overrides)


@pytest.mark.parametrize("env,message", [
    ({"TRAIN_PRECISION": "--bf16"}, "error: TRAIN_PRECISION=--bf16: use bf16, fp16"),
    ({"TRAIN_PRECISION": ""}, "error: TRAIN_PRECISION=: use bf16, fp16"),
    ({"TRAIN_ARCHS": "3ml_self_base gpt2_small"}, "error: TRAIN_ARCHS: gpt2_small has no recipe"),
    ({"TRAIN_UPDATES": "3e2"}, "error: TRAIN_UPDATES=3e2: use a positive integer"),
])
def test_bad_train_settings_stop_the_suite_before_its_first_stage(tmp_path, env, message):
    out, marker = tmp_path / "out", tmp_path / "setup-ran"
    proc = run_suite(tmp_path, "--stages", "setup train", out,
                     env={**env, "GPU_SUITE_CMD_setup": f"touch {marker}"})
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert not marker.exists() and not out.exists()
    # Without the train stage they do not matter.
    assert run_suite(tmp_path, "--stages", "setup", out,
                     env={**env, "GPU_SUITE_CMD_setup": "true"}).returncode == 0


# --- the train stage's check, on logs of a stand-in fairseq-hydra-train ---------------------

STAMP = "[2026-11-23 17:09:39,648]"


def fairseq_log(precision="bf16", losses=None, *, updates=300, interval=25, overflow_at=(),
                loss_scale="64", cuda=True):
    """A fairseq-hydra-train log as fairseq 0.12 writes it with common.log_format=json: its
    config (a dict's repr) saying which precision ran, CUDA's banner, a train_inner record every
    `interval` updates (losses from 10 down to 5 unless given; wps 40000 + the update, 5 ups;
    fp16's loss_scale), a gradient-overflow note after each update in `overflow_at` (those
    updates are skipped: fairseq does not count them), then the valid and train records."""
    config = {"_name": None, "common": {"fp16": precision == "fp16", "bf16": precision == "bf16",
                                        "memory_efficient_fp16": precision == "fp16"}}
    lines = [f"{STAMP}[fairseq_cli.train][INFO] - {config!r}"]
    if cuda:
        lines.append(f"{STAMP}[fairseq.utils][INFO] - {'*' * 23}CUDA enviroments for all 1 "
                     f"workers{'*' * 23}")
    records = updates // interval
    losses = losses or [10 - 5 * k / (records - 1) for k in range(records)]
    for update in range(1, updates + 1):
        if update in overflow_at:
            lines.append(f"{STAMP}[fairseq.trainer][INFO] - NOTE: gradient overflow detected, "
                         "ignoring gradient, setting loss scale to: 32.0")
        if update % interval == 0:
            record = {"epoch": 1, "loss": f"{losses[update // interval - 1]:.3f}",
                      "wps": str(40000 + update), "ups": "5", "num_updates": str(update),
                      "pflops": "0.02"}
            if precision == "fp16":
                record["loss_scale"] = loss_scale
            lines.append(f"{STAMP}[train_inner][INFO] - {json.dumps(record)}")
    lines.append(f"{STAMP}[valid][INFO] - " + json.dumps(
        {"epoch": 3, "valid_loss": "5.5", "valid_num_updates": str(updates)}))
    lines.append(f"{STAMP}[train][INFO] - " + json.dumps(
        {"epoch": 3, "train_loss": "7", "train_num_updates": str(updates)}))
    return "\n".join(lines) + "\n"


def run_train_stage(tmp_path, log_text, archs="3ml_self_tiny", **env):
    """The real train stage (TRAIN_UPDATES=300) with fairseq-hydra-train replaced by a script
    that prints `log_text` (and exits 3 for an arch named in FAKE_FAIL_ARCH); returns the
    suite's process and the summary's rows as dicts."""
    bin_dir, data = tmp_path / "env" / "bin", tmp_path / "data"
    bin_dir.mkdir(parents=True)
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    (tmp_path / "fairseq.log").write_text(log_text)
    scripts = {"python": f'exec {shlex.quote(sys.executable)} "$@"\n',
               "fairseq-hydra-train": (
                   'if [[ -n "${FAKE_FAIL_ARCH:-}" && " $* " == *" model._name=${FAKE_FAIL_ARCH} "* ]]'
                   f'; then echo crashed; exit 3; fi\ncat {shlex.quote(str(tmp_path / "fairseq.log"))}\n')}
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "train", out, env={
        "GPU_SUITE_DATA": str(data), "TRAIN_ARCHS": archs, **env})
    lines = (out / "train-summary.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return proc, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def test_train_stage_summarises_a_good_run(tmp_path):
    proc, rows = run_train_stage(tmp_path, fairseq_log("bf16"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows == [{"arch": "3ml_self_tiny", "precision": "bf16", "updates": "300",
                     "first_loss": "10.000", "last_loss": "5.000", "valid_loss": "5.5",
                     # the median of the records after the first: update 175's
                     "wps_median": "40175", "s_per_update": "0.200",
                     # 0.02 PFLOP per update x 5 updates/s = 100 TFLOP/s, over 989
                     "tflops": "100.0", "mfu": "10.1%", "overflows": "0", "verdict": "ok"}]


def test_fp16_overflows_while_the_loss_scale_settles_are_allowed(tmp_path):
    proc, rows = run_train_stage(tmp_path, fairseq_log("fp16", overflow_at=(1, 2, 4)),
                                 TRAIN_PRECISION="fp16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (rows[0]["overflows"], rows[0]["verdict"]) == ("3", "ok")


@pytest.mark.parametrize("precision,log,problem", [
    ("fp16", fairseq_log("fp16", overflow_at=(1, 2, 180)),
     "the loss scale did not settle: 3 gradient overflows, 1 in the second half"),
    ("fp16", fairseq_log("fp16", overflow_at=range(1, 32)),  # more than a tenth skipped
     "the loss scale did not settle: 31 gradient overflows, 0 in the second half"),
    ("fp16", fairseq_log("fp16", loss_scale="0.0001"), "the loss scale reached fairseq's minimum"),
    ("bf16", fairseq_log("bf16", overflow_at=(2,)), "1 gradient overflows in bf16"),
    ("bf16", fairseq_log("bf16", [5.0] * 11 + [5.2]), "the loss did not fall: 5.0 -> 5.2"),
    ("bf16", fairseq_log("bf16", [5.0] * 11 + [math.nan]), "non-finite loss"),
    ("bf16", fairseq_log("bf16", updates=275), "only 275 of 300 updates"),
    ("bf16", fairseq_log("fp32"), "fairseq's config does not say 'bf16': True"),
    ("fp16", fairseq_log("bf16"), "fairseq's config does not say 'memory_efficient_fp16': True"),
    ("bf16", fairseq_log("bf16", cuda=False), "fairseq trained without CUDA"),
], ids=["late-overflow", "many-overflows", "min-scale", "bf16-overflow", "no-fall", "nan",
        "short", "not-bf16", "not-fp16", "cpu"])
def test_train_stage_fails_a_bad_run_and_says_why(tmp_path, precision, log, problem):
    proc, rows = run_train_stage(tmp_path, log, TRAIN_PRECISION=precision)
    assert proc.returncode == 1
    assert stage_rows(tmp_path / "out") == [("train", "failed(1)")]
    assert rows[0]["verdict"].startswith("FAIL: ") and problem in rows[0]["verdict"], rows
    assert f"3ml_self_tiny: {problem}" in proc.stdout  # in the failing stage's log tail


def test_a_run_without_cuda_passes_where_the_suite_does_not_require_it(tmp_path):
    proc, rows = run_train_stage(tmp_path, fairseq_log("bf16", cuda=False),
                                 GPU_SUITE_REQUIRE_CUDA="0")
    assert proc.returncode == 0 and rows[0]["verdict"] == "ok", proc.stdout


def test_a_crashed_run_is_summarised_and_the_next_arch_still_trains(tmp_path):
    proc, rows = run_train_stage(tmp_path, fairseq_log("bf16"), archs="3ml_self_tiny bidir_lm_tiny",
                                 FAKE_FAIL_ARCH="3ml_self_tiny")
    assert proc.returncode == 1
    assert [(row["arch"], row["verdict"]) for row in rows] == [
        ("3ml_self_tiny", "failed(3)"), ("bidir_lm_tiny", "ok")]
    assert "crashed" in proc.stdout


@pytest.mark.slow
def test_train_stage_trains_for_real_on_the_cpu(tmp_path, tiny_data_bin):
    """The stage's own fairseq-hydra-train commands, run on this machine in bf16 (hydra's
    common.bf16 trains on the CPU too) at a tiny size: one masked-LM and one bidirectional_lm
    arch through their YAML twins, checked as on the GPU (but for CUDA)."""
    env = {"GPU_ENV": str(Path(sys.executable).parent.parent), "GPU_SUITE_REQUIRE_CUDA": "0",
           "GPU_SUITE_DATA": str(tiny_data_bin), "TRAIN_ARCHS": "3ml_self_tiny bidir_lm_tiny",
           "TRAIN_UPDATES": "12", "TRAIN_SEQ_LEN": "32", "TRAIN_BATCH": "4",
           "TRAIN_LOG_INTERVAL": "3", "TRAIN_LR": "0.001", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "train", out, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (out / "train-summary.tsv").read_text().splitlines()
    rows = [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    assert [(r["arch"], r["precision"], r["updates"], r["verdict"]) for r in rows] == [
        ("3ml_self_tiny", "bf16", "12", "ok"), ("bidir_lm_tiny", "bf16", "12", "ok")]
    for row in rows:
        assert float(row["last_loss"]) < float(row["first_loss"])
        assert float(row["wps_median"]) > 0 and math.isfinite(float(row["valid_loss"]))


def test_the_bench_stages_arguments_parse(tmp_path, monkeypatch):
    """Each benchmark command of the bench stages, as the dry run prints it, is accepted by the
    script's own argument parser (CUDA faked as available: the parsers check --device cuda)."""
    from fairseq_ext.benchmarks import bidirectional, swishrnn, three_ml

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "bench", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parsers = {"bench_swishrnn.py": swishrnn.parse_args, "bench_3ml.py": three_ml.parse_args,
               "bench_bidirectional.py": bidirectional.parse_args}
    seen = set()
    for name in ("bench_swishrnn", "bench_3ml", "bench_bidir"):
        for line in (out / f"{name}.log").read_text().splitlines():
            if not line.startswith("+ "):
                continue
            argv = shlex.split(line[2:])
            script = Path(argv[1]).name
            args = parsers[script](argv[2:])  # exits (SystemExit) on an unknown or bad option
            seen.add(script)
            if script != "bench_swishrnn.py":
                assert args.device == "cuda" and args.dtype == "bf16"
    assert seen == set(parsers)


def test_scripts_parse_and_pass_shellcheck():
    for script in (SUITE, WHEELS):
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert os.access(script, os.X_OK), f"{script} is not executable"
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    proc = subprocess.run(["shellcheck", str(SUITE), str(WHEELS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_gpu_wheels_rejects_unknown_arguments():
    proc = subprocess.run(["bash", str(WHEELS), "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


@pytest.mark.slow
def test_setup_installs_wheels_beside_the_interpreters_torch_once(tmp_path):
    """The real setup stage on this machine: this interpreter plays the GPU machine's python3,
    the fairseq wheel `make install` built plays .whl/ (its other needs are installed here)."""
    wheels = sorted((REPO_ROOT / "build" / "fairseq-wheel").glob("ve_fairseq-*.whl"))
    if not wheels:
        pytest.skip("no build/fairseq-wheel/ve_fairseq-*.whl (make install builds it)")
    wheel_dir = tmp_path / "whl"
    wheel_dir.mkdir()
    shutil.copy(wheels[-1], wheel_dir)
    env = {"GPU_PYTHON": sys.executable, "WHEEL_DIR": str(wheel_dir),
           "GPU_SUITE_REQUIRE_CUDA": "0", "PATH": f"/nonexistent:{os.environ['PATH']}"}
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "setup setup", out, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stage_rows(out) == [("setup", "ok"), ("setup", "ok")]
    fairseq_line = next(line for line in (out / "env.txt").read_text().splitlines()
                        if line.startswith("fairseq "))
    assert str(tmp_path / "env") in fairseq_line  # the wheel's copy, not this interpreter's
    assert (tmp_path / "env" / "bin" / "fairseq-train").exists()  # beside the env's python
    assert "wheels already installed" in (out / "setup.log").read_text()  # the second one
