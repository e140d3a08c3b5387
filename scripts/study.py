#!/usr/bin/env python
"""Run a study: equal-FLOP, multi-seed comparisons with error bars (docs/studies.md;
:mod:`fairseq_ext_lab.studies`). ``python scripts/study.py --help`` lists its options."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.studies import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.studies import main
    main()
