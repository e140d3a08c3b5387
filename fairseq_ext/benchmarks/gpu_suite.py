"""The GPU checks of issue 14 in one driver, for the lent GPU machine (Python 3.12, torch 2.11 +
CUDA 13, nvcc, no fairseq, no network). docs/benchmarks.md, "GPU suite", gives the device
calls that run it.

  scripts/gpu_suite.sh [--stages "LIST"] [--tar FILE] [--budget SECONDS] [--keep-going]
                       [--dry-run] OUTDIR

Stages, in this order (LIST: names separated by spaces or commas; `bench` = step and the three
bench_* stages, `all` = every stage; default: all of them; also the STAGES variable):
  setup           install the carried cp312 wheels (.whl/, made here by scripts/gpu_wheels.sh)
                  into an environment beside the machine's torch, check `import fairseq, torch`,
                  print the versions and nvidia-smi. Seconds, and a no-op when done already:
                  start every device call with it. A venv rather than a bare --target folder
                  on PYTHONPATH, so that fairseq's console scripts sit beside the interpreter,
                  where tests/conftest.py (fairseq_cli) and the recipes look for them.
  build           compile fairseq_ext.ops._C with its CUDA kernels (setup.py build_ext --inplace),
                  check that fairseq_ext::swish_recurrence has a CUDA kernel; copies the built
                  module to OUTDIR/prebuilt/, which a later call can carry as .gpu-build/ to
                  skip the compile (it is reused only if setup.py, fairseq_ext/ops/csrc/*, torch
                  and the GPU's compute capability are the same).
  step            scripts/bench_step.py on CUDA in bf16 at base/512 (issue 43): fairseq's own
                  Trainer.train_step for RoBERTa, 3ML-self and 3ML-cross, eager and
                  --torch-compile side by side, at micro-batch 32, 64 and 128 (STEP_BATCHES),
                  with --reduce-stats-at-log-interval and fused_adamw: ms per update, MFU over
                  GPU_SUITE_PEAK_TFLOPS, kernels, device busy and idle ms, device-to-host
                  copies and the device reads by source; the first micro-batch also writes
                  each case's profiled updates as Chrome traces (OUTDIR/step-traces/).
  tests           pytest (junit xml: OUTDIR/junit-tests.xml) on the tests that exercise CUDA:
                  the SwishRNN op/layer/model tests, tests/test_cuda_source.py, the benchmark
                  script's tests, the fairseq install check, FlexAttention's (its backward
                  against SDPA's, tests/test_block_sparse_attention.py), and every other
                  tests/test_*.py that mentions torch.cuda / "cuda" / nvcc. A test skipped for
                  want of a GPU, a CUDA kernel or nvcc fails the stage (OUTDIR/tests-skipped.txt
                  lists the skips). tests/test_cuda_host_emulation.py compares the CUDA op with
                  the CPU host emulation of its kernels and writes the differences to
                  OUTDIR/cuda-vs-host-emulation.json.
  bench_swishrnn  scripts/bench_swishrnn.py --part a; --part c (base, seq 512, bf16).
  bench_3ml       scripts/bench_3ml.py --device cuda --dtype bf16: base/512 and large/128 at
                  15/40/50% masking (JSON too; base/512 also with the padded encoder, to
                  see whether packing pays on the GPU), and the bookkeeping profile at base/512.
  bench_bidir     scripts/bench_bidirectional.py --device cuda at 125m, seq 1024, bf16; then
                  its --part flex at 125m, bf16, T = 1024 and 2048: FlexAttention against
                  SDPA's dense mask, attention alone, the fairseq-validate forward and the
                  training step (issue 24's target: >= 1.3x at 125m, T = 2048), on the
                  carried data-bin's valid split (else synthetic documents of 64-1024 tokens).
  train           300 updates (TRAIN_UPDATES) in bf16 (TRAIN_PRECISION) for each of
                  3ml_self_base, 3ml_cross_base, swishrnn_bert_base and bidir_lm_125m
                  (TRAIN_ARCHS), seq 512, batch 32 (bidir_lm: 32 x 512 tokens), through their
                  recipes' hydra YAML twins (recipes/config/3ml/pretrain_efficient.yaml,
                  swishrnn/pretrain_base.yaml, bidirectional/pretrain_125m.yaml) with
                  fairseq-hydra-train ... common.bf16=true: fairseq-train 0.12 makes --bf16
                  TPU training, and the shell recipes refuse it. Then checks each json log:
                  every update done, the loss fell, no NaN/inf, no gradient overflow (fp16:
                  only while its loss scaler settles), words/s logged, the precision in
                  fairseq's config, CUDA in use (OUTDIR/train-summary.tsv, train-ARCH.log).
  fsdp            fairseq's --ddp-backend fully_sharded (fairscale FSDP, from the carried
                  wheel) on one GPU against legacy_ddp: FSDP_ARCH trained FSDP_UPDATES updates
                  in FSDP_PRECISION with each backend, the same seed and batches, a record
                  every update; each log checked as the train stage's, then the per-update
                  losses compared (OUTDIR/fsdp-summary.tsv, fsdp-BACKEND.log,
                  fsdp-compare.txt): they match when none differs by more than FSDP_LOSS_TOL.

  study           issue 47's GPU study (scripts/study.py GPU_SUITE_STUDY [3ml-gpu], docs/studies.md):
                  RoBERTa-15% against 3ML-self-40% at 6 x 512, 3 seeds at equal analytic FLOPs,
                  one run at a time in fairseq fp16, each scored on the GPU; the report gives
                  the wall-clock seconds (and FLOPs) 3ML takes to reach RoBERTa's final [MASK]
                  loss, ± SE over seeds. The runs directory is GPU_SUITE_STUDY_DIR/NAME
                  [.gpu-study/NAME]: carried in the tree, its finished runs are read back, not
                  retrained, so a study cut off in one call goes on in the next. Every file of
                  it but checkpoints and data-bins is copied to OUTDIR/study/NAME/ when the
                  stage ends, also when it is cut off (extract it into .gpu-study/NAME here to
                  carry it). STUDY_UPDATES, STUDY_SEEDS: a shorter study (another runs
                  directory: a finished run of another plan is refused).
Training data: the embedded corpus's data-bin CARRIED in the tree, .gpu-data/python-docs-
spm8000 (scripts/gpu_wheels.sh copies it there from data-bin/python-docs-spm8000, which needs
apt-get and the network, so it is built on the CPU machine). If it is not there, the train
stage builds a data-bin from text shipped in the repo (its Markdown, Python, shell and YAML
files, about 1 MB) with fairseq_ext.corpus.prepare_corpus, and says so in its log.

Output: OUTDIR/stages.tsv (stage, seconds, status: ok, failed(RC), timeout, dry-run), one log
per stage (OUTDIR/STAGE.log), env.txt, junit-tests.xml, tests-skipped.txt, bench-*.txt/json,
train-*.log, train-summary.tsv; with --tar FILE (or GPU_SUITE_TAR) all of OUTDIR is packed into
FILE on exit, whatever happened (a device call returns at most 8 files). The first stage that
fails stops the suite: its log's tail is printed and the exit status is non-zero (the stage's,
124 on a timeout). With --keep-going (GPU_SUITE_KEEP_GOING=1) the later stages run after a
failure and the exit status is the first failure's.

Each stage runs as its own process (this file with --run-stage) in its own process group,
under a timeout that ends the group (TERM, then KILL 15 s later): GPU_SUITE_TIMEOUT_<stage>
seconds if set (e.g. GPU_SUITE_TIMEOUT_tests=170), else GPU_SUITE_STAGE_TIMEOUT (default 580),
or what is left of --budget (GPU_SUITE_BUDGET, seconds for this whole invocation, less 5; 0 =
none) where that is less, so the suite ends, and packs its tar, before a 10-minute device call
is killed. A stage left with under 10 s of the budget, or with a limit of 0, is not started
(status timeout).

Environment (defaults in brackets):
  GPU_PYTHON [python3]            the interpreter that holds the machine's torch (it runs this
                                  driver, too: scripts/gpu_suite.sh execs it)
  GPU_ENV [/tmp/gpu-suite-env]    the environment setup makes (a venv whose site-packages
                                  hold the wheels and that sees GPU_PYTHON's packages; if no
                                  venv can be made: GPU_ENV/site on PYTHONPATH)
  WHEEL_DIR [.whl]  GPU_SUITE_DATA [.gpu-data/python-docs-spm8000]  GPU_SUITE_PREBUILT [.gpu-build]
  GPU_SUITE_WORK [/tmp/gpu-suite-work]  scratch: checkpoints, a built data-bin
  GPU_SUITE_TESTS                 test files for the tests stage (default: as above)
  GPU_SUITE_PYTEST_WORKERS [4]    pytest-xdist processes (0: none)
  GPU_SUITE_PYTEST_TIMEOUT [120]  seconds per test (pytest-timeout, where installed: the GPU
                                  image has it)
  GPU_SUITE_PYTEST_ARGS           more pytest arguments, e.g. "--durations=15" (the stage
                                  runs pytest -v: a line per test as it ends)
  GPU_SUITE_REQUIRE_CUDA [1]      0: let setup/build/tests pass without a GPU (CPU trials)
  BENCH_3ML_ITERS [30]  BENCH_BIDIR_ROUNDS [20]
  BENCH_3ML_RUNS [base large profile]  which of bench_3ml's three runs to make
  STEP_BATCHES [32 64 128]  STEP_UPDATES [20]  the step stage's micro-batches and timed updates
  STEP_FAMILIES [roberta,3ml-self,3ml-cross]  STEP_COMPILE [eager,compile]  its families and
                                  modes (bench_step.py's --families and --compile)
  TRAIN_UPDATES [300]  TRAIN_ARCHS [the four above; also bert_rab_*, bert_orig_*, roberta_*,
                  any size]  TRAIN_SEQ_LEN [512]  TRAIN_BATCH [32]  TRAIN_LR [0.0003]
                  TRAIN_LOG_INTERVAL [25]  (warmup: a tenth of TRAIN_UPDATES, linear decay)
  GPU_SUITE_PEAK_TFLOPS [989]     the train summary's MFU is over this: dense bf16 of an
                                  H100/H200 SXM by NVIDIA's datasheet (KINDS.md measured 788
                                  on an 8192^3 bf16 matmul on the H200)
  TRAIN_PRECISION [bf16]          bf16 (common.bf16=true), fp16 (memory-efficient, with
                                  fairseq's adam) or fp32; checked before the first stage, with
                                  the TRAIN_* sizes and archs
  FSDP_ARCH [3ml_self_base]  FSDP_UPDATES [50]  FSDP_LOSS_TOL [0.02]
  FSDP_PRECISION [fp32]           fp32 or fp16 (memory-efficient, fairseq's adam); fairseq
                                  refuses fully_sharded with bf16
  GPU_SUITE_STUDY [3ml-gpu]  GPU_SUITE_STUDY_DIR [.gpu-study]  STUDY_UPDATES  STUDY_SEEDS
                                  the study stage's study, where its runs go, and its baseline
                                  updates and seeds (default: the study's own)
  GPU_SUITE_CMD_<stage>           run this shell command instead of the stage (tests of the
                                  suite, e.g. GPU_SUITE_CMD_build=false)
  GPU_SUITE_TIMEOUT_<stage>  GPU_SUITE_STAGE_TIMEOUT [580]  GPU_SUITE_BUDGET [0]  as above
  GPU_SUITE_KEEP_GOING [0]  GPU_SUITE_TAR  STAGES  as --keep-going, --tar, --stages
  GPU_SUITE_ECHO_LINES [8]        lines of a passed stage's log echoed after it
  DRY_RUN=1 (--dry-run)           every stage prints the commands it would run, runs none

Where the code is: scripts/gpu_suite.sh only execs GPU_PYTHON on this file
(fairseq_ext/benchmarks/gpu_suite.py), which holds the stage table (STAGES), the driver
(main), the fairseq-hydra-train command builder (train_command) and the checks of the train
logs (check_train_log) and of the tests' skips (check_junit_skips). It runs before fairseq is
installed, so it uses the standard library only (the wrapper and the driver start it with -S,
without site-packages) and is run by its path (fairseq_ext's __init__ imports fairseq); what
needs torch or fairseq runs in subprocesses with the setup stage's interpreter. The setup
stage is a Python stage like the others rather than shell in the wrapper: it needs nothing but
the standard library and GPU_PYTHON, and as a stage it gets the same log, timeout, budget,
stages.tsv row and --keep-going/--tar handling as the rest.
"""
import dataclasses
import hashlib
import importlib.util
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve()
WRAPPER = "scripts/gpu_suite.sh"

