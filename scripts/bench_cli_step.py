#!/usr/bin/env python
"""Time per update through fairseq-train itself, eager and --torch-compile, steady state
(:mod:`fairseq_ext_lab.benchmarks.cli_update_timing`; ``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.benchmarks.cli_update_timing import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.benchmarks.cli_update_timing import main
    sys.exit(main())
