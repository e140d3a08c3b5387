"""The embedded default corpus: the reStructuredText sources of the Python 3.11 documentation,
from Debian's ``python3.11-doc`` package.

:func:`ensure_python_docs` downloads the package with ``apt-get download`` into a cache
directory and unpacks it there with ``dpkg -x`` (no root install), as :func:`ensure_package` does
for any Debian package (the downstream suite's fortunes and WordNet), from Debian bookworm
main's lists pinned in the cache (:mod:`.apt_lists`), never the machine's. The unpacked tree is
reused by later runs while its version is the one the pinned lists offer; a stamp written last
marks it complete, so an interrupted fetch is redone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .apt_lists import AptLists, candidate_versions, deb_file_version, ensure_lists
from .errors import CorpusError

SOURCE_NAME = "python-docs"
PACKAGE = "python3.11-doc"
SOURCES_SUBDIR = "usr/share/doc/python3.11/html/_sources"
SOURCE_SUFFIX = ".rst.txt"


def ensure_python_docs(cache_dir: Path, log: Callable[[str], None]) -> tuple[Path, bool]:
    """Return the directory of the unpacked ``*.rst.txt`` sources, fetching them if needed,
    and whether they were fetched now."""
    return ensure_package(PACKAGE, SOURCES_SUBDIR, cache_dir, log,
                          other_systems="the default corpus comes from Debian's "
                                        f"{PACKAGE} package; on other systems pass --input PATH",
                          instead="(or pass --input PATH)")


def ensure_package(package: str, subdir: str, cache_dir: Path, log: Callable[[str], None],
                   other_systems: str = "", instead: str = "",
                   version: str | None = None) -> tuple[Path, bool]:
    """``cache_dir/<package>/<subdir>`` of the Debian ``package``, downloaded with ``apt-get
    download`` from the pinned lists (:func:`.apt_lists.ensure_lists`) and unpacked with
    ``dpkg -x`` (no root install) the first time, and whether it was fetched now. ``version``:
    the version those lists offer, when the caller looked it up for many packages at once
    (:func:`.apt_lists.candidate_versions`); a cached tree of another version (fetched from
    other lists) is fetched again. ``other_systems`` / ``instead``: what the user can do where
    there is no apt. A stamp written last marks the unpacked tree complete."""
    unpacked = cache_dir / package
    wanted = unpacked / subdir
    stamp = cache_dir / f"{package}.stamp.json"
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise CorpusError(f"{tool} not found: {other_systems or f'{package} is a Debian package'}")
    lists = ensure_lists(cache_dir, log)
    if version is None:
        version = candidate_versions(lists, [package]).get(package)
    if version is None:
        raise CorpusError(f"the pinned package lists ({lists.root}) hold no {package} "
                          f"{instead}".rstrip())
    if stamp.is_file() and wanted.is_dir():
        package_file = json.loads(stamp.read_text())["package_file"]
        if deb_file_version(package_file) == version:
            log(f"skip: fetch (done) {package_file} in {cache_dir}")
            return wanted, False
        log(f"refetch: {package_file} in {cache_dir} is not the pinned lists' {version}")
    log(f"run: fetch ({package} {version} into {cache_dir})")
    cache_dir.mkdir(parents=True, exist_ok=True)
    # per-package temporary names: fetches of different packages may run side by side
    download_dir = cache_dir / f"{package}.download.tmp-{os.getpid()}"
    unpack_dir = cache_dir / f"{package}.tmp-{os.getpid()}"
    for stale in (*cache_dir.glob(f"{package}.download.tmp-*"), *cache_dir.glob(f"{package}.tmp-*")):
        shutil.rmtree(stale)
    download_dir.mkdir()
    package_file = _download_package(package, version, lists, download_dir)
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
    temporary_stamp.write_text(json.dumps({"package_file": kept_package.name,
                                           "version": version}) + "\n")
    os.replace(temporary_stamp, stamp)
    return wanted, True


def _download_package(package: str, version: str, lists: AptLists, download_dir: Path) -> Path:
    """``apt-get download package=version`` from the pinned lists into ``download_dir``;
    return the .deb file."""
    command = ["apt-get", *lists.options(), "download", f"{package}={version}"]
    result = subprocess.run(command, cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0:
        raise CorpusError(f"`apt-get download {package}={version}` failed: {_last_line(result)}")
    packages = sorted(download_dir.glob(f"{package}_*.deb"))
    if len(packages) != 1:
        raise CorpusError(
            f"`apt-get download {package}` left {len(packages)} package files, expected 1"
        )
    return packages[0]


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
