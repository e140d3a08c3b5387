"""The SWORD versifications the English modules use: books, chapters and verses per chapter.

Public data, as in libsword's ``canon.h`` (KJV: 39 + 27 books, 1,189 chapters, 31,102 verses)
and ``canon_nrsva.h`` (NRSVA: the KJV books, 18 deuterocanonical books appended to the Old
Testament, and two more verses in the New: 3 John 15 and Revelation 12:18).
:func:`testament_slots` lays the books out the way SWORD's verse index does (see
:mod:`fairseq_ext.corpus.english.sword`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Book:
    name: str
    osis: str
    verses: tuple[int, ...]  # verses per chapter


def _book(name: str, osis: str, verses: str) -> Book:
    return Book(name, osis, tuple(int(count) for count in verses.split()))


KJV_OLD_TESTAMENT = (
    _book("Genesis", "Gen", """31 25 24 26 32 22 24 22 29 32 32 20 18 24 21 16 27 33 38 18 34 24 20
        67 34 35 46 22 35 43 55 32 20 31 29 43 36 30 23 23 57 38 34 34 28 34 31 22 33 26"""),
    _book("Exodus", "Exod", """22 25 22 31 23 30 25 32 35 29 10 51 22 31 27 36 16 27 25 26 36 31 33
        18 40 37 21 43 46 38 18 35 23 35 35 38 29 31 43 38"""),
    _book("Leviticus", "Lev", """17 16 17 35 19 30 38 36 24 20 47 8 59 57 33 34 16 30 37 27 24 33 44
        23 55 46 34"""),
    _book("Numbers", "Num", """54 34 51 49 31 27 89 26 23 36 35 16 33 45 41 50 13 32 22 29 35 41 30
        25 18 65 23 31 40 16 54 42 56 29 34 13"""),
    _book("Deuteronomy", "Deut", """46 37 29 49 33 25 26 20 29 22 32 32 18 29 23 22 20 22 21 20 23
        30 25 22 19 19 26 68 29 20 30 52 29 12"""),
    _book("Joshua", "Josh", """18 24 17 24 15 27 26 35 27 43 23 24 33 15 63 10 18 28 51 9 45 34 16
        33"""),
    _book("Judges", "Judg", "36 23 31 24 31 40 25 35 57 18 40 15 25 20 20 31 13 31 30 48 25"),
    _book("Ruth", "Ruth", "22 23 18 22"),
    _book("1 Samuel", "1Sam", """28 36 21 22 12 21 17 22 27 27 15 25 23 52 35 23 58 30 24 42 15 23 29
        22 44 25 12 25 11 31 13"""),
    _book("2 Samuel", "2Sam", """27 32 39 12 25 23 29 18 13 19 27 31 39 33 37 23 29 33 43 26 22 51 39
        25"""),
    _book("1 Kings", "1Kgs", "53 46 28 34 18 38 51 66 28 29 43 33 34 31 34 34 24 46 21 43 29 53"),
    _book("2 Kings", "2Kgs", """18 25 27 44 27 33 20 29 37 36 21 21 25 29 38 20 41 37 37 21 26 20 37
        20 30"""),
    _book("1 Chronicles", "1Chr", """54 55 24 43 26 81 40 40 44 14 47 40 14 17 29 43 27 17 19 8 30 19
        32 31 31 32 34 21 30"""),
    _book("2 Chronicles", "2Chr", """17 18 17 22 14 42 22 18 31 19 23 16 22 15 19 14 19 34 11 37 20 12
        21 27 28 23 9 27 36 27 21 33 25 33 27 23"""),
    _book("Ezra", "Ezra", "11 70 13 24 17 22 28 36 15 44"),
    _book("Nehemiah", "Neh", "11 20 32 23 19 19 73 18 38 39 36 47 31"),
    _book("Esther", "Esth", "22 23 15 17 14 14 10 17 32 3"),
    _book("Job", "Job", """22 13 26 21 27 30 21 22 35 22 20 25 28 22 35 22 16 21 29 29 34 30 17 25 6
        14 23 28 25 31 40 22 33 37 16 33 24 41 30 24 34 17"""),
    _book("Psalms", "Ps", """6 12 8 8 12 10 17 9 20 18 7 8 6 7 5 11 15 50 14 9 13 31 6 10 22 12 14 9
        11 12 24 11 22 22 28 12 40 22 13 17 13 11 5 26 17 11 9 14 20 23 19 9 6 7 23 13 11 11 17 12
        8 12 11 10 13 20 7 35 36 5 24 20 28 23 10 12 20 72 13 19 16 8 18 12 13 17 7 18 52 17 16 15
        5 23 11 13 12 9 9 5 8 28 22 35 45 48 43 13 31 7 10 10 9 8 18 19 2 29 176 7 8 9 4 8 5 6 5 6
        8 8 3 18 3 3 21 26 9 8 24 13 10 7 12 15 21 10 20 14 9 6"""),
    _book("Proverbs", "Prov", """33 22 35 27 23 35 27 36 18 32 31 28 25 35 33 33 28 24 29 30 31 29 35
        34 28 28 27 28 27 33 31"""),
    _book("Ecclesiastes", "Eccl", "18 26 22 16 20 12 29 17 18 20 10 14"),
    _book("Song of Solomon", "Song", "17 17 11 16 16 13 13 14"),
    _book("Isaiah", "Isa", """31 22 26 6 30 13 25 22 21 34 16 6 22 32 9 14 14 7 25 6 17 25 18 23 12
        21 13 29 24 33 9 20 24 17 10 22 38 22 8 31 29 25 28 28 25 13 15 22 26 11 23 15 12 17 13 12
        21 14 21 22 11 12 19 12 25 24"""),
    _book("Jeremiah", "Jer", """19 37 25 31 31 30 34 22 26 25 23 17 27 22 21 21 27 23 15 18 14 30 40
        10 38 24 22 17 32 24 40 44 26 22 19 32 21 28 18 16 18 22 13 30 5 28 7 47 39 46 64 34"""),
    _book("Lamentations", "Lam", "22 22 66 22 22"),
    _book("Ezekiel", "Ezek", """28 10 27 17 17 14 27 18 11 22 25 28 23 23 8 63 24 32 14 49 32 31 49
        27 17 21 36 26 21 26 18 32 33 31 15 38 28 23 29 49 26 20 27 31 25 24 23 35"""),
    _book("Daniel", "Dan", "21 49 30 37 31 28 28 27 27 21 45 13"),
    _book("Hosea", "Hos", "11 23 5 19 15 11 16 14 17 15 12 14 16 9"),
    _book("Joel", "Joel", "20 32 21"),
    _book("Amos", "Amos", "15 16 15 13 27 14 17 14 15"),
    _book("Obadiah", "Obad", "21"),
    _book("Jonah", "Jonah", "17 10 10 11"),
    _book("Micah", "Mic", "16 13 12 13 15 16 20"),
    _book("Nahum", "Nah", "15 13 19"),
    _book("Habakkuk", "Hab", "17 20 19"),
    _book("Zephaniah", "Zeph", "18 15 20"),
    _book("Haggai", "Hag", "15 23"),
    _book("Zechariah", "Zech", "21 13 10 14 11 15 14 23 17 12 17 14 9 21"),
    _book("Malachi", "Mal", "14 17 18 6"),
)

KJV_NEW_TESTAMENT = (
    _book("Matthew", "Matt", """25 23 17 25 48 34 29 34 38 42 30 50 58 36 39 28 27 35 30 34 46 46 39
        51 46 75 66 20"""),
    _book("Mark", "Mark", "45 28 35 41 43 56 37 38 50 52 33 44 37 72 47 20"),
    _book("Luke", "Luke", """80 52 38 44 39 49 50 56 62 42 54 59 35 35 32 31 37 43 48 47 38 71 56
        53"""),
    _book("John", "John", "51 25 36 54 47 71 53 59 41 42 57 50 38 31 27 33 26 40 42 31 25"),
    _book("Acts", "Acts", """26 47 26 37 42 15 60 40 43 48 30 25 52 28 41 40 34 28 41 38 40 30 35 27
        27 32 44 31"""),
    _book("Romans", "Rom", "32 29 31 25 21 23 25 39 33 21 36 21 14 23 33 27"),
    _book("1 Corinthians", "1Cor", "31 16 23 21 13 20 40 13 27 33 34 31 13 40 58 24"),
    _book("2 Corinthians", "2Cor", "24 17 18 18 21 18 16 24 15 18 33 21 14"),
    _book("Galatians", "Gal", "24 21 29 31 26 18"),
    _book("Ephesians", "Eph", "23 22 21 32 33 24"),
    _book("Philippians", "Phil", "30 30 21 23"),
    _book("Colossians", "Col", "29 23 25 18"),
    _book("1 Thessalonians", "1Thess", "10 20 13 18 28"),
    _book("2 Thessalonians", "2Thess", "12 17 18"),
    _book("1 Timothy", "1Tim", "20 15 16 16 25 21"),
    _book("2 Timothy", "2Tim", "18 26 17 22"),
    _book("Titus", "Titus", "16 15 15"),
    _book("Philemon", "Phlm", "25"),
    _book("Hebrews", "Heb", "14 18 19 16 14 20 28 13 28 39 40 29 25"),
    _book("James", "Jas", "27 26 18 17 20"),
    _book("1 Peter", "1Pet", "25 25 22 19 14"),
    _book("2 Peter", "2Pet", "21 22 18"),
    _book("1 John", "1John", "10 29 24 21 21"),
    _book("2 John", "2John", "13"),
    _book("3 John", "3John", "14"),
    _book("Jude", "Jude", "25"),
    _book("Revelation", "Rev", """20 29 22 11 14 17 17 13 21 11 19 17 18 20 8 21 18 24 21 15 27
        21"""),
)

NRSVA_DEUTEROCANON = (
    _book("Tobit", "Tob", "22 14 17 21 22 18 16 21 6 13 18 22 17 15"),
    _book("Judith", "Jdt", "16 28 10 15 24 21 32 36 14 23 23 20 20 19 14 25"),
    _book("Esther (Greek)", "EsthGr", "22 23 15 17 14 14 10 17 32 13 12 6 18 19 16 24"),
    _book("Wisdom", "Wis", "16 24 19 20 23 25 30 21 18 21 26 27 19 31 19 29 21 25 22"),
    _book("Sirach", "Sir", """30 18 31 31 15 37 36 19 18 31 34 18 26 27 20 30 32 33 30 31 28 27 27
        34 26 29 30 26 28 25 31 24 33 31 26 31 31 34 35 30 22 25 33 23 26 20 25 25 16 29 30"""),
    _book("Baruch", "Bar", "22 35 37 37 9 73"),
    _book("Prayer of Azariah", "PrAzar", "68"),
    _book("Susanna", "Sus", "64"),
    _book("Bel and the Dragon", "Bel", "42"),
    _book("1 Maccabees", "1Macc", "64 70 60 61 68 63 50 32 73 89 74 53 53 49 41 24"),
    _book("2 Maccabees", "2Macc", "36 32 40 50 27 31 42 36 29 38 38 45 26 46 39"),
    _book("1 Esdras", "1Esd", "58 30 24 63 73 34 15 96 55"),
    _book("Prayer of Manasseh", "PrMan", "15"),
    _book("Psalm 151", "AddPs", "7"),
    _book("3 Maccabees", "3Macc", "29 33 30 21 51 41 23"),
    _book("2 Esdras", "2Esd", "40 48 36 52 56 59 140 63 47 59 46 51 58 48 63 78"),
    _book("4 Maccabees", "4Macc", "35 24 21 26 38 35 23 29 32 21 27 19 27 20 32 25 24 24"),
)


def _nrsva_new_testament() -> tuple[Book, ...]:
    books = []
    for book in KJV_NEW_TESTAMENT:
        verses = list(book.verses)
        if book.osis == "3John":
            verses[0] = 15
        elif book.osis == "Rev":
            verses[11] = 18
        books.append(Book(book.name, book.osis, tuple(verses)))
    return tuple(books)


#: versification name (the conf's ``Versification=``, KJV when absent) -> (Old, New Testament)
VERSIFICATIONS: dict[str, tuple[tuple[Book, ...], tuple[Book, ...]]] = {
    "KJV": (KJV_OLD_TESTAMENT, KJV_NEW_TESTAMENT),
    "NRSVA": (KJV_OLD_TESTAMENT + NRSVA_DEUTEROCANON, _nrsva_new_testament()),
}

#: slots before a testament's first book: the module heading and the testament heading
TESTAMENT_HEADING_SLOTS = 2


def testament_slots(books: tuple[Book, ...]) -> list[tuple[Book | None, int, int]]:
    """``(book, chapter, verse)`` for each slot of a testament's verse index, from slot 0.

    SWORD's layout: slot 0 the module heading and slot 1 the testament heading (book ``None``),
    then per book a book-intro slot (chapter 0, verse 0), and per chapter a chapter-intro slot
    (verse 0) followed by its verses.
    """
    slots: list[tuple[Book | None, int, int]] = [(None, 0, 0)] * TESTAMENT_HEADING_SLOTS
    for book in books:
        slots.append((book, 0, 0))
        for chapter, verse_count in enumerate(book.verses, start=1):
            slots.extend((book, chapter, verse) for verse in range(verse_count + 1))
    return slots
