"""fairseq datasets (``FairseqDataset`` subclasses) that our tasks compose, one module each.

As in fairseq, ``data`` means datasets read during training; the offline pipeline that turns
raw text into a data-bin is :mod:`fairseq_ext.corpus`. Datasets register nothing, so importing
this package imports no module.
"""
