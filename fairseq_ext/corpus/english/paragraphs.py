"""The paragraph filter every source's text passes: English prose, not code, tables or lists.

A paragraph is kept when it has at least :data:`MIN_WORDS` whitespace-separated tokens, at least
:data:`MIN_PLAIN_SHARE` of them plain words (letters with inner apostrophes or hyphens, with
surrounding punctuation allowed), at least :data:`MIN_FUNCTION_SHARE` of them common English
function words (``the``, ``of``, ``and`` ...: code and word lists have few), and at least
:data:`MIN_ASCII_LETTER_SHARE` of its letters ASCII (other languages, transliterations). These
are the thresholds of the corpus survey (``docs/corpus.md``).
"""

from __future__ import annotations

import re

MIN_WORDS = 8
MIN_PLAIN_SHARE = 0.75
MIN_FUNCTION_SHARE = 0.12
MIN_ASCII_LETTER_SHARE = 0.95

FUNCTION_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same shall she should so some such than that the their theirs them themselves then there
these they this those through thee thou thy to too under until up upon very was we were what
when where which while who whom why will with would you your yours yourself yourselves unto
ye hath doth
""".split())

#: Typographic characters written as their ASCII forms before filtering (curly quotes would
#: otherwise fail the plain-word test, and the tokenizer would learn two spellings of a quote).
_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"',
                             "\u201d": '"', "\u201e": '"', "\u2013": "-", "\u2014": "--",
                             "\u2026": "...", "\u00a0": " ", "\u00ad": ""})

_PLAIN_WORD = re.compile(r"^[\"'(\[]*[A-Za-z]+(?:['\u2019-][A-Za-z]+)*[\"')\].,;:!?]*$")
_EDGE_PUNCTUATION = "\"'()[].,;:!?\u2019"


def plain_typography(paragraph: str) -> str:
    """``paragraph`` with curly quotes, dashes, ellipses and non-breaking spaces in ASCII and
    its whitespace collapsed."""
    return " ".join(paragraph.translate(_TYPOGRAPHY).split())


def is_prose(paragraph: str) -> bool:
    """Whether ``paragraph`` (whitespace already collapsed) passes the filter above."""
    tokens = paragraph.split()
    if len(tokens) < MIN_WORDS:
        return False
    plain = sum(1 for token in tokens if _PLAIN_WORD.match(token))
    if plain < MIN_PLAIN_SHARE * len(tokens):
        return False
    function = sum(1 for token in tokens if token.strip(_EDGE_PUNCTUATION).lower() in FUNCTION_WORDS)
    if function < MIN_FUNCTION_SHARE * len(tokens):
        return False
    letters = [character for character in paragraph if character.isalpha()]
    ascii_letters = sum(1 for character in letters if character.isascii())
    return ascii_letters >= MIN_ASCII_LETTER_SHARE * len(letters)


def word_count(paragraph: str) -> int:
    return len(paragraph.split())
