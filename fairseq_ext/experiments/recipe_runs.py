"""Running the repository's bash recipes from Python, shared by the demo, the studies and their
fine-tuning stage: where the checkout is, the environment a recipe runs with, one torch thread
per run, whole-line printing from parallel runs, and a run's output streamed into its log.

May import: see :mod:`fairseq_ext.experiments` (nothing of its other modules).
"""
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, Iterator, List

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: recipes/, scripts/
BIN_DIR = Path(sys.executable).parent
#: Runs at the same time, one torch thread each (a 2-core machine's cores).
WORKERS = 2
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_OUTPUT = threading.Lock()


def say(line: str) -> None:
    """Print one whole line: runs print from two threads at once, and ``print`` may interleave
    its text and newline with another thread's."""
    with _OUTPUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def recipe_environment(data: Path, settings: Dict[str, str]) -> Dict[str, str]:
    """The environment a recipe runs with: this one, ``DATA``, the run's ``settings`` on top,
    and this Python's console scripts (fairseq-train) first on the ``PATH``."""
    env = {**os.environ, "DATA": str(data), **settings}
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    return env


def stream(cmd: List[str], env: dict, log_path: Path) -> Iterator[str]:
    """Run ``cmd``, tee stdout+stderr into ``log_path``, yield its lines; raise on failure."""
    with open(log_path, "w") as log, subprocess.Popen(
        cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        bufsize=1,
    ) as proc:
        tail: List[str] = []
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line])[-40:]
            yield line
        if proc.wait() != 0:
            sys.stdout.write("".join(tail))
            raise SystemExit(f"error: {cmd[0]} failed (exit {proc.returncode}); full log: {log_path}")
