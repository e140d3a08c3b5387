"""The budget of a comparison: the fairseq-train command a recipe would run (``DRY_RUN=1``), its
analytic training PFLOPs per update (:mod:`fairseq_ext.flops`), and the updates each other model
gets for the baseline's FLOPs (:func:`equal_flops_updates`); the demo and the studies plan with it.

May import: see :mod:`fairseq_ext_lab` (of its other modules,
:mod:`~fairseq_ext_lab.recipe_runs`).
"""
import argparse
import math
import shlex
import subprocess
from pathlib import Path
from typing import List, Optional

from fairseq_ext_lab.recipe_runs import REPO_ROOT, DemoRun, recipe_env


def planned_command(run: DemoRun, data: Path, updates: Optional[int] = None) -> List[str]:
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


def equal_flops_updates(runs: List[DemoRun], data: Path,
                        baseline_updates: Optional[int] = None) -> List[int]:
    """Updates of each run at the analytic training FLOPs of the first run: its recipe's
    ``--max-update`` (or ``baseline_updates``), and for the others the updates that buy the
    same FLOPs, rounded down (``python -m fairseq_ext.flops --budget-of``'s rule; a model of
    the baseline's cost gets the baseline's updates, not one fewer from rounding)."""
    baseline = planned_command(runs[0], data, baseline_updates)
    updates = int(command_option(baseline, "--max-update"))
    budget = updates * analytic_pflops_per_update(baseline, data)
    return [updates] + [max(1, math.floor(budget / analytic_pflops_per_update(
        planned_command(run, data), data) * (1 + 1e-12))) for run in runs[1:]]




def command_option(command: List[str], flag: str, default: Optional[str] = None) -> Optional[str]:
    """The value of ``flag`` in a fairseq command line (the last one wins, as in argparse)."""
    values = [command[i + 1] for i, word in enumerate(command[:-1]) if word == flag]
    return values[-1] if values else default


def analytic_pflops_per_update(command: List[str], data: Path) -> Optional[float]:
    """Training PFLOPs of one update by the Appendix D formulas (:mod:`fairseq_ext.flops`), for
    the arch, length, masking and batch in the command the recipe printed (a
    ``bidirectional_lm`` command: :func:`bidirectional_pflops_per_update`)."""
    from fairseq_ext import flops

    arch = command_option(command, "--arch")
    if arch is None:
        return None
    if command_option(command, "--task") == "bidirectional_lm":
        return bidirectional_pflops_per_update(command, data)
    overrides = {name.replace("-", "_"): int(command_option(command, f"--{name}"))
                 for name in ("encoder-layers", "encoder-embed-dim", "encoder-ffn-embed-dim",
                              "decoder-layers", "decoder-embed-dim", "decoder-ffn-embed-dim")
                 if command_option(command, f"--{name}") is not None}
    spec = flops.spec_for_arch(arch, **overrides)
    mask_fraction = (1.0 - float(command_option(command, "--leave-unmasked-prob", "0.1"))
                     - float(command_option(command, "--random-token-prob", "0.1")))
    vocab = flops.vocab_size_of(argparse.Namespace(data=str(data), vocab_size=None))
    per_sequence = flops.training_flops_per_sequence(
        spec, int(command_option(command, "--tokens-per-sample", "512")),
        float(command_option(command, "--mask-prob", "0.15")), vocab, mask_fraction)
    sequences = int(command_option(command, "--batch-size", "1")) * int(
        command_option(command, "--update-freq", "1"))
    return per_sequence * sequences / 1e15


#: Training documents drawn for a variant's predicted share (:func:`bidirectional_pflops_per_update`).
SHARE_SAMPLE = 20000


def bidirectional_pflops_per_update(command: List[str], data: Path) -> Optional[float]:
    """Training PFLOPs of one ``bidirectional_lm`` update: rows of ``--tokens-per-sample``
    tokens, ``--max-tokens`` x ``--update-freq`` tokens an update, the output projection on the
    variant's share of predicted tokens, drawn by its own objective sampler
    (:meth:`~fairseq_ext.data.bidirectional_sampling.ObjectiveSampler.expected_predicted_share`)
    over :data:`SHARE_SAMPLE` training documents (one per line with ``--document-format
    lines``, cut at the row length as the task cuts them). ``None`` for other document formats,
    whose documents this does not rebuild."""
    import numpy as np
    from fairseq.data import Dictionary, data_utils

    from fairseq_ext import flops
    from fairseq_ext.data.bidirectional_sampling import ObjectiveSampler

    if command_option(command, "--document-format") != "lines":
        return None
    length = int(command_option(command, "--tokens-per-sample", "1024"))
    dictionary = Dictionary.load(str(Path(data) / "dict.txt"))
    train = data_utils.load_indexed_dataset(str(Path(data) / "train"), dictionary, combine=False)
    rng = np.random.default_rng(0)
    sizes = np.asarray(train.sizes)
    lengths = np.minimum(rng.choice(sizes, size=min(SHARE_SAMPLE, len(sizes)), replace=False),
                         length)
    sampler = ObjectiveSampler.from_flags(
        command_option(command, "--variant", "hyb_pre"),
        mask_prob=float(command_option(command, "--mask-prob", "0.15")),
        plain_lm_prob=float(command_option(command, "--plain-lm-prob", "0.1")),
        n_mask=command_option(command, "--n-mask"), n_bidir=command_option(command, "--n-bidir"),
        n_predict=command_option(command, "--n-predict"))
    share = sampler.expected_predicted_share(lengths, rng)
    spec = flops.spec_for_arch(command_option(command, "--arch"))
    vocab = flops.vocab_size_of(argparse.Namespace(data=str(data), vocab_size=None))
    tokens = int(command_option(command, "--max-tokens")) * int(
        command_option(command, "--update-freq", "1"))
    per_row = flops.TRAINING_MULTIPLIER * flops.exact_forward_flops(
        spec, length, mask_tokens=0.0, other_predicted_tokens=share * length, vocab_size=vocab)
    return per_row * tokens / length / 1e15
