"""The package lists every build from the Debian archive reads: Debian bookworm ``main`` alone,
fetched into the cache (``<cache>/apt/``) by ``apt-get update`` under private ``Dir::`` options.

The machine's own lists would make a build depend on the machine: extra suites such as
``bookworm-security`` fetch newer versions of some packages, and lists without the
``Translation-en`` files hold out only the package synopses, not their long descriptions. With
these lists every machine fetches the same package versions and reads the same records and
descriptions (the English corpus's held-out index, the suite's DebSection). Bookworm's ``main``
is oldstable and fixed between point releases, so the lists are fetched once per cache and kept
(delete ``<cache>/apt`` to fetch them again). :func:`ensure_lists` fetches them (one
``apt-get update``, 15 MB, a few seconds, no root); :meth:`AptLists.options` are the ``-o``
flags that point ``apt-get`` and ``apt-cache`` at them. Why: docs/corpus.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import CorpusError

MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
COMPONENT = "main"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: The lists' folder under a build's cache folder.
LISTS_FOLDER = "apt"
STAMP_NAME = "lists.stamp.json"
#: The InRelease fields recorded in the stamp (and so in a corpus card's settings).
RELEASE_FIELDS = ("Origin", "Suite", "Codename", "Version", "Date")


@dataclasses.dataclass(frozen=True)
class AptLists:
    """The pinned lists' folder: ``sources.list``, ``lists/`` (what ``apt-get update`` fetched),
    ``cache/`` and the stamp written last."""

    root: Path

    @classmethod
    def in_cache(cls, cache_dir: Path) -> "AptLists":
        """The lists of ``cache_dir``, by absolute path (apt reads a relative ``Dir::`` value
        as relative to its own folders)."""
        return cls(Path(cache_dir).resolve() / LISTS_FOLDER)

    @property
    def lists_dir(self) -> Path:
        return self.root / "lists"

    @property
    def stamp(self) -> Path:
        return self.root / STAMP_NAME

    def options(self) -> list[str]:
        """``-o`` flags that make ``apt-get`` / ``apt-cache`` read these lists and nothing of
        the machine's sources (``APT::Sandbox::User=root``: as root, apt would otherwise hand
        the download to the ``_apt`` user, who cannot write into the cache)."""
        settings = {
            "Dir::Etc::SourceList": self.root / "sources.list",
            "Dir::Etc::SourceParts": self.root / "sources.list.d",
            "Dir::State::Lists": self.lists_dir,
            "Dir::Cache": self.root / "cache",
            "Acquire::Languages": "en",
            "APT::Sandbox::User": "root",
        }
        return [flag for name, value in settings.items() for flag in ("-o", f"{name}={value}")]

    def packages_files(self) -> list[Path]:
        return sorted(self.lists_dir.glob(f"*_dists_{SUITE}_{COMPONENT}_binary-*_Packages*"))

    def translation_files(self) -> list[Path]:
        return sorted(self.lists_dir.glob(f"*_dists_{SUITE}_{COMPONENT}_i18n_Translation-en*"))

    def release(self) -> dict[str, str]:
        """The fetched suite's InRelease fields (:data:`RELEASE_FIELDS`), from the stamp."""
        return json.loads(self.stamp.read_text())["release"]


def sources_line() -> str:
    return f"deb [signed-by={KEYRING}] {MIRROR} {SUITE} {COMPONENT}\n"


def release_fields(in_release: str) -> dict[str, str]:
    """:data:`RELEASE_FIELDS` of an ``InRelease`` file's text: the first paragraph after the
    PGP armour's header (a plain ``Release`` text has none)."""
    if in_release.startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        in_release = in_release.split("\n\n", 1)[-1]
    fields = {}
    for line in in_release.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        if name in RELEASE_FIELDS:
            fields[name] = value.strip()
    return fields


def ensure_lists(cache_dir: Path, log: Callable[[str], None]) -> AptLists:
    """The pinned lists of ``cache_dir``, fetched with one ``apt-get update`` the first time
    (module docstring); a stamp written last marks them complete."""
    lists = AptLists.in_cache(cache_dir)
    if lists.stamp.is_file() and lists.packages_files():
        return lists
    if shutil.which("apt-get") is None:
        raise CorpusError("apt-get not found: the corpus and the suite read Debian bookworm "
                          "main's package lists (a Debian system), or pass --input PATH")
    if not KEYRING.is_file():
        raise CorpusError(f"{KEYRING} not found: install debian-archive-keyring, the key that "
                          f"checks {MIRROR}'s {SUITE} lists")
    log(f"run: apt-get update ({SUITE} {COMPONENT} alone, into {lists.root})")
    for folder in (lists.lists_dir / "partial", lists.root / "cache", lists.root / "sources.list.d"):
        folder.mkdir(parents=True, exist_ok=True)
    (lists.root / "sources.list").write_text(sources_line())
    result = subprocess.run(["apt-get", *lists.options(), "update"], capture_output=True,
                            text=True)
    if result.returncode != 0 or not lists.packages_files():
        lines = (result.stderr + result.stdout).strip().splitlines()
        problem = ([line for line in lines if line.startswith(("E:", "W:"))] or lines
                   or ["no package lists written"])[-1]
        raise CorpusError(f"apt-get update of {MIRROR} {SUITE} {COMPONENT} failed: {problem}")
    if not lists.translation_files():
        raise CorpusError(f"apt-get update of {MIRROR} {SUITE} wrote no Translation-en list "
                          "(the long package descriptions the leak filter holds out)")
    in_release = sorted(lists.lists_dir.glob(f"*_dists_{SUITE}_InRelease"))
    release = release_fields(in_release[0].read_text(errors="replace")) if in_release else {}
    temporary = lists.stamp.with_name(lists.stamp.name + f".tmp-{os.getpid()}")
    temporary.write_text(json.dumps({"sources": sources_line().strip(), "release": release})
                         + "\n")
    os.replace(temporary, lists.stamp)
    return lists


def candidate_versions(lists: AptLists, packages: Iterable[str]) -> dict[str, str]:
    """{package: the version these lists offer} (``apt-cache show --no-all-versions``); a
    package the lists do not hold is left out."""
    packages = sorted(set(packages))
    if not packages:
        return {}
    result = subprocess.run(["apt-cache", *lists.options(), "show", "--no-all-versions",
                             *packages], capture_output=True, text=True)
    versions, name = {}, None
    for line in result.stdout.splitlines():
        if line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and name is not None:
            versions[name] = line.split(":", 1)[1].strip()
    return versions


def deb_file_version(package_file: str) -> str:
    """The version in a ``.deb`` file name (``name_version_arch.deb``; ``%3a`` is ``:``)."""
    parts = package_file.split("_")
    return re.sub("%3a", ":", parts[1], flags=re.IGNORECASE) if len(parts) >= 3 else package_file
