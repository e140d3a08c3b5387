"""scripts/gpu_suite.sh, the GPU checks (a wrapper that runs the package
fairseq_ext_lab/benchmarks/gpu_suite/), as far as a CPU machine can check it: the stages run in
order, each timed into stages.tsv with its own log; the first failing stage stops the suite with
its log's tail and a non-zero exit; timeouts, the budget, --tar, --dry-run (the commands each
stage would run) and, with the wheel this machine's `make install` built, the real setup stage
(wheels into an environment beside this interpreter's torch). The train stage: its
fairseq-hydra-train commands (bf16 as hydra's common.bf16), its check of fairseq's json logs
(overflow, NaN, a loss that did not fall, ...) on canned logs, directly and through a stand-in
CLI, and a real run on the CPU at a tiny size. The driver's functions (the budget arithmetic,
the stage lists, the junit skip check, ...) are also called directly: the package is loaded from
its folder as a top-level ``gpu_suite``, as the GPU machine runs it (the standard library only,
no fairseq_ext package).

Stages are replaced by shell commands through GPU_SUITE_CMD_<stage>."""
import importlib
import importlib.util
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, cli_zygote

SUITE = REPO_ROOT / "scripts" / "gpu_suite.sh"
PACKAGE = REPO_ROOT / "fairseq_ext_lab" / "benchmarks" / "gpu_suite"
DRIVER = PACKAGE / "__main__.py"
WHEELS = REPO_ROOT / "scripts" / "gpu_wheels.sh"
STAGES = ["setup", "build", "step", "tests", "bench_swishrnn", "bench_3ml", "bench_bidir", "train",
          "fsdp", "study"]


