#!/usr/bin/env bash
# MLM pre-training of "Simple Recurrence Improves Masked Language Models" (Lei et al., §4 and
# Appendix B, Table 3) with fairseq's stock `masked_lm` task: SwishRNN-BERT (`swishrnn_bert_base`,
# step sizes 1,2,4 interleaved), sequences of 512 tokens, 15% masking with BERT's 80% [MASK] /
# 10% random / 10% unchanged, no next-sentence objective, 300K updates, 20K warmup updates then
# linear decay to 0, Adam (0.9, 0.98), weight decay 0.01, dropout 0.1, attention dropout 0.1.
# Base models (the default): batch 1024, peak lr 3e-4; an ARCH matching *_large defaults to
# Table 3's large column: batch 4096, peak lr 2e-4. The paper gives no Adam eps: 1e-6 as the
# other recipes (RoBERTa's); no clipping, as RoBERTa (the paper does not say).
# The baselines run the same recipe: ARCH=bert_rab_base (BERT-rab: T5 relative attention bias)
# or ARCH=bert_orig_base (BERT-orig: fairseq's roberta); *_large for the large models.
# Model flags: RAB_NUM_BUCKETS and RAB_MAX_DISTANCE (bert_rab_*, swishrnn_bert_*: T5's 32 and
# 128), SWISHRNN_STEP_SIZES (swishrnn_bert_*: 1,2,4; Table 2's slower variant: 1); empty leaves
# the flag out. Others (--rab-shared-across-layers, --no-token-positional-embeddings) go as
# extra arguments; fine-tuning must repeat them (recipes/swishrnn/finetune_glue.sh).
# Hydra twins: recipes/config/swishrnn/pretrain_base.yaml and pretrain_large.yaml.
#   DATA=data-bin/wiki-books NUM_GPUS=16 recipes/swishrnn/pretrain.sh
#   DATA=data-bin/wiki-books NUM_GPUS=64 ARCH=bert_rab_large recipes/swishrnn/pretrain.sh
# Extra arguments are appended to the fairseq-train command line; DRY_RUN=1 only prints it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

DATA="${DATA:?set DATA to a fairseq data-bin (scripts/prepare_corpus.sh makes one)}"
ARCH="${ARCH:-swishrnn_bert_base}"       # bert_rab_base, bert_orig_base; *_large
SAVE_DIR="${SAVE_DIR:-checkpoints/swishrnn/${ARCH}}"
TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-512}"
SAMPLE_BREAK_MODE="${SAMPLE_BREAK_MODE:-complete}"
MASK_PROB="${MASK_PROB:-0.15}"
LEAVE_UNMASKED_PROB="${LEAVE_UNMASKED_PROB:-0.1}"
RANDOM_TOKEN_PROB="${RANDOM_TOKEN_PROB:-0.1}"
# Table 3: batch 4096 and lr 2e-4 for the large models, 1024 and 3e-4 for the base ones.
if [[ "${ARCH}" == *_large ]]; then
  BATCH_SIZE="${BATCH_SIZE:-4096}"; PEAK_LR="${PEAK_LR:-0.0002}"
fi
BATCH_SIZE="${BATCH_SIZE:-1024}"          # effective batch, in sequences
PEAK_LR="${PEAK_LR:-0.0003}"
MAX_SENTENCES="${MAX_SENTENCES:-16}"      # per GPU (or per CPU process); not a paper value
TOTAL_UPDATES="${TOTAL_UPDATES:-300000}"
WARMUP_UPDATES="${WARMUP_UPDATES:-20000}"
LR_POWER="${LR_POWER:-1}"                 # polynomial_decay with power 1: linear decay to 0
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-06}"             # not in the paper
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"
CLIP_NORM="${CLIP_NORM:-0.0}"             # not in the paper
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
# Model flags of the arch (empty: not passed).
if [[ "${ARCH}" == bert_rab* || "${ARCH}" == swishrnn_bert* ]]; then
  RAB_NUM_BUCKETS="${RAB_NUM_BUCKETS:-32}"; RAB_MAX_DISTANCE="${RAB_MAX_DISTANCE:-128}"
fi
if [[ "${ARCH}" == swishrnn_bert* ]]; then SWISHRNN_STEP_SIZES="${SWISHRNN_STEP_SIZES:-1,2,4}"; fi
RAB_NUM_BUCKETS="${RAB_NUM_BUCKETS:-}"
RAB_MAX_DISTANCE="${RAB_MAX_DISTANCE:-}"
SWISHRNN_STEP_SIZES="${SWISHRNN_STEP_SIZES:-}"
CRITERION="${CRITERION:-masked_lm_flops}"  # masked_lm loss + per-category loss/ppl + training FLOPs; never fairseq's cross_entropy (divides by all tokens)
OPTIMIZER="${OPTIMIZER:-fused_adamw}"
SEED="${SEED:-1}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
SAVE_INTERVAL_UPDATES="${SAVE_INTERVAL_UPDATES:-2000}"
NUM_WORKERS="${NUM_WORKERS:-1}"
CPU="${CPU:-0}"                           # 1: train on the CPU
PRECISION="${PRECISION:-}"                # empty (fp32) or --fp16 on GPUs (bf16: docs/scaling.md)

model_args=()
if [[ -n "${RAB_NUM_BUCKETS}" ]]; then model_args+=(--rab-num-buckets "${RAB_NUM_BUCKETS}"); fi
if [[ -n "${RAB_MAX_DISTANCE}" ]]; then model_args+=(--rab-max-distance "${RAB_MAX_DISTANCE}"); fi
if [[ -n "${SWISHRNN_STEP_SIZES}" ]]; then
  model_args+=(--swishrnn-step-sizes "${SWISHRNN_STEP_SIZES}")
fi

run_mlm_pretraining "${model_args[@]}" "$@"
