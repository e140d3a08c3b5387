"""The English corpus: the paragraph filter, the dictd and Shakespeare readers, the held-out
(leak) filter with planted copies, and a build's reading, deduplication and layout, on small
files the tests write."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fairseq_ext.corpus.english import build, dictd, gutenberg_plays, leaks
from fairseq_ext.corpus.english.paragraphs import is_prose, plain_typography
from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.english.sources import MIXES, SOURCES, Source, mix_sources
from fairseq_ext.corpus.errors import CorpusError

PROSE = "The quick brown fox jumps over the lazy dog and runs into the wood."


# --- the paragraph filter ---------------------------------------------------------------

def test_is_prose_thresholds_by_hand():
    assert is_prose(PROSE)
    assert not is_prose("The fox jumps over the lazy dog.")  # 7 words < 8
    # code: 4 of 10 tokens are plain words (< 75%)
    assert not is_prose("x = foo(bar) + baz[2] if the value is None")
    # a word list: plain words, but no function word (< 12%)
    assert not is_prose("apple banana cherry grape lemon mango orange peach plum")
    # one function word in 8 tokens is 12.5% (kept); none in 9 is not
    assert is_prose("Apples bananas cherries grapes lemons mangoes oranges and")
    # letters: 2 non-ASCII of 40 is 95% ASCII (kept); 3 of 40 is not
    kept = "Caf\u00e9 na\u00efve is the word of this town near the river"
    assert sum(c.isalpha() for c in kept) == 40 and is_prose(kept)
    assert not is_prose("Caf\u00e9 na\u00efve is the word of this t\u00f6wn near the river")


def test_plain_typography():
    assert plain_typography("\u201cIt\u2019s\u201d \u2014 a\u00a0test\u2026") == '"It\'s" -- a test...'
    assert is_prose(plain_typography("\u201cThe fox\u201d jumps over the lazy dog and the cat."))


# --- dictd --------------------------------------------------------------------------------

def write_dictd(folder: Path, name: str, entries: list[tuple[str, str]]) -> None:
    """A dictd database (``.dict.dz``, gzip; ``.index`` in base 64) of ``(headword, body)``."""
    def b64(number: int) -> str:
        digits = ""
        while True:
            digits = dictd.BASE64_DIGITS[number % 64] + digits
            number //= 64
            if not number:
                return digits

    folder.mkdir(parents=True, exist_ok=True)
    data, index, offset = b"", [], 0
    for headword, body in [("00-database-info", "about this database\n"), *entries]:
        raw = body.encode()
        index.append(f"{headword}\t{b64(offset)}\t{b64(len(raw))}\n")
        data += raw
        offset += len(raw)
    with gzip.open(folder / f"{name}.dict.dz", "wb") as handle:
        handle.write(data)
    (folder / f"{name}.index").write_text("".join(sorted(index)))


def test_base64_numbers():
    assert dictd.decode_base64_number("A") == 0
    assert dictd.decode_base64_number("BA") == 64
    assert dictd.decode_base64_number("/") == 63
    with pytest.raises(ValueError):
        dictd.decode_base64_number("*")


def test_dictd_entries_drop_wordnet_and_markup(tmp_path):
    webster = ('Abandon \\A*ban"don\\, v. t. [OF. abandoner.]\n'
               "   1. To cast or drive out; to banish; to expel; to reject.\n"
               "      [1913 Webster]\n\n"
               "      That he might abandon them from him and all {their} house. --Udall.\n"
               "      [1913 Webster]\n\n"
               "   2. to give up with the intent of never claiming again.\n"
               "      [WordNet 1.5]\n")
    foldoc = ("brainstorm\n\n   <jargon> A {meeting} in which many people offer ideas to be"
              " sorted out later by the group.\n\n   (2014-11-27)\n")
    write_dictd(tmp_path / "usr/share/dictd", "test", [("abandon", webster),
                                                         ("brainstorm", foldoc)])
    documents = list(dictd.read_dictd(tmp_path, "test", "test"))
    assert documents == [RawDocument("test/00000", (
        "Abandon , v. t. 1. To cast or drive out; to banish; to expel; to reject.",
        "That he might abandon them from him and all their house. --Udall.",
        "brainstorm A meeting in which many people offer ideas to be sorted out later by the "
        "group."))]


def test_dictd_truncated_database_is_an_error(tmp_path):
    folder = tmp_path / "usr/share/dictd"
    write_dictd(folder, "test", [("word", "A word that is long enough to be a paragraph here.\n")])
    raw = gzip.decompress((folder / "test.dict.dz").read_bytes())
    (folder / "test.dict.dz").write_bytes(gzip.compress(raw[:-10]))
    with pytest.raises(CorpusError, match="truncated"):
        list(dictd.read_dictd(tmp_path, "test", "test"))


# --- Shakespeare --------------------------------------------------------------------------

PLAY = """THE TEMPEST

