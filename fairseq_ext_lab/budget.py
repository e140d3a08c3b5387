"""The budget of a comparison: the fairseq-train command a recipe would run (``DRY_RUN=1``), its
analytic training PFLOPs per update (:mod:`fairseq_ext.flops`), and the updates each other model
gets for the baseline's FLOPs (:func:`equal_flops_updates`); the demo and the studies plan with it.
Every setting is read from the command as fairseq-train parses it (the recipe is the one source;
defaults are fairseq's and the plugin's own), and counted as the training criterion counts.

May import: see :mod:`fairseq_ext_lab` (of its other modules,
:mod:`~fairseq_ext_lab.recipe_runs`).
"""
import argparse
import logging
import math
import os
import shlex
import subprocess
from pathlib import Path
from typing import List, Optional

from fairseq_ext_lab.recipe_runs import REPO_ROOT, RecipeRun, recipe_env


def planned_command(run: RecipeRun, data: Path, updates: Optional[int] = None) -> List[str]:
    """The fairseq-train command ``run``'s recipe would run (``DRY_RUN=1``)."""
    extra = {"DRY_RUN": "1", "SAVE_DIR": "unused"}
    if updates is not None:
        extra["TOTAL_UPDATES"] = str(updates)
    proc = subprocess.run(["bash", str(REPO_ROOT / run.recipe), *run.args],
                          env=recipe_env(run, data, **extra),
                          cwd=REPO_ROOT, capture_output=True, text=True)
    printed = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    if proc.returncode != 0 or not printed:
        raise SystemExit(f"error: {run.recipe} (DRY_RUN=1) failed: {proc.stderr.strip()}")
    return shlex.split(printed[-1][2:])


def equal_flops_updates(runs: List[RecipeRun], data: Path,
                        baseline_updates: Optional[int] = None) -> List[int]:
    """Updates of each run at the analytic training FLOPs of the first run: its recipe's
    ``--max-update`` (or ``baseline_updates``), and for the others the updates that buy the
    same FLOPs, rounded down (``python -m fairseq_ext.flops --budget-of``'s rule; a model of
    the baseline's cost gets the baseline's updates, not one fewer from rounding)."""
    from fairseq_ext import flops

    baseline = planned_command(runs[0], data, baseline_updates)
    updates = flops.training_args(baseline[1:]).max_update
    budget = updates * analytic_pflops_per_update(baseline)
    return [updates] + [max(1, math.floor(budget / analytic_pflops_per_update(
        planned_command(run, data)) * (1 + 1e-12))) for run in runs[1:]]


def command_option(command: List[str], flag: str) -> Optional[str]:
    """The value of ``flag`` as written in a command line (the last one wins, as in argparse;
    ``None`` when absent); the settings a run trains with come from
    :func:`fairseq_ext.flops.training_args`."""
    values = [command[i + 1] for i, word in enumerate(command[:-1]) if word == flag]
    return values[-1] if values else None


def analytic_pflops_per_update(command: List[str]) -> Optional[float]:
    """Training PFLOPs of one update by the Appendix D formulas, for the run ``command`` (the
    fairseq-train command a recipe printed) configures, every setting as fairseq-train reads it:
    its arguments parsed by fairseq's own parser (:func:`fairseq_ext.flops.training_args`: the
    recipe's flags, fairseq's and the plugin's defaults, the arch's sizes) and its task set up
    from them (the vocabulary; ``bidirectional_lm``'s objective:
    :func:`bidirectional_predicted_per_sequence`, ``None`` where that has no figure), counted
    as the training criterion counts a batch (:func:`fairseq_ext.flops.update_training_flops`;
    masked LMs: :func:`fairseq_ext.flops.masked_lm_predicted_per_sequence`)."""
    from fairseq import tasks

    from fairseq_ext import flops
    from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMTask

    args = flops.training_args(command[1:])
    disabled_before = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the task's setup notes: the run logs them when it trains
    try:
        task = tasks.setup_task(args)
    finally:
        logging.disable(disabled_before)
    if isinstance(task, BidirectionalLMTask):
        mask, other = 0.0, bidirectional_predicted_per_sequence(args, task)
        if other is None:
            return None
    else:
        mask, other = flops.masked_lm_predicted_per_sequence(args)
    return flops.update_training_flops(args, len(task.source_dictionary), mask, other) / 1e15


#: Training documents drawn for a variant's predicted share
#: (:func:`bidirectional_predicted_per_sequence`).
SHARE_SAMPLE = 20000


def bidirectional_predicted_per_sequence(args: argparse.Namespace, task) -> Optional[float]:
    """Expected predicted tokens of a ``bidirectional_lm`` row of ``--tokens-per-sample``
    tokens (the tokens the output projection runs on): the row length times the variant's
    share, drawn by the task's own objective sampler
    (:meth:`~fairseq_ext.data.bidirectional_sampling.ObjectiveSampler.expected_predicted_share`)
    over :data:`SHARE_SAMPLE` documents of the training split (one per line with
    ``--document-format lines``, cut at the row length as the task cuts them). ``None`` for
    other document formats, whose documents this does not rebuild."""
    import numpy as np
    from fairseq import utils
    from fairseq.data import data_utils

    from fairseq_ext.data.documents import LINES

    if str(args.document_format) != LINES:
        return None
    length = args.tokens_per_sample
    split = os.path.join(utils.split_paths(args.data)[0], args.train_subset)
    train = data_utils.load_indexed_dataset(split, task.source_dictionary, combine=False)
    rng = np.random.default_rng(0)
    sizes = np.asarray(train.sizes)
    lengths = np.minimum(rng.choice(sizes, size=min(SHARE_SAMPLE, len(sizes)), replace=False),
                         length)
    return task.sampler.expected_predicted_share(lengths, rng) * length
