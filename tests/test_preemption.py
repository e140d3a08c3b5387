"""fairseq-train on a cluster: a clean exit every time, and a preemption that loses nothing.

Patch items 8, 9a and 9b (``patches/``; docs/scaling.md, "Preemption"), through the installed
``fairseq-train`` / ``fairseq-hydra-train`` and a recipe, every run a fresh process:

* **The exit.** fairseq's ``BufferedIterator`` makes batches on a daemon thread; cut off inside
  torch's C++ at the interpreter's exit it aborted the process after "done training". A script
  that leaves such a thread busy in torch exits cleanly now, and aborts when the thread is left
  running as stock fairseq left it (the control). 40 consecutive short ``fairseq-train`` runs of
  the six families at the default ``--data-buffer-size`` exit 0.
* **The preemption.** SIGTERM (or SIGUSR1) at a chosen moment (before the first update, a
  random moment of training, during a validation, during a save) makes ``fairseq-train``
  finish the update, write ``checkpoint_last.pt``, log one line and exit 75; the same command
  then resumes from that update to the end, and the weights, Adam state, scheduler, data
  position and logged metrics equal those of a run never signalled, bit for bit
  (:mod:`checkpoint_state`): RoBERTa, 3ML-self and ``bidirectional_lm``, in one process and in
  two gloo processes (the signal to rank 1 only: both ranks stop after the same update; their
  resume needs item 9b).
* A second signal during that save leaves only complete checkpoint files; ``--no-save-on-signal``
  (and ``SAVE_ON_SIGNAL=0`` in a recipe) leaves the signal its default action.
"""
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from checkpoint_state import assert_identical, training_state
from test_exact_resume import FAMILIES  # one tiny model of each family, its task and criterion

from conftest import REPO_ROOT, USER_DIR, fairseq_cli, json_log_records

pytestmark = [pytest.mark.slow, pytest.mark.unserved]

#: The exit status of a run stopped by a signal after its checkpoint (fairseq/preemption.py).
PREEMPTED = 75

#: The families the preemption is checked on.
PREEMPTED_FAMILIES = ("roberta", "3ml_self", "bidirectional_lm")

UPDATES, SAVE_INTERVAL = 16, 4
#: Dropout on (fairseq reseeds it every update), a warm-up and a decay, clipping, a checkpoint
#: and a validation (2 batches) every SAVE_INTERVAL updates; fairseq's default
#: --data-buffer-size (10 batches made ahead by a thread).
COMMON = ["--user-dir", USER_DIR, "--tokens-per-sample", "32", "--optimizer", "adam",
          "--adam-betas", "(0.9,0.98)", "--weight-decay", "0.01", "--clip-norm", "1.0",
          "--lr", "1e-3", "--lr-scheduler", "polynomial_decay", "--warmup-updates", "2",
          "--total-num-update", str(UPDATES), "--max-update", str(UPDATES), "--dropout", "0.1",
          "--seed", "7", "--cpu", "--num-workers", "0", "--log-format", "json",
          "--log-interval", "1", "--no-progress-bar", "--max-valid-steps", "2",
          "--save-interval-updates", str(SAVE_INTERVAL), "--no-epoch-checkpoints"]

#: The line fairseq-train logs when a signal stopped it (fairseq/preemption.py).
STOPPED = re.compile(r"stopped (by (?P<signals>[A-Z0-9+]+)|with the other ranks \(a signal "
                     r"reached one of them\)) after update (?P<update>\d+): ")
#: The log lines that mark the moments a signal is sent at, after the handlers are installed.
#: "before_update": fairseq-train's model summary, before the data and the checkpoint load.
MOMENTS = {
    "before_update": re.compile(r"fairseq_cli\.train \| num\. shared model params"),
    "random": re.compile(r"Start iterating over samples"),
    "validation": re.compile(r'begin validation on "valid" subset'),
    "save": re.compile(rf"Preparing to save checkpoint for epoch \d+ @ {SAVE_INTERVAL} updates"),
}


