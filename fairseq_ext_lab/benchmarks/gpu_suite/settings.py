"""Every variable the GPU suite reads, in one table (:data:`SETTINGS`: the variable, its default,
its help): :class:`Settings` reads the stages' values from it, the driver its own, and `--help`
(the package docstring's "Environment") is rendered from it, so that each default is written
once. The standard library only (the package docstring says why)."""
import dataclasses
import os
import shlex
import textwrap
from pathlib import Path
from typing import Mapping, Optional, Tuple

#: The repository root (fairseq_ext_lab/benchmarks/gpu_suite/settings.py: three folders up).
REPO = Path(__file__).resolve().parents[3]

#: BENCH_3ML_RUNS: the bench_3ml stage's runs, in this order (default: all three).
BENCH_3ML_RUNS = ("base", "large", "profile")


class SettingsError(Exception):
    """A bad option or variable, found before the first stage: one line on stderr, exit 2."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One variable: its name, its default (as the variable would be written; a relative path
    is under the repo), its help, and how :class:`Settings` reads it into `field` (None: the
    driver reads it). `kind`: str (empty: the default), exact (empty stays empty), path
    (absolute), words (split on spaces), shell (shlex-split), flag ("1": True)."""

    var: str
    default: str
    help: str
    field: Optional[str] = None
    kind: str = "str"
    shown: Optional[str] = None  # the default as --help shows it, where not `default` itself


#: Every variable, in --help's order.
SETTINGS: Tuple[Setting, ...] = (
    Setting("GPU_PYTHON", "python3", "the interpreter that holds the machine's torch (it runs this "
            "driver, too: scripts/gpu_suite.sh execs it)", "gpu_python"),
    Setting("GPU_ENV", "/tmp/gpu-suite-env", "the environment setup makes (a venv whose "
            "site-packages hold the wheels and that sees GPU_PYTHON's packages; if no venv can be "
            "made: GPU_ENV/site on PYTHONPATH)", "gpu_env", "path"),
    Setting("WHEEL_DIR", ".whl", "the carried cp312 wheels (scripts/gpu_wheels.sh)", "wheel_dir",
            "path"),
    Setting("GPU_SUITE_DATA", ".gpu-data/english-spm8000-share", "the carried data-bin (a share "
            "of the English corpus's: scripts/gpu_wheels.sh)", "data", "path"),
    Setting("GPU_SUITE_PREBUILT", ".gpu-build", "a carried prebuilt fairseq_ext.ops._C "
            "(the build stage's OUTDIR/prebuilt/)", "prebuilt", "path"),
    Setting("GPU_SUITE_WORK", "/tmp/gpu-suite-work", "scratch: checkpoints, a built data-bin",
            "work", "path"),
    Setting("GPU_SUITE_TESTS", "", "test files for the tests stage (default: as above)", "tests",
            "exact"),
    Setting("GPU_SUITE_PYTEST_WORKERS", "4", "pytest-xdist processes (0: none)", "pytest_workers"),
    Setting("GPU_SUITE_PYTEST_TIMEOUT", "120", "seconds per test (pytest-timeout, where "
            "installed: the GPU image has it)", "pytest_timeout"),
    Setting("GPU_SUITE_PYTEST_ARGS", "", "more pytest arguments, e.g. \"--durations=15\" (the "
            "stage runs pytest -v: a line per test as it ends)", "pytest_args", "shell"),
    Setting("GPU_SUITE_REQUIRE_CUDA", "1", "0: let setup/build/tests pass without a GPU (CPU "
            "trials)", "require_cuda", "flag"),
    Setting("BENCH_3ML_ITERS", "30", "bench_3ml's timed iterations", "bench_3ml_iters"),
    Setting("BENCH_BIDIR_ROUNDS", "20", "bench_bidir's rounds", "bench_bidir_rounds"),
    Setting("BENCH_3ML_RUNS", " ".join(BENCH_3ML_RUNS), "which of bench_3ml's three runs to make",
            "bench_3ml_runs", "words"),
    Setting("STEP_BATCHES", "32 64 128", "the step stage's micro-batches", "step_batches",
            "words"),
    Setting("STEP_UPDATES", "20", "the step stage's timed updates", "step_updates"),
    Setting("STEP_SHAPE", "768 12 512", "the step stage's width, layers and sequence length "
            "(base/512; a CPU rehearsal runs the same stage at a width where compute vanishes, "
            "e.g. \"64 2 64\")", "step_shape", "words"),
    Setting("STEP_FAMILIES", "roberta,3ml-self,3ml-cross", "the step stage's families "
            "(bench_step.py's --families)", "step_families"),
    Setting("STEP_COMPILE", "eager,compile", "the step stage's modes (bench_step.py's --compile)",
            "step_compile"),
    Setting("TRAIN_UPDATES", "300", "the train stage's updates per arch (warmup: a tenth of them, "
            "linear decay)", "train_updates"),
    Setting("TRAIN_ARCHS", "3ml_self_base 3ml_cross_base swishrnn_bert_base bidir_lm_125m",
            "the archs the train stage trains; also bert_rab_*, bert_orig_*, roberta_*, any size",
            "train_archs", "words"),
    Setting("TRAIN_SEQ_LEN", "512", "the train stage's sequence length", "train_seq_len"),
    Setting("TRAIN_BATCH", "32", "the train stage's batch (bidir_lm: that many sequences' tokens)",
            "train_batch"),
    Setting("TRAIN_LR", "0.0003", "the train stage's peak learning rate", "train_lr"),
    Setting("TRAIN_LOG_INTERVAL", "25", "updates between the train stage's records",
            "train_log_interval"),
    Setting("GPU_SUITE_PEAK_TFLOPS", "989", "the train summary's and the step stage's MFU is over "
            "this: dense bf16 of an H100/H200 SXM by NVIDIA's datasheet (docs/benchmarks.md "
            "measured 788 on an 8192^3 bf16 matmul on the H200)", "peak_tflops"),
    Setting("TRAIN_PRECISION", "bf16", "bf16 (common.bf16=true), fp16 (memory-efficient, with "
            "fairseq's adam) or fp32; checked before the first stage, with the TRAIN_* sizes and "
            "archs", "train_precision", "exact"),
    Setting("FSDP_ARCH", "3ml_self_base", "the arch the fsdp stage trains", "fsdp_arch"),
    Setting("FSDP_UPDATES", "50", "the fsdp stage's updates per backend", "fsdp_updates"),
    Setting("FSDP_LOSS_TOL", "0.02", "the largest per-update loss difference that matches",
            "fsdp_loss_tol"),
    Setting("FSDP_PRECISION", "fp32", "fp32 or fp16 (memory-efficient, fairseq's adam); fairseq "
            "refuses fully_sharded with bf16", "fsdp_precision"),
    Setting("GPU_SUITE_STUDY", "3ml-gpu", "the study stage's study", "study"),
    Setting("GPU_SUITE_STUDY_DIR", ".gpu-study", "where the study's runs go", "study_dir", "path"),
    Setting("GPU_SUITE_DOWNSTREAM", ".gpu-data/english-spm8000-downstream", "the carried "
            "downstream suite the study fine-tunes on (built on GPU_SUITE_DATA's dictionary)",
            "downstream", "path"),
    Setting("STUDY_UPDATES", "", "the study's baseline updates (default: the study's own)",
            "study_updates", "exact"),
    Setting("STUDY_SEEDS", "", "the study's seeds (default: the study's own)", "study_seeds",
            "words"),
    Setting("STUDY_FINETUNE_TASKS", "", "the suite's tasks the study fine-tunes on (default: "
            "all; a trial)", "study_finetune_tasks", "words"),
    Setting("GPU_SUITE_CMD_<stage>", "", "run this shell command instead of the stage (tests of "
            "the suite, e.g. GPU_SUITE_CMD_build=false)"),
    Setting("GPU_SUITE_TIMEOUT_<stage>", "", "seconds stage <stage> may run (e.g. "
            "GPU_SUITE_TIMEOUT_tests=170)"),
    Setting("GPU_SUITE_STAGE_TIMEOUT", "580", "seconds a stage may run without its own "
            "GPU_SUITE_TIMEOUT_<stage>"),
    Setting("GPU_SUITE_BUDGET", "0", "as --budget: seconds for this whole invocation (0: none)"),
    Setting("GPU_SUITE_KEEP_GOING", "0", "1: as --keep-going"),
    Setting("GPU_SUITE_TAR", "", "as --tar"),
    Setting("STAGES", "", "as --stages"),
    Setting("GPU_SUITE_ECHO_LINES", "8", "lines of a passed stage's log echoed after it"),
    Setting("DRY_RUN", "0", "1 (--dry-run): every stage prints the commands it would run, runs "
            "none", "dry_run", "flag"),
)
SETTING = {setting.var: setting for setting in SETTINGS}


