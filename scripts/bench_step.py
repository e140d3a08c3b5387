#!/usr/bin/env python
"""Where one fairseq-train update goes, per model family: ms, ops, device reads by source
(:mod:`fairseq_ext_lab.benchmarks.trainer_step_timing`; ``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.benchmarks.trainer_step_timing import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.benchmarks.trainer_step_timing import main
    sys.exit(main())
