"""The one worker pool the demo, the studies and their fine-tuning stage run their runs in
(``fairseq_ext.experiments.recipe_runs.in_parallel``)."""
import threading
import time

import pytest

from fairseq_ext.experiments.recipe_runs import in_parallel


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
    from fairseq_ext.experiments.recipe_runs import OverTime, time_budget

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
