"""Benchmarks behind ``scripts/bench_3ml.py``, ``scripts/bench_swishrnn.py``,
``scripts/bench_bidirectional.py`` and ``scripts/bench_step.py`` (their thin command lines:
:mod:`~fairseq_ext_lab.benchmarks.trainer_step_timing` times fairseq's own
``Trainer.train_step`` per model family, through
:class:`~fairseq_ext.training.trainer_harness.TrainerStep`), the timing helpers they share
(:mod:`~fairseq_ext_lab.benchmarks.common`) and the counter of ops and device-to-host reads
(:mod:`~fairseq_ext_lab.benchmarks.device_reads`).

May import: tasks, criterions, models, modules, data, ops, flops, reporting, training (the GPU suite,
the package :mod:`~fairseq_ext_lab.benchmarks.gpu_suite`, imports none of them: it runs before fairseq is
installed).
"""