def default_of(var: str) -> str:
    """The default of variable `var`, as written in :data:`SETTINGS`."""
    return SETTING[var].default


def environment_help() -> str:
    """The package docstring's "Environment" section: a line or more per variable of
    :data:`SETTINGS`, `NAME [default]` and its help."""
    lines = []
    for setting in SETTINGS:
        head = f"  {setting.var}" + (f" [{setting.default}]" if setting.default else "")
        body = textwrap.wrap(setting.help, 96 - 34)
        if len(head) < 33:
            lines.append(f"{head:<34}{body[0]}".rstrip())
            body = body[1:]
        else:
            lines.append(head)
        lines += [" " * 34 + line for line in body]
    return "\n".join(lines) + "\n"


def _read(setting: Setting, environ: Mapping[str, str]):
    """`setting`'s value in `environ` (see :class:`Setting`'s kinds)."""
    if setting.kind == "exact":
        return environ.get(setting.var, setting.default)
    value = environ.get(setting.var) or setting.default
    if setting.kind == "path":  # a relative default is under the repo, a given one the cwd's
        return Path(os.path.abspath(environ.get(setting.var) or REPO / setting.default))
    if setting.kind == "words":
        return tuple(value.split())
    if setting.kind == "shell":
        return tuple(shlex.split(environ.get(setting.var, "")))
    if setting.kind == "flag":
        return value == "1"
    return value


@dataclasses.dataclass(frozen=True)
class Settings:
    """The stages' variables (:data:`SETTINGS`' rows with a field), read by :meth:`from_env`.
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
    step_shape: Tuple[str, ...]
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
    downstream: Path
    study_updates: str
    study_seeds: Tuple[str, ...]
    study_finetune_tasks: Tuple[str, ...]
    dry_run: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        """Read the settings from `environ`; an empty variable means its default, but for
        TRAIN_PRECISION, where empty is an error (check_train_settings says so)."""
        return cls(**{s.field: _read(s, environ) for s in SETTINGS if s.field})