def environment():
    """A real process's environment: this interpreter's scripts first, one thread, the output
    unbuffered (the test reads the log while the run writes it)."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]),
                OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")


class Run:
    """One command started as a fresh process (its own process group), stdout and stderr in
    ``log``; :meth:`signal_when` sends a signal once a pattern appears in the log."""

    def __init__(self, argv, log: Path, env=None):
        self.log = Path(log)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=out,
                                         stdin=subprocess.DEVNULL, env=env or environment(),
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: re.Pattern, timeout=300, start=0) -> int:
        """Poll the log (every 2 ms) until ``pattern`` appears after offset ``start``; returns
        the offset after the match. Fails if the run ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = pattern.search(self.text(), start)
            if match:
                return match.end()
            if self.proc.poll() is not None:
                pytest.fail(f"{pattern.pattern!r} never logged; the run ended "
                            f"({self.proc.returncode}):\n{self.text()[-4000:]}")
            time.sleep(0.002)
        pytest.fail(f"{pattern.pattern!r} not logged within {timeout} s")

    def send(self, signum=signal.SIGTERM, group=False):
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def wait(self, timeout=600) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def train_argv(data, family, save_dir, *extra):
    return [fairseq_cli("fairseq-train", real=True), data, *FAMILIES[family], *COMMON,
            "--save-dir", save_dir, *extra]


def ddp_argv(data, family, save_dir, rank, rendezvous):
    return train_argv(data, family, save_dir, "--distributed-world-size", "2",
                      "--distributed-rank", rank, "--distributed-no-spawn",
                      "--distributed-backend", "gloo", "--distributed-init-method",
                      f"file://{rendezvous}", "--ddp-backend", "legacy_ddp")


def stopped_update(text: str) -> int:
    """The update the stop line names (exactly one such line)."""
    lines = STOPPED.findall(text)
    assert len(lines) == 1, f"{len(lines)} stop lines:\n{text[-3000:]}"
    return int(STOPPED.search(text).group("update"))


def assert_resumed_from(text: str, update: int):
    """The log of the resumed run: it loaded checkpoint_last.pt of ``update`` and trained on
    from the next update to the end."""
    assert re.search(rf"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ {update} updates\)",
                     text), text[-3000:]
    records = [int(r["num_updates"]) for r in json_log_records(text) if "total_pflops" in r]
    assert records == list(range(update + 1, UPDATES + 1)), records


# --- the exit -------------------------------------------------------------------------------

#: A BufferedIterator whose thread is inside torch (matrix products) when the script exits.
#: With LEAVE_RUNNING, the thread is left as stock fairseq left it (its atexit stop removed).
BUSY_THREAD_AT_EXIT = textwrap.dedent("""
    import atexit, sys
    import torch
    from fairseq.data import iterators

    class Batches:
        def __len__(self):
            return 10 ** 6

        def __iter__(self):
            while True:
                x = torch.randn(300, 300)
                for _ in range(20):
                    x = torch.tanh(x @ x.T / 300)
                yield x

    if sys.argv[1] == "LEAVE_RUNNING":
        atexit.unregister(iterators.close_buffered_iterators)
    batches = iterators.BufferedIterator(2, Batches())
    next(batches)
    print("EXITING", flush=True)
""")


def test_an_exit_with_the_batch_thread_busy_in_torch_is_clean(tmp_path):
    script = tmp_path / "busy_thread.py"
    script.write_text(BUSY_THREAD_AT_EXIT)

    def run(mode):
        return subprocess.run([sys.executable, script, mode], capture_output=True, text=True,
                              env=environment(), timeout=300)

    for _ in range(3):
        done = run("STOP")
        assert done.returncode == 0 and "EXITING" in done.stdout, done.stderr[-2000:]
        assert "terminate called" not in done.stderr
    # The control: the thread left running aborts the process (stock fairseq's exit).
    controls = [run("LEAVE_RUNNING") for _ in range(3)]
    aborted = [c for c in controls if c.returncode == -signal.SIGABRT]
    assert aborted and all("terminate called" in c.stderr for c in aborted), \
        [(c.returncode, c.stderr[-300:]) for c in controls]


