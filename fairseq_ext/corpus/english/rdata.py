"""Read R's serialized data (``.rds``, ``.rda``, lazy-load databases) and the novels R packages ship.

The unserializer follows R Internals, "Serialization Formats" (and ``src/main/serialize.c``): the
XDR (big-endian) format ``"X\\n"``, versions 2 and 3 (3 adds the native encoding after the
header). Each item starts with a flags integer: SEXP type in the low byte, "is object" bit 8,
"has attributes" bit 9, "has tag" bit 10, the gp levels (string encoding) from bit 12.
Attributes come after a vector's contents but before a pairlist node's tag and CAR.

R values become Python values: atomic and generic vectors are :class:`RVector` (a ``list``
keeping R's attributes; ``NA`` is ``None``), symbols :class:`RSymbol`, attribute pairlists
dicts, environments :class:`REnvironment`. ALTREP compact sequences, deferred strings and
``wrap_*`` wrappers are expanded; other ALTREP classes raise :class:`CorpusError`.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.errors import CorpusError

SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, DOTSXP = 9, 10, 13, 14, 16, 17
VECSXP, EXPRSXP, EXTPTRSXP, WEAKREFSXP, RAWSXP, S4SXP = 19, 20, 22, 23, 24, 25
ALTREP_SXP, EMPTYENV_SXP, BASEENV_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP = 238, 242, 241, 253, 252
MISSINGARG_SXP, BASENAMESPACE_SXP, NAMESPACESXP, PACKAGESXP, PERSISTSXP = 251, 250, 249, 248, 247
NILVALUE_SXP, REFSXP = 254, 255

_PAIRLIST_TYPES = {LISTSXP: "pairlist", CLOSXP: "closure", PROMSXP: "promise", LANGSXP: "language",
                   DOTSXP: "dots"}
_SPECIAL_VALUES = {EMPTYENV_SXP: "emptyenv", BASEENV_SXP: "baseenv", GLOBALENV_SXP: "globalenv",
                   UNBOUNDVALUE_SXP: "unbound", MISSINGARG_SXP: "missingarg", BASENAMESPACE_SXP: "base"}
_STRING_VECTOR_TYPES = {NAMESPACESXP: "namespace", PACKAGESXP: "package", PERSISTSXP: "persistent"}

NA_INTEGER = -(2**31)
_BYTES_MASK, _LATIN1_MASK, _UTF8_MASK, _ASCII_MASK = 1 << 1, 1 << 2, 1 << 3, 1 << 6


class RVector(list):
    """An R vector (atomic or list) as a Python list, with R's attributes (``names``, ``class`` ...)."""

    __slots__ = ("attributes", "r_type")

    def __init__(self, values=(), attributes: dict | None = None, r_type: str = "list"):
        super().__init__(values)
        self.attributes = attributes or {}
        self.r_type = r_type

    @property
    def names(self) -> list | None:
        return self.attributes.get("names")

    @property
    def r_class(self) -> list:
        return list(self.attributes.get("class") or [])

    def to_dict(self) -> dict:
        """Name -> element (a data frame: column name -> column); raises CorpusError without names."""
        if self.names is None:
            raise CorpusError(f"R {self.r_type} has no names to map to a dict")
        return dict(zip(self.names, self))


class RSymbol(str):
    """An R symbol (a name)."""


class REnvironment(dict):
    """An R environment: its variables, name -> value (the enclosing environment is not kept)."""


class RReference:
    """A value R saved by name only: a package/namespace or special environment, an external
    pointer, or a persistent-name reference (a lazy-load database's ``references`` key)."""

    def __init__(self, kind: str, names: tuple = ()):
        self.kind, self.names = kind, tuple(names)

    def __repr__(self) -> str:
        return f"RReference({self.kind!r}, {self.names!r})"


