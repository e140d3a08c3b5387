#!/usr/bin/env python
"""Time per update of 3ML-self and 3ML-cross against RoBERTa, and the measured speedup
(:mod:`fairseq_ext_lab.benchmarks.three_ml`; ``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.benchmarks.three_ml import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.benchmarks.three_ml import main
    sys.exit(main())