def load_driver():
    """The package fairseq_ext_lab/benchmarks/gpu_suite/ loaded from its folder as ``gpu_suite``
    (not through the fairseq_ext package, whose __init__ imports fairseq), as
    scripts/gpu_suite.sh runs it: one namespace of its modules' public names."""
    spec = importlib.util.spec_from_file_location("gpu_suite", PACKAGE / "__init__.py",
                                                  submodule_search_locations=[str(PACKAGE)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package  # dataclasses and the relative imports look it up there
    spec.loader.exec_module(package)
    names = {}
    for name in ("settings", "checks", "runner", "stages", "stages.train", "stages.fsdp",
                 "stages.bench_3ml", "stages.tests", "driver"):
        module = importlib.import_module(f"gpu_suite.{name}")
        names.update((k, v) for k, v in vars(module).items() if not k.startswith("_"))
    return types.SimpleNamespace(**names)


gs = load_driver()


def run_suite(tmp_path, *args, env=None, timeout=60):
    """Run the suite with every GPU_SUITE_* / STAGES variable of the caller's environment
    cleared, the scratch paths under tmp_path, and `env` on top. The driver runs on this
    interpreter unless `env` names GPU_PYTHON (an empty one: the default, python3 on PATH, which
    here may be a slow-starting pyenv shim)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("GPU_SUITE_", "TRAIN_", "BENCH_")) and k not in (
                    "STAGES", "DRY_RUN", "GPU_ENV", "GPU_PYTHON", "WHEEL_DIR")}
    full_env.update(GPU_ENV=str(tmp_path / "env"), GPU_SUITE_WORK=str(tmp_path / "work"),
                    GPU_PYTHON=sys.executable)
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
    """...and the stage's whole process group is ended, a background child of it too."""
    out, pid_file = tmp_path / "out", tmp_path / "child.pid"
    env = {"GPU_SUITE_CMD_setup": f"sh -c 'echo $$ > {pid_file}; exec sleep 60' & sleep 60; wait",
           "GPU_SUITE_STAGE_TIMEOUT": "1"}
    proc = run_suite(tmp_path, "--stages", "setup", out, env=env, timeout=30)
    assert proc.returncode == 124
    assert stage_rows(out) == [("setup", "timeout")]
    assert float((out / "stages.tsv").read_text().splitlines()[1].split("\t")[1]) < 15
    assert process_ends(int(pid_file.read_text()))


def process_ends(pid: int, wait: float = 5.0) -> bool:
    """Whether process `pid` is gone (or a zombie, ended but not yet reaped) within `wait` s."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


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
        "setup", "step", "bench_swishrnn", "bench_3ml", "bench_bidir"]
    assert run_suite(tmp_path, "--stages", "setup,fly", tmp_path / "o2").returncode == 2
    assert run_suite(tmp_path).returncode == 2  # no OUTDIR
    assert run_suite(tmp_path, "--bogus", tmp_path / "o3").returncode == 2
    proc = run_suite(tmp_path, "--help")
    assert proc.returncode == 0 and "bench_swishrnn" in proc.stdout


def test_dry_run_prints_every_stages_commands_and_runs_none(tmp_path):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", out, env={"GPU_PYTHON": ""})  # python3 on PATH
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stage_rows(out) == [(name, "dry-run") for name in STAGES]
    assert not (tmp_path / "env").exists() and not (tmp_path / "work").exists()
    logs = {name: (out / f"{name}.log").read_text() for name in STAGES}
    assert "+ python3 --version" in logs["setup"] and "python3 -m venv" in logs["setup"]
    assert "-m pip install" in logs["setup"] and "nvidia-smi" in logs["setup"]
    assert "setup.py -q build_ext --inplace" in logs["build"]
    for test_file in ("tests/test_swish_recurrence_op.py", "tests/test_cuda_source.py",
                      "tests/test_swish_rnn.py", "tests/test_swishrnn_bert.py"):
        assert test_file in logs["tests"]
    assert "tests/test_gpu_suite.py" not in logs["tests"]
    assert "tests/test_gpu_suite_study.py" not in logs["tests"]  # the suite's own, too
    assert "tests/test_gpu_study.py" in logs["tests"]  # the study's entries mention CUDA
    assert "--junitxml=" in logs["tests"]
    assert "bench_swishrnn.py --part a" in logs["bench_swishrnn"]
    assert ("bench_swishrnn.py --part c --device cuda --dtype bf16 --arch-size base --seq-len 512"
            in logs["bench_swishrnn"])
    # step: the train step at base/512 in bf16, eager and compiled, each micro-batch
    for batch in ("32", "64", "128"):
        assert (f"bench_step.py --families roberta,3ml-self,3ml-cross --dim 768 --layers 12 "
                f"--seq-len 512 --batch-size {batch} --dtype bf16") in logs["step"]
    assert logs["step"].count("--compile eager,compile") == 3
    assert logs["step"].count("--trace") == 1  # the first micro-batch keeps its profiles
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
    # fsdp: 50 updates of 3ml_self_base in fp32 with each backend, a record every update
    for backend in ("legacy_ddp", "fully_sharded"):
        first = (out / f"fsdp-{backend}.log").read_text().splitlines()[0]
        assert "model._name=3ml_self_base" in first and "optimization.max_update=50" in first
        assert f"distributed_training.ddp_backend={backend}" in first
    assert "compare_losses(" in logs["fsdp"]
    # study: the GPU study on the carried data-bin, its runs in the carried .gpu-study/
    assert (f"scripts/study.py 3ml-gpu --data {REPO_ROOT}/.gpu-data/english-spm8000-share "
            f"--runs-dir {REPO_ROOT}/.gpu-study/3ml-gpu --minutes 0 --downstream "
            f"{REPO_ROOT}/.gpu-data/english-spm8000-downstream") in logs["study"]
    assert "--device" not in logs["study"] and "--updates" not in logs["study"]
    assert f"+ copy_study_files {REPO_ROOT}/.gpu-study/3ml-gpu {out}/study/3ml-gpu" in logs["study"]


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


BAD_RUNS = [
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
]
BAD_RUN_IDS = ["late-overflow", "many-overflows", "min-scale", "bf16-overflow", "no-fall", "nan",
               "short", "not-bf16", "not-fp16", "cpu"]


@pytest.mark.parametrize("precision,log,problem", BAD_RUNS, ids=BAD_RUN_IDS)
def test_the_train_log_check_fails_a_bad_run_and_says_why(precision, log, problem):
    check = gs.check_train_log(log, "3ml_self_tiny", precision, 300, require_cuda=True)
    assert check.row[-1].startswith("FAIL: ") and problem in check.row[-1], check.row
    assert any(problem in line for line in check.problems), check.problems
    assert dict(zip(gs.TRAIN_SUMMARY_COLUMNS, check.row))["arch"] == "3ml_self_tiny"


@pytest.mark.parametrize("precision,log,problem", [BAD_RUNS[0], BAD_RUNS[4]],
                         ids=[BAD_RUN_IDS[0], BAD_RUN_IDS[4]])
def test_train_stage_fails_a_bad_run_and_says_why(tmp_path, precision, log, problem):
    proc, rows = run_train_stage(tmp_path, log, TRAIN_PRECISION=precision)
    assert proc.returncode == 1
    assert stage_rows(tmp_path / "out") == [("train", "failed(1)")]
    assert rows[0]["verdict"].startswith("FAIL: ") and problem in rows[0]["verdict"], rows
    assert f"3ml_self_tiny: {problem}" in proc.stdout  # in the failing stage's log tail


def test_the_train_log_check_summarises_a_good_run():
    check = gs.check_train_log(fairseq_log("fp16", overflow_at=(1, 2)), "3ml_self_tiny", "fp16",
                               300, require_cuda=True, peak_tflops=100.0)
    assert check.problems == []
    row = dict(zip(gs.TRAIN_SUMMARY_COLUMNS, check.row))
    assert (row["updates"], row["overflows"], row["verdict"]) == ("300", "2", "ok")
    assert (row["tflops"], row["mfu"]) == ("100.0", "100.0%")  # 0.02 PFLOP x 5 updates/s
    # no CUDA banner: a problem only where CUDA is required
    assert gs.check_train_log(fairseq_log("bf16", cuda=False), "a", "bf16", 300,
                              require_cuda=False).problems == []


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
    gpu_env = Path(sys.executable).parent.parent
    zygote = cli_zygote()
    if zygote is not None:  # an environment whose bin/ is the zygote's: its runs are served
        gpu_env = tmp_path / "gpu-env"
        gpu_env.mkdir()
        (gpu_env / "bin").symlink_to(zygote.shims)
    env = {"GPU_ENV": str(gpu_env), "GPU_SUITE_REQUIRE_CUDA": "0",
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
    from fairseq_ext_lab.benchmarks import bidirectional, swishrnn, three_ml, trainer_step_timing

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "bench", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parsers = {"bench_swishrnn.py": swishrnn.parse_args, "bench_3ml.py": three_ml.parse_args,
               "bench_bidirectional.py": bidirectional.parse_args,
               "bench_step.py": trainer_step_timing.parse_args}
    seen = set()
    for name in ("step", "bench_swishrnn", "bench_3ml", "bench_bidir"):
        for line in (out / f"{name}.log").read_text().splitlines():
            if not line.startswith("+ "):
                continue
            argv = shlex.split(line[2:])
            script = Path(argv[1]).name
            args = parsers[script](argv[2:])  # exits (SystemExit) on an unknown or bad option
            seen.add(script)
            if script == "bench_step.py":  # on the machine's device: CUDA there
                assert args.dtype == "bf16" and args.compile == [False, True]
            elif script != "bench_swishrnn.py":
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


# --- the driver's functions, called directly --------------------------------------------------

def test_the_driver_needs_only_the_standard_library():
    """The GPU machine runs the driver before fairseq is installed: loaded without site-packages
    (-S, as the wrapper runs it) the way its __main__.py loads it, it imports neither torch nor
    any of fairseq_ext."""
    code = ("import runpy, sys; runpy.run_path(sys.argv[1]); "
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'fairseq', 'fairseq_ext')), "
            "'gpu_suite.driver' in sys.modules)")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(DRIVER)], capture_output=True,
                          text=True, check=True)
    assert proc.stdout.strip() == "[] True"


def test_the_stage_table_and_the_stage_lists():
    assert list(gs.STAGES) == STAGES and all(stage.body.__doc__ for stage in gs.STAGES.values())
    assert gs.parse_stages("") == STAGES
    assert gs.parse_stages("setup,bench train") == [
        "setup", "step", "bench_swishrnn", "bench_3ml", "bench_bidir", "train"]
    assert gs.parse_stages("setup all")[:2] == ["setup", "setup"]  # repeats kept, in order
    with pytest.raises(gs.UsageError, match="unknown stage: fly"):
        gs.parse_stages("setup,fly")


def test_the_command_line_over_its_variables():
    environ = {"STAGES": "bench", "GPU_SUITE_TAR": "a.tgz", "GPU_SUITE_BUDGET": "300",
               "GPU_SUITE_KEEP_GOING": "1", "DRY_RUN": "1"}
    options = gs.parse_args(["out"], environ)
    assert (options.stages, options.outdir, options.tar, options.budget, options.keep_going,
            options.dry_run) == (list(gs.ALIASES["bench"]), "out", "a.tgz", 300, True, True)
    options = gs.parse_args(["--stages=train", "--tar", "b.tgz", "--budget", "560", "o"], environ)
    assert (options.stages, options.tar, options.budget) == (["train"], "b.tgz", 560)
    options = gs.parse_args(["--keep-going", "--dry-run", "o"], {})
    assert (options.stages, options.budget, options.keep_going, options.dry_run) == (
        STAGES, 0, True, True)
    assert gs.parse_args(["--help"], {}).help
    for argv in ([], ["a", "b"], ["--bogus", "o"], ["o", "--tar"]):
        with pytest.raises(gs.UsageError, match="usage: scripts/gpu_suite.sh"):
            gs.parse_args(argv, {})
    with pytest.raises(gs.SettingsError, match="GPU_SUITE_BUDGET=ten"):
        gs.parse_args(["--budget", "ten", "o"], {})


def test_stage_limits_and_the_budget_arithmetic():
    env = {"GPU_SUITE_TIMEOUT_tests": "170", "GPU_SUITE_STAGE_TIMEOUT": "300"}
    assert gs.stage_limit("build", {}, 0, 1000.0) == 580  # the default; no budget: no cap
    assert gs.stage_limit("build", env, 0, 0) == 300
    assert gs.stage_limit("tests", env, 0, 0) == 170
    # with a budget: what is left of it, less 5 s for the tar, in whole seconds
    assert gs.stage_limit("build", env, 560, 100.0) == 300
    assert gs.stage_limit("build", env, 560, 300.5) == 254
    assert gs.stage_limit("tests", env, 560, 500.0) == 55
    assert gs.stage_limit("tests", env, 20, 12.0) == 3
    assert not gs.starts(3, 20, 12.0)  # under 10 s of the budget left: not started
    assert gs.starts(3, 0, 12.0) and gs.starts(5, 30, 12.0)  # a short limit of its own runs
    assert not gs.starts(0, 0, 0.0)
    with pytest.raises(gs.SettingsError, match="GPU_SUITE_TIMEOUT_tests=2m"):
        gs.stage_limit("tests", {"GPU_SUITE_TIMEOUT_tests": "2m"}, 0, 0)
    assert [gs.stage_status(rc, False) for rc in (0, 1, 124, 137)] == [
        "ok", "failed(1)", "timeout", "timeout"]
    assert gs.stage_status(0, True) == "dry-run"


def test_train_commands_of_the_baselines_and_bad_settings():
    settings = gs.Settings.from_env({"TRAIN_UPDATES": "40", "TRAIN_PRECISION": "fp32"})
    argv = gs.train_command("bert_orig_base", "DATA", settings, "BIN")
    assert argv[:5] == ["BIN/fairseq-hydra-train", "--config-dir",
                        f"{REPO_ROOT}/recipes/config/swishrnn", "--config-name", "pretrain_base"]
    assert {"~model.rab_num_buckets", "~model.rab_max_distance", "~model.swishrnn_step_sizes",
            "lr_scheduler.warmup_updates=4", "task.data=DATA"} <= set(argv)
    assert "~model.swishrnn_step_sizes" in gs.train_command("bert_rab_base", "D", settings, "B")
    assert "roberta --config-name pretrain" in " ".join(
        gs.train_command("roberta_base", "D", settings, "B")[:5])
    assert not any("16=" in arg for arg in argv)  # fp32: no precision override
    gs.check_train_settings(settings)
    for env, message in [({"TRAIN_BATCH": "0"}, "TRAIN_BATCH=0: use a positive integer"),
                         ({"TRAIN_ARCHS": "gpt2"}, "TRAIN_ARCHS: gpt2 has no recipe YAML"),
                         ({"GPU_SUITE_PEAK_TFLOPS": "-1"}, "GPU_SUITE_PEAK_TFLOPS=-1")]:
        with pytest.raises(gs.SettingsError, match=message):
            gs.check_train_settings(gs.Settings.from_env(env))


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_swish_rnn" name="test_cuda_layer">
  <skipped type="pytest.skip" message="no CUDA device">skip</skipped></testcase>
<testcase classname="tests.test_cuda_source" name="test_nvcc_compiles">
  <skipped type="pytest.skip" message="No nvcc on PATH">skip</skipped></testcase>
<testcase classname="tests.test_export" name="test_hf">
  <skipped type="pytest.skip" message="transformers is not installed">skip</skipped></testcase>
<testcase classname="tests.test_swish_rnn" name="test_cpu_layer"/>
</testsuite></testsuites>"""


def test_the_junit_check_fails_skips_of_the_cuda_paths(tmp_path, capsys):
    junit, listing = tmp_path / "junit.xml", tmp_path / "skipped.txt"
    junit.write_text(JUNIT)
    assert not gs.check_junit_skips(junit, listing, require_cuda=True)
    assert listing.read_text().splitlines() == [
        "tests.test_swish_rnn::test_cuda_layer\tno CUDA device",
        "tests.test_cuda_source::test_nvcc_compiles\tNo nvcc on PATH",
        "tests.test_export::test_hf\ttransformers is not installed"]
    out, err = capsys.readouterr()
    assert "3 skipped" in out and out.count("skipped without the GPU path") == 2
    assert "2 CUDA test(s) skipped on the GPU machine" in err
    assert gs.check_junit_skips(junit, listing, require_cuda=False)  # a CPU trial
    assert not gs.check_junit_skips(tmp_path / "none.xml", listing, require_cuda=False)


def module_junit(reason: str, ran_one: bool = False) -> str:
    """pytest's junit XML of one CUDA test module (a class of it too), every test skipped for
    `reason` (with `ran_one`, but one test that ran), and of a module whose tests ran."""
    skip = f'<skipped type="pytest.skip" message="{reason}">skip</skipped>'
    return f"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_cuda_module" name="test_a">{skip}</testcase>
<testcase classname="tests.test_cuda_module.TestOnCuda" name="test_b">{'' if ran_one else skip}</testcase>
<testcase classname="tests.test_swish_rnn" name="test_cpu_layer"/>
</testsuite></testsuites>"""


@pytest.mark.parametrize("reason, passes", [
    ("this torch has no FlexAttention", False),  # tests/test_block_sparse_attention.py's skip
    ("needs a newer triton", False),  # a reason outside ACCEPTED_MODULE_SKIPS: the module never ran
    ("a GPU: scripts/gpu_suite.sh checks FSDP", True),  # an accepted one
])
def test_the_junit_check_fails_a_cuda_module_skipped_whole_for_an_unlisted_reason(
        tmp_path, capsys, reason, passes):
    """A CUDA test module whose every test is skipped fails the tests stage unless its reason is
    one of the accepted ones; FlexAttention's module skip is a missing GPU path."""
    junit, listing = tmp_path / "junit.xml", tmp_path / "skipped.txt"
    junit.write_text(module_junit(reason))
    assert gs.check_junit_skips(junit, listing, require_cuda=True) == passes
    out, err = capsys.readouterr()
    if reason == "needs a newer triton":
        assert "every test of tests.test_cuda_module skipped" in out
        assert "1 CUDA test module(s) skipped whole on the GPU machine: tests.test_cuda_module" in err
    assert gs.check_junit_skips(junit, listing, require_cuda=False)  # a CPU trial
    junit.write_text(module_junit(reason, ran_one=True))  # one test of the module ran
    ran = gs.check_junit_skips(junit, listing, require_cuda=True)
    assert ran == (reason != "this torch has no FlexAttention")  # that one is a missing GPU path


def test_the_flex_attention_module_skip_is_declared():
    """tests/test_block_sparse_attention.py's module skip reason is one the junit check knows as
    a missing GPU path (it once matched none, so the suite passed with FlexAttention untested)."""
    text = (REPO_ROOT / "tests" / "test_block_sparse_attention.py").read_text()
    reason = "this torch has no FlexAttention"
    assert f'reason="{reason}"' in text and gs.no_gpu_skip(reason)


def test_the_suite_packs_its_tar_when_it_is_terminated(tmp_path):
    """SIGTERM to the driver (a device call cut short) ends the running stage's process group
    and still packs --tar."""
    out, tar = tmp_path / "out", tmp_path / "suite.tgz"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SUITE_")}
    env.update(GPU_SUITE_CMD_setup="echo started; sleep 60", GPU_ENV=str(tmp_path / "env"))
    proc = subprocess.Popen([sys.executable, str(DRIVER), "--tar", str(tar), "--stages", "setup",
                             str(out)], env=env, stdout=subprocess.PIPE, text=True)
    log, deadline = out / "setup.log", time.monotonic() + 10
    while not (log.exists() and "started" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143 and "packed" in stdout
    with tarfile.open(tar) as archive:
        assert "out/setup.log" in archive.getnames()


# --- the fsdp stage: fully_sharded against legacy_ddp ------------------------------------------

def test_compare_losses_by_hand():
    reference = {1: 10.0, 2: 9.5, 3: 9.0}
    line, problems = gs.compare_losses(reference, {1: 10.0, 2: 9.51, 3: 8.97}, 0.05)
    assert problems == []
    # |differences| 0, 0.01, 0.03: the largest at update 3, the mean 0.04 / 3
    assert "3 updates compared: max |loss difference| 0.0300 at update 3" in line
    assert "(9.0000 against 8.9700), mean 0.0133" in line
    _, problems = gs.compare_losses(reference, {1: 10.0, 2: 9.6, 3: 9.0}, 0.05)
    assert problems == ["the losses differ by more than FSDP_LOSS_TOL=0.05"]
    _, problems = gs.compare_losses(reference, {1: 10.0, 2: 9.5}, 0.05)
    assert problems == ["updates logged by one run only: [3]"]
    _, problems = gs.compare_losses(reference, {1: float("nan"), 2: 9.5, 3: 9.0}, 0.05)
    assert problems == ["the losses differ by more than FSDP_LOSS_TOL=0.05"]
    assert gs.compare_losses({}, {}, 0.05)[1] == ["no losses to compare"]


def test_train_losses_reads_the_train_inner_records():
    log = fairseq_log("fp32", updates=4, interval=1, losses=[4.0, 3.5, 3.25, 3.0])
    assert gs.train_losses(log) == {1: 4.0, 2: 3.5, 3: 3.25, 4: 3.0}


def run_fsdp_stage(tmp_path, shift=0.0, **env):
    """The real fsdp stage (FSDP_UPDATES=50) with fairseq-hydra-train replaced by a script that
    prints a 50-update fp32 log, its losses raised by `shift` under fully_sharded."""
    bin_dir, data = tmp_path / "env" / "bin", tmp_path / "data"
    bin_dir.mkdir(parents=True)
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    losses = [10 - 5 * k / 49 for k in range(50)]
    logs = {}
    for backend, delta in (("legacy_ddp", 0.0), ("fully_sharded", shift)):
        logs[backend] = tmp_path / f"{backend}.log"
        logs[backend].write_text(fairseq_log("fp32", [v + delta for v in losses], updates=50,
                                             interval=1))
    scripts = {"python": f'exec {shlex.quote(sys.executable)} "$@"\n',
               "fairseq-hydra-train": (
                   'if [[ " $* " == *" distributed_training.ddp_backend=fully_sharded "* ]]; then '
                   f'cat {shlex.quote(str(logs["fully_sharded"]))}; else '
                   f'cat {shlex.quote(str(logs["legacy_ddp"]))}; fi\n')}
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "fsdp", out, env={"GPU_SUITE_DATA": str(data), **env})
    return proc, out


def test_fsdp_stage_trains_each_backend_and_compares_the_losses(tmp_path):
    proc, out = run_fsdp_stage(tmp_path, shift=0.004)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (out / "fsdp-summary.tsv").read_text().splitlines()
    rows = [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    assert [(r["backend"], r["arch"], r["precision"], r["updates"], r["verdict"]) for r in rows] == [
        ("legacy_ddp", "3ml_self_base", "fp32", "50", "ok"),
        ("fully_sharded", "3ml_self_base", "fp32", "50", "ok")]
    compared = (out / "fsdp-compare.txt").read_text()
    assert "50 updates compared: max |loss difference| 0.0040" in compared
    assert compared.endswith("\nmatch\n")
    for backend in ("legacy_ddp", "fully_sharded"):
        argv = shlex.split((out / f"fsdp-{backend}.log").read_text().splitlines()[0][2:])
        overrides = dict(arg.split("=", 1) for arg in argv[5:])
        assert overrides["distributed_training.ddp_backend"] == backend
        assert overrides["model._name"] == "3ml_self_base"
        assert overrides["optimization.max_update"] == "50"
        assert overrides["common.log_interval"] == "1"
        assert not any(key.startswith(("common.bf16", "common.fp16")) for key in overrides)


def test_fsdp_stage_fails_when_the_losses_differ(tmp_path):
    proc, out = run_fsdp_stage(tmp_path, shift=0.05)
    assert proc.returncode == 1
    assert "DIFFER: the losses differ by more than FSDP_LOSS_TOL=0.02" in (
        out / "fsdp-compare.txt").read_text()
    proc, out = run_fsdp_stage(tmp_path / "loose", shift=0.05, FSDP_LOSS_TOL="0.1")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("env,message", [
    ({"FSDP_PRECISION": "bf16"}, "fairseq refuses --ddp-backend fully_sharded with bf16"),
    ({"FSDP_UPDATES": "0"}, "FSDP_UPDATES=0: use a positive integer"),
    ({"FSDP_LOSS_TOL": "-1"}, "FSDP_LOSS_TOL=-1: use a number >= 0"),
    ({"FSDP_ARCH": "gpt2_small"}, "FSDP_ARCH: gpt2_small has no recipe YAML here"),
])
def test_bad_fsdp_settings_stop_the_suite_before_its_first_stage(tmp_path, env, message):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--stages", "setup fsdp", out,
                     env={**env, "GPU_SUITE_CMD_setup": "touch should-not-exist"})
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not out.exists()


def test_bench_3ml_runs_picks_the_runs(tmp_path):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "bench_3ml", out,
                     env={"BENCH_3ML_RUNS": "large profile"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (out / "bench_3ml.log").read_text()
    assert "--size large" in log and "--profile" in log and "--padded-encoder" not in log
    proc = run_suite(tmp_path, "--dry-run", "--stages", "bench_3ml", tmp_path / "out2",
                     env={"BENCH_3ML_RUNS": "huge"})  # refused before the first stage
    assert proc.returncode == 2 and "BENCH_3ML_RUNS: unknown huge" in proc.stderr
    assert not (tmp_path / "out2").exists()


def test_the_tests_stage_runs_pytest_verbose_with_the_extra_arguments(tmp_path):
    """A line per test (-v: a stage timeout's log names the tests still running) and
    GPU_SUITE_PYTEST_ARGS, split as a shell would, before the test files."""
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "tests", out,
                     env={"GPU_SUITE_PYTEST_ARGS": "--durations=7 -k 'cuda and not slow'"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    command = next(line for line in (out / "tests.log").read_text().splitlines()
                   if " -m pytest " in line)
    argv = shlex.split(command[command.index("+ ") + 2:])
    assert argv[argv.index("pytest") + 1] == "-v"
    extra = argv.index("--durations=7")
    assert argv[extra:extra + 3] == ["--durations=7", "-k", "cuda and not slow"]
    assert argv[extra + 3].startswith("tests/")


def test_the_step_stage_runs_at_the_shape_given(tmp_path):
    """STEP_SHAPE: the same stage at a width where compute vanishes (the CPU rehearsal); a
    malformed one stops the suite before its first stage."""
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "step", out,
                     env={"STEP_SHAPE": "64 2 32", "STEP_BATCHES": "4"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (command,) = [line for line in (out / "step.log").read_text().splitlines()
                  if "bench_step.py" in line]
    argv = shlex.split(command[2:])
    assert [argv[argv.index(flag) + 1] for flag in ("--dim", "--layers", "--seq-len")] == [
        "64", "2", "32"]
    assert argv[argv.index("--json") + 1].endswith("bench-step-64x2-32-b4.json")
    for shape in ("64 2", "64 2 x", "0 2 32"):
        proc = run_suite(tmp_path, "--dry-run", "--stages", "step", tmp_path / "bad",
                         env={"STEP_SHAPE": shape})
        assert proc.returncode == 2 and f"STEP_SHAPE={shape}:" in proc.stderr
    proc = run_suite(tmp_path, "--dry-run", "--stages", "step", tmp_path / "bad",
                     env={"STEP_BATCHES": "32 six"})
    assert proc.returncode == 2 and "STEP_BATCHES: six" in proc.stderr


def test_step_families_and_modes_reach_bench_step(tmp_path):
    out = tmp_path / "out"
    proc = run_suite(tmp_path, "--dry-run", "--stages", "step", out,
                     env={"STEP_FAMILIES": "roberta,3ml-self", "STEP_COMPILE": "eager",
                          "STEP_BATCHES": "32"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commands = [line for line in (out / "step.log").read_text().splitlines()
                if "bench_step.py" in line]
    assert len(commands) == 1
    argv = shlex.split(commands[0][2:])
    assert argv[argv.index("--families") + 1] == "roberta,3ml-self"
    assert argv[argv.index("--compile") + 1] == "eager"
    assert argv[argv.index("--batch-size") + 1] == "32"