def test_forty_runs_at_the_default_buffer_size_exit_zero(tiny_data_bin, tmp_path):
    """Short runs that stop mid-epoch (--max-update 3) with the batch thread running, each
    family in turn, as tests/test_exact_resume.py's aborted now and then before."""
    families = list(FAMILIES)
    for i in range(40):
        family = families[i % len(families)]
        run = Run(train_argv(tiny_data_bin, family, tmp_path / f"run{i}", "--max-update", "3",
                             "--total-num-update", "3", "--save-interval-updates", "1"),
                  tmp_path / f"run{i}.log")  # (the last of a repeated flag wins)
        status = run.wait()
        assert status == 0, f"run {i} ({family}): status {status}\n{run.text()[-3000:]}"
        assert "done training" in run.text()


# --- one process ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def never_signalled(tiny_data_bin, tmp_path_factory):
    """{family: checkpoint_last.pt of the run never signalled}, one process."""
    root = tmp_path_factory.mktemp("never_signalled")
    last = {}
    for family in PREEMPTED_FAMILIES:
        run = Run(train_argv(tiny_data_bin, family, root / family), root / f"{family}.log")
        assert run.wait() == 0, run.text()[-3000:]
        last[family] = root / family / "checkpoint_last.pt"
    return last


@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("family", PREEMPTED_FAMILIES)
def test_a_signalled_run_resumes_bit_exactly(family, moment, never_signalled, tiny_data_bin,
                                             tmp_path):
    save = tmp_path / "save"
    rng = random.Random(f"{family}-{moment}")
    signum = signal.SIGUSR1 if rng.random() < 0.5 else signal.SIGTERM
    run = Run(train_argv(tiny_data_bin, family, save), tmp_path / "signalled.log")
    run.wait_for(MOMENTS[moment])
    if moment == "random":
        time.sleep(rng.uniform(0.0, 0.25))
    run.send(signum)
    assert run.wait() == PREEMPTED, run.text()[-3000:]
    text = run.text()
    update = stopped_update(text)
    assert f"by {signal.Signals(signum).name} after update {update}: wrote " in text
    print(f"{family}, {moment}: {signal.Signals(signum).name} -> stopped after update {update}")
    assert 1 <= update < UPDATES
    if moment == "before_update":
        assert update == 1  # the update in flight is the first
    if moment in ("validation", "save"):
        assert update > SAVE_INTERVAL  # the next update, after the validation and the save
    # The checkpoint of that update, as an interval save writes it; not the --max-update stop.
    assert training_state(save / "checkpoint_last.pt")["num_updates"] == update
    assert "Stopping training due to" not in text

    resumed = Run(train_argv(tiny_data_bin, family, save), tmp_path / "resumed.log")
    assert resumed.wait() == 0, resumed.text()[-3000:]
    assert_resumed_from(resumed.text(), update)
    assert_identical(training_state(save / "checkpoint_last.pt"),
                     training_state(never_signalled[family]), f"{family}, {moment}")


