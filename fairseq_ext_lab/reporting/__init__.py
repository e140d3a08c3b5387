"""Reading and showing the lab's runs: fairseq's json log records (:mod:`.log_records`), loss
curves against FLOPs, wall time or tokens (:mod:`.curves`, ``scripts/plot_curves.py``),
plain-text tables (:mod:`.text_tables`) and the figures of the demo and the studies
(:mod:`.figures`). The statistics they print come from the plugin's
:mod:`fairseq_ext.reporting.uncertainty`.
"""
