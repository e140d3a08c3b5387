#!/usr/bin/env bash
# The SwishRNN demo run: a small SwishRNN-BERT (`swishrnn_bert_mini`: bert_rab_mini, 2 layers
# of dim 128, with SwishRNN blocks and step sizes 1,2,4, pre-LN) trained on the CPU with the
# paper's 15% masking and otherwise exactly the settings of recipes/roberta/demo.sh and
# recipes/3ml/demo.sh (one line per sample up to 64 tokens, 64 lines per update, lr 2e-3, no
# dropout, 600 updates, 60 warmup, log every 25: the recurrence learns context sooner); ARCH=bert_rab_mini or bert_orig_mini gives
# the baselines at the same size and FLOPs. Same script as pretrain.sh with demo-sized defaults; its hydra
# twin is recipes/config/swishrnn/demo.yaml (tests/test_recipes.py checks they agree).
#   DATA=data-bin/python-docs-spm8000 recipes/swishrnn/demo.sh
set -euo pipefail
export ARCH="${ARCH:-swishrnn_bert_mini}"
export SAVE_DIR="${SAVE_DIR:-checkpoints/swishrnn_demo/${ARCH}}"
export TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-64}"
export SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-eos}"
export BATCH_SIZE="${BATCH_SIZE:-64}"
export MAX_SENTENCES="${MAX_SENTENCES:-64}"
export PEAK_LR="${PEAK_LR:-0.002}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-600}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-60}"
export DROPOUT="${DROPOUT:-0.0}"
export ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.0}"
ENCODER_NORMALIZE_BEFORE="${ENCODER_NORMALIZE_BEFORE:-1}"  # 1: pre-LN (--encoder-normalize-before), as the other demo runs
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-0}"
export LOG_INTERVAL="${LOG_INTERVAL:-25}"
export NUM_WORKERS="${NUM_WORKERS:-0}"
export CPU="${CPU:-1}"
normalize=()
if [[ "${ENCODER_NORMALIZE_BEFORE}" == 1 ]]; then normalize=(--encoder-normalize-before); fi
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain.sh" "${normalize[@]}" "$@"
