#!/usr/bin/env python
"""Benchmark SwishRNN: the fairseq_ext::swish_recurrence op (CUDA against the bandwidth bound,
CPU against the fair loop) and a training step of SwishRNN-BERT against BERT-rab
(:mod:`fairseq_ext_lab.benchmarks.swishrnn`; ``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.benchmarks.swishrnn import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.benchmarks.swishrnn import main
    sys.exit(main())