DEFAULT_STAGE_TIMEOUT = 580
#: Seconds of --budget kept back for packing the tar after the last stage.
BUDGET_RESERVE = 5
#: A stage with less time than this left in the budget is not started.
MIN_STAGE_SECONDS = 10
#: Seconds between TERM and KILL when a stage passes its limit (timeout -k 15).
KILL_AFTER = 15
#: Lines of a failed stage's log printed after it.
FAILED_TAIL_LINES = 60

#: BENCH_3ML_RUNS: the bench_3ml stage's runs, in this order (default: all three).
BENCH_3ML_RUNS = ("base", "large", "profile")
#: The fsdp stage's DDP backends: the reference first, then the one checked against it.
FSDP_BACKENDS = ("legacy_ddp", "fully_sharded")
TRAIN_SUMMARY_COLUMNS = ("arch", "precision", "updates", "first_loss", "last_loss", "valid_loss",
                         "wps_median", "s_per_update", "tflops", "mfu", "overflows", "verdict")
#: The tests stage's files besides those that mention CUDA (CUDA_TEST_PATTERN).
DEFAULT_TEST_FILES = ("tests/test_swish_recurrence_op.py", "tests/test_cuda_source.py",
                      "tests/test_bench_swishrnn.py", "tests/test_fairseq_build.py",
                      "tests/test_swish_rnn.py", "tests/test_swishrnn_bert.py",
                      "tests/test_block_sparse_attention.py")
CUDA_TEST_PATTERN = re.compile(r"""torch\.cuda|["']cuda["']|nvcc|NATIVE_OP_DEVICES""")
#: A skip reason that means the CUDA path did not run.
NO_GPU_SKIP = re.compile(r"\bno\b.*(gpu|cuda|nvcc)", re.I)
#: fairseq's common.min_loss_scale, where it gives up.
MIN_LOSS_SCALE = 1e-4


class SuiteError(Exception):
    """A stage cannot go on; its message is printed as `error: MESSAGE` and the stage exits 1."""


class SettingsError(Exception):
    """A bad option or variable, found before the first stage: one line on stderr, exit 2."""


class CommandFailed(Exception):
    """A command of a stage exited non-zero; the stage exits with its status."""

    def __init__(self, argv: Sequence[str], returncode: int):
        super().__init__(f"exit {returncode}: {shlex.join(map(str, argv))}")
        self.returncode = returncode


# --------------------------------------------------------------------------------- settings

