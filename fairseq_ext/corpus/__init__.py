"""Data preparation for fairseq-ext.

``python -m fairseq_ext.corpus.prepare_corpus`` (console script ``fairseq-ext-prepare-corpus``)
turns raw text, or the reStructuredText sources of the Python 3.11 documentation, into a
fairseq data-bin; ``python -m fairseq_ext.corpus.glue`` (``scripts/prepare_glue.sh``)
binarizes GLUE tasks for fine-tuning with its sentencepiece model and dictionary. This package
imports nothing heavy at import time.

May import: training.
"""
