"""Benchmarks behind ``scripts/bench_3ml.py`` and ``scripts/bench_swishrnn.py`` (their thin
command lines), and the timing helpers they share (:mod:`~fairseq_ext.benchmarks.common`)."""
