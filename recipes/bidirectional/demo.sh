#!/usr/bin/env bash
# The generalized-bidirectionality demo run: `bidir_lm_mini` (2 layers x 128) trained on the
# CPU, each line of text a document of up to 64 tokens (DOCUMENT_FORMAT=lines), 2048 tokens per
# update, lr 2e-3, no dropout, 600 updates, 60 warmup (README, "Demo settings"); VARIANT (default
# hyb_pre) picks the Table 1 variant. Same script as pretrain.sh with
# demo-sized defaults; its hydra twin is recipes/config/bidirectional/demo.yaml.
#   DATA=data-bin/python-docs-spm8000 VARIANT=hyb_pre recipes/bidirectional/demo.sh
set -euo pipefail
export VARIANT="${VARIANT:-hyb_pre}"
export SIZE="${SIZE:-mini}"
export SAVE_DIR="${SAVE_DIR:-checkpoints/bidirectional_demo/${VARIANT}}"
export TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-64}"
export DOCUMENT_FORMAT="${DOCUMENT_FORMAT:-lines}"
export MAX_TOKENS="${MAX_TOKENS:-2048}"
export BATCH_TOKENS="${BATCH_TOKENS:-2048}"
export PEAK_LR="${PEAK_LR:-0.002}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-600}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-60}"
export DROPOUT="${DROPOUT:-0.0}"
export ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.0}"
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-0}"
export LOG_INTERVAL="${LOG_INTERVAL:-25}"
export NUM_WORKERS="${NUM_WORKERS:-0}"
export CPU="${CPU:-1}"
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain.sh" "$@"
