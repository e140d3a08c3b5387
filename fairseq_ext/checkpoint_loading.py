"""Load fairseq checkpoints on torch >= 2.6 without giving up safe unpickling.

torch 2.6 made ``torch.load(..., weights_only=True)`` the default. fairseq 0.12 checkpoints
pickle a few non-tensor Python objects, so ``fairseq-validate --path``, ``fairseq-train
--restore-file`` and ``checkpoint_utils.load_model_ensemble`` stop with
``Unsupported global: GLOBAL argparse.Namespace``.

We keep ``weights_only=True`` and allow-list exactly the globals that fairseq checkpoints
contain (found by scanning checkpoints written by ``fairseq-train`` and ``fairseq-hydra-train``
with ``torch.serialization.get_unsafe_globals_in_checkpoint``; ``tests/test_checkpoints.py``
re-checks this on every run):

* ``argparse.Namespace``: ``cfg.model`` of every model registered with the legacy
  ``add_args`` interface (fairseq's ``roberta`` among them), and ``args`` in checkpoints
  written by older fairseq versions.

Everything else in a fairseq checkpoint (tensors, dicts, lists, ``OrderedDict``, numbers and
strings of the hydra config, optimizer and meter state) is already accepted by the
weights-only unpickler. Any other global still raises, as torch intends.

Importing :mod:`fairseq_ext` (``--user-dir fairseq_ext``) installs the allow-list; in a Python
session, ``import fairseq_ext`` before ``checkpoint_utils.load_model_ensemble``.
"""
import argparse

import torch.serialization

#: The only non-builtin globals found in fairseq 0.12 checkpoints.
FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,)


def allow_fairseq_checkpoint_globals() -> None:
    """Add :data:`FAIRSEQ_CHECKPOINT_GLOBALS` to torch's weights-only allow-list (idempotent)."""
    already_allowed = set(torch.serialization.get_safe_globals())
    missing = [g for g in FAIRSEQ_CHECKPOINT_GLOBALS if g not in already_allowed]
    if missing:
        torch.serialization.add_safe_globals(missing)
