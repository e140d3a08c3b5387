"""Applications that drive the rest end to end: :mod:`~fairseq_ext.experiments.demo` (``make
demo``: prepares the corpus, runs the recipes of each system at equal FLOPs, scores them with
error bars beside the unigram baseline, writes the report) and
:mod:`~fairseq_ext.experiments.studies` (``scripts/study.py``: each paper's claim at equal
training FLOPs over several seeds, resumable, with holds / fails / unresolved per claim), and
:mod:`~fairseq_ext.experiments.finetuning` (their fine-tuning stage on the downstream suite, and
the demo's fine-tuning table), with :mod:`~fairseq_ext.experiments.recipe_runs` (running the bash
recipes) beneath all three.
Nothing in the package imports this one.

May import: every other layer (evaluation, export, benchmarks, tasks, criterions, models, optim,
modules, data, ops, corpus, flops, reporting, training, cli).
"""