class _Unserializer:
    """Reads one XDR serialization from ``data`` (``name`` is for error messages)."""

    def __init__(self, data: bytes, name: str):
        self.data, self.name, self.pos = data, name, 0
        self.references: list = []
        self.native_encoding = "utf-8"

    def fail(self, what: str) -> CorpusError:
        return CorpusError(f"{self.name}: {what} at byte {self.pos}")

    def ints(self, count: int) -> tuple:
        end = self.pos + 4 * count
        if end > len(self.data):
            raise self.fail("truncated R serialization")
        values = struct.unpack_from(f">{count}i", self.data, self.pos)
        self.pos = end
        return values

    def int(self) -> int:
        return self.ints(1)[0]

    def raw(self, length: int) -> bytes:
        end = self.pos + length
        if length < 0 or end > len(self.data):
            raise self.fail("truncated R serialization")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def length(self) -> int:
        length = self.int()
        if length == -1:
            upper, lower = self.ints(2)
            length = (upper << 32) + (lower & 0xFFFFFFFF)
        if length < 0:
            raise self.fail(f"negative vector length {length}")
        return length

    def read(self) -> object:
        """The header, then the one top-level item."""
        if self.raw(2) != b"X\n":
            raise self.fail("not an R XDR serialization (only format 'X' is supported)")
        version = self.int()
        if version not in (2, 3):
            raise self.fail(f"unsupported R serialization version {version}")
        self.ints(2)  # writer's R version, oldest R version that can read it
        if version == 3:
            encoding = self.raw(self.int()).decode("ascii", "replace")
            try:
                self.native_encoding = codecs.lookup(encoding).name
            except LookupError:
                pass  # an encoding Python lacks: strings flagged UTF-8/Latin-1 still decode
        return self.item()

    def decode(self, chunk: bytes, levels: int) -> str:
        if levels & (_LATIN1_MASK | _BYTES_MASK):
            return chunk.decode("latin-1")
        if levels & (_UTF8_MASK | _ASCII_MASK):
            return chunk.decode("utf-8", "replace")
        try:
            return chunk.decode(self.native_encoding)
        except (UnicodeDecodeError, LookupError):
            return chunk.decode("latin-1")

    def item(self) -> object:
        flags = self.int()
        kind = flags & 0xFF
        has_attributes = flags & (1 << 9)
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            index = (flags >> 8) or self.int()
            if not 0 < index <= len(self.references):
                raise self.fail(f"R reference {index} not in the reference table")
            return self.references[index - 1]
        if kind in _SPECIAL_VALUES:
            return RReference(_SPECIAL_VALUES[kind])
        if kind == SYMSXP:
            symbol = RSymbol(self.item() or "")
            self.references.append(symbol)
            return symbol
        if kind in _STRING_VECTOR_TYPES:
            if self.int() != 0:
                raise self.fail("bad string vector in a reference item")
            reference = RReference(_STRING_VECTOR_TYPES[kind], [self.item() for _ in range(self.int())])
            self.references.append(reference)
            return reference
        if kind in _PAIRLIST_TYPES:
            return self.pairlist(flags)
        if kind == ENVSXP:
            return self.environment()
        if kind == ALTREP_SXP:
            return self.altrep()
        if kind in (EXTPTRSXP, WEAKREFSXP):
            pointer = RReference("externalptr" if kind == EXTPTRSXP else "weakref")
            self.references.append(pointer)
            if kind == EXTPTRSXP:
                self.item(), self.item()  # protected value, tag
            value = pointer
        elif kind == CHARSXP:
            length = self.int()
            return None if length == -1 else self.decode(self.raw(length), flags >> 12)
        else:
            value = self.vector(kind)
        if has_attributes:
            attributes = self.item()
            if isinstance(value, RVector) and isinstance(attributes, RVector):
                value.attributes = _attribute_dict(attributes)
        return value

    def vector(self, kind: int) -> RVector:
        if kind == S4SXP:
            return RVector((), r_type="S4")
        length = self.length()
        if kind == STRSXP:
            return RVector(self.strings(length), r_type="character")
        if kind in (VECSXP, EXPRSXP):
            return RVector([self.item() for _ in range(length)], r_type="list")
        if kind == INTSXP:
            return RVector([None if v == NA_INTEGER else v for v in self.ints(length)], r_type="integer")
        if kind == LGLSXP:
            logicals = [None if v == NA_INTEGER else bool(v) for v in self.ints(length)]
            return RVector(logicals, r_type="logical")
        if kind == REALSXP:
            chunk = self.raw(8 * length)
            reals = list(struct.unpack(f">{length}d", chunk))
            for index, value in enumerate(reals):  # NA_real_ is the NaN whose low word is 1954
                if value != value and struct.unpack_from(">I", chunk, 8 * index + 4)[0] == 1954:
                    reals[index] = None
            return RVector(reals, r_type="double")
        if kind == RAWSXP:
            return RVector(self.raw(length), r_type="raw")
        raise self.fail(f"unsupported R SEXP type {kind}")

    def strings(self, count: int) -> list:
        """A STRSXP's CHARSXP elements, read in a tight loop (novels are long character vectors)."""
        data, pos, strings = self.data, self.pos, []
        for _ in range(count):
            if pos + 8 > len(data):
                self.pos = pos
                raise self.fail("truncated R serialization")
            flags, length = struct.unpack_from(">ii", data, pos)
            if flags & 0xFF != CHARSXP:
                self.pos = pos
                raise self.fail(f"string vector element of SEXP type {flags & 0xFF}")
            pos += 8
            if length == -1:
                strings.append(None)
                continue
            if length < 0 or pos + length > len(data):
                self.pos = pos
                raise self.fail("truncated R serialization")
            strings.append(self.decode(data[pos:pos + length], flags >> 12))
            pos += length
        self.pos = pos
        return strings

    def pairlist(self, flags: int) -> RVector:
        """A pairlist (or call, closure ...) as an RVector of its CARs, named by its tags; read
        iteratively along the CDRs. Attributes of the first node become the vector's."""
        values, tags, attributes = [], [], {}
        r_type = _PAIRLIST_TYPES[flags & 0xFF]
        while True:
            if flags & (1 << 9):
                node_attributes = self.item()
                if not values and isinstance(node_attributes, RVector):
                    attributes = _attribute_dict(node_attributes)
            tags.append(self.item() if flags & (1 << 10) else None)
            values.append(self.item())
            flags = self.int()
            if flags & 0xFF == NILVALUE_SXP:
                break
            if flags & 0xFF not in _PAIRLIST_TYPES:
                self.pos -= 4
                self.item()  # a dotted pair's final CDR: not kept
                break
        if any(tag is not None for tag in tags):
            attributes.setdefault("names", RVector([str(t) if t is not None else "" for t in tags]))
        return RVector(values, attributes, r_type)

    def environment(self) -> REnvironment:
        """An ENVSXP: locked flag, enclosure, frame (a pairlist), hash table (a list of
        pairlists), attributes; registered in the reference table before its contents."""
        environment = REnvironment()
        self.references.append(environment)
        self.int()
        self.item()
        frame, hashtab, _ = self.item(), self.item(), self.item()
        for bucket in [frame] + list(hashtab or []):
            if isinstance(bucket, RVector) and bucket.names:
                environment.update(bucket.to_dict())
        return environment

    def altrep(self) -> object:
        """An ALTREP object: ``info`` (class, package, type), its serialized state, attributes."""
        info, state, attributes = self.item(), self.item(), self.item()
        class_name = str(info[0]) if isinstance(info, RVector) and info else "?"
        if class_name in ("compact_intseq", "compact_realseq"):
            length, start, step = (state or [0, 0, 1])[:3]
            values = [start + i * step for i in range(int(length))]
            value = RVector([int(v) for v in values] if class_name == "compact_intseq" else values,
                            r_type="integer" if class_name == "compact_intseq" else "double")
        elif class_name == "deferred_string":
            strings = [None if v is None else _r_number_string(v) for v in state[0]]
            value = RVector(strings, r_type="character")
        elif class_name.startswith("wrap_"):
            value = RVector(state[0], r_type=getattr(state[0], "r_type", "list"))
        else:
            raise self.fail(f"unsupported ALTREP class {class_name}")
        if isinstance(attributes, RVector):
            value.attributes = _attribute_dict(attributes)
        return value


