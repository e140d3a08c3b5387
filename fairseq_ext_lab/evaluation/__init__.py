"""Evaluation beyond fairseq's own CLIs, for generalized bidirectionality (Artetxe et al. 2022):
the Tables 3-5 report over ``fairseq-validate --eval-mode`` runs (:mod:`.bidirectional_report`),
full-sequence infilling (:mod:`.infill_rescore`, Table 6), zero-shot multiple choice
(:mod:`.multiple_choice`, Tables 7-8) and their scoring primitives (:mod:`.sequence_scoring`);
for 3ML (Liao et al. 2022), masked-token prediction of hub directories with the decoder kept
against the encoder-only export (:mod:`.fill_mask`); and for any masked LM, per-sequence [MASK]
losses on shared positions beside the training unigram, with delta-method errors and paired
differences (:mod:`.masked_lm_scores`, with :mod:`fairseq_ext.reporting.uncertainty`), as ``make
demo`` reports them; the statistics of token features and probes the transfer diagnosis reports
(:mod:`.feature_statistics`); the report of a bidirectional GLUE grid (:mod:`.finetune_grid`); and
the ``fairseq-validate`` command the lab scores checkpoints with (:mod:`.fairseq_validate`).

May import: tasks, modules, data, corpus, reporting, training, cli.
"""
