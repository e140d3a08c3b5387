#!/usr/bin/env bash
# The smallest pre-training measured to pay on the English corpus (docs/transfer.md, "On the
# English corpus"): the demo's 2 x 128 RoBERTa (recipes/roberta/demo.sh: pre-LN with an
# embedding LayerNorm, one sentence of up to 64 tokens per sample, 64 per update, lr 2e-3, no
# dropout) for 12,000 updates (about 17M tokens, 0.57 of an epoch of the corpus's 29.8M training
# pieces) on `data-bin/english-spm8000`: 1,332 s of one CPU thread (two such runs side by side
# on 2 cores). Fine-tune it with mean pooling (POOLING=mean) and the rate docs/transfer.md chose.
#   scripts/prepare_corpus.sh                       # data-bin/english-spm8000
#   recipes/roberta/english.sh                      # checkpoints/roberta_english
# Its hydra twin is recipes/config/roberta/english.yaml.
set -euo pipefail
export DATA="${DATA:-data-bin/english-spm8000}"
export SAVE_DIR="${SAVE_DIR:-checkpoints/roberta_english}"
export ARCH="${ARCH:-roberta_mini_prenorm}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-12000}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-100}"
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-3000}"
export LOG_INTERVAL="${LOG_INTERVAL:-100}"
exec "$(dirname "${BASH_SOURCE[0]}")/demo.sh" "$@"
