"""Dictionaries in the dictd format: GCIDE, FOLDOC and the Jargon File.

A dictd database is a text file compressed with dictzip (gzip-compatible, ``.dict.dz``) and an
index (``.index``): one line per headword, ``headword TAB offset TAB length``, the numbers
written in base 64 (``A-Z a-z 0-9 + /`` are the digits 0-63). Several headwords may share one
entry; entries named ``00-database-*`` describe the database itself and are skipped. Each entry
becomes paragraphs (:func:`entry_paragraphs`; GCIDE's WordNet blocks dropped, as WordNet is held
out for evaluation), and entries follow in the file's order, :data:`ENTRIES_PER_DOCUMENT` to a
document (a dictionary has no larger unit of text). The sources: docs/corpus.md.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import CorpusError
from .raw import RawDocument

BASE64_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
ENTRIES_PER_DOCUMENT = 100
MIN_BLOCK_WORDS = 8
#: A block tagged with this source is WordNet's, held out for evaluation.
WORDNET_TAG = re.compile(r"\[\s*WordNet", re.IGNORECASE)

_PRONUNCIATION = re.compile(r"\\[^\\\n]*\\")
_SOURCE_TAG = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]")
_DATE_STAMP = re.compile(r"^\(\d{4}-\d{2}-\d{2}\)$")
_BRACES = re.compile(r"[{}]")
_DOMAIN_TAG = re.compile(r"<[^<>\n]{1,60}>")  # FOLDOC's <programming, humour>


def decode_base64_number(text: str) -> int:
    """The number dictd writes as ``text`` (most significant digit first)."""
    value = 0
    for character in text:
        digit = BASE64_DIGITS.find(character)
        if digit < 0:
            raise ValueError(f"not a dictd base-64 digit: {character!r}")
        value = value * 64 + digit
    return value


def read_index(path: Path) -> list[tuple[int, int]]:
    """``(offset, length)`` of every entry of a ``.index`` file, in file order, each once,
    without the ``00-database-*`` entries."""
    spans: set[tuple[int, int]] = set()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                raise CorpusError(f"{path}:{number}: not a dictd index line (headword, offset, "
                                  "length)")
            if fields[0].startswith("00-database") or fields[0].startswith("00database"):
                continue
            try:
                spans.add((decode_base64_number(fields[1]), decode_base64_number(fields[2])))
            except ValueError as error:
                raise CorpusError(f"{path}:{number}: {error}") from None
    return sorted(spans)


def entry_paragraphs(body: str, drop_wordnet: bool = True) -> list[str]:
    """The paragraphs of one entry's text: blocks separated by blank lines, each (its
    hard-wrapped lines joined) a paragraph, a block shorter than :data:`MIN_BLOCK_WORDS` words
    joined to the next (a sense number or headword line and its text read as one). GCIDE tags
    each block's source (``[1913 Webster]``, ``[WordNet 1.5]``, ``[PJC]``): blocks tagged WordNet
    are dropped when ``drop_wordnet``, and the tags, the pronunciation ``\\Ab*do"men\\`` and the
    cross-reference braces ``{...}`` removed; so are FOLDOC's date stamps ``(2014-11-27)`` and
    ``[{Jargon File}]`` credits."""
    paragraphs: list[str] = []
    pending = ""
    for block in re.split(r"\n[ \t]*\n", body):
        if drop_wordnet and WORDNET_TAG.search(block):
            continue
        text = _PRONUNCIATION.sub("", block)
        text = _SOURCE_TAG.sub(" ", text)
        text = " ".join(text.split())
        if not text or _DATE_STAMP.match(text):
            continue
        text = " ".join(_DOMAIN_TAG.sub(" ", _BRACES.sub("", text)).split())
        pending = f"{pending} {text}" if pending else text
        if len(pending.split()) >= MIN_BLOCK_WORDS:
            paragraphs.append(pending)
            pending = ""
    if pending:
        paragraphs.append(pending)
    return paragraphs


def read_dictd(package_root: Path, source: str, database: str,
               subdir: str = "usr/share/dictd") -> Iterator[RawDocument]:
    """The entries of ``<subdir>/<database>.dict.dz`` as documents of
    :data:`ENTRIES_PER_DOCUMENT` entries, identified ``<source>/<number of the first entry>``."""
    folder = package_root / subdir
    index, data = folder / f"{database}.index", folder / f"{database}.dict.dz"
    for path in (index, data):
        if not path.is_file():
            raise CorpusError(f"{source}: no {path}")
    spans = read_index(index)
    try:
        with gzip.open(data, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise CorpusError(f"{data}: not a readable dictzip file ({error})") from None
    if spans and spans[-1][0] + spans[-1][1] > len(raw):
        raise CorpusError(f"{index}: an entry ends past the end of {data} ({len(raw)} bytes): "
                          "the database is truncated")
    for start in range(0, len(spans), ENTRIES_PER_DOCUMENT):
        paragraphs: list[str] = []
        for offset, length in spans[start:start + ENTRIES_PER_DOCUMENT]:
            body = raw[offset:offset + length].decode("utf-8", "replace")
            paragraphs += entry_paragraphs(body)
        if paragraphs:
            yield RawDocument(f"{source}/{start // ENTRIES_PER_DOCUMENT:05d}", tuple(paragraphs))
