"""One module per kind of evaluation (masked LM, bidirectional LM).

May import: see :mod:`fairseq_ext.experiments`.
"""
