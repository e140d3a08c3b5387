"""Reader for SWORD Bible modules: zText Bibles and zCom commentaries, one document per book.

A package names its modules in ``usr/share/sword/mods.d/*.conf``; a verse-keyed module
(libsword's ``zVerse``: zText/zCom and zText4/zCom4) keeps each testament as zlib blocks behind a
verse index whose slots follow the versification
(:mod:`~fairseq_ext.corpus.english.kjv_versification`; :func:`_read_testament` reads them).
Entries are OSIS (also ThML-like HTML) or GBF markup, reduced to text by :func:`_add_markup` and
:func:`_add_gbf`: notes go with their content, titles become paragraphs of their own, paragraph
marks end paragraphs. In a Bible a paragraph is a run of verses, in a commentary each entry; a
book div inside a slot starts a document of its own, and a commentary book over
:data:`MAX_BOOK_WORDS` words is split into one document per chapter. The sources: docs/corpus.md.
"""

from __future__ import annotations

import bz2
import html
import lzma
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fairseq_ext.corpus.english.kjv_versification import VERSIFICATIONS, testament_slots
from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.errors import CorpusError

SWORD_ROOT = Path("usr/share/sword")
MAX_BOOK_WORDS = 100_000
TESTAMENTS = (("ot", "Old Testament"), ("nt", "New Testament"))

#: ModDrv (lowercase) -> (is a commentary, verse index slot size in bytes)
DRIVERS = {"ztext": (False, 10), "zcom": (True, 10), "ztext4": (False, 12), "zcom4": (True, 12)}
BLOCK_LETTERS = {"BOOK": "b", "CHAPTER": "c", "VERSE": "v"}
DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "ZIP": zlib.decompress, "BZIP2": bz2.decompress, "XZ": lzma.decompress}

_BOOK_NAMES = {book.osis: book.name for testaments in VERSIFICATIONS.values()
               for books in testaments for book in books}

# Markup: inline tags whose text is kept, element groups, attributes.
_INLINE_TAGS = re.compile(
    r"</?(?:w|transChange|divineName|hi|seg|q|foreign|name|reference|scripRef|scripture|added"
    r"|abbr|a|b|i|u|em|strong|span|font|sup|sub|sync|inscription|mentioned|index|milestone"
    r"(?![^>]*type=\"(?:x-p|x-paragraph|paragraph|x-usfm-h)\"))(?:\s[^>]*)?>")
_TAG = re.compile(r"<(/?)([A-Za-z][\w.:-]*)([^>]*)>")
_TYPE = re.compile(r'\btype\s*=\s*"([^"]*)"')
_OSIS_ID = re.compile(r'\bosisID\s*=\s*"([^"]*)"')
_N = re.compile(r'\bn\s*=\s*"([^"]*)"')
_DROPPED = frozenset({"note", "script", "style"})
_TITLES = frozenset({"title", "head", "h1", "h2", "h3", "h4", "h5", "h6", "speaker"})
_MARKS = frozenset({"p", "lg"})
_BREAKS = frozenset({"chapter", "list", "item", "li", "ul", "ol", "table", "row", "tr", "verse"})
_PARAGRAPH_TYPES = frozenset({"x-p", "x-paragraph", "paragraph"})
_PART_TYPES = frozenset({"book", "front", "back", "glossary"})
# HTML list/paragraph/font tags a module stored as &lt;..&gt; text
_ESCAPED_TAG = re.compile(r"</?(?:ol|ul|li|p|br|b|i|em|strong|div|span|font|sup|sub)\b[^<>]*>")
_GBF_TAG = re.compile(r"<([A-Z][A-Za-z])([^>]*)>")
_GBF_NOTE = re.compile(r"<RF[^>]*>.*?<Rf>", re.DOTALL)


@dataclass
class _Conf:
    path: Path
    name: str
    values: dict[str, str]

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key.lower(), default).strip()


def read_sword_module(package_root: Path, source: str) -> Iterator[RawDocument]:
    """Documents of every verse-keyed module that ``package_root``'s ``mods.d`` names.

    Identities are ``"<source>/<Book>"`` (``"<source>/<Book> <chapter>"`` for a split
    commentary book), with the module name after the source when the package has several.
    """
    sword_root = package_root / SWORD_ROOT
    conf_paths = sorted((sword_root / "mods.d").glob("*.conf"))
    if not conf_paths:
        raise CorpusError(f"{sword_root / 'mods.d'}: no SWORD module .conf file")
    confs = [_read_conf(path) for path in conf_paths]
    for conf in confs:
        prefix = f"{source}/{conf.name}" if len(confs) > 1 else source
        yield from _module_documents(sword_root, conf, prefix)


