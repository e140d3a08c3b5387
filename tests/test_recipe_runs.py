"""The one worker pool the demo, the studies and their fine-tuning stage run their runs in
(``fairseq_ext_lab.recipe_runs.in_parallel``)."""
import threading
import time

import pytest

from fairseq_ext_lab.recipe_runs import in_parallel


def test_in_parallel_keeps_the_order_and_runs_at_most_workers_at_once():
    running, most = [0], [0]
    lock = threading.Lock()

    def job(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return item * item

    assert in_parallel(job, range(7), workers=3) == [i * i for i in range(7)]
    assert most[0] == 3
    assert in_parallel(job, [], workers=2) == []
    assert in_parallel(job, [5], workers=0) == [25]  # at least one worker


def test_in_parallel_raises_the_first_failure_after_the_started_items_end():
    ended = []

    def job(item):
        if item == 1:
            raise ValueError("run 1 failed")
        time.sleep(0.05)
        ended.append(item)

    with pytest.raises(ValueError, match="run 1 failed"):
        in_parallel(job, [0, 1, 2], workers=2)
    assert 0 in ended  # the run beside the failed one was not abandoned


def test_a_spent_time_budget_starts_no_further_item_and_lets_the_started_ones_end():
    from fairseq_ext_lab.recipe_runs import OverTime, time_budget

    started, ended = [], []

    def job(item):
        started.append(item)
        time.sleep(0.3)
        ended.append(item)
        return item

    with time_budget(0.1, "over: use --minutes"):
        with pytest.raises(OverTime, match="over: use --minutes"):
            in_parallel(job, range(6), workers=2)
    # the first two started within the budget and finished; none started after it
    assert sorted(started) == [0, 1] and sorted(ended) == [0, 1]
    # outside the budget (and with None: no budget) every item runs
    assert in_parallel(job, [7], workers=1) == [7]
    with time_budget(None, "unused"):
        assert in_parallel(job, [8, 9], workers=2) == [8, 9]
    assert issubclass(OverTime, SystemExit)  # the study's command exits with its message


def test_the_wall_heartbeat_keeps_a_killed_invocations_time_on_disk(tmp_path):
    """A study's minutes count every invocation's, a killed one's too: while inside,
    ``wall_heartbeat`` writes booked + elapsed every ``every`` seconds; a process killed
    (SIGKILL: no ``finally`` runs) leaves its last value, which ``spent_seconds`` counts."""
    import json
    import subprocess
    import sys

    from fairseq_ext_lab.recipe_runs import spent_seconds, wall_heartbeat

    live = tmp_path / "ledger" / "wall.live.json"
    assert spent_seconds(live, 12.5) == 12.5  # nothing live: what was booked
    killed = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, time, pathlib\n"
         "from fairseq_ext_lab.recipe_runs import wall_heartbeat\n"
         f"with wall_heartbeat(pathlib.Path({str(live)!r}), 100.0, every=0.05):\n"
         "    time.sleep(0.6)\n"
         "    os.kill(os.getpid(), signal.SIGKILL)\n"], check=False)
    assert killed.returncode == -9
    left = json.loads(live.read_text())["wall_seconds"]
    assert 100.4 <= left < 102  # the last beat: about 0.6 s after entering, within a period
    assert spent_seconds(live, 12.5) == left  # the killed invocation's time, booked on top
    assert spent_seconds(live, 500.0) == 500.0  # a stale live file never lowers the ledger

    # leaving normally (or by an exception) writes the final value once more
    with pytest.raises(RuntimeError):
        with wall_heartbeat(live, 3.0, every=60.0):
            time.sleep(0.2)
            raise RuntimeError("a run failed")
    assert 3.2 <= json.loads(live.read_text())["wall_seconds"] < 5
