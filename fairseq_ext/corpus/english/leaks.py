"""Keeping the evaluation texts out of the pre-training corpus.

Four kinds of text are held out for fine-tuning and evaluation (:data:`HELD_OUT_KINDS`): the
Linux man pages, WordNet 3.0, the fortunes and the Debian package descriptions (bookworm main's
lists pinned in the cache, :mod:`..apt_lists`). A corpus paragraph is dropped when it shares a
:data:`WINDOW`-word window (normalized words, read across the paragraphs of its document) with
a held-out text, or holds the first :data:`GLOSS_OPENING` words of a WordNet definition at least
that long. Windows are hashed with a polynomial rolling hash over 64-bit word hashes (numpy), so
the 25M words of the corpus are checked in seconds; :class:`HeldOutIndex` holds each kind's
sorted hashes and :meth:`HeldOutIndex.leaking_paragraphs` says which paragraphs of a document to
drop and why. The packages and rules: docs/corpus.md ("Kept out, for evaluation");
docs/downstream.md checks every task's texts against the corpus again.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..downstream_sources import (
    NO_LONG_DESCRIPTIONS,
    clean_fortune,
    control_paragraphs,
    fortune_entries,
    normalize,
    read_compressed,
)
from ..errors import CorpusError

if TYPE_CHECKING:
    from ..apt_lists import AptLists

WINDOW = 13
GLOSS_OPENING = 10
HELD_OUT_KINDS = ("man-pages", "wordnet", "fortunes", "debian-descriptions")
#: The Debian packages each held-out kind is read from, with the folder taken from each.
HELD_OUT_PACKAGES = {
    "man-pages": (("manpages", "usr/share/man"), ("manpages-dev", "usr/share/man")),
    "wordnet": (("wordnet-base", "usr/share/wordnet"),),
    "fortunes": (("fortunes", "usr/share/games/fortunes"),
                 ("fortunes-min", "usr/share/games/fortunes")),
}
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


class WordHasher:
    """A stable 64-bit hash per normalized word (blake2b), cached."""

    def __init__(self) -> None:
        self.cache: dict[str, int] = {}

    def ids(self, words: Sequence[str]) -> np.ndarray:
        cache = self.cache
        values = []
        for word in words:
            value = cache.get(word)
            if value is None:
                value = int.from_bytes(hashlib.blake2b(word.encode("utf-8"),
                                                       digest_size=8).digest(), "little")
                cache[word] = value
            values.append(value)
        return np.array(values, dtype=np.uint64)


def window_hashes(word_ids: np.ndarray, n: int) -> np.ndarray:
    """The rolling hash of every ``n``-word window of ``word_ids`` (empty if shorter)."""
    count = len(word_ids) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    hashes = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(n):
            hashes = hashes * _MULTIPLIER + word_ids[offset:offset + count]
    return hashes


# --- reading the held-out texts ---------------------------------------------------------

_ROFF_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
_ROFF_SPECIAL = re.compile(r"\\(?:\(..|\[[^\]]*\]|\*(?:\(..|\[[^\]]*\]|.)|s[+-]?\d+|[&%c|^:])")
_ROFF_TEXT_MACROS = re.compile(r"^\.(?:B|I|BR|RB|IR|RI|BI|IB|SM|SB|SH|SS|TP|IP|UR|MT)\s+(.*)$")


def roff_text(source: str) -> str:
    """The running text of a man page's roff source: requests dropped, the words of font
    macros (``.B``, ``.IR``...) and headings kept, escapes removed."""
    kept = []
    for line in source.splitlines():
        if line.startswith((".", "'")):
            match = _ROFF_TEXT_MACROS.match(line)
            if not match:
                continue
            line = match.group(1).replace('"', " ")
        if line.startswith('.\\"'):
            continue
        line = _ROFF_FONT.sub("", line)
        line = line.replace("\\-", "-").replace("\\e", "\\")
        kept.append(_ROFF_SPECIAL.sub("", line))
    return " ".join(" ".join(kept).split())


def man_page_texts(man_dir: Path) -> list[str]:
    """The text of every man page (``man*/*.gz`` or plain) under ``man_dir``; ``.so``
    redirections skipped."""
    texts = []
    for path in sorted(man_dir.glob("man*/*")):
        if not path.is_file():
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            source = handle.read()
        if source.lstrip().startswith(".so ") and source.count("\n") <= 2:
            continue
        texts.append(roff_text(source))
    return texts


def wordnet_texts(wordnet_dir: Path) -> tuple[list[str], list[str]]:
    """``(glosses, definitions)`` of WordNet's ``data.*`` files: each synset's whole gloss
    (definition and examples) and its definition (the gloss before the first ``;``)."""
    glosses, definitions = [], []
    for name in ("data.noun", "data.verb", "data.adj", "data.adv"):
        path = wordnet_dir / name
        if not path.is_file():
            raise CorpusError(f"wordnet: no {path}")
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("  ") or "|" not in line:
                    continue  # the licence header
                gloss = line.split("|", 1)[1].strip()
                glosses.append(gloss)
                definitions.append(gloss.split(";", 1)[0])
    return glosses, definitions


def fortune_texts(fortune_dirs: Iterable[Path]) -> list[str]:
    """Every fortune of the category files (no ``.dat``, no ``.u8`` copies) in ``fortune_dirs``."""
    texts = []
    for folder in fortune_dirs:
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.suffix:
                text = path.read_text(encoding="utf-8", errors="replace")
                texts += [clean_fortune(entry) for entry in fortune_entries(text)]
    return texts


def debian_description_texts(packages_text: str, translations: Iterable[Path] = ()) -> list[str]:
    """Every package Description (synopsis and long text) of a Packages-format text, and
    every long description of the ``Translation-en`` files."""
    texts = [fields["Description"] for fields in control_paragraphs(packages_text)
             if "Description" in fields]
    for path in translations:
        texts += [fields["Description-en"] for fields in control_paragraphs(read_compressed(path))
                  if "Description-en" in fields]
    return texts


def debian_descriptions(lists: "AptLists") -> tuple[list[str], int]:
    """The package descriptions of the pinned lists (:mod:`..apt_lists`: their Packages and
    Translation-en files, the texts the suite's DebSection is built from), and how many
    Translation-en lists there were."""
    from ..downstream_sources import pinned_packages_text

    files = lists.translation_files()
    texts = debian_description_texts(pinned_packages_text(lists), files)
    require_long_descriptions(texts)
    return texts, len(files)


def require_long_descriptions(texts: Sequence[str]) -> None:
    """Refuse descriptions that are synopses only (package lists read without their
    ``Translation-en`` lists): the index would hold almost no 13-word window of them."""
    if not any("\n" in text.strip() for text in texts):
        raise CorpusError(NO_LONG_DESCRIPTIONS)


# --- the index --------------------------------------------------------------------------

class HeldOutIndex:
    """The sorted window hashes of each held-out kind, and the WordNet definition openings."""

    def __init__(self, texts_by_kind: dict[str, list[str]], definitions: Iterable[str] = ()):
        self.hasher = WordHasher()
        self.windows: dict[str, np.ndarray] = {}
        self.texts: dict[str, int] = {}
        for kind, texts in texts_by_kind.items():
            parts = [window_hashes(self.hasher.ids(normalize(text).split()), WINDOW)
                     for text in texts]
            self.windows[kind] = np.unique(np.concatenate(parts)) if parts else np.zeros(
                0, dtype=np.uint64)
            self.texts[kind] = len(texts)
        openings = []
        for definition in definitions:
            words = normalize(definition).split()
            if len(words) >= GLOSS_OPENING:
                openings.append(window_hashes(self.hasher.ids(words[:GLOSS_OPENING]),
                                              GLOSS_OPENING))
        self.openings = (np.unique(np.concatenate(openings)) if openings
                         else np.zeros(0, dtype=np.uint64))

    def sizes(self) -> dict[str, dict[str, int]]:
        sizes = {kind: {"texts": self.texts[kind], "windows": int(len(windows))}
                 for kind, windows in self.windows.items()}
        sizes["wordnet-definition-openings"] = {"openings": int(len(self.openings))}
        return sizes

    def leaking_paragraphs(self, paragraphs: Sequence[str]) -> dict[int, str]:
        """{index of a paragraph to drop: the held-out kind it copies} for one document's
        paragraphs (the first kind found, in :data:`HELD_OUT_KINDS` order, then the
        WordNet openings)."""
        words_per_paragraph = [normalize(paragraph).split() for paragraph in paragraphs]
        words = [word for paragraph in words_per_paragraph for word in paragraph]
        owner = np.repeat(np.arange(len(paragraphs)),
                          [len(paragraph) for paragraph in words_per_paragraph])
        ids = self.hasher.ids(words)
        leaks: dict[int, str] = {}
        windows = window_hashes(ids, WINDOW)
        for kind, held in self.windows.items():
            if not len(held) or not len(windows):
                continue
            hits = np.flatnonzero(_member(windows, held))
            for start in hits:
                for paragraph in range(owner[start], owner[start + WINDOW - 1] + 1):
                    leaks.setdefault(int(paragraph), kind)
        if len(self.openings) and len(ids) >= GLOSS_OPENING:
            # every 10-word window inside one paragraph, checked at once
            openings = window_hashes(ids, GLOSS_OPENING)
            inside = owner[:len(openings)] == owner[GLOSS_OPENING - 1:]
            for start in np.flatnonzero(inside & _member(openings, self.openings)):
                leaks.setdefault(int(owner[start]), "wordnet-definition-opening")
        return leaks


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in the sorted array ``sorted_set``."""
    positions = np.searchsorted(sorted_set, values)
    positions[positions == len(sorted_set)] = 0
    return sorted_set[positions] == values
