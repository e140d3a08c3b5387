#!/usr/bin/env bash
# 3ML pre-training, the efficient recipe (Liao et al. 2022, §3.3 and Table 4, 3ML-large column;
# the recipe of 24hBERT, Izsak et al. 2021): 3ML-self-large (pre-LN), sequences of 128 tokens,
# 40% masking (80% [MASK] / 10% random / 10% unchanged), batch 4096, peak lr 2e-3, 23K updates,
# warmup 6% of them then linear decay to 0, Adam (0.9, 0.98) eps 1e-6, weight decay 0.01, no
# clipping, dropout 0.1, attention dropout 0.1. ARCH=3ml_cross_large gives 3ML-cross; MASK_PROB=0.5
# the paper's other 3ML-self row (it recommends 40-50%).
# This is also the one script behind the other recipes of recipes/3ml/ (pretrain_longer.sh,
# baseline_24hbert.sh, baseline_roberta.sh, demo.sh): they only change its defaults and exec it.
# Override anything through the environment, e.g.
#   DATA=data-bin/python-docs-spm8000 NUM_GPUS=8 recipes/3ml/pretrain_efficient.sh
# Extra arguments are appended to the fairseq-train command line; DRY_RUN=1 only prints it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

DATA="${DATA:?set DATA to a fairseq data-bin (scripts/prepare_corpus.sh makes one)}"
SAVE_DIR="${SAVE_DIR:-checkpoints/3ml_efficient}"
ARCH="${ARCH:-3ml_self_large}"            # 3ml_cross_large; pre-LN is the arch default (Table 4)
TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-128}"
SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-complete}"
MASK_PROB="${MASK_PROB:-0.4}"             # §4.2: 40% or 50% for both 3MLs
LEAVE_UNMASKED_PROB="${LEAVE_UNMASKED_PROB:-0.1}"
RANDOM_TOKEN_PROB="${RANDOM_TOKEN_PROB:-0.1}"
BATCH_SIZE="${BATCH_SIZE:-4096}"          # effective batch, in sequences
MAX_SENTENCES="${MAX_SENTENCES:-32}"      # per GPU (or per CPU process); not a paper value
PEAK_LR="${PEAK_LR:-0.002}"
TOTAL_UPDATES="${TOTAL_UPDATES:-23000}"
WARMUP_PROPORTION="${WARMUP_PROPORTION:-0.06}"
WARMUP_UPDATES="${WARMUP_UPDATES:-}"      # empty: WARMUP_PROPORTION of TOTAL_UPDATES
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
ZERO_SHARDING="${ZERO_SHARDING:-none}"    # os: Adam's state sharded over the GPUs (docs/scaling.md)

run_mlm_pretraining "$@"
