"""Reading the input documents, and assigning each one to a split.

Two input shapes: a directory, every regular file below it (recursively, in sorted
relative-path order) one document identified by its relative path, its paragraphs (blank-line
separated in ``text`` format, :func:`~fairseq_ext.corpus.rst_cleaner.clean_rst` in ``rst``)
written one sentence per line (:func:`split_sentences`) or with ``line_unit="paragraph"`` one
paragraph per line; or a single file, whose documents are separated by blank lines, each
non-blank line one output line, each document identified by the hash of its content.
Everything streams, one document in memory at a time. Bytes that are not valid UTF-8 become
U+FFFD and are counted (:class:`ReplacementCounter`); output lines hold no line breaks and
single spaces. The inputs and their output lines: docs/corpus.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import CorpusError
from .rst_cleaner import clean_rst

SPLITS = ("train", "valid", "test")

#: Output line units for directory input: fairseq's ``--sample-break-mode complete`` /
#: ``complete_doc`` pack whole lines into blocks, and drop a line longer than a block, so lines
#: are sentences by default (the BERT/RoBERTa convention), not whole paragraphs.
LINE_UNITS = ("sentence", "paragraph")

_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")
_NOT_SENTENCE_END = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|al|Mr|Mrs|Ms|Dr|Prof|St|No|Fig|Sec|approx)\.|\b[A-Z]\.)$"
)


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph after ``.``, ``!`` or ``?`` (and closing quotes or brackets) where the
    next word starts with a capital letter or a digit; common abbreviations (``e.g.``, ``Dr.``,
    initials) do not end a sentence."""
    sentences: list[str] = []
    start = 0
    for boundary in _SENTENCE_BOUNDARY.finditer(paragraph):
        candidate = paragraph[start:boundary.end(1)]  # closing quotes stay with the sentence
        if _NOT_SENTENCE_END.search(candidate.rstrip("\"')]")):
            continue
        sentences.append(candidate)
        start = boundary.end()
    sentences.append(paragraph[start:])
    return [sentence for sentence in sentences if sentence]


INPUT_FORMATS = ("text", "rst")