def _r_number_string(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.15g}" if isinstance(value, float) else str(value)


def _attribute_dict(pairlist: RVector) -> dict:
    names = pairlist.names or [""] * len(pairlist)
    return dict(zip(names, pairlist))


def read_serialized(data: bytes, name: str = "R serialization") -> object:
    """Unserialize one R object from XDR bytes (the content of an uncompressed ``.rds``)."""
    try:
        return _Unserializer(data, name).read()
    except RecursionError:
        raise CorpusError(f"{name}: R object nested too deeply") from None


def _decompress_file(data: bytes, name: str) -> bytes:
    """gzip, bzip2 or xz by magic bytes; anything else is taken as already uncompressed."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:3] == b"BZh":
            return bz2.decompress(data)
        if data[:6] == b"\xfd7zXZ\x00":
            return lzma.decompress(data)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error) as error:
        raise CorpusError(f"{name}: corrupt compressed data ({error})") from None
    return data


def _read_bytes(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise CorpusError(f"{path}: cannot read ({error.strerror or error})") from None


def read_rds(path: Path) -> object:
    """The object of an ``.rds`` file (``saveRDS``: a serialization, usually gzip-compressed)."""
    return read_serialized(_decompress_file(_read_bytes(path), str(path)), str(path))


def read_rda(path: Path) -> dict[str, object]:
    """The variables of an ``.rda``/``.RData`` file (``save``): ``"RDX2\\n"`` or ``"RDX3\\n"`` then
    a serialized pairlist of name -> value, the whole file gzip, bzip2 or xz compressed."""
    data = _decompress_file(_read_bytes(path), str(path))
    if data[:5] not in (b"RDX2\n", b"RDX3\n"):
        raise CorpusError(f"{path}: not an XDR R data file (starts {data[:5]!r})")
    variables = read_serialized(data[5:], str(path))
    if not isinstance(variables, RVector):
        raise CorpusError(f"{path}: R data file holds no variable list")
    return _attribute_dict(variables)


def _lazyload_blob(blob: bytes, compression: int, name: str) -> bytes:
    """One lazy-load entry: 4-byte big-endian uncompressed length, then zlib data (type 1); types 2
    and 3 put a type byte after the length ('0' none, '1' zlib, '2' bzip2, 'Z' xz)."""
    if compression == 0:
        return blob
    if len(blob) < 5:
        raise CorpusError(f"{name}: truncated lazy-load entry")
    expected = struct.unpack_from(">I", blob)[0]
    method, payload = (b"1", blob[4:]) if compression == 1 else (blob[4:5], blob[5:])
    try:
        if method == b"1":
            data = zlib.decompress(payload)
        elif method == b"2":
            data = bz2.decompress(payload)
        elif method == b"Z":
            data = lzma.decompress(payload)
        elif method == b"0":
            data = payload
        else:
            raise CorpusError(f"{name}: unknown lazy-load compression type {method!r}")
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error) as error:
        raise CorpusError(f"{name}: corrupt lazy-load entry ({error})") from None
    if len(data) != expected:
        raise CorpusError(f"{name}: lazy-load entry is {len(data)} bytes, index says {expected}")
    return data


def read_lazyload(rdx: Path) -> dict[str, object]:
    """The variables of a lazy-load database (``data/Rdata.rdx`` + ``.rdb``, ``R/<pkg>.rdx``): the
    ``.rdx`` is a serialized list (``saveRDS``, gzip; or a length-prefixed zlib entry) with
    ``variables`` (name -> c(offset, length) into the ``.rdb``), ``references`` and ``compressed``.
    Environments saved by reference stay :class:`RReference` placeholders."""
    rdx = Path(rdx)
    data = _read_bytes(rdx)
    if data[:2] == b"\x1f\x8b" or data[:2] == b"X\n":
        index = read_serialized(_decompress_file(data, str(rdx)), str(rdx))
    else:
        index = read_serialized(_lazyload_blob(data, 1, str(rdx)), str(rdx))
    try:
        index = index.to_dict()
        positions = index["variables"].to_dict()
        compressed = index.get("compressed") or [True]
    except (AttributeError, KeyError, CorpusError):
        raise CorpusError(f"{rdx}: not a lazy-load index (no 'variables' list)") from None
    compression = int(compressed[0] or 0)
    rdb_path = rdx.with_suffix(".rdb")
    rdb = _read_bytes(rdb_path)
    variables = {}
    for variable, position in positions.items():
        offset, length = (int(v) for v in position[:2])
        if offset + length > len(rdb):
            raise CorpusError(f"{rdb_path}: truncated (entry {variable!r} ends past the file)")
        name = f"{rdb_path}[{variable}]"
        blob = _lazyload_blob(rdb[offset:offset + length], compression, name)
        variables[variable] = read_serialized(blob, name)
    return variables


# ---- Novels: Project Gutenberg-style lines held as R character vectors -------------------------

_UNITS = ("ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE THIRTEEN FOURTEEN "
          "FIFTEEN SIXTEEN SEVENTEEN EIGHTEEN NINETEEN").split()
_TENS = {"TWENTY": 20, "THIRTY": 30, "FORTY": 40, "FIFTY": 50, "SIXTY": 60, "SEVENTY": 70,
         "EIGHTY": 80, "NINETY": 90}
_NUMBER_WORD = r"(?:" + "|".join(list(_TENS) + _UNITS[::-1]) + r")"
_NUMBER = rf"(?P<number>\d+|[IVXLC]+|{_NUMBER_WORD}(?:[- ]{_NUMBER_WORD})?)"
_CHAPTER = re.compile(rf"(?-i:CHAPTER|Chapter)\s+{_NUMBER}(?:[.:]?|[.:]\s+(?P<title>\S.*))", re.IGNORECASE)
_DIVISION = re.compile(rf"(?-i:VOLUME|Volume|BOOK|Book|PART|Part)\s+{_NUMBER}\.?", re.IGNORECASE)
_SECTION = re.compile(r"(?P<name>PROLOGUE|Prologue|EPILOGUE|Epilogue)\.?")
_BACK_MATTER = re.compile(r"(?:THE END|The End|FINIS|Finis|A NOTE ON THE TEXT)\.?|"
                          r"(?:\*+\s*)?End of (?:the |this )?Project Gutenberg.*", re.IGNORECASE)
_EMPHASIS = re.compile(r"(?<![\w_])_(?=\S)([^_]+?)(?<=\S)_(?![\w_])")  # Gutenberg's _italics_
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


def _number(text: str) -> int:
    """An arabic, roman or English-word chapter number ("12", "XLI", "TWENTY-ONE")."""
    text = text.upper()
    if text.isdigit():
        return int(text)
    if set(text) <= set(_ROMAN):
        values = [_ROMAN[c] for c in text]
        return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))
    return sum(_TENS.get(word) or _UNITS.index(word) for word in re.split(r"[- ]", text))


def _blocks(lines: list) -> list[list[str]]:
    """Runs of non-blank lines (the paragraphs of a hard-wrapped text)."""
    blocks, current = [], []
    for line in lines:
        if line is None or not line.strip():
            if current:
                blocks.append(current)
                current = []
        else:
            current.append(line)
    if current:
        blocks.append(current)
    return blocks


def _join(block: list[str]) -> str:
    """A block's lines as one paragraph, ``_italic_`` marks removed; lines that a "--" dash ends or
    starts run on without a space."""
    text = block[0].strip()
    for line in block[1:]:
        line = line.strip()
        text += ("" if text.endswith("--") or line.startswith("--") else " ") + line
    return " ".join(_EMPHASIS.sub(r"\1", text).split())


def _is_title(block: list[str]) -> bool:
    text = " ".join(block)
    return len(block) <= 2 and not re.search(r"[a-z]", text) and len(text.split()) <= 12


def split_chapters(lines: list) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(chapter label, paragraphs) of a novel's lines: chapters start at one-line blocks like
    ``CHAPTER XLI.``, ``Chapter 1``, ``CHAPTER 1. Loomings.`` or ``CHAPTER ONE``; ``VOLUME``/``BOOK``/
    ``PART`` headings make labels "<division>.<chapter>"; ``Epilogue``/``Prologue`` are their own.
    Everything before the first chapter (title page, contents, licence header, front matter), after
    ``THE END``/``FINIS``/a Gutenberg footer, and between a division heading and its first chapter
    is dropped, as is an upper-case title right after a chapter heading."""
    blocks = _blocks(lines)
    divided_book = any(len(b) == 1 and _DIVISION.fullmatch(b[0].strip()) for b in blocks)
    division = 0 if divided_book else None
    label, paragraphs, after_heading = None, [], False
    for block in blocks:
        head = block[0].strip() if len(block) == 1 else ""
        chapter = _CHAPTER.fullmatch(block[0].strip())
        if chapter and len(block) > 1 and not (len(block) == 2 and chapter["title"]):
            chapter = None  # a paragraph that starts with "Chapter"; a wrapped title is kept
        section = _SECTION.fullmatch(head) if head else None
        divided = _DIVISION.fullmatch(head) if head else None
        if chapter or section or divided or (head and _BACK_MATTER.fullmatch(head)):
            if label is not None and paragraphs:
                yield label, tuple(paragraphs)
            label, paragraphs, after_heading = None, [], True
            if chapter:
                number = str(_number(chapter["number"]))
                label = number if division is None else f"{division}.{number}"
            elif section:
                label = section["name"].lower()
            elif divided:
                division = _number(divided["number"])
            else:
                return
            continue
        if label is None:
            continue
        if after_heading and _is_title(block) and not paragraphs:
            after_heading = False
            continue
        after_heading = False
        paragraphs.append(_join(block))
    if label is not None and paragraphs:
        yield label, tuple(paragraphs)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _books(variables: dict[str, object]) -> Iterator[tuple[str, list]]:
    """(book name, lines) of the novels among an R data file's variables: character vectors of
    lines (a one-string vector is split at its line breaks), or a data frame with a ``text``
    column of lines and a ``title`` (or ``book``) column naming each line's book."""
    for name, value in variables.items():
        if not isinstance(value, RVector):
            continue
        if value.r_type == "character":
            lines = value
            if len(value) == 1 and value[0]:
                lines = _LINE_BREAK.split(value[0].lstrip("\ufeff"))
            yield name, lines
        elif "data.frame" in value.r_class and value.names:
            columns = value.to_dict()
            text, titles = columns.get("text"), columns.get("title", columns.get("book"))
            if getattr(text, "r_type", None) != "character" or titles is None:
                continue
            levels = titles.attributes.get("levels")
            if levels is not None:  # a factor: 1-based codes into its levels
                titles = [None if code is None else levels[code - 1] for code in titles]
            books: dict[str, list] = {}
            for line, title in zip(text, titles):
                books.setdefault(str(title), []).append(line)
            for title, lines in books.items():
                yield _slug(title), lines


