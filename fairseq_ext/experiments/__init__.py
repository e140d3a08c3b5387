"""Applications that drive the rest end to end: :mod:`~fairseq_ext.experiments.demo` (``make
demo``: prepares the corpus, runs the recipes of each system at equal FLOPs, scores them with
error bars beside the unigram baseline, writes the report) and
:mod:`~fairseq_ext.experiments.studies` (``scripts/study.py``: each paper's claim at equal
training FLOPs over several seeds, resumable, with holds / fails / unresolved per claim), and
:mod:`~fairseq_ext.experiments.finetuning` (their fine-tuning stage on the downstream suite, and
the demo's fine-tuning table), with what they share beneath all three:
:mod:`~fairseq_ext.experiments.recipe_runs` (running the bash recipes),
:mod:`~fairseq_ext.experiments.budget` (equal-FLOP updates from a recipe's dry-run command),
:mod:`~fairseq_ext.experiments.recipe_training` (training and scoring one run) and
:mod:`~fairseq_ext.experiments.run_store` (the resumable ``result.json`` store). The demo and the
studies do not import each other.
Nothing in the package imports this one.

May import: every other layer (evaluation, export, benchmarks, tasks, criterions, models, optim,
modules, data, ops, corpus, flops, reporting, training, cli).
"""
