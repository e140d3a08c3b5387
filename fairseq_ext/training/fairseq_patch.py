"""The fairseq build fairseq-ext needs, checked when the plugin is imported.

``make install`` installs ve-fairseq 0.12.3 with fairseq-ext's patch series applied
(``patches/series``), and the build writes what it applied into ``fairseq/__init__.py`` as
``__fairseq_ext_patch__ = {"version": ..., "items": (...)}``. Under a stock fairseq the plugin
would silently lose what the series fixes, so importing ``fairseq_ext`` checks the marker first
(:func:`require_patched_fairseq`) and stops with one line naming ``make install`` when it is
missing or older than :data:`REQUIRED_PATCH_VERSION`, raised with the series' version
(``tests/test_fairseq_patch_series.py`` holds the two together). The series, the marker and the
error: docs/install.md.
"""
import re
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence, Tuple

from fairseq_ext.cli.errors import UserInputError

#: The attribute the build writes into ``fairseq/__init__.py``.
MARKER = "__fairseq_ext_patch__"
#: The series version this plugin needs (``# version: N`` in ``patches/series``).
REQUIRED_PATCH_VERSION = 2
#: What to do about a missing or old build.
REMEDY = "run `make install` in the fairseq-ext checkout (docs/install.md)"
#: ``patches/series``'s version line.
SERIES_VERSION_LINE = re.compile(r"^# version: *(\d+) *$")


class UnpatchedFairseqError(UserInputError, ImportError):
    """The installed fairseq is not the build ``make install`` makes; the message says so."""


def read_series(path) -> Tuple[int, Tuple[str, ...]]:
    """(version, item names) of a ``patches/series`` file: its ``# version: N`` line and the
    patch files it lists, in order, without ``.patch`` (as the build writes them)."""
    version, items = None, []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        match = SERIES_VERSION_LINE.match(line)
        if match:
            version = int(match.group(1))
        elif line and not line.startswith("#"):
            items.append(line[:-len(".patch")] if line.endswith(".patch") else line)
    if version is None:
        raise ValueError(f"{path}: no '# version: N' line")
    return version, tuple(items)


def marker_problem(marker, required_version: int = REQUIRED_PATCH_VERSION) -> Optional[str]:
    """Why ``marker`` (the installed fairseq's :data:`MARKER`, ``None`` when absent) is not a
    build this plugin can run on, or ``None`` when it is."""
    if marker is None:
        return f"no {MARKER} marker"
    try:
        version, items = int(marker["version"]), tuple(marker["items"])
    except (TypeError, KeyError, ValueError):
        return f"an unreadable {MARKER} marker: {marker!r}"
    if version < required_version:
        return (f"patch series version {version} ({len(items)} items); this fairseq-ext needs "
                f"version {required_version} or later")
    return None


def require_patched_fairseq(fairseq: Optional[ModuleType] = None,
                            required_version: int = REQUIRED_PATCH_VERSION) -> None:
    """Raise :class:`UnpatchedFairseqError` unless ``fairseq`` (the installed one by default)
    carries the patch series this plugin needs (:func:`marker_problem`)."""
    if fairseq is None:
        import fairseq
    problem = marker_problem(getattr(fairseq, MARKER, None), required_version)
    if problem is not None:
        where = Path(getattr(fairseq, "__file__", None) or "fairseq").parent
        raise UnpatchedFairseqError(
            f"fairseq at {where} is not fairseq-ext's patched build ({problem}): {REMEDY}")


def installed_series(fairseq: Optional[ModuleType] = None
                     ) -> Optional[Tuple[int, Sequence[str]]]:
    """(version, items) of the installed fairseq's marker, ``None`` without one."""
    if fairseq is None:
        import fairseq
    marker = getattr(fairseq, MARKER, None)
    return None if marker is None else (int(marker["version"]), tuple(marker["items"]))
