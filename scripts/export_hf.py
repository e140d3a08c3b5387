#!/usr/bin/env python
"""Export a fairseq checkpoint to a Hugging Face ``transformers`` directory (safetensors,
config, fast tokenizer): RoBERTa -> ``RobertaForMaskedLM`` (pre-LN: ``RobertaPreLayerNorm`` /
``XLMRobertaXLForMaskedLM``), bidirectional_lm NxtUni -> ``OPTForCausalLM``. ::

    python scripts/export_hf.py exports/3ml_encoder.pt exports/3ml_hf
    python scripts/export_hf.py HUB_DIR OUT_DIR --force

What maps, what is refused and why: :mod:`fairseq_ext.export.huggingface`. Needs the ``hf`` extra
(``requirements-hf.txt``). OUT is never overwritten unless ``--force``; errors are one line on
stderr and exit status 2.
"""
import logging
import sys
from pathlib import Path

if __name__ == "__main__":
    # Its import-time INFO line about fused kernels is irrelevant here.
    logging.getLogger("fairseq_ext.training.fused_kernels").setLevel(logging.WARNING)
    try:
        from fairseq_ext.export.huggingface import main
    except ImportError:  # run from a checkout where fairseq_ext is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fairseq_ext.export.huggingface import main
    sys.exit(main())
