#!/usr/bin/env bash
# Issue 55's smallest pre-training measured to help (docs/transfer.md): the demo's 2 x 128 RoBERTa
# (pre-LN with an embedding LayerNorm, recipes/roberta/demo.sh's settings) for 2,000 updates on
# English prose (scripts/prepare_english_prose.sh: GCIDE, encoded with the embedded corpus's
# sentencepiece model and dictionary), about 3 min of one CPU thread. Fine-tuned on FortuneTopic
# with the demo's protocol, its checkpoint at 1,000 updates (SAVE_INTERVAL_UPDATES=1000) was
# 5.07 ± 0.29 points above its random init and its last one 5.40 ± 0.72 (3 seeds, paired;
# docs/transfer/curve.json), where the same model on the Python docs is 3.00 ± 0.46 below.
#   scripts/prepare_english_prose.sh data-bin/python-docs-spm8000 data-bin/gcide-spm8000
#   DATA=data-bin/gcide-spm8000 recipes/roberta/english_prose.sh
set -euo pipefail
export SAVE_DIR="${SAVE_DIR:-checkpoints/roberta_english_prose}"
export ARCH="${ARCH:-roberta_mini_prenorm}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-2000}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-100}"
exec "$(dirname "${BASH_SOURCE[0]}")/demo.sh" "$@"
