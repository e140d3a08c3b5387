#!/usr/bin/env bash
# The `make demo` baseline: a small RoBERTa (fairseq's roberta, `roberta_mini_prenorm`: 2 pre-LN
# layers of dim 128, with an embedding LayerNorm: EMBEDDING_LAYERNORM=1, `--layernorm-embedding`)
# trained on the CPU for a fixed number of updates. Same recipe as pretrain.sh
# with demo-sized defaults, each chosen so that a model this small learns context within the
# demo's minutes (README, "Demo settings"): one line of text per sample (`eos`, up to 64
# tokens), 64 lines per update, lr 2e-3, no dropout. Its hydra twin is
# recipes/config/roberta/demo.yaml (tests/test_recipes.py checks they agree).
set -euo pipefail
export SAVE_DIR="${SAVE_DIR:-checkpoints/roberta_demo}"
export ARCH="${ARCH:-roberta_mini_prenorm}"
export TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-64}"
export SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-eos}"
export BATCH_SIZE="${BATCH_SIZE:-64}"
export MAX_SENTENCES="${MAX_SENTENCES:-64}"
export PEAK_LR="${PEAK_LR:-0.002}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-1000}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-100}"
export DROPOUT="${DROPOUT:-0.0}"
export ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.0}"
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-0}"
export LOG_INTERVAL="${LOG_INTERVAL:-25}"
export NUM_WORKERS="${NUM_WORKERS:-0}"
export CPU="${CPU:-1}"
# 1: an embedding LayerNorm (`--layernorm-embedding`). Without it a short pre-LN run collapses:
# its first block writes a near-constant vector 50x the embeddings into the residual stream and
# the model fine-tunes worse than its random initialisation (docs/transfer.md).
EMBEDDING_LAYERNORM="${EMBEDDING_LAYERNORM:-1}"
case "${EMBEDDING_LAYERNORM}" in
  1) embedding_flags=(--layernorm-embedding) ;;
  0) embedding_flags=() ;;
  *) echo "error: EMBEDDING_LAYERNORM=${EMBEDDING_LAYERNORM}: use 1 (an embedding LayerNorm) or 0" >&2; exit 2 ;;
esac
exec "$(dirname "${BASH_SOURCE[0]}")/pretrain.sh" "${embedding_flags[@]}" "$@"
