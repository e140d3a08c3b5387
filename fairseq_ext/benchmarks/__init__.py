"""Benchmarks behind ``scripts/bench_3ml.py`` and ``scripts/bench_swishrnn.py`` (their thin
command lines), and the timing helpers they share (:mod:`~fairseq_ext.benchmarks.common`).

May import: tasks, criterions, models, modules, data, ops, flops, training (the GPU suite's driver,
:mod:`~fairseq_ext.benchmarks.gpu_suite`, imports none of them: it runs before fairseq is
installed).
"""
