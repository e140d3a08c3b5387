"""The errors fairseq-ext's checks raise, printed by fairseq's tools as one line.

A check that finds input the user has to change (a flag out of range, a config that cannot
work, a data-bin or checkpoint that cannot be read) raises a :class:`UserInputError` whose
message names what to change: plain flag and config checks raise :class:`ConfigError`, a
``ValueError``; the data-bin, dictionary, document-format and checkpoint errors subclass it
beside their own base. Under ``fairseq-train``, ``fairseq-validate`` and ``fairseq-hydra-train``
(:func:`fairseq_ext.models.validation.fairseq_program`), importing the plugin installs
:func:`one_line_excepthook`, which prints such an error as argparse prints a usage error
(``fairseq-train: error: --mask-prob must be in (0, 1); got 1.5``) and exits with status 1; an
error fairseq wraps prints as the line of ours it wraps, every other exception as Python prints
it, and ``FAIRSEQ_EXT_TRACEBACK=1`` (:data:`TRACEBACK_VARIABLE`) brings the traceback back. Where
it applies (hydra, spawned workers) and the errors fairseq prints itself: docs/troubleshooting.md.
"""
import os
import sys
from typing import Callable, Optional

#: Set to 1 to have fairseq's tools print the traceback of our errors again.
TRACEBACK_VARIABLE = "FAIRSEQ_EXT_TRACEBACK"
#: hydra's own setting: let exceptions propagate instead of printing an abridged traceback.
HYDRA_FULL_ERROR = "HYDRA_FULL_ERROR"


class UserInputError(Exception):
    """An error the user fixes by changing their input; the message says what to change."""


class ConfigError(UserInputError, ValueError):
    """A flag or config value that cannot work; the message names the flag and what to give."""


def user_input_error_in(error: BaseException) -> Optional[UserInputError]:
    """``error`` if it is a :class:`UserInputError`, else the first one in its chain of causes
    and contexts (``raise ... from``, or raised while one was handled), else ``None``."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserInputError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def one_line_error(program: str, error: BaseException) -> Optional[str]:
    """The line ``program`` prints for ``error``: ``None`` unless a :class:`UserInputError` is
    in it (:func:`user_input_error_in`)."""
    ours = user_input_error_in(error)
    if ours is None:
        return None
    message = " ".join(str(ours).split()) or type(ours).__name__
    return f"{program}: error: {message} ({TRACEBACK_VARIABLE}=1 prints the traceback)"


def one_line_excepthook(program: str, previous: Callable) -> Callable:
    """A ``sys.excepthook`` that prints our errors as ``program``'s one-line error and hands
    everything else (and ours too, under ``FAIRSEQ_EXT_TRACEBACK=1``) to ``previous``."""

    def excepthook(error_type, error, traceback):
        line = None if os.environ.get(TRACEBACK_VARIABLE) else one_line_error(program, error)
        if line is None:
            previous(error_type, error, traceback)
        else:
            sys.stderr.write(line + "\n")

    excepthook.fairseq_ext_program = program
    return excepthook


def install_one_line_errors(program: Optional[str]) -> None:
    """Under ``program`` (a fairseq tool's name; ``None`` outside them: nothing to do), print
    our errors as one line (:func:`one_line_excepthook`). Installing twice does nothing."""
    if program is None or getattr(sys.excepthook, "fairseq_ext_program", None):
        return
    sys.excepthook = one_line_excepthook(program, sys.excepthook)
    if program == "fairseq-hydra-train":
        os.environ.setdefault(HYDRA_FULL_ERROR, "1")