class ReplacementCounter:
    """Decodes UTF-8 and counts the bytes that had to be replaced by U+FFFD."""

    def __init__(self) -> None:
        self.replaced_bytes = 0

    def decode(self, raw: bytes) -> str:
        """Decode ``raw`` like ``raw.decode("utf-8", "replace")``, counting replaced bytes."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        parts = []
        position = 0
        while True:
            try:
                parts.append(raw[position:].decode("utf-8"))
                return "".join(parts)
            except UnicodeDecodeError as error:
                parts.append(raw[position : position + error.start].decode("utf-8"))
                parts.append("\ufffd")
                self.replaced_bytes += error.end - error.start
                position += error.end


@dataclass(frozen=True)
class InputListing:
    """The files of the input, in processing order, and a fingerprint of their state."""

    root: Path
    is_directory: bool
    relative_paths: tuple[str, ...]
    total_bytes: int
    fingerprint: str  # sha256 over (relative path, size, mtime) of every file

    def paths(self) -> Iterator[tuple[str, Path]]:
        """Yield ``(relative path, absolute path)`` for every input file."""
        for relative in self.relative_paths:
            yield relative, (self.root / relative if self.is_directory else self.root)


@dataclass
class Document:
    """One document: its identity (what decides its split) and its output lines (lazy)."""

    identity: str
    lines: Iterator[str]


def list_input(path: Path, suffix: str | None = None) -> InputListing:
    """List the input files under ``path`` (a file or a directory).

    Only files whose name ends with ``suffix`` are taken when it is given. Raises
    :class:`CorpusError` when the path is missing or holds no bytes at all.
    """
    if not path.exists():
        raise CorpusError(f"input not found: {path}")
    entries = []
    if path.is_dir():
        for directory, _subdirectories, filenames in os.walk(path):
            for name in filenames:
                full = os.path.join(directory, name)
                try:
                    status = os.stat(full)
                except OSError:  # a dangling symlink
                    continue
                if stat.S_ISREG(status.st_mode) and (suffix is None or name.endswith(suffix)):
                    relative = Path(full).relative_to(path).as_posix()
                    entries.append((relative, status.st_size, status.st_mtime_ns))
        entries.sort()
    elif path.is_file():
        status = path.stat()
        entries.append((path.name, status.st_size, status.st_mtime_ns))
    else:
        raise CorpusError(f"input is neither a file nor a directory: {path}")
    total_bytes = sum(size for _relative, size, _mtime in entries)
    if total_bytes == 0:
        raise CorpusError(
            f"input is empty: {path} has no {'files with ' if path.is_dir() else ''}content"
        )
    digest = hashlib.sha256()
    for relative, size, mtime in entries:
        digest.update(f"{relative}\t{size}\t{mtime}\n".encode())
    return InputListing(
        root=path,
        is_directory=path.is_dir(),
        relative_paths=tuple(relative for relative, _size, _mtime in entries),
        total_bytes=total_bytes,
        fingerprint=digest.hexdigest(),
    )


def iter_documents(
    listing: InputListing, input_format: str, counter: ReplacementCounter,
    line_unit: str = "sentence",
) -> Iterator[Document]:
    """Yield the documents of the input, in a deterministic order. ``input_format`` (``text``
    or ``rst``) and ``line_unit`` (one of :data:`LINE_UNITS`) apply to directory input; a
    single file is always read as text, one output line per input line."""
    if not listing.is_directory:
        yield from _single_file_documents(listing.root, counter)
        return
    for relative, path in listing.paths():
        if input_format == "rst":
            paragraphs: Iterable[str] = _rst_file_lines(path, counter)
        else:
            paragraphs = _paragraph_lines(_decoded_lines(path, counter))
        if line_unit == "sentence":
            paragraphs = (s for paragraph in paragraphs for s in split_sentences(paragraph))
        yield Document(relative, iter(paragraphs))


def assign_split(identity: str, valid_fraction: float, test_fraction: float) -> str:
    """The split of a document: a pure function of its identity and the fractions."""
    position = int.from_bytes(hashlib.sha256(identity.encode("utf-8")).digest()[:8], "big") / 2**64
    if position < valid_fraction:
        return "valid"
    if position < valid_fraction + test_fraction:
        return "test"
    return "train"


def collapse_whitespace(text: str) -> str:
    """Join the words of ``text`` with single spaces (also removes any line break)."""
    return " ".join(text.split())


def _decoded_lines(path: Path, counter: ReplacementCounter) -> Iterator[str]:
    """The lines of a file, decoded, without a leading byte-order mark."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle):
            line = counter.decode(raw)
            yield line.lstrip("\ufeff") if number == 0 else line


def _paragraph_lines(lines: Iterable[str]) -> Iterator[str]:
    """One output line per paragraph (blank-line separated) of ``lines``."""
    paragraph: list[str] = []
    for line in lines:
        words = line.split()
        if words:
            paragraph.extend(words)
        elif paragraph:
            yield " ".join(paragraph)
            paragraph = []
    if paragraph:
        yield " ".join(paragraph)


def _rst_file_lines(path: Path, counter: ReplacementCounter) -> list[str]:
    return clean_rst("".join(_decoded_lines(path, counter)))


def _single_file_documents(path: Path, counter: ReplacementCounter) -> Iterator[Document]:
    """Blank-line separated documents of one file, identified by their content hash."""
    document: list[str] = []
    for line in _decoded_lines(path, counter):
        text = collapse_whitespace(line)
        if text:
            document.append(text)
        elif document:
            yield _content_document(document)
            document = []
    if document:
        yield _content_document(document)


def _content_document(lines: list[str]) -> Document:
    identity = "sha256:" + hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    return Document(identity, iter(lines))