by William Shakespeare

DRAMATIS PERSONAE

ALONSO, King of Naples

ACT I.

Scene I. On a ship at sea.

[Enter a Shipmaster and a Boatswain]

MASTER.
Boatswain!

BOATSWAIN.
Here, master: what cheer?
[Exit.]
Good, speak to the mariners.

ACT II.

Gonzalo.
Beseech you, sir, be merry; you have cause,
So have we all, of joy.
"""


def test_play_documents_by_act_without_speakers_or_directions():
    assert gutenberg_plays.play_documents(PLAY, "tempest") == [
        ("act-i", ["Scene I. On a ship at sea.", "Boatswain!",
                   "Here, master: what cheer? Good, speak to the mariners."]),
        ("act-ii", ["Beseech you, sir, be merry; you have cause, So have we all, of joy."]),
    ]
    poem = "SONNETS\n\nI\n\nFrom fairest creatures we desire increase,\nThat beauty die.\n"
    assert gutenberg_plays.play_documents(poem, "sonnets") == [
        ("all", ["SONNETS", "I", "From fairest creatures we desire increase, That beauty die."])]


def test_read_plays_takes_the_modern_edition_only(tmp_path):
    (tmp_path / "tempest_gut.txt").write_text(PLAY)
    (tmp_path / "tempest_gut_f.txt").write_text("ACT I.\n\nFolio text.\n")
    identities = [d.identity for d in gutenberg_plays.read_plays(tmp_path, "shakespeare")]
    assert identities == ["shakespeare/tempest/act-i", "shakespeare/tempest/act-ii"]


# --- the held-out texts -------------------------------------------------------------------

FORTUNE = ("A journey of a thousand miles begins with a single step and a lot of "
           "complaining about the weather")
GLOSS = "a domesticated carnivorous mammal that typically has a long snout and an acute sense"
MAN_TEXT = ("The signal disposition is a per-process attribute and in a multithreaded "
            "application the disposition of a particular signal is the same for all threads")


def planted_index() -> leaks.HeldOutIndex:
    return leaks.HeldOutIndex({"man-pages": [MAN_TEXT], "wordnet": [GLOSS + "; a dog"],
                               "fortunes": [FORTUNE], "debian-descriptions": []}, [GLOSS])


def test_window_hashes_match_brute_force():
    hasher = leaks.WordHasher()
    words = "one two three four five six".split()
    ids = hasher.ids(words)
    hashes = leaks.window_hashes(ids, 3)
    assert len(hashes) == 4
    for start in range(4):
        assert hashes[start] == leaks.window_hashes(hasher.ids(words[start:start + 3]), 3)[0]
    assert len(set(hashes.tolist())) == 4
    assert len(leaks.window_hashes(ids, 7)) == 0


def test_planted_leaks_are_dropped_by_kind():
    index = planted_index()
    fortune_window = " ".join(FORTUNE.split()[3:3 + leaks.WINDOW])
    paragraphs = [
        PROSE,
        f"As the saying goes, {fortune_window.upper()}!",          # a fortune's 13 words
        "The " + " ".join(GLOSS.split()[:leaks.GLOSS_OPENING]) + " is what we call a dog here.",
        "It is known that " + " ".join(MAN_TEXT.split()[:7]),    # a man-page window split over
        " ".join(MAN_TEXT.split()[7:14]) + " in the text.",       # two paragraphs: both dropped
        PROSE.replace("fox", "cat"),
    ]
    assert index.leaking_paragraphs(paragraphs) == {1: "fortunes",
                                                    2: "wordnet-definition-opening",
                                                    3: "man-pages", 4: "man-pages"}
    # nine words of the gloss's opening are not a copy
    nine = "The " + " ".join(GLOSS.split()[:9]) + " and more words after."
    assert index.leaking_paragraphs([nine]) == {}


def test_roff_text():
    source = ('.\\" a comment\n.TH SIGNAL 7\n.SH NAME\nsignal \\- overview of signals\n'
              ".PP\nA process can change the\n.BR sigaction (2)\n\\fBdisposition\\fP of a "
              "signal\\(emthe default.\n")
    assert leaks.roff_text(source) == ("NAME signal - overview of signals A process can change "
                                       "the sigaction (2) disposition of a signalthe default.")


def test_held_out_readers(tmp_path):
    man = tmp_path / "man" / "man7"
    man.mkdir(parents=True)
    with gzip.open(man / "signal.7.gz", "wt") as handle:
        handle.write(".SH NAME\nsignal \\- overview\n")
    (man / "sig.7").write_text(".so man7/signal.7\n")
    assert leaks.man_page_texts(tmp_path / "man") == ["NAME signal - overview"]
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    (wordnet / "data.noun").write_text("  1 licence header line\n"
                                       "02084071 05 n 01 dog 0 000 | a member of the genus Canis;"
                                       ' "the dog barked"\n')
    for name in ("data.verb", "data.adj", "data.adv"):
        (wordnet / name).write_text("")
    assert leaks.wordnet_texts(wordnet) == (['a member of the genus Canis; "the dog barked"'],
                                            ["a member of the genus Canis"])
    fortunes = tmp_path / "fortunes"
    fortunes.mkdir()
    (fortunes / "work").write_text("Work is good.\n\t-- Someone\n%\nRest is better.\n%\n")
    (fortunes / "work.dat").write_bytes(b"\0\1")
    assert leaks.fortune_texts([fortunes]) == ["Work is good.", "Rest is better."]
    packages = ("Package: a\nDescription: a tool\n more about the tool\n\n"
                "Package: b\nDescription-md5: 00\n")
    assert leaks.debian_description_texts(packages) == ["a tool\n more about the tool"]


def test_synopses_alone_are_refused_as_the_held_out_descriptions():
    """Package lists read without their Translation-en lists hold synopses only: the corpus
    build stops with the fix, as the downstream builder does."""
    synopses = leaks.debian_description_texts("Package: a\nDescription: a tool\n\n"
                                              "Package: b\nDescription: another tool\n")
    with pytest.raises(CorpusError, match="apt-get update -o Acquire::Languages=en"):
        leaks.require_long_descriptions(synopses)
    leaks.require_long_descriptions(synopses + ["a tool\n more about the tool"])


# --- a build: read, filter, deduplicate, write ----------------------------------------------

def fake_reader(documents):
    def read(folder: Path, name: str):
        for part, paragraphs in documents:
            yield RawDocument(f"{name}/{part}", tuple(paragraphs))
    return read


def test_read_and_write_corpus(tmp_path):
    fortune_copy = "He said " + FORTUNE
    first = Source("first", "literature", "first-package", "", fake_reader([
        ("a", [PROSE, "too short", fortune_copy, "\u201cQuoted\u201d " + PROSE]),
        ("b/c?", ["x = 1 + 2 * y"]),  # nothing kept: no file
    ]), "MIT")
    second = Source("second", "technical", "second-package", "", fake_reader([
        ("d", [PROSE.upper(), PROSE.replace("fox", "hen")]),  # the first: a duplicate
    ]), "GPL")
    folders = {"first": tmp_path, "second": tmp_path}
    results = build.read_sources((first, second), folders, planted_index(), workers=2,
                                 log=lambda line: None)
    assert results["first"]["counts"] == {
        "documents_read": 2, "paragraphs_read": 5,
        "words_read": 14 + 2 + 21 + 15 + 7, "paragraphs_not_prose": 2,
        "words_not_prose": 2 + 7, "leaks_fortunes": 1}
    out = tmp_path / "english-test"
    card = build.write_corpus(out, (first, second), results, {"first": "1.0", "second": "2"})
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.txt")) == [
        "first/a.txt", "second/d.txt"]
    assert (out / "first/a.txt").read_text() == f'{PROSE}\n\n"Quoted" {PROSE}\n'
    assert (out / "second/d.txt").read_text() == PROSE.replace("fox", "hen") + "\n"
    rows = {row["name"]: row for row in card["sources"]}
    assert rows["second"]["paragraphs_duplicate"] == 1 and rows["second"]["words"] == 14
    assert rows["first"]["words"] == 14 + 15 and card["words"] == 43
    assert rows["first"]["share"] == round(29 / 43, 4) and rows["first"]["version"] == "1.0"
    assert card["documents"] == 2
    # a second build replaces the folder as a whole
    (out / "stale.txt").write_text("left by an earlier build")
    build.write_corpus(out, (first, second), results, {})
    assert not (out / "stale.txt").exists()


def test_document_paths_are_safe_and_unique(tmp_path):
    assert build.document_path("src/../a b/c:d") == "src/a_b/c_d.txt"
    twice = Source("s", "literature", "p", "", fake_reader([("x y", [PROSE]),
                                                               ("x:y", [PROSE + " again"])]), "")
    results = build.read_sources((twice,), {"s": tmp_path}, planted_index(), workers=1)
    with pytest.raises(CorpusError, match="not unique"):
        build.write_corpus(tmp_path / "out", (twice,), results, {})


def test_empty_corpus_is_an_error(tmp_path):
    empty = Source("e", "literature", "p", "", fake_reader([("a", ["code()"])]), "")
    results = build.read_sources((empty,), {"e": tmp_path}, planted_index(), workers=1)
    with pytest.raises(CorpusError, match="kept no text"):
        build.write_corpus(tmp_path / "out", (empty,), results, {})


def test_the_table():
    names = [source.name for source in SOURCES]
    assert len(names) == len(set(names))
    assert {source.register for source in SOURCES} <= set(MIXES["broad"])
    assert all(source.register != "technical" for source in mix_sources("prose"))
    assert all(source.licence for source in SOURCES)
    by_name = {source.name: source for source in SOURCES}
    assert by_name["gcide"].reader_settings() == (
        "fairseq_ext.corpus.english.dictd.read_dictd[('database', 'gcide')]")
    assert by_name["boost-doc"].subdir in by_name["boost-doc"].reader_settings()


# --- through prepare_corpus and the card ------------------------------------------------------

WORDS = ("river stone garden light window morning letter story music winter village "
         "teacher market bridge forest candle").split()


def fake_build(tmp_path, monkeypatch):
    """``build_corpus`` replaced by a build of two small sources (no download)."""
    import random

    from fairseq_ext.corpus import prepare_corpus

    rng = random.Random(0)

    def paragraph():
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
        return "The " + " and the ".join(" ".join(words[i:i + 2]) for i in range(0, 12, 2)) + "."

    sources = tuple(
        Source(name, register, f"{name}-package", "", fake_reader(
            [(f"part{i}", [paragraph() for _ in range(6)]) for i in range(12)]), "MIT")
        for name, register in (("novels", "literature"), ("manuals", "technical")))
    calls = []

    def build_corpus(cache_dir, mix, workers, log):
        calls.append((Path(cache_dir), mix))
        out = Path(cache_dir) / f"english-{mix}"
        chosen = tuple(s for s in sources if s.register in MIXES[mix])
        results = build.read_sources(chosen, {s.name: tmp_path for s in chosen}, planted_index())
        card = build.write_corpus(out, chosen, results, {s.name: "1.0" for s in chosen})
        card.update(settings={"mix": mix, "build_version": build.BUILD_VERSION},
                    held_out={"packages": {"fortunes": "1"}, "translation_lists": 0,
                              "sizes": planted_index().sizes()}, seconds={"read": 0.5})
        (out / build.CARD_NAME).write_text(json.dumps(card))
        return out

    monkeypatch.setattr(prepare_corpus.english_build, "build_corpus", build_corpus)
    return calls


SMALL_BIN = ["--vocab-size", "60", "--valid-fraction", "0.2", "--test-fraction", "0.2",
             "--workers", "1"]


def test_prepare_corpus_source_english_and_the_card(tmp_path, monkeypatch, capsys):
    from fairseq_ext.corpus import prepare_corpus
    from fairseq_ext.corpus.english import card

    calls = fake_build(tmp_path, monkeypatch)
    destdir = tmp_path / "bin"
    status = prepare_corpus.main(["--cache-dir", str(tmp_path / "cache"), "--destdir",
                                  str(destdir), *SMALL_BIN])
    assert status == 0 and calls == [(tmp_path / "cache", "broad")]
    manifest = json.loads((destdir / "manifest.json").read_text())
    assert manifest["settings"]["source"] == "english"
    assert manifest["settings"]["english_corpus"]["mix"] == "broad"
    assert manifest["summary"]["input_files"] == 24  # 12 documents of each source
    assert "corpus" in manifest["summary"]["seconds"]
    copied = json.loads((destdir / build.CARD_NAME).read_text())
    assert Path(copied["folder"]) == tmp_path / "cache" / "english-broad"
    # the cleaned text stays beside the data-bin: the two sources' paragraphs, sentence lines
    prep = "".join((destdir / "prep" / f"{split}.txt").read_text() for split in
                   ("train", "valid", "test"))
    assert prep.count("The ") == sum(row["paragraphs"] for row in copied["sources"])
    capsys.readouterr()

    figures = card.card_figures(destdir)
    rows = {row["name"]: row for row in figures["card"]["sources"]}
    assert set(rows) == {"novels", "manuals"} and all(row["pieces"] > 0 for row in rows.values())
    assert sum(row["pieces"] for row in rows.values()) == sum(
        manifest["summary"]["tokens"].values())  # one paragraph a line: the same pieces
    text = card.markdown(figures)
    assert "| novels | literature | novels-package (1.0) | MIT | 12 |" in text

    # --mix prose: the technical source left out, its own data-bin name
    status = prepare_corpus.main(["--cache-dir", str(tmp_path / "cache"), "--mix", "prose",
                                  "--destdir", str(tmp_path / "prose"), *SMALL_BIN])
    assert status == 0 and calls[-1][1] == "prose"
    manifest = json.loads((tmp_path / "prose" / "manifest.json").read_text())
    assert manifest["settings"]["source"] == "english-prose"
    assert manifest["summary"]["input_files"] == 12


def test_mix_is_for_the_english_source_only(tmp_path, capsys):
    from fairseq_ext.corpus import prepare_corpus

    for extra in (["--source", "python-docs"], ["--input", str(tmp_path)]):
        with pytest.raises(SystemExit) as stopped:
            prepare_corpus.main(["--mix", "prose", *extra])
        assert stopped.value.code == 2
        assert "--mix is for --source english" in capsys.readouterr().err


def test_prepare_corpus_refuses_rst_for_english(tmp_path, monkeypatch, capsys):
    from fairseq_ext.corpus import prepare_corpus

    fake_build(tmp_path, monkeypatch)
    status = prepare_corpus.main(["--cache-dir", str(tmp_path / "c"), "--input-format", "rst",
                                  "--destdir", str(tmp_path / "b"), *SMALL_BIN])
    assert status == 2
    assert "--source english is plain text" in capsys.readouterr().err


def test_docs_quote_the_committed_card():
    """docs/corpus.md's card is the committed run summary, rendered."""
    from fairseq_ext.corpus.english import card

    root = Path(__file__).resolve().parent.parent
    figures = json.loads((root / "docs/corpus/english-card.json").read_text())
    assert card.markdown(figures) in (root / "docs/corpus.md").read_text()
    rows = figures["card"]["sources"]
    assert sum(row["words"] for row in rows) == figures["card"]["words"]
    assert {row["name"] for row in rows} == {source.name for source in SOURCES}
    assert figures["training_pieces"] >= 10_000_000
