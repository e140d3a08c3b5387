#!/usr/bin/env python
"""`make demo`: prepare the embedded corpus, pre-train the demo models, validate, summarize
(:mod:`fairseq_ext_lab.demo`). ``python scripts/demo.py --help`` lists its options."""
import sys
from pathlib import Path

if __name__ == "__main__":
    try:
        from fairseq_ext_lab.demo import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext_lab.demo import main
    main()