def _path(environ: Mapping[str, str], name: str, default) -> Path:
    """The path in variable `name` (empty or unset: `default`), made absolute from the cwd."""
    return Path(os.path.abspath(environ.get(name) or str(default)))


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every variable the suite reads, with its default (the module docstring lists them).
    Values that go into command lines stay strings, as given."""

    gpu_python: str
    gpu_env: Path
    wheel_dir: Path
    data: Path
    prebuilt: Path
    work: Path
    tests: str
    pytest_workers: str
    pytest_timeout: str
    pytest_args: Tuple[str, ...]
    require_cuda: bool
    bench_3ml_iters: str
    step_batches: Tuple[str, ...]
    step_updates: str
    step_families: str
    step_compile: str
    bench_3ml_runs: Tuple[str, ...]
    bench_bidir_rounds: str
    train_updates: str
    train_archs: Tuple[str, ...]
    train_seq_len: str
    train_batch: str
    train_precision: str
    train_lr: str
    train_log_interval: str
    peak_tflops: str
    fsdp_arch: str
    fsdp_updates: str
    fsdp_precision: str
    fsdp_loss_tol: str
    study: str
    study_dir: Path
    study_updates: str
    study_seeds: Tuple[str, ...]
    dry_run: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        """Read the settings from `environ`; an empty variable means its default, but for
        TRAIN_PRECISION, where empty is an error (check_train_settings says so)."""
        def get(name, default):
            return environ.get(name) or default
        return cls(
            gpu_python=get("GPU_PYTHON", "python3"),
            gpu_env=_path(environ, "GPU_ENV", "/tmp/gpu-suite-env"),
            wheel_dir=_path(environ, "WHEEL_DIR", REPO / ".whl"),
            data=_path(environ, "GPU_SUITE_DATA", REPO / ".gpu-data" / "python-docs-spm8000"),
            prebuilt=_path(environ, "GPU_SUITE_PREBUILT", REPO / ".gpu-build"),
            work=_path(environ, "GPU_SUITE_WORK", "/tmp/gpu-suite-work"),
            tests=environ.get("GPU_SUITE_TESTS", ""),
            pytest_workers=get("GPU_SUITE_PYTEST_WORKERS", "4"),
            pytest_timeout=get("GPU_SUITE_PYTEST_TIMEOUT", "120"),
            pytest_args=tuple(shlex.split(environ.get("GPU_SUITE_PYTEST_ARGS", ""))),
            require_cuda=get("GPU_SUITE_REQUIRE_CUDA", "1") == "1",
            bench_3ml_iters=get("BENCH_3ML_ITERS", "30"),
            step_batches=tuple(get("STEP_BATCHES", "32 64 128").split()),
            step_updates=get("STEP_UPDATES", "20"),
            step_families=get("STEP_FAMILIES", "roberta,3ml-self,3ml-cross"),
            step_compile=get("STEP_COMPILE", "eager,compile"),
            bench_3ml_runs=tuple(get("BENCH_3ML_RUNS", " ".join(BENCH_3ML_RUNS)).split()),
            bench_bidir_rounds=get("BENCH_BIDIR_ROUNDS", "20"),
            train_updates=get("TRAIN_UPDATES", "300"),
            train_archs=tuple(get("TRAIN_ARCHS", "3ml_self_base 3ml_cross_base swishrnn_bert_base "
                                                 "bidir_lm_125m").split()),
            train_seq_len=get("TRAIN_SEQ_LEN", "512"),
            train_batch=get("TRAIN_BATCH", "32"),
            train_precision=environ.get("TRAIN_PRECISION", "bf16"),
            train_lr=get("TRAIN_LR", "0.0003"),
            train_log_interval=get("TRAIN_LOG_INTERVAL", "25"),
            peak_tflops=get("GPU_SUITE_PEAK_TFLOPS", "989"),
            fsdp_arch=get("FSDP_ARCH", "3ml_self_base"),
            fsdp_updates=get("FSDP_UPDATES", "50"),
            fsdp_precision=get("FSDP_PRECISION", "fp32"),
            fsdp_loss_tol=get("FSDP_LOSS_TOL", "0.02"),
            study=get("GPU_SUITE_STUDY", "3ml-gpu"),
            study_dir=_path(environ, "GPU_SUITE_STUDY_DIR", REPO / ".gpu-study"),
            study_updates=environ.get("STUDY_UPDATES", ""),
            study_seeds=tuple(environ.get("STUDY_SEEDS", "").split()),
            dry_run=get("DRY_RUN", "0") == "1",
        )


# ------------------------------------------------------------------------ the train command

#: TRAIN_ARCHS prefix -> (recipes/config folder, YAML name, keys to drop: overrides `~KEY`).
#: The baselines use the SwishRNN YAML without the keys their archs do not take (its comment).
TRAIN_FAMILIES = (
    ("3ml_", "3ml", "pretrain_efficient", ()),
    ("swishrnn_bert_", "swishrnn", "pretrain_base", ()),
    ("bert_rab_", "swishrnn", "pretrain_base", ("model.swishrnn_step_sizes",)),
    ("bert_orig_", "swishrnn", "pretrain_base",
     ("model.rab_num_buckets", "model.rab_max_distance", "model.swishrnn_step_sizes")),
    ("roberta_", "roberta", "pretrain", ()),
    ("bidir_lm_", "bidirectional", "pretrain_125m", ()),
)


def precision_overrides(precision: str) -> List[str]:
    """The hydra overrides that make TRAIN_PRECISION's run; anything else is a SettingsError.

    fairseq-train 0.12 turns --bf16 into TPU training (it asks for torch_xla on any machine, and
    the shell recipes refuse PRECISION=--bf16: docs/scaling.md, "Low precision"), so the stage
    trains through the recipes' YAML twins with fairseq-hydra-train, where common.bf16=true is
    bf16 on the GPU. fp16 is fairseq's memory-efficient form, with its own adam (our fused_adamw
    wraps torch.optim.AdamW, which that wrapper does not take; tests/test_low_precision.py)."""
    if precision == "bf16":
        return ["common.bf16=true"]
    if precision == "fp16":
        return ["common.fp16=true", "common.memory_efficient_fp16=true", "optimizer._name=adam"]
    if precision == "fp32":
        return []
    raise SettingsError(f"TRAIN_PRECISION={precision}: use bf16, fp16 (memory-efficient) or fp32 "
                        "(the train stage runs fairseq-hydra-train; fairseq-train's --bf16 is TPU "
                        "training in fairseq 0.12)")


def train_command(arch: str, data, settings: Settings, fairseq_bin) -> List[str]:
    """The fairseq-hydra-train command that trains `arch` for TRAIN_UPDATES updates of
    TRAIN_BATCH x TRAIN_SEQ_LEN tokens through the YAML twin of its recipe (recipes/config/*),
    in TRAIN_PRECISION, json records on stdout, no checkpoints; an arch with no YAML twin is a
    SettingsError. The bidirectional_lm recipe batches by tokens: TRAIN_BATCH sequences' worth."""
    family = next((f for f in TRAIN_FAMILIES if arch.startswith(f[0])), None)
    if family is None:
        raise SettingsError(f"TRAIN_ARCHS: {arch} has no recipe YAML here; use a 3ml_*, "
                            "swishrnn_bert_*, bert_rab_*, bert_orig_*, roberta_* or bidir_lm_* arch")
    prefix, folder, name, dropped = family
    length, batch, updates = settings.train_seq_len, settings.train_batch, settings.train_updates
    if prefix == "bidir_lm_":
        sizes = [f"task.tokens_per_sample={length}", f"model.max_target_positions={length}",
                 f"dataset.max_tokens={int(batch) * int(length)}"]
    else:
        sizes = [f"task.tokens_per_sample={length}", f"model.max_positions={length}",
                 f"dataset.batch_size={batch}"] + [f"~{key}" for key in dropped]
    return [
        f"{fairseq_bin}/fairseq-hydra-train", "--config-dir", f"{REPO}/recipes/config/{folder}",
        "--config-name", name,
        f"task.data={data}", f"checkpoint.save_dir={settings.work}/train/{arch}",
        "checkpoint.no_save=true", "common.log_format=json", "common.log_file=null",
        "common.no_progress_bar=true", f"common.log_interval={settings.train_log_interval}",
        f"model._name={arch}", *sizes,
        f"optimization.max_update={updates}", f"lr_scheduler.total_num_update={updates}",
        f"lr_scheduler.warmup_updates={int(updates) // 10}", f"optimization.lr=[{settings.train_lr}]",
        "optimization.update_freq=[1]", "distributed_training.distributed_world_size=1",
        "dataset.num_workers=2", *precision_overrides(settings.train_precision),
    ]


def check_train_settings(settings: Settings) -> None:
    """Raise SettingsError unless TRAIN_PRECISION, TRAIN_ARCHS, the sizes and the MFU's peak are
    usable (the driver checks before the first stage, so that a typo does not surface after the
    benchmarks' minutes)."""
    for name, value in (("TRAIN_UPDATES", settings.train_updates),
                        ("TRAIN_SEQ_LEN", settings.train_seq_len),
                        ("TRAIN_BATCH", settings.train_batch),
                        ("TRAIN_LOG_INTERVAL", settings.train_log_interval)):
        if not re.fullmatch(r"[1-9][0-9]*", value):
            raise SettingsError(f"{name}={value}: use a positive integer")
    precision_overrides(settings.train_precision)
    for arch in settings.train_archs:
        train_command(arch, "DATA", settings, ".")
    try:
        peak = float(settings.peak_tflops)
    except ValueError:
        peak = -1.0
    if not (peak > 0 and math.isfinite(peak)):
        raise SettingsError(f"GPU_SUITE_PEAK_TFLOPS={settings.peak_tflops}: use a positive number")


# --------------------------------------------------------------------- the train log check

@dataclasses.dataclass
class TrainCheck:
    """The summary row of one train run (TRAIN_SUMMARY_COLUMNS) and what was wrong with it."""

    row: List[str]
    problems: List[str]


def standard_library_module(relative_path: str):
    """A module of the package that imports the standard library only, loaded from its file:
    imported through ``fairseq_ext``, whose __init__ imports fairseq and torch, it would need
    what this suite installs."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(f"gpu_suite_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The JSON object a fairseq log line ends with, else None: the package's own reader.
json_record = standard_library_module("fairseq_ext/reporting/log_records.py").parse_json_record


def check_train_log(text: str, arch: str, precision: str, updates: int, require_cuda: bool = True,
                    peak_tflops: float = 989.0) -> TrainCheck:
    """Check a fairseq-hydra-train log (common.log_format=json records on stdout) and make its
    summary row: every update done, the loss fell, no NaN/inf, words/s logged, the precision
    asked for in fairseq's config, CUDA when the suite requires it; the achieved TFLOP/s (our
    criteria's FLOPs per update, the records' pflops, times updates per second) and MFU, that
    over `peak_tflops`; medians over the records after the first.

    Gradient overflow: none in bf16 and fp32; in fp16 the dynamic loss scaler (starting at 128)
    skips a few updates while it settles, so overflow fails the run only when it persists (any
    in the second half of the run, or more than a tenth of the updates skipped) or the loss
    scale reaches fairseq's minimum (1e-4)."""
    # fairseq's output, without the command line the stage printed first (paths may say anything).
    lines = [line for line in text.splitlines() if not line.startswith("+ ")]
    train, valid, other_overflow = [], [], []
    done = overflows = late_overflows = 0
    for line in lines:
        record = json_record(line)
        if record is not None:
            if "loss" in record and "num_updates" in record:
                train.append(record)
            elif "valid_loss" in record:
                valid.append(record)
            for key in ("num_updates", "train_num_updates", "valid_num_updates"):
                done = max(done, int(float(record.get(key, 0))))
        elif "gradient overflow detected" in line:
            overflows += 1
            late_overflows += done >= updates // 2
        elif "overflow" in line.lower() and "overflow in param" not in line:
            other_overflow.append(line)
    problems = []
    inner = [r for r in train if "wps" in r]
    if not inner:
        problems.append("no training records")
    else:
        losses = [float(r["loss"]) for r in inner]
        if not all(math.isfinite(v) for v in losses):
            problems.append(f"non-finite loss: {losses}")
        elif not losses[-1] < losses[0]:
            problems.append(f"the loss did not fall: {losses[0]} -> {losses[-1]}")
    if done < updates:
        problems.append(f"only {done} of {updates} updates")
    bad = [line for line in lines if re.search(r'"(-?inf|nan)"', line, re.I)] + other_overflow
    if bad:
        problems.append(f"{len(bad)} NaN/inf/overflow lines, first: {bad[0][:200]}")
    if overflows and precision != "fp16":  # no loss scaler: an overflow is a real one
        problems.append(f"{overflows} gradient overflows in {precision}")
    elif late_overflows or overflows > updates // 10:
        problems.append(f"the loss scale did not settle: {overflows} gradient overflows, "
                        f"{late_overflows} in the second half of the run")
    scales = [float(r["loss_scale"]) for r in train if "loss_scale" in r]
    if any(s <= MIN_LOSS_SCALE for s in scales) or any("Minimum loss scale" in x for x in lines):
        problems.append(f"the loss scale reached fairseq's minimum ({MIN_LOSS_SCALE})")
    # fairseq logs its config (a dict's repr) as it starts: the override reached the trainer.
    flag = {"bf16": "'bf16': True", "fp16": "'memory_efficient_fp16': True"}.get(precision)
    if flag and not any(flag in line for line in lines):
        problems.append(f"fairseq's config does not say {flag}: not trained in {precision}")
    if require_cuda and not any("CUDA enviroments" in line for line in lines):
        problems.append("fairseq trained without CUDA (no 'CUDA enviroments' banner in the log)")
    steady = inner[1:] or inner
    wps = [float(r["wps"]) for r in steady]
    ups = [float(r["ups"]) for r in steady if float(r.get("ups", 0)) > 0]
    tflops = [float(r["pflops"]) * float(r["ups"]) * 1e3 for r in steady
              if "pflops" in r and float(r.get("ups", 0)) > 0]
    row = [arch, precision, done,
           inner[0]["loss"] if inner else "-", inner[-1]["loss"] if inner else "-",
           valid[-1]["valid_loss"] if valid else "-",
           f"{statistics.median(wps):.0f}" if wps else "-",
           f"{1 / statistics.median(ups):.3f}" if ups else "-",
           f"{statistics.median(tflops):.1f}" if tflops else "-",
           f"{statistics.median(tflops) / peak_tflops:.1%}" if tflops else "-", overflows,
           "ok" if not problems else "FAIL: " + "; ".join(problems)]
    return TrainCheck([str(value) for value in row], problems)


# ------------------------------------------------------------------- the tests' skip check

def check_junit_skips(junit: Path, listing: Path, require_cuda: bool) -> bool:
    """List the skipped tests of pytest's junit XML in `listing` (name TAB reason) and print
    those skipped for want of a GPU, a CUDA kernel or nvcc: such skips mean the CUDA paths did
    not run. Returns False (a failed stage) when there are any and CUDA is required, or when the
    XML is missing or unreadable."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"error: no junit XML to check ({junit}): {error}", file=sys.stderr)
        return False
    skipped = []
    for case in root.iter("testcase"):
        for skip in case.findall("skipped"):
            skipped.append((f"{case.get('classname')}::{case.get('name')}", skip.get("message", "")))
    with open(listing, "w") as f:
        f.writelines(f"{name}\t{reason}\n" for name, reason in skipped)
    print(f"{len(skipped)} skipped (list: {listing})")
    missing = [s for s in skipped if NO_GPU_SKIP.search(s[1])]
    for name, reason in missing:
        print(f"  skipped without the GPU path: {name}: {reason}")
    if missing and require_cuda:
        print(f"{len(missing)} CUDA test(s) skipped on the GPU machine", file=sys.stderr)
        return False
    return True


# ------------------------------------------------------------- running a stage's commands

class StageRun:
    """What a stage body works with: the settings, OUTDIR, and the commands it runs, each
    printed on stderr as `+ COMMAND` (shell-quoted, like bash's set -x) and run unless this is a
    dry run. `py` and `fairseq_bin` are the environment's, once use_env ran."""

    def __init__(self, settings: Settings, outdir: Path):
        self.settings = settings
        self.outdir = outdir
        self.py = ""
        self.fairseq_bin = ""

    @property
    def dry_run(self) -> bool:
        """True when the stage only prints its commands."""
        return self.settings.dry_run

    @staticmethod
    def show(argv: Sequence, extra_env: Optional[Mapping[str, str]] = None, stream=None) -> None:
        """Print `+ [env K=V...] ARGV` on `stream` (stderr), as the logs and the dry run show
        commands."""
        words = [str(a) for a in argv]
        if extra_env:
            words = ["env", *(f"{k}={v}" for k, v in extra_env.items()), *words]
        stream = stream or sys.stderr
        stream.write("+ " + shlex.join(words) + "\n")
        stream.flush()

    def run(self, argv: Sequence, *, input: Optional[str] = None, tee: Optional[Path] = None,
            append: bool = False, extra_env: Optional[Mapping[str, str]] = None,
            check: bool = True) -> int:
        """Print and run `argv` (stdin: `input`, else none); with `tee`, its stdout also goes
        into that file (appended with `append`). Returns its exit status; raises CommandFailed
        on a non-zero one when `check`. A dry run only prints, and returns 0."""
        self.show(argv, extra_env)
        if self.dry_run:
            return 0
        argv = [str(a) for a in argv]
        env = dict(os.environ, **extra_env) if extra_env else None
        sys.stdout.flush()
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE if input is not None
                                    else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE if tee else None)
        except OSError as error:
            return self._not_run(argv, error, check)
        if input is not None:
            proc.stdin.write(input.encode())
            proc.stdin.close()
        if tee:
            with open(tee, "ab" if append else "wb") as copy:
                for line in proc.stdout:
                    sys.stdout.buffer.write(line)
                    sys.stdout.buffer.flush()
                    copy.write(line)
        rc = proc.wait()
        if rc and check:
            raise CommandFailed(argv, rc)
        return rc

    @staticmethod
    def _not_run(argv: List[str], error: OSError, check: bool) -> int:
        """A command that could not start (not found, not executable): said on stderr, status
        127 as in a shell; CommandFailed when `check`."""
        print(f"{argv[0]}: {error.strerror or error}", file=sys.stderr, flush=True)
        if check:
            raise CommandFailed(argv, 127)
        return 127

    def step(self, argv: Sequence, action: Callable[[], object]) -> None:
        """Print `argv`, the shell command that does what `action` does, and do it in this
        process unless this is a dry run (rm -rf, cp, mkdir -p)."""
        self.show(argv)
        if not self.dry_run:
            action()

    def note(self, call: str) -> None:
        """Print a check this process makes itself (`+ name(args)`), as a dry run shows it."""
        sys.stderr.write(f"+ {call}\n")
        sys.stderr.flush()


def capture(argv: Sequence, input: Optional[str] = None) -> str:
    """The stdout of `argv` (not printed: a value the stage needs, like bash's $(...));
    CommandFailed if it exits non-zero."""
    argv = [str(a) for a in argv]
    try:
        proc = subprocess.run(argv, input=input, stdout=subprocess.PIPE, text=True)
    except OSError as error:
        StageRun._not_run(argv, error, check=True)
    if proc.returncode:
        raise CommandFailed(argv, proc.returncode)
    return proc.stdout


def read_stamp(path: Path) -> Optional[str]:
    """A one-line stamp file's text without its trailing newlines; None if there is none."""
    try:
        return path.read_text().rstrip("\n")
    except OSError:
        return None


def use_env(run: StageRun) -> str:
    """Point this stage at the environment setup made: set run.py (its interpreter) and
    run.fairseq_bin (where fairseq's console scripts are, exported as FAIRSEQ_BIN), and PATH,
    VIRTUAL_ENV or PYTHONPATH for the commands. Every stage after setup calls it; each device
    call must run setup first (a fresh machine is bare). Returns run.py."""
    s = run.settings
    env, venv_python = s.gpu_env, s.gpu_env / "bin" / "python"
    path = os.environ.get("PATH", "")
    if os.access(venv_python, os.X_OK):
        py = str(venv_python)
        os.environ.update(PATH=f"{env}/bin:{path}", VIRTUAL_ENV=str(env))
    elif (env / "site").is_dir():  # the fallback: --target install on PYTHONPATH
        py = shutil.which(s.gpu_python) or ""
        if not py:
            raise SuiteError(f"GPU_PYTHON={s.gpu_python} not found")
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = f"{REPO}:{env}/site" + (f":{old}" if old else "")
        os.environ["PATH"] = f"{env}/site/bin:{path}"
    elif s.dry_run:
        py = str(venv_python)
    else:
        raise SuiteError(f"no environment at {env}: run the setup stage first (in the same device "
                         "call)")
    fairseq_bin = os.path.dirname(py)
    if (env / "site" / "bin").is_dir() and not os.access(venv_python, os.X_OK):
        fairseq_bin = f"{env}/site/bin"
    os.environ["FAIRSEQ_BIN"] = fairseq_bin
    run.py, run.fairseq_bin = py, fairseq_bin
    return py


# ------------------------------------------------------------------------------ the setup

#: Run with GPU_PYTHON (argv: REPO): one .pth line per site directory of the interpreter that
#: holds torch (processed like the venv's own, .pth files included), then the repository
#: (fairseq_ext, built in place).
BASE_PTH_LINES = """\
import sys
for path in sys.path:
    if path.endswith(("site-packages", "dist-packages")):
        print(f"import site; site.addsitedir({path!r})")
print(sys.argv[1])
"""

#: Run with the environment's interpreter (argv: GPU_SUITE_REQUIRE_CUDA, GPU_ENV): fairseq from
#: the wheels, the versions, the device.
ENV_CHECK = """\
import os, platform, sys
import fairseq, hydra, numpy, omegaconf, torch
if not os.path.realpath(fairseq.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep):
    sys.exit(f"fairseq comes from {fairseq.__file__}, not from the wheels in {sys.argv[2]}")
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| cuDNN",
      torch.backends.cudnn.version())
print("fairseq", fairseq.__version__, fairseq.__file__)
print("numpy", numpy.__version__, "| hydra", hydra.__version__, "| omegaconf",
      omegaconf.__version__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device {p.name}, capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.1f} GiB")
elif sys.argv[1] == "1":
    sys.exit("torch sees no CUDA device")
else:
    print("device: none (GPU_SUITE_REQUIRE_CUDA=0)")
"""

PIP_INSTALL = ("-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--disable-pip-version-check")


def carried_wheels(wheel_dir: Path) -> List[Path]:
    """The wheels in WHEEL_DIR (as the shell's *.whl: no hidden files), sorted."""
    if not wheel_dir.is_dir():
        return []
    return sorted(p for p in wheel_dir.glob("*.whl") if not p.name.startswith(".") and p.is_file())


def wheels_key(wheels: Sequence[Path]) -> str:
    """The wheels' sizes and names, one `SIZE NAME` line each: a second setup with the same
    wheels installs nothing."""
    return "\n".join(sorted(f"{p.stat().st_size} {p.name}" for p in wheels))


def stage_setup(run: StageRun) -> None:
    """Install the carried wheels into GPU_ENV (a venv that sees GPU_PYTHON's packages and the
    repo; else a --target folder on PYTHONPATH), unless the same wheels are in already; check
    `import fairseq, torch` and the device; versions and nvidia-smi into env.txt."""
    s = run.settings
    run.run([s.gpu_python, "--version"])
    wheels = carried_wheels(s.wheel_dir)
    if not wheels and not s.dry_run:
        raise SuiteError(f"no wheels in {s.wheel_dir}: run scripts/gpu_wheels.sh on the CPU machine "
                         "and name .whl in the device call's carry")
    wheel_args = [str(p) for p in wheels] or [f"{s.wheel_dir}/*.whl"]
    key, stamp = wheels_key(wheels), s.gpu_env / ".wheels-installed"
    if read_stamp(stamp) == key:
        print(f"wheels already installed in {s.gpu_env}")
    else:
        run.step(["rm", "-rf", s.gpu_env], lambda: shutil.rmtree(s.gpu_env, ignore_errors=True))
        if run.run([s.gpu_python, "-m", "venv", "--without-pip", s.gpu_env], check=False) == 0:
            # The venv sees the base interpreter's packages (torch...) after its own, and the repo.
            if not s.dry_run:
                venv_python = s.gpu_env / "bin" / "python"
                site_dir = capture([venv_python, "-c", "import sysconfig; "
                                    "print(sysconfig.get_paths()['purelib'])"]).strip()
                pth = capture([s.gpu_python, "-", REPO], input=BASE_PTH_LINES)
                Path(site_dir, "zz_gpu_suite_base.pth").write_text(pth)
            # pip runs from the base interpreter's packages; --ignore-installed: into the venv
            # even where the base has the same version.
            run.run([s.gpu_env / "bin" / "python", *PIP_INSTALL, "--ignore-installed", *wheel_args])
        else:
            print(f"no venv could be made: installing into {s.gpu_env}/site, on PYTHONPATH", flush=True)
            run.step(["rm", "-rf", s.gpu_env], lambda: shutil.rmtree(s.gpu_env, ignore_errors=True))
            run.run([s.gpu_python, *PIP_INSTALL, "--upgrade", "--target", f"{s.gpu_env}/site",
                     *wheel_args])
        if not s.dry_run:
            stamp.write_text(key + "\n")
    use_env(run)
    env_txt = run.outdir / "env.txt"
    run.run([run.py, "-", "1" if s.require_cuda else "0", s.gpu_env], input=ENV_CHECK, tee=env_txt)
    if s.dry_run or shutil.which("nvidia-smi"):
        run.run(["nvidia-smi"], tee=env_txt, append=True)
    elif s.require_cuda:
        raise SuiteError("nvidia-smi not found")
    if s.dry_run or shutil.which("nvcc"):
        run.run(["nvcc", "--version"], tee=env_txt, append=True)


# ------------------------------------------------------------------------------ the build

#: Run with the environment's interpreter in REPO (argv: GPU_SUITE_REQUIRE_CUDA): the op has a
#: kernel for the device, and on CUDA it matches the reference.
KERNEL_CHECK = """\
import sys
import torch
from fairseq_ext.ops import swish_recurrence as ops
print("fairseq_ext.ops._C:", getattr(ops.EXTENSION, "__file__", None))
print("kernels of fairseq_ext::swish_recurrence for:", ops.NATIVE_OP_DEVICES,
      "| CPU kernels:", ops.cpu_kernels())
want = "cuda" if sys.argv[1] == "1" else "cpu"
if want not in ops.NATIVE_OP_DEVICES:
    sys.exit(f"no {want} kernel registered: the build failed (setup.py only warns), see above")
if want == "cuda":
    x = torch.randn(64, 4, 32, device="cuda")
    a, b = torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
    out = torch.ops.fairseq_ext.swish_recurrence(x, a, b, 2)
    ref = ops.swish_recurrence_reference(x, a, b, 2)
    torch.testing.assert_close(out, ref)
    print("CUDA kernel ran; matches the reference at (64, 4, 32), k = 2")
"""

TORCH_AND_DEVICE = ("import torch; print(torch.__version__, "
                    "torch.cuda.is_available() and torch.cuda.get_device_capability())")


def copy_into_place(source, target) -> None:
    """Copy file `source` to `target` through a temporary file and a rename, so that a process
    that has the old `target` loaded (a shared library) keeps its copy intact."""
    partial = f"{target}.partial-{os.getpid()}"
    shutil.copy(source, partial)
    os.replace(partial, target)


def build_key(py: str) -> str:
    """What the compiled module depends on, hashed: setup.py, fairseq_ext/ops/csrc/*, the torch
    version and the GPU's compute capability. A prebuilt module is used only if this matches."""
    digest = hashlib.sha256((REPO / "setup.py").read_bytes())
    for source in sorted((REPO / "fairseq_ext" / "ops" / "csrc").iterdir()):
        if source.is_file():
            digest.update(source.read_bytes())
    digest.update(capture([py, "-c", TORCH_AND_DEVICE]).encode())
    return digest.hexdigest()[:16]


def stage_build(run: StageRun) -> None:
    """Compile fairseq_ext.ops._C with its CUDA kernels (or take the carried prebuilt one, or the one
    built in this machine already, when its key matches), check the op's kernel, and copy the
    module and its key to OUTDIR/prebuilt/."""
    s = run.settings
    py = use_env(run)
    os.chdir(REPO)
    suffix, key = ".cpython-312-x86_64-linux-gnu.so", "dry-run"
    if not s.dry_run:
        suffix = capture([py, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"])
        suffix, key = suffix.strip(), build_key(py)
    so, prebuilt = f"fairseq_ext/ops/_C{suffix}", s.prebuilt / f"_C{suffix}"
    build_stamp = s.gpu_env / ".build-key"
    if prebuilt.is_file() and read_stamp(s.prebuilt / "key") == key:
        print(f"using the prebuilt {prebuilt} (key {key})", flush=True)
        run.step(["cp", prebuilt, so], lambda: copy_into_place(prebuilt, so))
    elif Path(so).is_file() and read_stamp(build_stamp) == key:
        print(f"{so} is built already (key {key})", flush=True)
    else:
        # setup.py's CUDA_ARCH_LIST (TORCH_CUDA_ARCH_LIST=native: only the GPU's own).
        run.run([py, "setup.py", "-q", "build_ext", "--inplace"],
                extra_env={"MAX_JOBS": os.environ.get("MAX_JOBS") or "16"})
        if not s.dry_run:
            build_stamp.write_text(key + "\n")
    run.run([py, "-", "1" if s.require_cuda else "0"], input=KERNEL_CHECK)
    target = run.outdir / "prebuilt"
    run.step(["mkdir", "-p", target], lambda: target.mkdir(parents=True, exist_ok=True))
    run.step(["cp", so, f"{target}/"], lambda: shutil.copy(so, target))
    if not s.dry_run:
        (target / "key").write_text(key + "\n")


# ------------------------------------------------------------------------------ the tests

def stage_test_files(settings: Settings) -> List[str]:
    """The tests stage's files, relative to the repo: GPU_SUITE_TESTS if set, else
    DEFAULT_TEST_FILES and every tests/test_*.py that mentions CUDA, but this suite's own."""
    if settings.tests:
        return settings.tests.split()
    files = set(DEFAULT_TEST_FILES)
    for path in (REPO / "tests").glob("test_*.py"):
        if CUDA_TEST_PATTERN.search(path.read_text(errors="replace")):
            files.add(f"tests/{path.name}")
    files.discard("tests/test_gpu_suite.py")
    return sorted(files)


def stage_tests(run: StageRun) -> int:
    """pytest on stage_test_files (junit XML in OUTDIR, each test limited to GPU_SUITE_PYTEST_TIMEOUT
    where pytest-timeout is installed), then check_junit_skips. Returns pytest's status, else 1
    if the skip check fails."""
    s = run.settings
    py = use_env(run)
    os.chdir(REPO)
    xdist = ["-n", s.pytest_workers] if s.pytest_workers != "0" else []
    # A test that hangs fails alone, with its stacks, instead of the stage timing out without
    # its junit XML (the first GPU run's tests stage did: every test reported, pytest never ended).
    per_test = []
    if s.dry_run or subprocess.run([py, "-c", "import pytest_timeout"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL).returncode == 0:
        per_test = ["--timeout", s.pytest_timeout]
    junit = run.outdir / "junit-tests.xml"
    # -v: a line per test as it ends, so that the log names the tests a stage timeout cut off
    # (with -q, the second GPU run's log had only dots: 116 of 143 reported, but which?).
    rc = run.run([py, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", *xdist, *per_test,
                  f"--junitxml={junit}", *s.pytest_args, *stage_test_files(s)],
                 extra_env={"CUDA_HOST_EMULATION_REPORT": str(run.outdir / "cuda-vs-host-emulation.json")},
                 check=False)
    # Skips for want of a GPU, a CUDA kernel or nvcc mean the CUDA paths did not run.
    listing = run.outdir / "tests-skipped.txt"
    run.note(f"check_junit_skips({str(junit)!r}, {str(listing)!r}, require_cuda={s.require_cuda})")
    if not s.dry_run and not check_junit_skips(junit, listing, s.require_cuda):
        rc = rc or 1
    return rc


# ------------------------------------------------------------------------- the benchmarks

# A stage run again in the same OUTDIR (a later device call) measures again: its files are the
# suite's own, so the benchmarks' --json files are rewritten (--force), as the logs are.

def stage_bench_swishrnn(run: StageRun) -> None:
    """scripts/bench_swishrnn.py --part a, then --part c at base, seq 512, bf16 on CUDA."""
    py, out = use_env(run), run.outdir
    os.chdir(REPO)
    run.run([py, "scripts/bench_swishrnn.py", "--part", "a"], tee=out / "bench-swishrnn-a.txt")
    run.run([py, "scripts/bench_swishrnn.py", "--part", "c", "--device", "cuda", "--dtype", "bf16",
             "--arch-size", "base", "--seq-len", "512", "--batch-size", "16"],
            tee=out / "bench-swishrnn-c.txt")


def check_bench_3ml_runs(settings: Settings) -> None:
    """SettingsError unless BENCH_3ML_RUNS names only bench_3ml's runs (BENCH_3ML_RUNS)."""
    unknown = sorted(set(settings.bench_3ml_runs) - set(BENCH_3ML_RUNS))
    if unknown:
        raise SettingsError(f"BENCH_3ML_RUNS: unknown {' '.join(unknown)}; use some of "
                            f"{' '.join(BENCH_3ML_RUNS)}")


def stage_step(run: StageRun) -> None:
    """scripts/bench_step.py on CUDA in bf16 at base/512: STEP_FAMILIES [RoBERTa, 3ML-self and
    3ML-cross] through fairseq's Trainer.train_step, STEP_COMPILE [eager and compiled], at each
    of STEP_BATCHES; the first micro-batch also keeps the profiles as Chrome traces. bench_step
    reports on stderr (the stage's log) as it goes: each trainer built, each case's first
    update (its compile), each round, each case's result."""
    s, py, out = run.settings, use_env(run), run.outdir
    os.chdir(REPO)
    data = ["--data", s.data] if (s.data / "dict.txt").is_file() else [
        "--cache", s.work / "bench-step", "--vocab", "8000"]
    for index, batch in enumerate(s.step_batches):
        trace = ["--trace", out / "step-traces"] if index == 0 else []
        run.run([py, "scripts/bench_step.py", "--families", s.step_families,
                 "--dim", "768", "--layers", "12", "--seq-len", "512", "--batch-size", batch,
                 "--dtype", "bf16", "--optimizer", "fused_adamw", "--compile", s.step_compile,
                 "--peak-tflops", s.peak_tflops, "--warmup", "5", "--updates", s.step_updates,
                 "--share-updates", "3", "--count-updates", "1", *data, *trace,
                 "--fairseq-args=--reduce-stats-at-log-interval --required-seq-len-multiple 64",
                 "--json", out / f"bench-step-base-512-b{batch}.json", "--force"],
                tee=out / f"bench-step-base-512-b{batch}.txt")


def stage_bench_3ml(run: StageRun) -> None:
    """scripts/bench_3ml.py on CUDA in bf16: base/512 (with the padded encoder too) and
    large/128 at 15/40/50% masking, JSON and text; then the bookkeeping profile at base/512.
    BENCH_3ML_RUNS picks among these three runs (base, large, profile)."""
    check_bench_3ml_runs(run.settings)
    py, out, runs = use_env(run), run.outdir, run.settings.bench_3ml_runs
    os.chdir(REPO)
    common = ["--device", "cuda", "--dtype", "bf16", "--mask-rates", "0.15,0.4,0.5", "--warmup", "5",
              "--iters", run.settings.bench_3ml_iters]
    if "base" in runs:
        run.run([py, "scripts/bench_3ml.py", "--size", "base", "--seq-len", "512", "--batch-size", "32",
                 *common, "--padded-encoder", "--json", out / "bench-3ml-base-512.json", "--force"],
                tee=out / "bench-3ml-base-512.txt")
    if "large" in runs:
        run.run([py, "scripts/bench_3ml.py", "--size", "large", "--seq-len", "128", "--batch-size",
                 "128", *common, "--json", out / "bench-3ml-large-128.json", "--force"],
                tee=out / "bench-3ml-large-128.txt")
    if "profile" in runs:
        run.run([py, "scripts/bench_3ml.py", "--size", "base", "--seq-len", "512", "--batch-size",
                 "32", "--device", "cuda", "--dtype", "bf16", "--profile", "--profile-rate", "0.5"],
                tee=out / "bench-3ml-profile.txt")


def stage_bench_bidir(run: StageRun) -> None:
    """scripts/bench_bidirectional.py on CUDA in bf16 at 125m, seq 1024; then its --part flex
    (FlexAttention against SDPA) at T = 1024 and 2048 on the carried data-bin if there is one."""
    s, py, out = run.settings, use_env(run), run.outdir
    os.chdir(REPO)
    rounds = s.bench_bidir_rounds
    run.run([py, "scripts/bench_bidirectional.py", "--arch-size", "125m", "--seq-len", "1024",
             "--batch-size", "8", "--device", "cuda", "--dtype", "bf16", "--rounds", rounds,
             "--json", out / "bench-bidir-125m.json", "--force"], tee=out / "bench-bidir-125m.txt")
    data = ["--data", s.data] if (s.data / "dict.txt").is_file() else []
    run.run([py, "scripts/bench_bidirectional.py", "--part", "flex", "--arch-size", "125m",
             "--seq-lens", "1024,2048", "--batch-size", "4", "--max-batches", "4", "--device", "cuda",
             "--dtype", "bf16", "--rounds", rounds, *data, "--json", out / "bench-bidir-flex-125m.json",
             "--force"], tee=out / "bench-bidir-flex-125m.txt")


# -------------------------------------------------------------------------- the training

REPO_TEXT_ROOTS = ("README.md", "docs", "fairseq_ext", "recipes", "scripts", "tests")
REPO_TEXT_SUFFIXES = (".md", ".py", ".sh", ".yaml")


def repo_text_files() -> List[str]:
    """The repo's Markdown, Python, shell and YAML files (under REPO_TEXT_ROOTS), relative and
    sorted: the text of the data-bin the train stage builds when none is carried."""
    found = []
    for root in REPO_TEXT_ROOTS:
        top = REPO / root
        paths = [top] if top.is_file() else [Path(d, f) for d, _, names in os.walk(top) for f in names]
        found += [p.relative_to(REPO).as_posix() for p in paths
                  if p.name.endswith(REPO_TEXT_SUFFIXES) and p.is_file() and not p.is_symlink()]
    return sorted(found)


def training_data(run: StageRun) -> Path:
    """The data-bin the train stage uses: the carried GPU_SUITE_DATA, else one built (once, in
    GPU_SUITE_WORK) from the repo's own text with fairseq_ext.corpus.prepare_corpus."""
    s = run.settings
    if (s.data / "dict.txt").is_file():
        print(f"training data: {s.data} (carried)", file=sys.stderr, flush=True)
        return s.data
    text, dest = s.work / "repo-text.txt", s.work / "data-bin-repo-text"
    print(f"training data: no {s.data}; building {dest} from the repo's own text", file=sys.stderr,
          flush=True)
    if not (dest / "dict.txt").is_file():
        s.work.mkdir(parents=True, exist_ok=True)
        # Documents separated by blank lines, one output line per line (prepare_corpus, file input).
        with open(text, "wb") as f:
            for name in repo_text_files():
                f.write((REPO / name).read_bytes() + b"\n\n")
        run.run([run.py, "-m", "fairseq_ext.corpus.prepare_corpus", "--input", text, "--destdir", dest,
                 "--workers", "8"])
    return dest


def format_columns(rows: Sequence[Sequence[str]]) -> str:
    """The rows as aligned columns, two spaces apart (column -t)."""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def run_training(run: StageRun, cmd: List[str], log: Path) -> int:
    """Run fairseq-hydra-train command `cmd` with its output in `log` (the command line first);
    on a crash print the log's tail. Returns its exit status (0 in a dry run)."""
    with open(log, "w") as f:  # the command line is the first line of its log
        run.show(cmd, stream=f)
        rc = 0
        if not run.dry_run:
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL).returncode
            except OSError as error:
                f.write(f"{cmd[0]}: {error.strerror or error}\n")
                rc = 127
    if rc:
        print(f"fairseq-hydra-train failed (exit {rc}); the end of {log}:")
        print("\n".join(tail_lines(log, 40)), flush=True)
    return rc


def train_and_check(run: StageRun, settings: Settings, arch: str, cmd: List[str], log: Path,
                    summary: Path, lead: Sequence[str] = ()) -> Optional[TrainCheck]:
    """run_training, then check_train_log with `settings`' updates and precision; appends the
    summary row (failed(RC) for a crash), after the columns `lead`, to `summary`. Returns the
    check (None: crashed or a dry run)."""
    rc = run_training(run, cmd, log)
    if rc:
        with open(summary, "a") as f:
            f.write("\t".join([*lead, arch, settings.train_precision, *["-"] * 9, f"failed({rc})"])
                    + "\n")
        return None
    run.note(f"check_train_log(open({str(log)!r}).read(), {arch!r}, {settings.train_precision!r}, "
             f"{settings.train_updates}, require_cuda={settings.require_cuda}, "
             f"peak_tflops={settings.peak_tflops})")
    if run.dry_run:
        return None
    check = check_train_log(log.read_text(errors="replace"), arch, settings.train_precision,
                            int(settings.train_updates), settings.require_cuda,
                            float(settings.peak_tflops))
    with open(summary, "a") as f:
        f.write("\t".join([*lead, *check.row]) + "\n")
    for problem in check.problems:
        print(f"{arch}: {problem}", file=sys.stderr, flush=True)
    return check


def stage_train(run: StageRun) -> int:
    """Train each of TRAIN_ARCHS with train_command (its output, after the command line, in
    OUTDIR/train-ARCH.log), check each log with check_train_log into OUTDIR/train-summary.tsv,
    and print the summary. A crashed run is summarised as failed(RC) and the next arch still
    trains. Returns 1 if any run crashed or failed its check."""
    s = run.settings
    check_train_settings(s)
    use_env(run)
    os.chdir(REPO)
    data = s.data if s.dry_run else training_data(run)
    summary = run.outdir / "train-summary.tsv"
    summary.write_text("\t".join(TRAIN_SUMMARY_COLUMNS) + "\n")
    failed = 0
    for arch in s.train_archs:
        cmd = train_command(arch, data, s, run.fairseq_bin)
        print(f"== {arch}: {os.path.relpath(cmd[2], REPO)}/{cmd[4]}.yaml, {s.train_updates} updates "
              f"of {s.train_batch} x {s.train_seq_len} tokens, {s.train_precision}", flush=True)
        check = train_and_check(run, s, arch, cmd, run.outdir / f"train-{arch}.log", summary)
        if not run.dry_run:
            failed = failed or int(check is None or bool(check.problems))
    print(format_columns([line.split("\t") for line in summary.read_text().splitlines()]), flush=True)
    return failed


# ------------------------------------------------------------------------------ the fsdp check

def fsdp_settings(settings: Settings) -> Settings:
    """The train settings of the fsdp stage's runs: FSDP_ARCH for FSDP_UPDATES updates in
    FSDP_PRECISION, a record every update. SettingsError for values fairseq would refuse."""
    if not re.fullmatch(r"[1-9][0-9]*", settings.fsdp_updates):
        raise SettingsError(f"FSDP_UPDATES={settings.fsdp_updates}: use a positive integer")
    if settings.fsdp_precision not in ("fp32", "fp16"):
        raise SettingsError(f"FSDP_PRECISION={settings.fsdp_precision}: use fp32 or fp16 "
                            "(fairseq refuses --ddp-backend fully_sharded with bf16)")
    try:
        tolerance = float(settings.fsdp_loss_tol)
    except ValueError:
        tolerance = -1.0
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise SettingsError(f"FSDP_LOSS_TOL={settings.fsdp_loss_tol}: use a number >= 0")
    fsdp = dataclasses.replace(settings, train_updates=settings.fsdp_updates,
                               train_precision=settings.fsdp_precision, train_log_interval="1")
    try:
        train_command(fsdp.fsdp_arch, "DATA", fsdp, ".")
    except SettingsError as error:  # an arch without a recipe YAML
        raise SettingsError(str(error).replace("TRAIN_ARCHS:", "FSDP_ARCH:", 1)) from None
    return fsdp


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def one_process_group(cuda: bool) -> List[str]:
    """Overrides that give fairseq-hydra-train a torch.distributed process group of one process
    (rank 0 of 1, in this process: no spawn), NCCL on CUDA, else gloo. fairscale 0.4.13's FSDP
    asks torch.distributed for its reduce-scatter group even on one GPU, so fairseq's own
    one-process path (distributed_world_size=1 and no init method: no process group, a
    DummyProcessGroup for FSDP) stops with "torch.distributed is not yet initialized" (the
    second GPU run, 2026-11-26). Both backends of the fsdp stage run so, to compare alike."""
    return [f"distributed_training.distributed_init_method=tcp://127.0.0.1:{free_port()}",
            "distributed_training.distributed_no_spawn=true",
            "distributed_training.distributed_rank=0", "distributed_training.device_id=0",
            f"distributed_training.distributed_backend={'nccl' if cuda else 'gloo'}"]


def train_losses(text: str) -> Dict[int, float]:
    """update -> training loss, from the json train_inner records of a fairseq log."""
    losses = {}
    for line in text.splitlines():
        record = None if line.startswith("+ ") else json_record(line)
        if record is not None and "loss" in record and "num_updates" in record:
            losses[int(float(record["num_updates"]))] = float(record["loss"])
    return losses


def compare_losses(reference: Mapping[int, float], other: Mapping[int, float],
                   tolerance: float) -> Tuple[str, List[str]]:
    """Compare two runs' per-update losses: a one-line summary (updates compared, the largest
    and the mean absolute difference, and where the largest is) and the problems (an update
    logged by one run only, a difference above `tolerance`, nothing to compare)."""
    problems = []
    only = sorted(set(reference) ^ set(other))
    if only:
        problems.append(f"updates logged by one run only: {only[:10]}")
    common = sorted(set(reference) & set(other))
    if not common:
        return "no update logged by both runs", problems + ["no losses to compare"]
    gaps = {u: abs(reference[u] - other[u]) for u in common}
    worst = max(common, key=gaps.get)
    line = (f"{len(common)} updates compared: max |loss difference| {gaps[worst]:.4f} at update "
            f"{worst} ({reference[worst]:.4f} against {other[worst]:.4f}), mean "
            f"{statistics.fmean(gaps.values()):.4f}; last update {common[-1]}: "
            f"{reference[common[-1]]:.4f} against {other[common[-1]]:.4f}")
    if not all(math.isfinite(g) for g in gaps.values()) or gaps[worst] > tolerance:
        problems.append(f"the losses differ by more than FSDP_LOSS_TOL={tolerance:g}")
    return line, problems


def stage_fsdp(run: StageRun) -> int:
    """fairseq's --ddp-backend fully_sharded (fairscale FSDP) on one GPU against legacy_ddp:
    FSDP_ARCH [3ml_self_base] trained FSDP_UPDATES [50] updates in FSDP_PRECISION [fp32] with
    each backend (train_command, seed 1, the same batches), each log checked as the train
    stage's (OUTDIR/fsdp-BACKEND.log, fsdp-summary.tsv), then the per-update losses compared
    (compare_losses, OUTDIR/fsdp-compare.txt): they match when no update differs by more than
    FSDP_LOSS_TOL [0.02]. Returns 1 if a run fails or the losses do not match."""
    s = run.settings
    fsdp = fsdp_settings(s)
    use_env(run)
    os.chdir(REPO)
    data = s.data if s.dry_run else training_data(run)
    summary = run.outdir / "fsdp-summary.tsv"
    summary.write_text("\t".join(("backend",) + TRAIN_SUMMARY_COLUMNS) + "\n")
    losses, failed = {}, 0
    for backend in FSDP_BACKENDS:
        cmd = [*train_command(fsdp.fsdp_arch, data, fsdp, run.fairseq_bin),
               *one_process_group(s.require_cuda), f"distributed_training.ddp_backend={backend}"]
        print(f"== {fsdp.fsdp_arch}, {backend}: {fsdp.train_updates} updates, {fsdp.train_precision}",
              flush=True)
        log = run.outdir / f"fsdp-{backend}.log"
        check = train_and_check(run, fsdp, fsdp.fsdp_arch, cmd, log, summary, lead=[backend])
        if run.dry_run:
            continue
        failed = failed or int(check is None or bool(check.problems))
        if check is not None:
            losses[backend] = train_losses(log.read_text(errors="replace"))
    print(format_columns([line.split("\t") for line in summary.read_text().splitlines()]), flush=True)
    run.note(f"compare_losses(<{FSDP_BACKENDS[0]} losses>, <{FSDP_BACKENDS[1]} losses>, "
             f"{fsdp.fsdp_loss_tol})")
    if run.dry_run:
        return 0
    if len(losses) < len(FSDP_BACKENDS):
        print("error: a run failed, so there are no two runs' losses to compare", file=sys.stderr)
        return 1
    line, problems = compare_losses(losses[FSDP_BACKENDS[0]], losses[FSDP_BACKENDS[1]],
                                    float(fsdp.fsdp_loss_tol))
    verdict = "match" if not problems else "DIFFER: " + "; ".join(problems)
    text = f"{FSDP_BACKENDS[1]} against {FSDP_BACKENDS[0]}: {line}\n{verdict}\n"
    (run.outdir / "fsdp-compare.txt").write_text(text)
    print(text, end="", flush=True)
    return failed or int(bool(problems))


# ------------------------------------------------------------------------------ the GPU study

#: What the study stage leaves on the machine: checkpoints and data-bins (the study's held-out
#: split); everything else of the runs directory comes back in OUTDIR/study/.
STUDY_LEFT_BEHIND = (".pt", ".bin", ".idx")


def copy_study_files(runs_dir: Path, target: Path) -> int:
    """Copy every file under `runs_dir` but STUDY_LEFT_BEHIND's into `target`, keeping the
    tree; returns how many. What a later call, or this machine's report, needs: each finished
    run's result.json and scores.json, the logs, study.json and curves.png."""
    copied = 0
    for path in sorted(runs_dir.rglob("*")) if runs_dir.is_dir() else []:
        if path.is_file() and not path.is_symlink() and not path.name.endswith(STUDY_LEFT_BEHIND):
            dest = target / path.relative_to(runs_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            copied += 1
    return copied


def stage_study(run: StageRun) -> None:
    """scripts/study.py GPU_SUITE_STUDY [3ml-gpu] on the GPU (issue 47, item 5) on the carried
    data-bin, its runs in GPU_SUITE_STUDY_DIR/NAME (carried: finished runs are read back), its
    output in OUTDIR/study-NAME.txt; then (also when the stage is ended at its limit: SIGTERM
    leaves through here) copy_study_files into OUTDIR/study/NAME/."""
    s, out = run.settings, run.outdir
    py = use_env(run)
    os.chdir(REPO)
    data = s.data if s.dry_run else training_data(run)
    runs_dir = s.study_dir / s.study
    argv = [py, "scripts/study.py", s.study, "--data", data, "--runs-dir", runs_dir]
    if s.study_updates:
        argv += ["--updates", s.study_updates]
    if s.study_seeds:
        argv += ["--seeds", *s.study_seeds]
    if not s.require_cuda:  # a trial on a machine without a GPU
        argv += ["--device", "cpu"]
    target = out / "study" / s.study
    signal.signal(signal.SIGTERM, _terminate)  # the copy below still runs
    try:
        run.run(argv, tee=out / f"study-{s.study}.txt")
    finally:
        run.step(["copy_study_files", runs_dir, target],
                 lambda: print(f"copied {copy_study_files(runs_dir, target)} files of {runs_dir} "
                               f"to {target}", flush=True))


# ---------------------------------------------------------------------------- the stages

@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its name, its body (returns its exit status, None for 0) and what it does."""

    name: str
    body: Callable[[StageRun], Optional[int]]
    summary: str


#: The stage table, in the order the suite runs them.
STAGES: Dict[str, Stage] = {stage.name: stage for stage in (
    Stage("setup", stage_setup, "install the carried wheels beside the machine's torch"),
    Stage("build", stage_build, "compile fairseq_ext.ops._C with its CUDA kernels, check the op"),
    Stage("step", stage_step, "scripts/bench_step.py: the train step at base/512, eager and "
          "compiled, micro-batch 32/64/128, MFU, device timeline"),
    Stage("tests", stage_tests, "pytest on the tests that exercise CUDA; CUDA skips fail"),
    Stage("bench_swishrnn", stage_bench_swishrnn, "scripts/bench_swishrnn.py parts a and c"),
    Stage("bench_3ml", stage_bench_3ml, "scripts/bench_3ml.py at base/512 and large/128, profile"),
    Stage("bench_bidir", stage_bench_bidir, "scripts/bench_bidirectional.py at 125m, flex"),
    Stage("train", stage_train, "fairseq-hydra-train per arch, each json log checked"),
    Stage("fsdp", stage_fsdp, "--ddp-backend fully_sharded against legacy_ddp, losses compared"),
    Stage("study", stage_study, "scripts/study.py 3ml-gpu: RoBERTa-15% against 3ML-self-40%, "
          "wall clock to RoBERTa's final [MASK] loss"),
)}
ALL_STAGES = tuple(STAGES)
#: Names --stages takes besides the stages' own.
ALIASES = {"all": ALL_STAGES, "bench": ("step", "bench_swishrnn", "bench_3ml", "bench_bidir")}


def run_stage(name: str, outdir: Path) -> int:
    """The body of one stage, in this (the stage's own) process: GPU_SUITE_CMD_<name> if set
    (exec'd with bash -c), else the stage table's. Returns the stage's exit status."""
    override = os.environ.get(f"GPU_SUITE_CMD_{name}")
    if override:
        print(f"+ GPU_SUITE_CMD_{name}: {override}", flush=True)
        os.execvp("bash", ["bash", "-c", override])
    run = StageRun(Settings.from_env(os.environ), outdir)
    try:
        return STAGES[name].body(run) or 0
    except CommandFailed as failure:
        print(f"error: command failed ({failure})", file=sys.stderr)
        return failure.returncode
    except (SuiteError, SettingsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------------- the driver

USAGE = (f'usage: {WRAPPER} [--stages "{" ".join(ALL_STAGES)}"] [--tar FILE] [--budget SECONDS] '
         "[--keep-going] [--dry-run] OUTDIR")


@dataclasses.dataclass
class Options:
    """The driver's command line, over its variables (STAGES, GPU_SUITE_TAR, GPU_SUITE_BUDGET,
    GPU_SUITE_KEEP_GOING, DRY_RUN)."""

    stages: List[str]
    outdir: str
    tar: str
    budget: int
    keep_going: bool
    dry_run: bool
    help: bool = False


#: The options that take a value, and what the value is.
VALUE_OPTIONS = {"--stages": "a list", "--tar": "a file", "--budget": "seconds"}


class UsageError(Exception):
    """A bad command line: the message, then exit 2."""


def parse_stages(text: str) -> List[str]:
    """The stage names in `text` (separated by spaces or commas; `bench` and `all` expanded; in
    the order given, repeats kept); empty: every stage. UsageError for an unknown name."""
    stages: List[str] = []
    for name in text.replace(",", " ").split():
        if name in ALIASES:
            stages += ALIASES[name]
        elif name in STAGES:
            stages.append(name)
        else:
            raise UsageError(f"unknown stage: {name} (stages: {' '.join(ALL_STAGES)}, bench, all)")
    return stages or list(ALL_STAGES)


def seconds_setting(name: str, value: str) -> int:
    """`value` of variable or option `name` as whole seconds; SettingsError otherwise."""
    if not re.fullmatch(r"[0-9]+", value.strip()):
        raise SettingsError(f"{name}={value}: use a whole number of seconds")
    return int(value)


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """The command line `argv` with `environ`'s defaults; UsageError (its message, the usage
    line) for an unknown option, a missing value, or no or two OUTDIRs."""
    stages_arg = environ.get("STAGES", "")
    tar = environ.get("GPU_SUITE_TAR", "")
    budget = environ.get("GPU_SUITE_BUDGET") or "0"
    keep_going = environ.get("GPU_SUITE_KEEP_GOING", "0") == "1"
    dry_run = (environ.get("DRY_RUN") or "0") == "1"
    outdir = ""
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in VALUE_OPTIONS:
            if not args or not args[0]:
                raise UsageError(f"{arg} needs {VALUE_OPTIONS[arg]}\n{USAGE}")
            value = args.pop(0)
            if arg == "--stages":
                stages_arg = value
            elif arg == "--tar":
                tar = value
            else:
                budget = value
        elif arg.startswith("--stages="):
            stages_arg = arg.split("=", 1)[1]
        elif arg == "--keep-going":
            keep_going = True
        elif arg == "--dry-run":
            dry_run = True
        elif arg in ("-h", "--help"):
            return Options([], "", "", 0, False, False, help=True)
        elif arg.startswith("-"):
            raise UsageError(f"unknown option: {arg}\n{USAGE}")
        elif outdir:
            raise UsageError(USAGE)
        else:
            outdir = arg
    if not outdir:
        raise UsageError(USAGE)
    return Options(parse_stages(stages_arg), outdir, tar, seconds_setting("GPU_SUITE_BUDGET", budget),
                   keep_going, dry_run)


def budget_left(budget: int, elapsed: float) -> Optional[int]:
    """Whole seconds left of a --budget of `budget` seconds after `elapsed`, less 5 for the
    tar (truncated, like awk's %d); None without a budget (0)."""
    return math.trunc(budget - elapsed - BUDGET_RESERVE) if budget > 0 else None


def stage_limit(name: str, environ: Mapping[str, str], budget: int, elapsed: float) -> int:
    """Seconds stage `name` may run: GPU_SUITE_TIMEOUT_<name>, else GPU_SUITE_STAGE_TIMEOUT
    (580); with a budget (> 0), at most budget_left."""
    own = environ.get(f"GPU_SUITE_TIMEOUT_{name}")
    if own:
        limit = seconds_setting(f"GPU_SUITE_TIMEOUT_{name}", own)
    else:
        limit = seconds_setting("GPU_SUITE_STAGE_TIMEOUT",
                                environ.get("GPU_SUITE_STAGE_TIMEOUT") or str(DEFAULT_STAGE_TIMEOUT))
    left = budget_left(budget, elapsed)
    return limit if left is None else min(limit, left)


def starts(limit: int, budget: int, elapsed: float) -> bool:
    """Whether a stage with `limit` seconds is started: not when its limit is 0, nor when the
    budget leaves under MIN_STAGE_SECONDS (too little for any stage to finish)."""
    left = budget_left(budget, elapsed)
    return limit > 0 and (left is None or left >= MIN_STAGE_SECONDS)


def stage_status(rc: int, dry_run: bool) -> str:
    """stages.tsv's status for exit status `rc`: ok (dry-run), timeout (124, 137), failed(RC)."""
    if rc == 0:
        return "dry-run" if dry_run else "ok"
    if rc in (124, 137):
        return "timeout"
    return f"failed({rc})"


def tail_lines(path: Path, count: int) -> List[str]:
    """The last `count` lines of the file at `path` (none if it cannot be read)."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-count:] if count > 0 else []


def _stop_group(proc: subprocess.Popen) -> int:
    """End a stage's process group: TERM, then KILL after KILL_AFTER seconds if the stage is
    still running. Returns 124, or 137 where KILL was needed (as timeout -k does)."""
    def signal_group(sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    signal_group(signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_AFTER)
        rc = 124
    except subprocess.TimeoutExpired:
        rc = 137
    signal_group(signal.SIGKILL)  # what is left of the group, too
    proc.wait()
    return rc


def run_stage_process(name: str, outdir: Path, limit: int, log: Path) -> int:
    """Run stage `name` as its own process (this file with --run-stage) in a new process group,
    stdout and stderr into `log`, for at most `limit` seconds. Returns its exit status, 124 (or
    137) when it ran out of time; if this driver is interrupted, the group is ended first."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-S", str(SELF), "--run-stage", name, str(outdir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        return proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        return _stop_group(proc)
    except BaseException:
        _stop_group(proc)
        raise


def human_size(size: int) -> str:
    """A byte count the way du -h prints it (4.0K, 12K, 1.5M)."""
    value, unit = float(size), ""
    for unit in ("", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            break
        value /= 1024
    if not unit:
        return str(size)
    return f"{math.ceil(value * 10) / 10:.1f}{unit}" if value < 10 else f"{math.ceil(value)}{unit}"


def pack(outdir: Path, tar_file: str) -> None:
    """Pack all of `outdir` (as its own folder) into the gzipped tar `tar_file`."""
    target = Path(os.path.abspath(tar_file))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as archive:
        archive.add(outdir, arcname=outdir.name,
                    filter=lambda info: None if info.name == f"{outdir.name}/{target.name}"
                    and target.parent == outdir else info)
    print(f"packed {outdir} into {tar_file} ({human_size(target.stat().st_size)})", flush=True)


def _terminate(signum, frame):
    """SIGTERM/SIGHUP: leave through the normal exits, so the running stage's group is ended and
    the tar is packed."""
    raise SystemExit(128 + signum)


def run_suite(options: Options, outdir: Path) -> int:
    """Run the stages in order, each its own timed process with its own log, appending a
    stages.tsv row each; a passed stage's log tail is echoed, a failed one's printed. Returns 0,
    or the exit status of the stage that stopped the suite (with keep-going: the first failure's)."""
    environ = os.environ
    echo_lines = int(environ.get("GPU_SUITE_ECHO_LINES") or 8)
    start = time.monotonic()
    print(f"gpu_suite: stages {' '.join(options.stages)} -> {outdir}"
          f"{' (dry run)' if options.dry_run else ''}", flush=True)
    first_failure = 0
    for i, name in enumerate(options.stages, 1):
        log = outdir / f"{name}.log"
        elapsed = time.monotonic() - start
        limit = stage_limit(name, environ, options.budget, elapsed)
        print(f"== [{i}/{len(options.stages)}] {name} (limit {limit} s, log {log})", flush=True)
        stage_start = time.monotonic()
        if not starts(limit, options.budget, elapsed):
            log.write_text(f"no time left in --budget {options.budget} for {name}\n" if options.budget
                           else f"no time for {name}: its limit is {limit} s\n")
            rc = 124
        else:
            rc = run_stage_process(name, outdir, limit, log)
        seconds = f"{time.monotonic() - stage_start:.1f}"
        status = stage_status(rc, options.dry_run)
        with open(outdir / "stages.tsv", "a") as f:
            f.write(f"{name}\t{seconds}\t{status}\n")
        if rc:
            print(f"== {name}: {status} after {seconds} s; the last {FAILED_TAIL_LINES} lines of {log}:")
            print("\n".join(tail_lines(log, FAILED_TAIL_LINES)), flush=True)
            if options.keep_going:
                first_failure = first_failure or rc
                continue
            print(f"== stopped at {name}; stages.tsv:")
            print((outdir / "stages.tsv").read_text(), end="", flush=True)
            return rc
        print(f"   {status} in {seconds} s; the last lines of its log:")
        print("".join(f"   | {line}\n" for line in tail_lines(log, echo_lines)), end="", flush=True)
    if first_failure:
        print("== some stages failed (--keep-going); stages.tsv:")
    else:
        print("== all stages passed; stages.tsv:")
    print((outdir / "stages.tsv").read_text(), end="", flush=True)
    return first_failure


def main(argv: Optional[Sequence[str]] = None) -> int:
    """scripts/gpu_suite.sh's command line (the module docstring): check the options and, when
    the train stage is chosen, the train settings (a one-line error and exit 2 before any
    stage; the fsdp stage's and BENCH_3ML_RUNS likewise), run the stages, and pack --tar whatever happened.
    `--run-stage NAME OUTDIR` runs one stage's body (the driver starts each stage that way)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Logs and pipes show each line as it is printed; the stages' Pythons do likewise.
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    os.environ["PYTHONUNBUFFERED"] = "1"
    if argv[:1] == ["--run-stage"] and len(argv) == 3:
        return run_stage(argv[1], Path(argv[2]))
    try:
        options = parse_args(argv, os.environ)
        if options.help:
            print(__doc__, end="")
            return 0
        # The stage processes read these.
        os.environ.update(DRY_RUN="1" if options.dry_run else "0", GPU_SUITE_BUDGET=str(options.budget))
        for name in set(options.stages):
            stage_limit(name, os.environ, 0, 0)  # the timeouts are whole seconds
        if "train" in options.stages:
            check_train_settings(Settings.from_env(os.environ))
        if "fsdp" in options.stages:
            fsdp_settings(Settings.from_env(os.environ))
        if "bench_3ml" in options.stages:
            check_bench_3ml_runs(Settings.from_env(os.environ))
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    outdir = Path(os.path.abspath(options.outdir))
    outdir.mkdir(parents=True, exist_ok=True)
    if not (outdir / "stages.tsv").is_file():
        (outdir / "stages.tsv").write_text("stage\tseconds\tstatus\n")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader gone (| head): end quietly, as a shell does
    rc = 1
    try:
        rc = run_suite(options, outdir)
    except KeyboardInterrupt:
        rc = 130
    except SystemExit as stop:
        rc = stop.code if isinstance(stop.code, int) else 1
    finally:
        if options.tar:
            try:
                pack(outdir, options.tar)
            except (OSError, tarfile.TarError) as error:
                print(f"could not pack {outdir} into {options.tar}: {error}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
