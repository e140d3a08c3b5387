#!/usr/bin/env bash
# RoBERTa pre-training with fairseq's `roberta` model and stock `masked_lm` task.
# Defaults: RoBERTa-base (Liu et al. 2019, Table 9): batch 8K sequences of 512 tokens, peak lr
# 6e-4, 500K updates, 24K warmup, Adam (0.9, 0.98) eps 1e-6, weight decay 0.01, dropout 0.1,
# no clipping, 15% masking (80/10/10). Override any of them through the environment, e.g.
#   DATA=data-bin/python-docs-spm8000 ARCH=roberta_small BATCH_SIZE=16 recipes/roberta/pretrain.sh
# Extra arguments are appended to the fairseq-train command line.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

DATA="${DATA:?set DATA to a fairseq data-bin (scripts/prepare_corpus.sh makes one)}"
SAVE_DIR="${SAVE_DIR:-checkpoints/roberta}"
ARCH="${ARCH:-roberta_base}"
TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-512}"
SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-complete}"
MASK_PROB="${MASK_PROB:-0.15}"
LEAVE_UNMASKED_PROB="${LEAVE_UNMASKED_PROB:-0.1}"
RANDOM_TOKEN_PROB="${RANDOM_TOKEN_PROB:-0.1}"
BATCH_SIZE="${BATCH_SIZE:-8192}"          # effective batch, in sequences
MAX_SENTENCES="${MAX_SENTENCES:-16}"      # per GPU (or per CPU process)
PEAK_LR="${PEAK_LR:-0.0006}"
TOTAL_UPDATES="${TOTAL_UPDATES:-500000}"
WARMUP_UPDATES="${WARMUP_UPDATES:-24000}"
LR_POWER="${LR_POWER:-1}"                 # polynomial_decay with power 1: linear decay to 0
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-06}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"
CLIP_NORM="${CLIP_NORM:-0.0}"
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
CRITERION="${CRITERION:-masked_lm_flops}"  # masked_lm loss + per-category loss/ppl + training FLOPs; never fairseq's cross_entropy (divides by all tokens)
OPTIMIZER="${OPTIMIZER:-fused_adamw}"
SEED="${SEED:-1}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-2000}"
NUM_WORKERS="${NUM_WORKERS:-1}"
CPU="${CPU:-0}"                           # 1: train on the CPU
PRECISION="${PRECISION:-}"                # empty (fp32) or --fp16 on GPUs (bf16: docs/scaling.md)

run_mlm_pretraining "$@"
