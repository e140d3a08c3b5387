"""Reading and showing runs: fairseq's json log records (:mod:`.log_records`), loss curves against
FLOPs, wall time or tokens (:mod:`.curves`, ``scripts/plot_curves.py``), plain-text tables
(:mod:`.text_tables`), the statistics every printed comparison carries, mean ± one standard
error and paired differences (:mod:`.uncertainty`), and the per-row score files that
``fairseq-validate --eval-scores`` writes (:mod:`.eval_scores`). The criteria and tasks use the
last two, so they live below them.

May import: training, cli.
"""