def test_a_second_signal_during_the_save_leaves_complete_checkpoints(tiny_data_bin, tmp_path):
    """SIGUSR1 mid-training, then SIGTERM once the checkpoint it causes is being written (its
    .tmp file seen): the save completes, every file in the directory loads, none is partial,
    and the same command resumes. A wider model (6 x 256) makes the write take long enough."""
    wide = ["--encoder-layers", "6", "--encoder-embed-dim", "256", "--encoder-ffn-embed-dim",
            "1024", "--encoder-attention-heads", "4"]
    save = tmp_path / "save"
    argv = train_argv(tiny_data_bin, "roberta", save, *wide)
    run = Run(argv, tmp_path / "signalled.log")
    run.wait_for(re.compile(r"Preparing to save checkpoint for epoch \d+ @ 4 updates"))
    run.wait_for(re.compile(r"Saved checkpoint \S+ \(epoch \d+ @ 4 updates"))
    run.send(signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while not any(save.glob("checkpoint*.pt.tmp")):  # the stop's save has begun
        assert run.proc.poll() is None and time.monotonic() < deadline, run.text()[-3000:]
        time.sleep(0.0005)
    run.send(signal.SIGTERM)
    assert run.wait() == PREEMPTED, run.text()[-3000:]
    text = run.text()
    update = stopped_update(text)
    assert f"by SIGUSR1+SIGTERM after update {update}" in text  # both came before the stop
    assert not list(save.glob("*.tmp"))
    for path in save.glob("*.pt"):
        torch.load(path, map_location="cpu")  # complete: a truncated file does not load
    assert training_state(save / "checkpoint_last.pt")["num_updates"] == update

    resumed = Run(argv, tmp_path / "resumed.log")
    assert resumed.wait() == 0, resumed.text()[-3000:]
    assert_resumed_from(resumed.text(), update)


def test_no_save_on_signal_leaves_the_signal_its_default_action(tiny_data_bin, tmp_path):
    save = tmp_path / "save"
    run = Run(train_argv(tiny_data_bin, "roberta", save, "--no-save-on-signal"),
              tmp_path / "train.log")
    run.wait_for(MOMENTS["random"])
    run.send(signal.SIGTERM)
    assert run.wait() == -signal.SIGTERM
    assert not STOPPED.search(run.text())


# --- a recipe and fairseq-hydra-train ---------------------------------------------------------

def recipe_env(data, save_dir, **extra):
    return dict(environment(), DATA=str(data), SAVE_DIR=str(save_dir), CPU="1",
                TOTAL_UPDATES="400", LOG_FILE="", FAIRSEQ_BIN=str(Path(sys.executable).parent),
                **extra)


def test_a_recipe_signalled_as_a_scheduler_does_exits_75_and_resumes(tiny_data_bin, tmp_path):
    """SIGUSR1 to the recipe's whole process group (what SLURM's --signal does): bash survives
    it, fairseq-train saves, the recipe exits 75; the same recipe resumes."""
    recipe = ["bash", REPO_ROOT / "recipes" / "roberta" / "demo.sh"]
    env = recipe_env(tiny_data_bin, tmp_path / "save")
    run = Run(recipe, tmp_path / "recipe.log", env)
    run.wait_for(MOMENTS["random"])
    time.sleep(0.5)
    run.send(signal.SIGUSR1, group=True)
    assert run.wait() == PREEMPTED, run.text()[-3000:]
    update = stopped_update(run.text())
    env["TOTAL_UPDATES"] = str(update + 2)  # a short resume (the schedule's length changes)
    resumed = Run(recipe, tmp_path / "resumed.log", env)
    assert resumed.wait() == 0, resumed.text()[-3000:]
    assert re.search(rf"Loaded checkpoint \S+ \(epoch \d+ @ {update} updates\)", resumed.text())


def test_save_on_signal_0_in_a_recipe_passes_the_flag(tiny_data_bin, tmp_path):
    recipe = ["bash", REPO_ROOT / "recipes" / "roberta" / "demo.sh"]
    run = Run(recipe, tmp_path / "recipe.log",
              recipe_env(tiny_data_bin, tmp_path / "save", SAVE_ON_SIGNAL="0"))
    run.wait_for(MOMENTS["random"])
    run.send(signal.SIGTERM, group=True)
    status = run.wait()
    assert status in (-signal.SIGTERM, 128 + signal.SIGTERM), run.text()[-3000:]
    assert "--no-save-on-signal" in run.text().splitlines()[0]
    assert not STOPPED.search(run.text())


def test_fairseq_hydra_train_saves_and_exits_on_sigterm(tiny_data_bin, tmp_path):
    save = tmp_path / "save"
    argv = [fairseq_cli("fairseq-hydra-train", real=True), "--config-dir",
            REPO_ROOT / "recipes" / "config" / "roberta", "--config-name", "demo",
            f"task.data={tiny_data_bin}", f"common.user_dir={USER_DIR}", "common.cpu=true",
            f"checkpoint.save_dir={save}", "optimization.max_update=400",
            "lr_scheduler.total_num_update=400", "common.log_file=null",
            f"hydra.run.dir={tmp_path / 'hydra'}"]
    run = Run(argv, tmp_path / "hydra.log")
    run.wait_for(MOMENTS["random"])
    time.sleep(0.5)
    run.send(signal.SIGTERM)
    assert run.wait() == PREEMPTED, run.text()[-3000:]
    update = stopped_update(run.text())
    assert training_state(save / "checkpoint_last.pt")["num_updates"] == update


# --- two processes (gloo) ---------------------------------------------------------------------

def run_ranks(data, family, save_dir, logs: Path, name):
    """Ranks 0 and 1 of a two-process run, meeting through the file ``logs/name.rendezvous``."""
    return [Run(ddp_argv(data, family, save_dir, rank, logs / f"{name}.rendezvous"),
                logs / f"{name}-rank{rank}.log") for rank in (0, 1)]


def wait_all(runs, timeout=300):
    """The exit statuses of ``runs``; a run still going when another has failed is killed
    (a rank whose peer died waits for it forever)."""
    deadline = time.monotonic() + timeout
    while any(r.proc.poll() is None for r in runs) and time.monotonic() < deadline:
        if any(r.proc.poll() not in (None, 0, PREEMPTED) for r in runs):
            break
        time.sleep(0.05)
    for r in runs:
        if r.proc.poll() is None:
            r.proc.kill()
    return [r.proc.wait() for r in runs]


@pytest.mark.parametrize("family", PREEMPTED_FAMILIES)
def test_two_processes_stop_after_the_same_update_and_resume_bit_exactly(family, tiny_data_bin,
                                                                          tmp_path):
    reference = run_ranks(tiny_data_bin, family, tmp_path / "never", tmp_path, "never")
    assert wait_all(reference) == [0, 0], [r.text()[-2000:] for r in reference]

    save = tmp_path / "save"
    ranks = run_ranks(tiny_data_bin, family, save, tmp_path, "signalled")
    ranks[0].wait_for(MOMENTS["random"])  # (rank 1 logs warnings only)
    time.sleep(random.Random(family).uniform(0.0, 0.25))
    ranks[1].send(signal.SIGTERM)  # rank 1 only: rank 0 learns it through the all-reduce
    assert wait_all(ranks) == [PREEMPTED, PREEMPTED], [r.text()[-2000:] for r in ranks]
    updates = [stopped_update(r.text()) for r in ranks]
    print(f"{family}, two processes: stopped after updates {updates}")
    assert updates[0] == updates[1] < UPDATES
    assert "by SIGTERM" in ranks[1].text() and "with the other ranks" in ranks[0].text()
    assert sorted(p.name for p in save.glob("checkpoint_last*")) == ["checkpoint_last.pt"]
    assert training_state(save / "checkpoint_last.pt")["num_updates"] == updates[0]

    resumed = run_ranks(tiny_data_bin, family, save, tmp_path, "resumed")
    assert wait_all(resumed) == [0, 0], [r.text()[-2000:] for r in resumed]
    assert_resumed_from(resumed[0].text(), updates[0])
    assert_identical(training_state(save / "checkpoint_last.pt"),
                     training_state(tmp_path / "never" / "checkpoint_last.pt"), family)
