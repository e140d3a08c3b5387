"""The R data reader: XDR serializations written here by a tiny serializer, wrapped as a lazy-load
database (.rdx + .rdb) and as a gzip .rda, read back exactly; novels split into chapters."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.english.rdata import (
    read_lazyload,
    read_r_novels,
    read_rda,
    read_serialized,
    split_chapters,
)
from fairseq_ext.corpus.errors import CorpusError

UTF8, LATIN1, ASCII = 1 << 3, 1 << 2, 1 << 6
HAS_ATTRIBUTES, HAS_TAG = 1 << 9, 1 << 10
NIL = struct.pack(">i", 254)


def integer(value: int) -> bytes:
    return struct.pack(">i", value)


def header(version: int = 3) -> bytes:
    encoding = integer(5) + b"UTF-8" if version == 3 else b""
    return b"X\n" + integer(version) + integer(0x040201) + integer(0x030500) + encoding


def charsxp(text: str | None, encoding: int = UTF8) -> bytes:
    if text is None:
        return integer(9) + integer(-1)
    data = text.encode("latin-1" if encoding == LATIN1 else "utf-8")
    return integer(9 | encoding << 12) + integer(len(data)) + data


def symbol(name: str) -> bytes:
    return integer(1) + charsxp(name, ASCII)


def reference(index: int) -> bytes:
    return integer(index << 8 | 255)


def pairlist(items: list[tuple[bytes, bytes]]) -> bytes:
    """Tagged pairlist nodes (tag bytes, value bytes), NIL-terminated (attributes, .rda bodies)."""
    return b"".join(integer(2 | HAS_TAG) + tag + value for tag, value in items) + NIL


def strsxp(values: list, attributes: bytes = b"", encoding: int = UTF8) -> bytes:
    flags = 16 | (HAS_ATTRIBUTES if attributes else 0)
    return integer(flags) + integer(len(values)) + b"".join(charsxp(v, encoding) for v in values) + attributes


def intsxp(values: list[int]) -> bytes:
    return integer(13) + integer(len(values)) + b"".join(integer(v) for v in values)


def vecsxp(items: list[bytes], attributes: bytes = b"") -> bytes:
    flags = 19 | (HAS_ATTRIBUTES if attributes else 0) | (1 << 8 if attributes else 0)
    return integer(flags) + integer(len(items)) + b"".join(items) + attributes


def data_frame() -> bytes:
    """data.frame(word = c("tea", NA, "café"), book = c("Emma", "Emma", "Persuasion")), the first
    column Latin-1, with compact row names c(NA, -3)."""
    attributes = pairlist([
        (symbol("names"), strsxp(["word", "book"])),
        (symbol("class"), strsxp(["data.frame"])),
        (symbol("row.names"), intsxp([-(2**31), -3])),
    ])
    columns = [strsxp(["tea", None, "café"], encoding=LATIN1), strsxp(["Emma", "Emma", "Persuasion"])]
    return vecsxp(columns, attributes)


def test_data_frame_reads_back_with_names_class_and_na():
    frame = read_serialized(header() + data_frame())
    assert frame.to_dict() == {"word": ["tea", None, "café"], "book": ["Emma", "Emma", "Persuasion"]}
    assert frame.r_class == ["data.frame"]
    assert frame.attributes["row.names"] == [None, -3]


def test_referenced_symbol_and_named_list_in_version_2():
    """The inner list's attributes define the symbol ``names`` (reference 1); the outer list's
    attributes, written after its elements, refer back to it."""
    inner = vecsxp([strsxp(["b", "c"])], pairlist([(symbol("names"), strsxp(["inner"]))]))
    named = vecsxp([strsxp(["a"]), inner], pairlist([(reference(1), strsxp(["first", "second"]))]))
    value = read_serialized(header(2) + named)
    assert value.to_dict()["first"] == ["a"]
    assert value.to_dict()["second"].to_dict() == {"inner": ["b", "c"]}


def test_altrep_compact_sequence_and_unknown_class():
    def altrep(class_name: str, state: bytes) -> bytes:
        info = integer(2) + symbol(class_name) + integer(2) + symbol("base") + integer(2) + intsxp([13]) + NIL
        return integer(238) + info + state + NIL

    state = integer(14) + integer(3) + struct.pack(">3d", 3, 5, 1)  # length 3 from 5 by 1
    assert read_serialized(header() + altrep("compact_intseq", state)) == [5, 6, 7]
    with pytest.raises(CorpusError, match="unsupported ALTREP class mmap_integer"):
        read_serialized(header() + altrep("mmap_integer", NIL))


def test_truncated_data_and_unknown_type_raise_corpus_error():
    with pytest.raises(CorpusError, match="frame.rds: truncated"):
        read_serialized((header() + data_frame())[:-7], "frame.rds")
    with pytest.raises(CorpusError, match="unsupported R SEXP type 99"):
        read_serialized(header() + integer(99) + integer(0))


def write_lazyload(folder, variables: dict[str, bytes]) -> object:
    """A data/Rdata.rdx + .rdb pair: each value a 4-byte length + zlib entry, the index saveRDS-style."""
    rdb, positions = b"", []
    for serialized in variables.values():
        data = header() + serialized
        entry = struct.pack(">I", len(data)) + zlib.compress(data)
        positions.append(intsxp([len(rdb), len(entry)]))
        rdb += entry
    names = pairlist([(symbol("names"), strsxp(list(variables)))])
    index = vecsxp(
        [vecsxp(positions, names), vecsxp([]), integer(10) + integer(1) + integer(1)],
        pairlist([(reference(1), strsxp(["variables", "references", "compressed"]))]),
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Rdata.rdb").write_bytes(rdb)
    (folder / "Rdata.rdx").write_bytes(gzip.compress(header() + index))
    return folder / "Rdata.rdx"


def test_lazyload_database_reads_back(tmp_path):
    rdx = write_lazyload(tmp_path, {"frame": data_frame(), "lines": strsxp(["x", "y"])})
    variables = read_lazyload(rdx)
    assert list(variables) == ["frame", "lines"]
    assert variables["frame"].to_dict()["word"] == ["tea", None, "café"]
    assert variables["lines"] == ["x", "y"]


def test_lazyload_database_with_truncated_rdb_raises(tmp_path):
    rdx = write_lazyload(tmp_path, {"lines": strsxp(["x", "y"])})
    rdb = tmp_path / "Rdata.rdb"
    rdb.write_bytes(rdb.read_bytes()[:-3])
    with pytest.raises(CorpusError, match="Rdata.rdb"):
        read_lazyload(rdx)


def test_gzip_rda_reads_back(tmp_path):
    path = tmp_path / "books.rda"
    path.write_bytes(gzip.compress(b"RDX3\n" + header() + pairlist([(symbol("books"), data_frame())])))
    books = read_rda(path)["books"]
    assert books.to_dict()["book"] == ["Emma", "Emma", "Persuasion"]
    path.write_bytes(b"RDX3\n" + header()[:5])
    with pytest.raises(CorpusError, match="books.rda"):
        read_rda(path)


NOVEL = [
    "EMMA", "", "By Jane Austen", "", "CONTENTS", "", "VOLUME I", "",
    "CHAPTER I", "", "", "Emma Woodhouse, handsome, clever,", "and rich.", "",
    "She was the _youngest_ of the two", "daughters.", "",
    "CHAPTER II.", "", "A SHORT TITLE", "", "Mr. Weston was a native--", "of Highbury.", "",
    "VOLUME II", "", "A VOLUME TITLE", "", "Chapter 1", "", "Emma and Harriet had been walking.", "",
    "", "THE END", "", "A note after the end.",
]


def test_split_chapters_joins_lines_and_drops_front_and_back_matter():
    assert list(split_chapters(NOVEL)) == [
        ("1.1", ("Emma Woodhouse, handsome, clever, and rich.",
                 "She was the youngest of the two daughters.")),
        ("1.2", ("Mr. Weston was a native--of Highbury.",)),
        ("2.1", ("Emma and Harriet had been walking.",)),
    ]


MOBY = "\r\n".join([
    "\ufeffThe Project Gutenberg EBook of Moby Dick", "", "*** START OF THIS PROJECT GUTENBERG EBOOK ***", "",
    "ETYMOLOGY.", "", "The pale Usher.", "",
    "CHAPTER 1. Loomings.", "", "Call me Ishmael. Some years ago", "--never mind how long.", "",
    "CHAPTER 2. Of Whales in Paint; in Teeth; in Wood; in", "Stone; in Mountains.", "",
    "Chapter one begins a sentence here", "and goes on.", "",
    "Epilogue", "", "The drama's done.", "",
    "End of Project Gutenberg's Moby Dick", "", "*** END OF THIS PROJECT GUTENBERG EBOOK ***", "Licence.",
])


def test_read_r_novels_from_a_package(tmp_path):
    library = tmp_path / "usr/lib/R/site-library/novels"
    write_lazyload(library / "data", {
        "mobydick": strsxp([MOBY], pairlist([(symbol("names"), strsxp(["mobydick"]))])),
        "stop_words": strsxp(["a", "about", "above"]),
    })
    books = vecsxp(
        [strsxp(NOVEL + NOVEL), strsxp(["Emma"] * len(NOVEL) + ["Copy"] * len(NOVEL))],
        pairlist([(symbol("names"), strsxp(["text", "title"])), (symbol("class"), strsxp(["data.frame"]))]),
    )
    (library / "extdata").mkdir()
    (library / "extdata/books.rda").write_bytes(
        gzip.compress(b"RDX2\n" + header(2) + pairlist([(symbol("books"), books)])))
    documents = list(read_r_novels(tmp_path, "novels", exclude=("copy",)))
    assert documents[:3] == [
        RawDocument("novels/mobydick/1", ("Call me Ishmael. Some years ago--never mind how long.",)),
        RawDocument("novels/mobydick/2", ("Chapter one begins a sentence here and goes on.",)),
        RawDocument("novels/mobydick/epilogue", ("The drama's done.",)),
    ]
    assert [document.identity for document in documents[3:]] == ["novels/emma/1.1", "novels/emma/1.2",
                                                                  "novels/emma/2.1"]


def test_read_r_novels_without_r_data_raises(tmp_path):
    with pytest.raises(CorpusError, match="no R data files"):
        list(read_r_novels(tmp_path, "novels"))
