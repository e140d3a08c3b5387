#!/usr/bin/env bash
# The SwishRNN demo run: a small SwishRNN-BERT (`swishrnn_bert_small`: bert_rab_small, 4 layers
# of dim 256, with SwishRNN blocks of d' 680 and step sizes 1,2,4) trained on the CPU with the
# paper's 15% masking and otherwise exactly the settings of recipes/roberta/demo.sh and
# recipes/3ml/demo.sh (128 tokens, batch 16, lr 1e-3, 300 updates, 30 warmup, log every 25), so
# the demo runs compare equal updates; ARCH=bert_rab_small or bert_orig_small gives the
# baselines at the same size. Same script as pretrain.sh with demo-sized defaults; its hydra
# twin is recipes/config/swishrnn/demo.yaml (tests/test_recipes.py checks they agree).
#   DATA=data-bin/python-docs-spm8000 recipes/swishrnn/demo.sh
set -euo pipefail
export ARCH="${ARCH:-swishrnn_bert_small}"
export SAVE_DIR="${SAVE_DIR:-checkpoints/swishrnn_demo/${ARCH}}"
export TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-128}"
export BATCH_SIZE="${BATCH_SIZE:-16}"
export MAX_SENTENCES="${MAX_SENTENCES:-16}"
export PEAK_LR="${PEAK_LR:-0.001}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-300}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-30}"
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-0}"
export LOG_INTERVAL="${LOG_INTERVAL:-25}"
export NUM_WORKERS="${NUM_WORKERS:-0}"
export CPU="${CPU:-1}"
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain.sh" "$@"
