"""Running the repository's bash recipes from Python, shared by the demo, the studies and their
fine-tuning stage: where the checkout is, the environment a recipe runs with, one torch thread
per run, the one worker pool (:func:`in_parallel`), whole-line printing from parallel runs, and a
run's output streamed into its log; a run's
declaration (:class:`RecipeRun`) and the scoring settings the demo and the studies share.

May import: see :mod:`fairseq_ext_lab` (nothing of its other modules).
"""
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: recipes/, scripts/
BIN_DIR = Path(sys.executable).parent
#: Runs at the same time, one torch thread each (a 2-core machine's cores).
WORKERS = 2
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_OUTPUT = threading.Lock()
_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class OverTime(SystemExit):
    """A time budget ran out: no further item starts (:func:`time_budget`)."""


_BUDGET: List[Tuple[float, str]] = []  # (deadline on time.monotonic(), the message), innermost last


@contextlib.contextmanager
def time_budget(seconds: Optional[float], message: str) -> Iterator[None]:
    """Within it, :func:`in_parallel` starts no item once ``seconds`` have passed: the items
    not started raise :class:`OverTime` with ``message`` (the started ones finish; the first
    exception is raised after them). ``None``: no budget. A study enforces its declared
    minutes with it (``Study.minutes``, ``scripts/study.py --minutes``)."""
    if seconds is None:
        yield
        return
    _BUDGET.append((time.monotonic() + seconds, message))
    try:
        yield
    finally:
        _BUDGET.pop()


@contextlib.contextmanager
def wall_heartbeat(live: Path, booked: float, every: float = 30.0) -> Iterator[None]:
    """While inside, writes ``{"wall_seconds": booked + elapsed}`` to ``live`` every ``every``
    seconds and once on leaving, however it leaves: the wall time of an invocation that is
    killed or fails mid-way stays on disk, and the next invocation counts it
    (:func:`spent_seconds`). The caller books the total in its own ledger, then removes
    ``live``. A study's pre-training and its fine-tuning stage each keep one, so that the
    minutes a study has spent (``Study.minutes``) include every invocation's."""
    start = time.monotonic()
    stop = threading.Event()

    def write() -> None:
        tmp = live.with_name(live.name + ".tmp")
        tmp.write_text(f'{{"wall_seconds": {booked + time.monotonic() - start:.3f}}}\n')
        os.replace(tmp, live)  # a kill mid-write leaves the previous value whole

    def beat() -> None:
        while not stop.wait(every):
            write()

    live.parent.mkdir(parents=True, exist_ok=True)
    write()
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        write()


def spent_seconds(live: Path, booked: float) -> float:
    """A ledger's wall time over earlier invocations: ``booked`` (what the last one that
    finished wrote), or the larger value a later invocation left in ``live``
    (:func:`wall_heartbeat`) when it was killed or failed before booking it."""
    if not live.is_file():
        return booked
    return max(booked, float(json.loads(live.read_text())["wall_seconds"]))


def _within_budget(function: Callable[[_Item], _Result]) -> Callable[[_Item], _Result]:
    def guarded(item: _Item) -> _Result:
        for deadline, message in list(_BUDGET):
            if time.monotonic() > deadline:
                raise OverTime(message)
        return function(item)

    return guarded


def in_parallel(function: Callable[[_Item], _Result], items: Iterable[_Item],
                workers: int = WORKERS) -> List[_Result]:
    """``[function(item) for item in items]``, ``workers`` at a time (threads: each item runs a
    recipe or a fairseq process), started in order; the first exception is raised once every
    started item has ended; within a :func:`time_budget` that has run out, no item starts. The
    demo, the studies and the fine-tuning stage all run their runs here."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(_within_budget(function), items))


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


#: The demo's data-bin: the English embedded corpus (``scripts/prepare_corpus.sh`` with no
#: input; docs/corpus.md).
DEFAULT_DATA = REPO_ROOT / "data-bin" / "english-spm8000"
#: The studies' data-bin until they are re-run on the English corpus: their committed tables
#: (docs/studies.md) were made on the Python docs (``prepare_corpus.sh --source python-docs``).
PYTHON_DOCS_DATA = REPO_ROOT / "data-bin" / "python-docs-spm8000"
#: Checkpoints scored per masked-LM run (the points of its [MASK]-loss curve), the last included.
CURVE_POINTS = 4
#: The corruption rate every masked-LM checkpoint is scored at (the baselines', RoBERTa's and
#: BERT's 15%): the same valid positions for every model of every group.
SCORING_MASK_PROB = 0.15
#: How many valid sequences the demo scores each masked-LM checkpoint on, spread evenly over
#: the split (``masked_lm_scores --max-sequences``): 1 in 36 of the English corpus's 71,278
#: (about 5,200 [MASK] positions; 3,000 sequences took 8 s a checkpoint on one thread).
SCORED_SEQUENCES = 2000


@dataclasses.dataclass(frozen=True)
class RecipeRun:
    """One model of a comparison: a recipe, the environment overrides it runs with, (masked
    LMs) the :data:`MASKED_LM_GROUPS` entry it belongs to, and fairseq-train flags appended to
    the recipe's command (a shape, a seed)."""

    name: str
    recipe: str  # path relative to the repository root
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    group: str = ""
    args: Tuple[str, ...] = ()


#: R values of the demo's suffix-ppl and infilling columns.
BIDIRECTIONAL_R_VALUES = "0,1"
#: Masked positions per document in the demo's infilling columns (``--infill-positions``).
BIDIRECTIONAL_INFILL_POSITIONS = 4
#: Documents the demo's bidirectional evaluation scores, spread evenly over the valid split
#: (``fairseq-validate --eval-max-documents``): 1 in 38 of the English corpus's 75,578 valid
#: documents (its lines, the longer ones cut at 64 tokens; infilling: 4 positions each).
BIDIRECTIONAL_EVAL_DOCUMENTS = 2000


def recipe_env(run: RecipeRun, data: Path, **extra: str) -> dict:
    return recipe_environment(data, {**run.env, **extra})  # extra wins over run.env