def _read_conf(path: Path) -> _Conf:
    """The first value of each key (lowercased) in the ``[Module]`` section; ``\\`` continues."""
    try:
        lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError as error:
        raise CorpusError(f"{path}: cannot read: {error.strerror}") from error
    name, values, key, continued = "", {}, "", False
    for line in lines:
        if continued:  # a continuation line of the value before
            if key:
                values[key] += "\n" + line.rstrip("\\")
        elif line.startswith("[") and "]" in line and not name:
            name = line[1:line.index("]")].strip()
        elif "=" in line and not line.lstrip().startswith("#") and name:
            key, value = line.split("=", 1)
            key = key.strip().lower()
            if key in values:
                key = ""  # a repeated key: keep the first value
            else:
                values[key] = value.rstrip("\\")
        continued = line.endswith("\\")
    if not name or "datapath" not in values or "moddrv" not in values:
        raise CorpusError(f"{path}: not a SWORD module .conf (no [Module], DataPath or ModDrv)")
    return _Conf(path, name, values)


def _module_documents(sword_root: Path, conf: _Conf, prefix: str) -> Iterator[RawDocument]:
    driver = conf.get("ModDrv").lower()
    if driver not in DRIVERS:
        raise CorpusError(f"{conf.path}: ModDrv={conf.get('ModDrv')} is not a zText/zCom module")
    if conf.get("CipherKey"):
        raise CorpusError(f"{conf.path}: the module is enciphered (CipherKey)")
    compress = conf.get("CompressType", "ZIP").upper()
    if compress not in DECOMPRESSORS:
        raise CorpusError(f"{conf.path}: CompressType={compress} is not supported")
    commentary, slot_size = DRIVERS[driver]
    letter = BLOCK_LETTERS.get(conf.get("BlockType", "CHAPTER").upper(), "c")
    versification = VERSIFICATIONS.get(conf.get("Versification", "KJV"))
    gbf = conf.get("SourceType").upper() == "GBF"
    encoding = "utf-8" if conf.get("Encoding", "Latin-1").upper().replace("-", "") == "UTF8" else "latin-1"
    directory = sword_root / conf.get("DataPath")
    found = False
    for number, (testament, heading) in enumerate(TESTAMENTS):
        # without a known versification (or with a verse index of another size) the documents
        # follow the book divs of the markup alone
        slots = testament_slots(versification[number]) if versification else []
        entries = _read_testament(directory / testament, letter, slot_size, len(slots),
                                  DECOMPRESSORS[compress])
        if entries is None:
            continue
        found = True
        if len(entries) != len(slots):
            slots = []
        assembler = _Assembler(commentary, heading)
        for index, entry in enumerate(entries):
            if slots:
                book, chapter, _ = slots[index]
                assembler.set_position(book.name if book else heading, chapter)
            if entry is None:
                continue
            markup = entry.decode(encoding, errors="replace").replace("\x00", "")
            (_add_gbf if gbf else _add_markup)(markup, assembler)
            assembler.end_entry()
        for part, paragraphs in assembler.documents():
            yield RawDocument(f"{prefix}/{part}", paragraphs)
    if not found:
        raise CorpusError(f"{directory}: no ot.{letter}zs/nt.{letter}zs verse module files")


def _read_testament(base: Path, letter: str, slot_size: int, expected_slots: int,
                    decompress: Callable[[bytes], bytes]) -> list[bytes | None] | None:
    """Each verse slot's entry (``None`` for an empty slot or a link), or ``None`` without files.

    A testament is three files, ``ot.Xzs``/``ot.Xzv``/``ot.Xzz`` (``X`` from ``BlockType``: b
    book, c chapter, v verse): ``.Xzs`` indexes the compressed blocks (offset, compressed size,
    uncompressed size: u32 each, little endian), ``.Xzv`` has one slot per verse of the
    versification (block number u32, offset in the uncompressed block u32, size u16; u32 for the
    ``4`` drivers), ``.Xzz`` holds the blocks (``CompressType`` ZIP is zlib). Slots run: module
    and testament headings, then per book an intro slot and per chapter an intro slot and the
    verses. An empty slot has size 0; a slot repeating an earlier slot's block, offset and size
    is a link (a commentary entry covering several verses), read once."""
    paths = [base.with_name(f"{base.name}.{letter}z{kind}") for kind in "svz"]
    if not any(path.exists() for path in paths):
        return None
    try:
        block_index, verse_index, data = (path.read_bytes() for path in paths)
    except OSError as error:
        raise CorpusError(f"{error.filename}: cannot read: {error.strerror}") from error
    if len(block_index) % 12:
        raise CorpusError(f"{paths[0]}: size {len(block_index)} is not a multiple of 12")
    for size in (slot_size, 12 if slot_size == 10 else 10):  # the conf's ModDrv may be wrong
        if expected_slots and len(verse_index) == expected_slots * size:
            slot_size = size
            break
    if len(verse_index) % slot_size:
        raise CorpusError(f"{paths[1]}: size {len(verse_index)} is not a multiple of {slot_size}")
    blocks = list(struct.iter_unpack("<III", block_index))
    records = list(struct.iter_unpack("<IIH" if slot_size == 10 else "<III", verse_index))
    if slot_size == 10:
        records = _restore_overflowed_sizes(records, blocks)
    entries: list[bytes | None] = []
    seen: set[tuple[int, int, int]] = set()
    cached_number, cached_block = -1, b""
    for slot, record in enumerate(records):
        number, offset, size = record
        if size == 0 or record in seen:
            entries.append(None)
            continue
        seen.add(record)
        if number != cached_number:
            if number >= len(blocks):
                raise CorpusError(f"{paths[1]}: slot {slot} names block {number} of {len(blocks)}")
            start, compressed_size, _ = blocks[number]
            if start + compressed_size > len(data):
                raise CorpusError(f"{paths[2]}: block {number} ends past the end of the file "
                                  f"({start + compressed_size} > {len(data)} bytes): truncated")
            try:
                cached_block = decompress(data[start:start + compressed_size])
            except (zlib.error, OSError, lzma.LZMAError, ValueError) as error:
                raise CorpusError(f"{paths[2]}: block {number} does not decompress: {error}") from error
            cached_number = number
        if offset + size > len(cached_block):
            raise CorpusError(f"{paths[1]}: slot {slot} reaches past the end of block {number}")
        entries.append(cached_block[offset:offset + size])
    return entries


