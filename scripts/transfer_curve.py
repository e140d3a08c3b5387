#!/usr/bin/env python3
"""Fine-tuned dev accuracy against pre-training updates, beside random initialisation:
``fairseq_ext_lab.transfer_curve`` (docs/transfer.md).

    scripts/transfer_curve.py --suite data-bin/python-docs-spm8000-downstream \
        --run roberta runs/x/checkpoint_1_1000.pt runs/x/checkpoint_2_2000.pt \
        --runs-dir runs/transfer-curve --out curve.json
"""
import sys

from fairseq_ext_lab.transfer_curve import main

if __name__ == "__main__":
    sys.exit(main())