def _data_files(package_root: Path) -> list[Path]:
    libraries = sorted(Path(package_root).glob("usr/lib/R/site-library/*"))
    files = []
    for library in libraries:
        files += sorted(library.glob("data/*.rdx"))
        files += sorted(p for pattern in ("*.rda", "*.RData", "*.rdata")
                        for folder in ("data", "extdata") for p in library.glob(f"{folder}/{pattern}"))
    return files


def read_r_novels(package_root: Path, source: str, exclude: tuple[str, ...] = ()) -> Iterator[RawDocument]:
    """One document per chapter of each novel in an unpacked R package's data (lazy-load
    ``data/Rdata.rdx`` and ``data``/``extdata`` ``.rda`` files under ``usr/lib/R/site-library``),
    identity ``"<source>/<book>/<chapter>"``; ``book`` is the R variable name, or the slugged title
    for a data frame of several books. Books in ``exclude`` (those names) and vectors without at
    least two chapter headings (word lists, lexicons) are skipped."""
    files = _data_files(package_root)
    if not files:
        raise CorpusError(f"{package_root}: no R data files under usr/lib/R/site-library/*/(ext)data")
    for path in files:
        variables = read_lazyload(path) if path.suffix == ".rdx" else read_rda(path)
        for book, lines in _books(variables):
            if book in exclude:
                continue
            chapters = list(split_chapters(lines))
            if len(chapters) < 2:
                continue
            seen: dict[str, int] = {}
            for label, paragraphs in chapters:
                seen[label] = seen.get(label, 0) + 1
                suffix = f"-{seen[label]}" if seen[label] > 1 else ""
                yield RawDocument(f"{source}/{book}/{label}{suffix}", paragraphs)
