"""What every stage works with: :class:`StageRun` (the settings, OUTDIR, and the commands it
prints and runs), the environment the setup stage made (:func:`use_env`), and small helpers.
The standard library only (the package docstring says why)."""
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from .settings import REPO, Settings


class SuiteError(Exception):
    """A stage cannot go on; its message is printed as `error: MESSAGE` and the stage exits 1."""


class CommandFailed(Exception):
    """A command of a stage exited non-zero; the stage exits with its status."""

    def __init__(self, argv: Sequence[str], returncode: int):
        super().__init__(f"exit {returncode}: {shlex.join(map(str, argv))}")
        self.returncode = returncode


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


def format_columns(rows: Sequence[Sequence[str]]) -> str:
    """The rows as aligned columns, two spaces apart (column -t)."""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def tail_lines(path: Path, count: int) -> List[str]:
    """The last `count` lines of the file at `path` (none if it cannot be read)."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-count:] if count > 0 else []


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its name, its body (returns its exit status, None for 0), a one-line summary,
    and what it does (its module's docstring, for --help)."""

    name: str
    body: Callable[[StageRun], Optional[int]]
    summary: str
    doc: str = ""


def terminate(signum, frame):
    """SIGTERM/SIGHUP: leave through the normal exits, so the running stage's group is ended and
    the tar is packed (the driver), or the study stage's files are copied."""
    raise SystemExit(128 + signum)


@dataclasses.dataclass(frozen=True)
class Bench:
    """One benchmark invocation of a stage's table: ``scripts/SCRIPT ARGS``, where an argument
    ``{NAME}`` is the stage's value NAME (a list is spliced in: none, one or more arguments),
    its output teed into OUTDIR/OUTPUT.txt (OUTPUT formatted with the same values) and, with
    `json`, ``--json OUTDIR/OUTPUT.json --force`` last (a stage run again measures again)."""

    name: str
    script: str
    args: Tuple[str, ...]
    output: str
    json: bool = True


def run_bench(run: StageRun, py: str, bench: Bench, values: Mapping[str, object]) -> None:
    """Print and run `bench` (:class:`Bench`) with the stage's `values`, with interpreter `py`."""
    argv: List[object] = [py, f"scripts/{bench.script}"]
    for arg in bench.args:
        if arg.startswith("{") and arg.endswith("}"):
            value = values[arg[1:-1]]
            argv += value if isinstance(value, list) else [value]
        else:
            argv.append(arg)
    output = run.outdir / bench.output.format(**values)
    if bench.json:
        argv += ["--json", f"{output}.json", "--force"]
    run.run(argv, tee=Path(f"{output}.txt"))
