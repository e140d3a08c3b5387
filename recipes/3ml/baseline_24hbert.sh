#!/usr/bin/env bash
# The 24hBERT baseline of the efficient recipe (Liao et al. 2022, Table 3; Izsak et al. 2021):
# fairseq's RoBERTa at large size with pre-LN (`roberta_large_prenorm`), trained with exactly the
# efficient recipe's settings and budget (128 tokens, batch 4096, lr 2e-3, 23K updates, 6% warmup,
# linear decay, Adam (0.9, 0.98) eps 1e-6, wd 0.01) and BERT's 15% masking; MASK_PROB=0.4 is the
# paper's 24hBERT-40% row. Same script as pretrain_efficient.sh with these defaults; twin:
# recipes/config/3ml/baseline_24hbert.yaml.
#   DATA=data-bin/python-docs-spm8000 NUM_GPUS=16 recipes/3ml/baseline_24hbert.sh
set -euo pipefail
export SAVE_DIR="${SAVE_DIR:-checkpoints/baseline_24hbert}"
export ARCH="${ARCH:-roberta_large_prenorm}"
export MASK_PROB="${MASK_PROB:-0.15}"
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain_efficient.sh" "$@"
