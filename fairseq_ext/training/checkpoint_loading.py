"""Load fairseq checkpoints on torch >= 2.6 without giving up safe unpickling.

torch 2.6 made ``torch.load(..., weights_only=True)`` the default, and fairseq 0.12 checkpoints
pickle ``argparse.Namespace`` (``cfg.model`` of every model registered through ``add_args``,
``args`` of older checkpoints), so ``fairseq-validate --path`` and ``fairseq-train
--restore-file`` stop with ``Unsupported global: GLOBAL argparse.Namespace``. We keep
``weights_only=True`` and allow-list exactly that global (``tests/test_checkpoints.py`` re-scans
fresh checkpoints with ``torch.serialization.get_unsafe_globals_in_checkpoint``); any other
global still raises. Importing :mod:`fairseq_ext` installs the allow-list. fairseq-ext's own
loaders (:func:`load_checkpoint_to_cpu`) turn torch's errors into one line saying what to do
(:func:`checkpoint_error_message`): a truncated file (the words of our fairseq patch's
``TruncatedCheckpointError``), a corrupt one, or a checkpoint loaded without the allow-list.
User-facing: docs/install.md, "Checkpoints on torch >= 2.6"; docs/troubleshooting.md.
"""
import argparse
import os

import torch.serialization

from fairseq_ext.cli.errors import UserInputError

#: The only non-builtin globals found in fairseq 0.12 checkpoints.
FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,)


def allow_fairseq_checkpoint_globals() -> None:
    """Add :data:`FAIRSEQ_CHECKPOINT_GLOBALS` to torch's weights-only allow-list (idempotent)."""
    already_allowed = set(torch.serialization.get_safe_globals())
    missing = [g for g in FAIRSEQ_CHECKPOINT_GLOBALS if g not in already_allowed]
    if missing:
        torch.serialization.add_safe_globals(missing)


class CheckpointLoadError(UserInputError, ValueError):
    """A checkpoint that cannot be read; the message says what to do about it."""


def load_error_reason(error: Exception) -> str:
    """One line saying why ``torch.load`` failed: torch's weights-only errors put the reason
    after a long preamble, and its zip reader's after a first sentence, which is all we keep."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0].split(". ", 1)[0] if lines else ""
    return f"{type(error).__name__}: {first}".rstrip(": ")


def checkpoint_error_advice(path, error: Exception) -> str:
    """What is wrong with the checkpoint at ``path`` given ``error`` from loading it, and what
    to do, as a predicate (``"is truncated (...); the newest complete checkpoint in ..."``,
    fairseq's own words for a truncated file)."""
    from fairseq.checkpoint_utils import TruncatedCheckpointError

    if isinstance(error, TruncatedCheckpointError):
        return error.advice
    reason = load_error_reason(error)
    if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError)):
        return f"cannot be opened ({reason})"
    if "Unsupported global" in reason:
        if any(f"{g.__module__}.{g.__qualname__}" in reason for g in FAIRSEQ_CHECKPOINT_GLOBALS):
            return (f"needs fairseq-ext's allow-list to load on torch >= 2.6 ({reason}): add "
                    "`--user-dir fairseq_ext` to the fairseq command, or `import fairseq_ext` "
                    "before loading it in Python")
        return (f"holds a class that safe unpickling refuses ({reason}); fairseq-ext allows "
                "only what fairseq-train and fairseq-hydra-train write")
    try:
        size = f"{os.path.getsize(path)} bytes"
    except OSError:
        size = "size unknown"
    return f"is truncated or corrupt ({size}; {reason}); re-copy it or use an earlier checkpoint"


def checkpoint_error_message(path, error: Exception) -> str:
    """``checkpoint PATH`` + :func:`checkpoint_error_advice`."""
    return f"checkpoint {path} {checkpoint_error_advice(path, error)}"


def load_checkpoint_to_cpu(path, arg_overrides=None) -> dict:
    """fairseq's ``checkpoint_utils.load_checkpoint_to_cpu``, raising :class:`CheckpointLoadError`
    with :func:`checkpoint_error_message` when the file cannot be read."""
    from fairseq import checkpoint_utils

    allow_fairseq_checkpoint_globals()
    try:
        return checkpoint_utils.load_checkpoint_to_cpu(str(path), arg_overrides)
    except Exception as error:  # torch.load: truncated, not a checkpoint, a refused global, ...
        raise CheckpointLoadError(checkpoint_error_message(path, error)) from error
