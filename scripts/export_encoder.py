#!/usr/bin/env python
"""Export the encoder of a 3ML checkpoint as a standard fairseq RoBERTa checkpoint, or as a hub
directory (model.pt, dict.txt, sentencepiece.bpe.model) that RobertaModel.from_pretrained loads.

After pre-training, 3ML's decoder is dropped and only the encoder is fine-tuned (Liao et al.,
2022, §2.2 "Fine-tuning and Inference"). ::

    python scripts/export_encoder.py checkpoints/3ml/checkpoint_last.pt exports/3ml_encoder.pt
    python scripts/export_encoder.py --print-finetune-args exports/3ml_encoder.pt
    python scripts/export_encoder.py checkpoints/3ml/checkpoint_last.pt exports/3ml-hub
    python scripts/export_encoder.py --keep-decoder checkpoints/3ml/checkpoint_last.pt exports/3ml-full

What the export contains, and why: :mod:`fairseq_ext.export.encoder`. OUT is never overwritten unless
``--force``; errors are one line on stderr and exit status 2.
"""
import logging
import sys
from pathlib import Path

if __name__ == "__main__":
    # Its import-time INFO line about fused kernels is irrelevant here.
    logging.getLogger("fairseq_ext.training.fused_kernels").setLevel(logging.WARNING)
    try:
        from fairseq_ext.export.encoder import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext.export.encoder import main
    sys.exit(main())
