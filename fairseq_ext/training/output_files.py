"""Writing the files a user keeps: exports, results pages, plots, candidate and prediction files.

Two promises, shared by every command of the package that writes one:

* **Nothing is overwritten without ``--force``.** A command checks its outputs with
  :func:`refuse_existing` before any expensive work, so a refused run costs nothing, and reports
  the :class:`OutputError` as one line on stderr, ``PROG: error: OUT exists; pass --force to
  overwrite it`` (:func:`error_line`), exit status 2.
* **Nothing is left half-written.** :func:`atomic_file` and :func:`atomic_directory` write to a
  temporary file (directory) beside the output and rename it onto the output once complete, so
  an interrupted write leaves the earlier file as it was, and no partial one.

Data-bins have their own rules (:mod:`fairseq_ext.corpus.step_state`, :mod:`fairseq_ext.corpus.glue`).
"""
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional, Union

from fairseq_ext.cli.errors import UserInputError

PathLike = Union[str, os.PathLike]


class OutputError(UserInputError):
    """An output that may not be written as asked (it exists and there is no ``--force``, or it
    is of the wrong kind): one line for the user, exit status 2."""


def refuse_existing(paths: Iterable[Optional[PathLike]], force: bool) -> None:
    """Raise :class:`OutputError` for the first of ``paths`` (``None``: an output not asked for)
    that exists, unless ``force``."""
    if force:
        return
    for path in paths:
        if path is not None and os.path.lexists(path):
            raise OutputError(f"{path} exists; pass --force to overwrite it")


def refused(prog: str, paths: Iterable[Optional[PathLike]], force: bool) -> bool:
    """:func:`refuse_existing` for a command's ``main``: True, after printing the one-line error
    on stderr, if one of ``paths`` exists and there is no ``force`` (the caller exits with 2)."""
    try:
        refuse_existing(paths, force)
    except OutputError as error:
        print(error_line(prog, error), file=sys.stderr)
        return True
    return False


def error_line(prog: str, error: object) -> str:
    """A command's one-line error message (a refused output's, or another), in argparse's form:
    ``PROG: error: MESSAGE``."""
    return f"{prog}: error: {error}"


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_file(path: PathLike, force: bool, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (text: UTF-8, ``\\n`` line ends; or
    ``binary``); when the block ends without an error, it is renamed onto ``path``, with the
    modes a plain ``open`` would give it. An existing ``path`` is replaced only with ``force``."""
    path = Path(path)
    refuse_existing([path], force)
    if path.is_dir():
        raise OutputError(f"{path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it 0600
        with (os.fdopen(fd, "wb") if binary
              else os.fdopen(fd, "w", encoding="utf-8", newline="\n")) as handle:
            yield handle
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_text(path: PathLike, text: str, force: bool) -> None:
    """``text`` into ``path`` through :func:`atomic_file`."""
    with atomic_file(path, force) as handle:
        handle.write(text)


@contextlib.contextmanager
def atomic_directory(path: PathLike, force: bool) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path`` to fill; when the block ends without an
    error, it is renamed onto ``path`` (an existing one, with ``force``, is moved aside first,
    removed after, and put back if the rename fails)."""
    path = Path(path)
    refuse_existing([path], force)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path} exists and is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = None
    try:
        yield temporary
        readable_by_umask(temporary)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None and not path.exists() and (old / path.name).exists():
            os.replace(old / path.name, path)  # put the previous output back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def readable_by_umask(directory: Path) -> None:
    """Give ``directory`` (``mkdtemp`` makes it 0700) and what it holds the modes a plain
    ``mkdir`` / ``open`` would (the umask's)."""
    umask = _umask()
    os.chmod(directory, 0o777 & ~umask)
    for path in directory.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
