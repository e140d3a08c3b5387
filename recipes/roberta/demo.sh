#!/usr/bin/env bash
# The `make demo` run: a small RoBERTa (fairseq's roberta, `roberta_mini` sizes: 2 layers of dim
# 128) trained on the CPU for a fixed number of updates. Same recipe as pretrain.sh with demo-sized defaults; its
# hydra twin is recipes/config/roberta/demo.yaml (tests/test_recipes.py checks they agree).
set -euo pipefail
export SAVE_DIR="${SAVE_DIR:-checkpoints/roberta_demo}"
export ARCH="${ARCH:-roberta_mini}"
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
