#!/usr/bin/env python
"""Table 6 of Artetxe et al. (2022): single-token infilling re-ranked by full-sequence scoring; a thin
command line over :mod:`fairseq_ext_lab.evaluation.infill_rescore` (``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.evaluation.infill_rescore import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.evaluation.infill_rescore import main
    sys.exit(main())