def _restore_overflowed_sizes(records: list[tuple[int, int, int]],
                              blocks: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Undo u16 wrap-around: osis2mod stores ``size % 65536`` for an entry of 64 KiB or more,
    which shows as a gap of whole 64 KiB units before the next entry of its block."""
    starts: dict[int, list[int]] = {}
    for number, offset, size in records:
        if size:
            starts.setdefault(number, []).append(offset)
    following: dict[tuple[int, int], int] = {}
    for number, offsets in starts.items():
        ordered = sorted(set(offsets))
        end = blocks[number][2] if number < len(blocks) else ordered[-1]
        for offset, next_offset in zip(ordered, ordered[1:] + [end]):
            following[number, offset] = next_offset
    restored = []
    for number, offset, size in records:
        gap = following.get((number, offset), offset + size) - offset - size
        if size and gap > 0 and gap % 65536 == 0:
            size += gap
        restored.append((number, offset, size))
    return restored


@dataclass
class _Part:
    chapters: dict[int, list[list[str]]] = field(default_factory=dict)  # paragraphs of chunks
    marked: bool = False


class _Assembler:
    """Collects text into paragraphs of chunks (a chunk is one entry's text within a paragraph)
    and paragraphs into parts (books) and chapters."""

    def __init__(self, commentary: bool, part: str) -> None:
        self.commentary = commentary
        self.parts: dict[str, _Part] = {}
        self.part, self.chapter = part, 0
        self.pieces: list[str] = []
        self.chunks: list[str] = []
        self.pending_rename = False

    def text(self, piece: str) -> None:
        if "\u00b6" in piece:  # the pilcrow starts a paragraph
            first, *rest = piece.split("\u00b6")
            self.pieces.append(first)
            for following in rest:
                self.paragraph_break(marked=True)
                self.pieces.append(following)
        else:
            self.pieces.append(piece)

    def last_character(self) -> str:
        for piece in reversed(self.pieces):
            if piece:
                return piece[-1]
        return " "

    def _close_chunk(self) -> None:
        chunk = " ".join("".join(self.pieces).split())
        self.pieces = []
        if chunk:
            self.chunks.append(chunk)

    def paragraph_break(self, marked: bool = False) -> None:
        self._close_chunk()
        part = self.parts.get(self.part)
        if self.chunks:
            if part is None:
                part = self.parts[self.part] = _Part()
            part.chapters.setdefault(self.chapter, []).append(self.chunks)
            self.chunks = []
        if marked:
            if part is None:
                part = self.parts[self.part] = _Part()
            part.marked = True

    def end_entry(self) -> None:
        if self.commentary:
            self.paragraph_break()
        else:
            self._close_chunk()

    def set_position(self, part: str, chapter: int) -> None:
        if part != self.part:
            self.paragraph_break()
        self.part, self.chapter = part, chapter
        self.pending_rename = False

    def start_part(self, part: str, provisional: bool) -> None:
        """A book or front/back matter div opened inside an entry."""
        self.paragraph_break()
        self.part, self.chapter = part, 0
        self.pending_rename = provisional

    def rename_part(self, name: str) -> None:
        if self.pending_rename and name and name not in self.parts:
            self.part = name
        self.pending_rename = False

    def _paragraphs(self, part: _Part, chapters: list[list[list[str]]]) -> tuple[str, ...]:
        """Chunks joined into paragraphs, or one paragraph per chunk in an unmarked Bible book."""
        if part.marked or self.commentary:
            return tuple(" ".join(chunks) for paragraphs in chapters for chunks in paragraphs)
        return tuple(chunk for paragraphs in chapters for chunks in paragraphs for chunk in chunks)

    def documents(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """``(part name, paragraphs)`` per part; a large commentary part per chapter."""
        self.paragraph_break()
        for name, part in self.parts.items():
            chapters = sorted(part.chapters.items())
            whole = self._paragraphs(part, [chapter for _, chapter in chapters])
            if not self.commentary or len(chapters) < 2 or (
                    sum(len(paragraph.split()) for paragraph in whole) <= MAX_BOOK_WORDS):
                yield name, whole
                continue
            intro = [chapters[0][1]] if chapters[0][0] == 0 else []  # the book intro slot
            for number, chapter in chapters[len(intro):]:
                yield f"{name} {number}", self._paragraphs(part, intro + [chapter])
                intro = []


def _attribute(pattern: re.Pattern[str], attributes: str) -> str:
    match = pattern.search(attributes)
    return match.group(1) if match else ""


def _add_markup(markup: str, out: _Assembler) -> None:
    """Feed one OSIS (or ThML/HTML-like) entry to ``out``.

    Notes go with their content; Strong's ``<w>``, ``<hi>``, ``<reference>``/``<scripRef>`` and
    other inline tags keep only their text; titles become paragraphs of their own; paragraph
    marks (OSIS ``x-p`` divs and milestones, ``<p>``, ``<lg>``, the pilcrow) end paragraphs (one
    verse per paragraph in a book without them). A book div (``<div type="book" osisID=...>``, or
    a front/back matter div) starts a document of its own (the WEB stores its preface in the
    Genesis intro slot and its Greek Daniel in the Hosea intro slot)."""
    markup = _INLINE_TAGS.sub("", markup)
    dropped = 0  # depth inside dropped elements
    after_note = False  # a dropped note may have swallowed the space before the next word
    position = 0
    for match in _TAG.finditer(markup):
        if not dropped and match.start() > position:
            _add_text(markup[position:match.start()], out, after_note)
            after_note = False
        position = match.end()
        closing, name, attributes = match.group(1), match.group(2).lower(), match.group(3)
        empty = attributes.endswith("/")
        if name in _DROPPED:
            if not empty:
                dropped += -1 if closing else 1
                dropped = max(dropped, 0)
                after_note = dropped == 0
            continue
        if dropped:
            continue
        if name == "div":
            kind = _attribute(_TYPE, attributes)
            if kind == "x-milestone":
                continue
            if kind in _PARAGRAPH_TYPES:
                out.paragraph_break(marked=True)
            elif kind in _PART_TYPES and not closing and "eID=" not in attributes:
                osis = _attribute(_OSIS_ID, attributes)
                known = _BOOK_NAMES.get(osis)
                out.start_part(known or osis or kind.capitalize(), provisional=not known)
            else:
                out.paragraph_break()
        elif name in _TITLES or name in _BREAKS:
            out.paragraph_break()
        elif name in _MARKS:
            out.paragraph_break(marked=True)
        elif name == "lb" or name == "milestone":
            kind = _attribute(_TYPE, attributes)
            if kind in _PARAGRAPH_TYPES:
                out.paragraph_break(marked=True)
            elif kind == "x-usfm-h":
                out.rename_part(html.unescape(_attribute(_N, attributes)).strip())
            else:
                out.text(" ")
        else:  # l, br, cell and anything unknown: keep the text, separate by a space
            out.text(" ")
    if not dropped and position < len(markup):
        _add_text(markup[position:], out, after_note)


def _add_text(text: str, out: _Assembler, after_note: bool) -> None:
    if "&" in text:
        text = html.unescape(text)
        if "<" in text:
            text = _ESCAPED_TAG.sub(" ", text)
    if after_note and text[:1].isalnum() and not out.last_character().isspace():
        out.text(" ")
    out.text(text)


def _add_gbf(markup: str, out: _Assembler) -> None:
    """Feed one GBF entry: ``<RF>..<Rf>`` notes dropped, ``<TS>..<Ts>`` titles, ``<CM>``
    paragraph ends, ``<CL>`` line breaks; other tags (Strong's ``<WH..>``, fonts) removed."""
    markup = _GBF_NOTE.sub(" ", markup)
    position = 0
    for match in _GBF_TAG.finditer(markup):
        _add_text(markup[position:match.start()], out, after_note=False)
        position = match.end()
        code = match.group(1)
        if code == "CM":
            out.paragraph_break(marked=True)
        elif code in ("TS", "Ts"):
            out.paragraph_break()
        elif code == "CL":
            out.text(" ")
    _add_text(markup[position:], out, after_note=False)

