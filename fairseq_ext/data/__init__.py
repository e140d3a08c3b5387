"""fairseq datasets (``FairseqDataset`` subclasses) that our tasks compose, one module each.

As in fairseq, ``data`` means datasets read during training; the offline pipeline that turns
raw text into a data-bin is :mod:`fairseq_ext.corpus`. Datasets register nothing, so importing
this package imports no module; the task that uses a dataset imports its module.

* :mod:`.bidirectional_lm_dataset`: rows of packed documents with the objective of generalized
  bidirectionality (Artetxe et al. 2022, Figure 3), for ``--task bidirectional_lm``;
  :mod:`.bidirectional_sampling`: its per-document ``n_mask``, ``n_bidir``, ``n_predict``
  (Table 1) and their count expressions.
* :mod:`.masking_capacity`: static sizes for what fairseq's ``MaskTokensDataset`` corrupts in a
  batch, from its shape and the masking settings (3ML and our criteria on CUDA).

May import: cli.
"""
