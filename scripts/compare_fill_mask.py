#!/usr/bin/env python
"""Masked-token accuracy of hub directories on held-out text (3ML with its decoder kept against
its encoder-only export); a thin command line over :mod:`fairseq_ext_lab.evaluation.fill_mask`
(``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.evaluation.fill_mask import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.evaluation.fill_mask import main
    sys.exit(main())
