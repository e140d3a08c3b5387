"""fairseq datasets (``FairseqDataset`` subclasses) that our tasks compose, one module each.

As in fairseq, ``data`` means datasets read during training; the offline pipeline that turns
raw text into a data-bin is :mod:`fairseq_ext.corpus`. Datasets register nothing, so importing
this package imports no module; the task that uses a dataset imports its module.

* :mod:`fairseq_ext.data.bidirectional_lm_dataset`: rows of packed documents with the objective
  of generalized bidirectionality (Artetxe et al. 2022, Figure 3), for ``--task bidirectional_lm``;
  :mod:`fairseq_ext.data.bidirectional_sampling`: its per-document ``n_mask``, ``n_bidir``,
  ``n_predict`` (Table 1) and their count expressions.

May import: cli.
"""
