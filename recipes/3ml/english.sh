#!/usr/bin/env bash
# 3ML-self-40% at the training FLOPs of recipes/roberta/english.sh (RoBERTa-15%, 24,000
# updates, the smallest measured pre-training that pays on the English corpus): the same
# 2 x 128 pre-LN encoder with an embedding LayerNorm, one sentence of up to 64 tokens per sample,
# 64 per update, lr 2e-3, no dropout, 5% warm-up, and the demo's 1-layer decoder of 32 (1 head,
# FFN 128) that appends the [MASK]s. At this shape 3ML costs 1.22x RoBERTa-15%'s FLOPs per
# update (analytic speedup 0.82: its 40%-wide output layer costs more than the encoder saves),
# so equal FLOPs buy 19,591 updates:
#   python -m fairseq_ext.flops --arch 3ml_self_mini --decoder-layers 1 --decoder-embed-dim 32 \
#     --decoder-ffn-embed-dim 128 --mask-prob 0.4 --tokens-per-sample 64 --data data-bin/english-spm8000 \
#     --batch-size 64 --vs-mask-prob 0.15 --budget-of roberta_mini_prenorm:24000
# Fine-tuned through its exported encoder (docs/transfer.md, "3ML-self-40% at the paying budget").
#   scripts/prepare_corpus.sh                       # data-bin/english-spm8000
#   recipes/3ml/english.sh                          # checkpoints/3ml_english
# Its hydra twin is recipes/config/3ml/english.yaml.
set -euo pipefail
export DATA="${DATA:-data-bin/english-spm8000}"
export SAVE_DIR="${SAVE_DIR:-checkpoints/3ml_english}"
export ARCH="${ARCH:-3ml_self_mini}"
export MASK_PROB="${MASK_PROB:-0.4}"
export TOTAL_UPDATES="${TOTAL_UPDATES:-19591}"
export WARMUP_UPDATES="${WARMUP_UPDATES:-980}"
export SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-4900}"
export LOG_INTERVAL="${LOG_INTERVAL:-100}"
exec "$(dirname "${BASH_SOURCE[0]}")/demo.sh" --decoder-layers 1 --decoder-embed-dim 32 \
  --decoder-ffn-embed-dim 128 --decoder-attention-heads 1 "$@"
