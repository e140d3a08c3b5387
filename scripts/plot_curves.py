#!/usr/bin/env python
"""Plot valid loss against cumulative training FLOPs and against wall time, one line per run
(:mod:`fairseq_ext_lab.reporting.curves`)::

    python scripts/plot_curves.py RUN_LOG [RUN_LOG ...] [--labels a,b] [--out curves.png]
"""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.reporting.curves import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.reporting.curves import main
    sys.exit(main())
