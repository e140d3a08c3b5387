"""The GPU suite's driver: scripts/gpu_suite.sh's command line (:func:`main`), the stage
order, --stages, timeouts, --budget, --keep-going, --tar, --dry-run, stages.tsv and the logs.
`--help` prints :func:`help_text`, made from the stages' docstrings and the settings table."""
import dataclasses
import math
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from .checks import check_train_log  # noqa: F401 (the suite's functions, for its tests)
from .runner import CommandFailed, StageRun, SuiteError, tail_lines, terminate
from .settings import Settings, SettingsError, default_of, environment_help
from .stages import ALIASES, ALL_STAGES, STAGES
from .stages.bench_3ml import check_bench_3ml_runs
from .stages.fsdp import fsdp_settings
from .stages.step import check_step_settings
from .stages.train import check_train_settings

#: What the stage processes run: the package's entry, by its path.
MAIN = Path(__file__).resolve().with_name("__main__.py")
WRAPPER = "scripts/gpu_suite.sh"

DEFAULT_STAGE_TIMEOUT = int(default_of("GPU_SUITE_STAGE_TIMEOUT"))
#: Seconds of --budget kept back for packing the tar after the last stage.
BUDGET_RESERVE = 5
#: A stage with less time than this left in the budget is not started.
MIN_STAGE_SECONDS = 10
#: Seconds between TERM and KILL when a stage passes its limit (timeout -k 15).
KILL_AFTER = 15
#: Lines of a failed stage's log printed after it.
FAILED_TAIL_LINES = 60

#: --help: {stages} and {environment} are filled in by help_text.
HELP = """The GPU checks in one driver, for the lent GPU machine (Python 3.12, torch 2.11 +
CUDA 13, nvcc, no fairseq, no network). docs/benchmarks.md, "GPU suite", gives the device
calls that run it.

  scripts/gpu_suite.sh [--stages "LIST"] [--tar FILE] [--budget SECONDS] [--keep-going]
                       [--dry-run] OUTDIR

Stages, in this order (LIST: names separated by spaces or commas; `bench` = step and the three
bench_* stages, `all` = every stage; default: all of them; also the STAGES variable):
{stages}Training data: a share of the embedded English corpus's data-bin CARRIED in the tree,
.gpu-data/english-spm8000-share (scripts/gpu_wheels.sh writes it there from
data-bin/english-spm8000, which needs apt-get and the network, so it is built on the CPU
machine: 8M of its 31.1M training tokens, spread evenly). If it is not there, the train
stage builds a data-bin from text shipped in the repo (its Markdown, Python, shell and YAML
files, about 1 MB) with fairseq_ext.corpus.prepare_corpus, and says so in its log.

Output: OUTDIR/stages.tsv (stage, seconds, status: ok, failed(RC), timeout, dry-run), one log
per stage (OUTDIR/STAGE.log), env.txt, junit-tests.xml, tests-skipped.txt, bench-*.txt/json,
train-*.log, train-summary.tsv; with --tar FILE (or GPU_SUITE_TAR) all of OUTDIR is packed into
FILE on exit, whatever happened (a device call returns at most 8 files). The first stage that
fails stops the suite: its log's tail is printed and the exit status is non-zero (the stage's,
124 on a timeout). With --keep-going (GPU_SUITE_KEEP_GOING=1) the later stages run after a
failure and the exit status is the first failure's.

Each stage runs as its own process (the package's __main__.py with --run-stage) in its own process group,
under a timeout that ends the group (TERM, then KILL 15 s later): GPU_SUITE_TIMEOUT_<stage>
seconds if set (e.g. GPU_SUITE_TIMEOUT_tests=170), else GPU_SUITE_STAGE_TIMEOUT (default 580),
or what is left of --budget (GPU_SUITE_BUDGET, seconds for this whole invocation, less 5; 0 =
none) where that is less, so the suite ends, and packs its tar, before a 10-minute device call
is killed. A stage left with under 10 s of the budget, or with a limit of 0, is not started
(status timeout).

Environment (defaults in brackets):
{environment}
Where the code is: scripts/gpu_suite.sh only execs GPU_PYTHON on the package
fairseq_ext_lab/benchmarks/gpu_suite/ (its __main__.py): settings.py holds the table of every
variable above (SETTINGS: name, default, help; this text is made from it), stages/<name>.py one
stage each (its docstring is its entry above; stages/__init__.py the stage table, STAGES),
checks.py the pure checks of the train logs (check_train_log), of the tests' junit XML
(check_junit_skips) and of two runs' losses (compare_losses), runner.py what every stage runs
commands with (StageRun), and driver.py the driver (main). It runs before fairseq is installed,
so it uses the standard library only (the wrapper and the driver start it with -S, without
site-packages) and is run as a folder of its own, not through fairseq_ext_lab (whose __init__
imports the plugin and so fairseq); what needs torch or fairseq runs in subprocesses with the setup stage's
interpreter. The setup stage is a Python stage like the others rather than shell in the
wrapper: it needs nothing but the standard library and GPU_PYTHON, and as a stage it gets the
same log, timeout, budget, stages.tsv row and --keep-going/--tar handling as the rest.
"""


def stages_help() -> str:
    """--help's list of the stages: each stage module's docstring, after its first line."""
    lines = []
    for stage in STAGES.values():
        doc = stage.doc.strip().splitlines()[2:]
        lines.append(f"  {stage.name:<15} {doc[0]}")
        lines += [" " * 18 + line for line in doc[1:]]
    return "\n".join(lines) + "\n"


def help_text() -> str:
    """The text --help prints: the usage, the stages, the output, the timeouts, and every
    variable with its default (settings.SETTINGS)."""
    return HELP.format(stages=stages_help(), environment=environment_help())


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
    stages_arg = environ.get("STAGES", default_of("STAGES"))
    tar = environ.get("GPU_SUITE_TAR", default_of("GPU_SUITE_TAR"))
    budget = environ.get("GPU_SUITE_BUDGET") or default_of("GPU_SUITE_BUDGET")
    keep_going = (environ.get("GPU_SUITE_KEEP_GOING") or default_of("GPU_SUITE_KEEP_GOING")) == "1"
    dry_run = (environ.get("DRY_RUN") or default_of("DRY_RUN")) == "1"
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
        proc = subprocess.Popen([sys.executable, "-S", str(MAIN), "--run-stage", name, str(outdir)],
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


def run_suite(options: Options, outdir: Path) -> int:
    """Run the stages in order, each its own timed process with its own log, appending a
    stages.tsv row each; a passed stage's log tail is echoed, a failed one's printed. Returns 0,
    or the exit status of the stage that stopped the suite (with keep-going: the first failure's)."""
    environ = os.environ
    echo_lines = int(environ.get("GPU_SUITE_ECHO_LINES") or default_of("GPU_SUITE_ECHO_LINES"))
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
            print(help_text(), end="")
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
        if "step" in options.stages:
            check_step_settings(Settings.from_env(os.environ))
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
        signal.signal(sig, terminate)
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
