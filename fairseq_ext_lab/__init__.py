"""fairseq-ext-lab: what measures the plugin (``fairseq_ext``). It imports the plugin; the plugin
never imports it, and ``--user-dir fairseq_ext`` loads none of it.

- :mod:`.demo`: ``make demo`` (the recipes of each system at equal FLOPs, scored with error bars
  beside the unigram baseline, and the fine-tuning table);
- :mod:`.studies`: ``scripts/study.py`` (each paper's claim over seeds, resumable, with a verdict);
- :mod:`.finetuning`: the one fine-tuning path, through ``recipes/*/finetune_glue.sh``;
- :mod:`.recipe_runs`, :mod:`.budget`, :mod:`.recipe_training`, :mod:`.run_store`: running a
  recipe, its equal-FLOP budget, training and scoring one run, the resumable result store;
- :mod:`.evaluation`, :mod:`.benchmarks` (with the GPU suite) and :mod:`.reporting`.
"""
import fairseq_ext  # noqa: F401  (the plugin first: its checks, registrations and warning filter)
