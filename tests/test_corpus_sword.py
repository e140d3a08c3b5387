"""The SWORD module reader on tiny zText/zCom modules written in the real zVerse format."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from fairseq_ext.corpus.english import kjv_versification
from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.english.sword import read_sword_module
from fairseq_ext.corpus.errors import CorpusError

NT_SLOTS = kjv_versification.testament_slots(kjv_versification.KJV_NEW_TESTAMENT)


def slot(osis: str, chapter: int, verse: int) -> int:
    """The New Testament verse index slot of ``osis chapter:verse`` (verse 0: the intro)."""
    return next(index for index, (book, chap, vers) in enumerate(NT_SLOTS)
                if book is not None and book.osis == osis and chap == chapter and vers == verse)


def write_module(root: Path, name: str, conf: str, letter: str, slot_size: int,
                 blocks: list[list[tuple[int, str]]], links: dict[int, int] | None = None) -> Path:
    """A New-Testament-only module: ``blocks`` of ``(slot, markup)`` entries, ``links`` of
    ``slot -> earlier slot`` whose index record it repeats. Returns the data directory."""
    sword = root / "usr/share/sword"
    data_dir = sword / "modules" / name
    data_dir.mkdir(parents=True)
    (sword / "mods.d").mkdir(parents=True)
    (sword / "mods.d" / f"{name}.conf").write_text(
        f"[{name}]\nDataPath=./modules/{name}/\n{conf}", encoding="utf-8")
    records = [(0, 0, 0)] * len(NT_SLOTS)
    block_index, compressed = b"", b""
    for number, entries in enumerate(blocks):
        block = b""
        for index, markup in entries:
            text = markup.encode("utf-8")
            records[index] = (number, len(block), len(text))
            block += text
        packed = zlib.compress(block)
        block_index += struct.pack("<III", len(compressed), len(packed), len(block))
        compressed += packed
    for index, source in (links or {}).items():
        records[index] = records[source]
    layout = "<IIH" if slot_size == 10 else "<III"
    verse_index = b"".join(struct.pack(layout, number, offset, size % (1 << (8 * (slot_size - 8))))
                           for number, offset, size in records)
    (data_dir / f"nt.{letter}zs").write_bytes(block_index)
    (data_dir / f"nt.{letter}zv").write_bytes(verse_index)
    (data_dir / f"nt.{letter}zz").write_bytes(compressed)
    return data_dir


BIBLE_CONF = "ModDrv=zText\nBlockType=BOOK\nCompressType=ZIP\nSourceType=OSIS\nEncoding=UTF-8\n"


def write_bible(root: Path) -> Path:
    return write_module(root, "TestBible", BIBLE_CONF, "b", 10, [
        [(slot("Matt", 0, 0), '<div canonical="true" osisID="Matt" sID="b1" type="book"/> '
                              '<milestone n="Matthew" type="x-usfm-h"/>'
                              '<title type="main">The Gospel of Matthew</title>'),
         (slot("Matt", 1, 0), '<chapter n="1" osisID="Matt.1" sID="Matt.1"/>'),
         (slot("Matt", 1, 1), '<div sID="p1" type="x-p"/><w lemma="strong:G976">The book</w> of the '
                              'generation of Jesus Christ,<note placement="foot">Or, <hi>lineage</hi>'
                              '</note> the son of David &amp; Abraham.'),
         (slot("Matt", 1, 2), '<w lemma="strong:G11">Abraham</w> begat<note type="crossReference">'
                              '<reference osisRef="Gen.21.3">Gen 21:3</reference></note>'
                              '<w lemma="strong:G2464">Isaac</w>.<div eID="p1" type="x-p"/>')],
        [(slot("Matt", 1, 3), '<div sID="p2" type="x-p"/>\u00b6 And Judas begat Phares; '
                              '<lg><l>and Phares begat Esrom;</l> <l>and Esrom begat Aram.</l></lg>'),
         (slot("Mark", 1, 1), "The beginning of the gospel."),
         (slot("Mark", 1, 2), "As it is written in the prophets."),
         (slot("Mark", 1, 3), "The voice of one crying.")],
    ])


def test_bible_text_one_document_per_book_paragraphs_from_marks(tmp_path: Path) -> None:
    write_bible(tmp_path)
    assert list(read_sword_module(tmp_path, "sword-test")) == [
        RawDocument("sword-test/Matthew", (
            "The Gospel of Matthew",
            "The book of the generation of Jesus Christ, the son of David & Abraham. "
            "Abraham begat Isaac.",
            "And Judas begat Phares;",
            "and Phares begat Esrom; and Esrom begat Aram.",
        )),
        # a book without paragraph marks: one paragraph per verse
        RawDocument("sword-test/Mark", (
            "The beginning of the gospel.",
            "As it is written in the prophets.",
            "The voice of one crying.",
        )),
    ]


def test_commentary_entries_paragraphs_and_links(tmp_path: Path) -> None:
    conf = "ModDrv=zCom4\nBlockType=CHAPTER\nCompressType=ZIP\nSourceType=OSIS\nEncoding=UTF-8\n"
    write_module(tmp_path, "TestCom", conf, "c", 12, [
        [(slot("John", 3, 16), '<div sID="a" type="x-p"/><hi type="bold">Verses 16-17</hi> God so '
                               'loved the world.<div eID="a" type="x-p"/><div sID="b" type="x-p"/>'
                               'Compare <scripRef passage="Rom 5:8">Romans 5:8</scripRef>.'
                               '<div eID="b" type="x-p"/>'),
         (slot("John", 3, 18), '<title type="x-s">Verse 18</title>He that believeth &lt;is&gt; not '
                               'condemned.&lt;/ol&gt;')],
    ], links={slot("John", 3, 17): slot("John", 3, 16)})
    assert list(read_sword_module(tmp_path, "sword-com")) == [
        RawDocument("sword-com/John", (
            "Verses 16-17 God so loved the world.",
            "Compare Romans 5:8.",
            "Verse 18",
            "He that believeth <is> not condemned.",
        )),
    ]


def test_entry_of_64_kib_or_more_is_read_whole(tmp_path: Path) -> None:
    """A u16 size wraps around at 64 KiB; the gap before the next entry gives it back."""
    long_verse = "word " * 14_000  # 70,000 bytes
    write_module(tmp_path, "Long", BIBLE_CONF, "b", 10, [
        [(slot("Jude", 1, 1), long_verse), (slot("Jude", 1, 2), "End.")],
    ])
    (document,) = read_sword_module(tmp_path, "sword-long")
    assert document.identity == "sword-long/Jude"
    assert [len(paragraph.split()) for paragraph in document.paragraphs] == [14_000, 1]


def test_truncated_block_file_raises_corpus_error(tmp_path: Path) -> None:
    data_dir = write_bible(tmp_path)
    blocks = data_dir / "nt.bzz"
    blocks.write_bytes(blocks.read_bytes()[:-10])
    with pytest.raises(CorpusError, match=r"nt\.bzz: block 1 ends past the end of the file"):
        list(read_sword_module(tmp_path, "sword-test"))


def test_corrupt_block_and_missing_conf_raise_corpus_error(tmp_path: Path) -> None:
    data_dir = write_bible(tmp_path / "corrupt")
    blocks = data_dir / "nt.bzz"
    blocks.write_bytes(b"\x00" * len(blocks.read_bytes()))
    with pytest.raises(CorpusError, match=r"nt\.bzz: block 0 does not decompress"):
        list(read_sword_module(tmp_path / "corrupt", "sword-test"))
    with pytest.raises(CorpusError, match="no SWORD module .conf"):
        list(read_sword_module(tmp_path / "empty", "sword-test"))
