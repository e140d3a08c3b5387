#!/usr/bin/env python
"""Training tokens/s of bidirectional_lm against fairseq's transformer_lm of the same size, and
their ratio (:mod:`fairseq_ext_lab.benchmarks.bidirectional`; ``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.benchmarks.bidirectional import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.benchmarks.bidirectional import main
    sys.exit(main())
