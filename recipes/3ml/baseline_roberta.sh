#!/usr/bin/env bash
# The RoBERTa-base baseline of the longer recipe (Liao et al. 2022, Table 3 "RoBERTa*" and
# Appendix C): fairseq's `roberta_base` (post-LN) with the longer recipe's settings (512 tokens,
# batch 2048, peak lr 7e-4 as Table 4's base column, 6% warmup, linear decay, Adam (0.9, 0.98)
# eps 1e-6, wd 0.01), 15% masking and RoBERTa's 125K updates (256M samples, as BERT).
# Same script as pretrain_longer.sh with these defaults; hydra twin:
# recipes/config/3ml/baseline_roberta.yaml.
#   DATA=data-bin/python-docs-spm8000 NUM_GPUS=32 recipes/3ml/baseline_roberta.sh
set -euo pipefail
export SAVE_DIR="${SAVE_DIR:-checkpoints/baseline_roberta}"
export ARCH="${ARCH:-roberta_base}"
export MASK_PROB="${MASK_PROB:-0.15}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-125000}"
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain_longer.sh" "$@"
