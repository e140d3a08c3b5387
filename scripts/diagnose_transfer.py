#!/usr/bin/env python3
"""Why a pre-trained checkpoint does or does not transfer, beside its random initialisation:
``fairseq_ext_lab.transfer_diagnosis`` (docs/transfer.md).

    scripts/diagnose_transfer.py CHECKPOINT DATA_BIN [--seeds 1 2 3] [--out report.json]
"""
import sys

from fairseq_ext_lab.transfer_diagnosis import main

if __name__ == "__main__":
    sys.exit(main())
