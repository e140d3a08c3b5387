"""The English-prose data lever (docs/transfer.md): GCIDE entries cleaned to one line each."""
from fairseq_ext.corpus import english_prose

SAMPLE = """Abdication \\Ab`di*ca"tion\\, n. [L. abdicatio: cf. F.
   abdication.]
   The act of abdicating; the renunciation of a high office,
   dignity, or trust, by its holder.
   [1913 Webster]

Abdicator \\Ab"di*ca`tor\\, n.
   One who abdicates.
   [1913 Webster]

Abdomen \\Ab*do"men\\, n.
   1. (Anat.) The belly, or that part of the body between the
      thorax and the pelvis.
   [1913 Webster]
"""


def test_each_entry_becomes_one_clean_line_and_short_ones_are_left_out():
    lines = english_prose.entry_lines(SAMPLE)
    assert lines == [
        "Abdication , n. The act of abdicating; the renunciation of a high office, dignity, or "
        "trust, by its holder.",
        "Abdomen , n. 1. (Anat.) The belly, or that part of the body between the thorax and the "
        "pelvis."]  # "Abdicator , n. One who abdicates." has 6 words
    long = english_prose.entry_lines("Word \\W\\ " + "x " * 500)
    assert len(long[0]) == english_prose.MAX_CHARS


def test_the_split_is_seeded_and_keeps_every_line_once():
    lines = [f"line {i}" for i in range(100)]
    train, valid = english_prose.split_lines(lines)
    assert len(valid) == 2 and sorted(train + valid) == sorted(lines)
    assert (train, valid) == english_prose.split_lines(lines)
    assert english_prose.split_lines(lines, seed=1) != (train, valid)
