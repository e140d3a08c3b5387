#!/usr/bin/env python
"""Tables 7-8 of Artetxe et al. (2022): zero-shot multiple choice (full-sequence or infill scoring); a
thin command line over :mod:`fairseq_ext_lab.evaluation.multiple_choice` (``--help`` lists the options)."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.evaluation.multiple_choice import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.evaluation.multiple_choice import main
    sys.exit(main())
