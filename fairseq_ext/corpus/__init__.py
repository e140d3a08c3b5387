"""Data preparation for fairseq-ext.

``python -m fairseq_ext.corpus.prepare_corpus`` (console script ``fairseq-ext-prepare-corpus``)
turns raw text, or the reStructuredText sources of the Python 3.11 documentation, into a
fairseq data-bin. This package imports nothing heavy at import time.
"""
