"""What ``fairseq-validate`` reports beyond a mean loss: the statistics a printed comparison
carries, mean ± one standard error and paired differences (:mod:`.uncertainty`), and the
per-row score files that ``--eval-scores`` writes (:mod:`.eval_scores`). The bidirectional task
and criterion use them.

May import: training, cli.
"""
