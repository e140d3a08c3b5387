#!/usr/bin/env bash
# Fine-tune a model pre-trained by recipes/swishrnn/pretrain.sh on one GLUE or SuperGLUE task:
# ONE run of "Simple Recurrence Improves Masked Language Models" (Lei et al., Appendix B,
# "Fine-tuning" and Table 4); recipes/swishrnn/finetune_glue_grid.sh runs the paper's grid of
# learning rates x 3 seeds. fairseq's stock `sentence_prediction` task and criterion, as in
# fairseq's RoBERTa GLUE README.
#
#   TASK=RTE DATA=glue/RTE-bin PRETRAINED=checkpoints/swishrnn/swishrnn_bert_base/checkpoint_last.pt \
#     LR=5e-06 recipes/swishrnn/finetune_glue.sh
#
# The paper: batch 32, evaluation every 1000 steps, Adam without weight decay, a fixed learning
# rate tuned among {1e-5, 5e-6, 3e-6, 2e-6} (default: 1e-5) warmed up over 1000 steps (fairseq's
# `fixed` scheduler with --warmup-updates 1000: linear warmup, then constant), and the number of
# steps of Table 4 (TOTAL_UPDATES, from TASK): BoolQ 50K, CoLA 50K, MNLI 200K, MRPC 20K,
# MultiRC 50K, QNLI 100K, QQP 150K, RTE 20K, SST-2 80K, STS-B 30K. Validation and checkpointing
# happen every EVAL_INTERVAL_UPDATES (1000) updates and at the end only (epoch ends are no
# evaluation points); checkpoint_best.pt is the best of these by the task's metric. Not in the
# paper, so fairseq's RoBERTa GLUE settings: Adam (0.9, 0.98) eps 1e-6, no clipping, dropout 0.1,
# attention dropout 0.1.
#
# PRETRAINED is the pre-training checkpoint itself (restored with --restore-file and all the
# --reset-* flags: a fresh optimizer, schedule, data loader and meters; the classification head
# is new). ARCH must be the pre-training arch (default swishrnn_bert_base; bert_rab_base,
# bert_orig_base, *_large), with its model flags: RAB_NUM_BUCKETS, RAB_MAX_DISTANCE,
# SWISHRNN_STEP_SIZES default as in pretrain.sh, and flags given there as extra arguments
# (--rab-shared-across-layers, --no-token-positional-embeddings) must be given here too.
# MAX_POSITIONS: the pre-training TOKENS_PER_SAMPLE (512).
#
# DATA: a data-bin laid out as sentence_prediction expects (scripts/prepare_glue.sh makes it):
# input0/ [input1/] with the pre-training dictionary, label/ (classification) or
# label/{train,valid}.label (STS-B). BoolQ: input0 the question, input1 the passage. MultiRC has
# no fairseq preprocessing: it is taken as binary classification of (paragraph + question,
# answer) pairs, input0 the paragraph and question, input1 one answer, label whether the answer
# is correct; its metric here is the binary F1 over all answers (the official F1a); the
# official EM (all answers of a question right) needs the answers grouped by question, which is
# not done. A downstream task of scripts/prepare_downstream.sh (DebSection, GlossTopic,
# FortuneTopic, GlossPair) has no Table 4 steps (set TOTAL_UPDATES), is scored by accuracy and has the
# classes of DATA/label/dict.txt. The task sets NUM_CLASSES, --regression-target (STS-B) and BEST_METRIC (CoLA:
# Matthews corr.; MRPC, QQP: mean of F1 and accuracy; STS-B: mean of Pearson and Spearman;
# MultiRC: F1; others: accuracy).
# Extra arguments are appended to the fairseq-train command line. DRY_RUN=1 prints it only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

TASK="${TASK:?set TASK to one of BoolQ CoLA MNLI MRPC MultiRC QNLI QQP RTE SST-2 STS-B, or ${DOWNSTREAM_TASKS}}"
TASK="$(finetune_task_name "${TASK}" glue_superglue_task_name)" || exit 2
# Table 4's maximum number of fine-tuning steps, the classes and the metric of each task.
case "${TASK}" in
  BoolQ) task_updates=50000 task_classes=2 task_metric=accuracy ;;
  CoLA) task_updates=50000 task_classes=2 task_metric=mcc ;;
  MNLI) task_updates=200000 task_classes=3 task_metric=accuracy ;;
  MRPC) task_updates=20000 task_classes=2 task_metric=acc_and_f1 ;;
  MultiRC) task_updates=50000 task_classes=2 task_metric=f1 ;;
  QNLI) task_updates=100000 task_classes=2 task_metric=accuracy ;;
  QQP) task_updates=150000 task_classes=2 task_metric=acc_and_f1 ;;
  RTE) task_updates=20000 task_classes=2 task_metric=accuracy ;;
  SST-2) task_updates=80000 task_classes=2 task_metric=accuracy ;;
  STS-B) task_updates=30000 task_classes=1 task_metric=pearson_and_spearman ;;
  *) task_updates='' task_classes='' task_metric=accuracy ;;  # downstream: no Table 4 steps
esac

DATA="${DATA:?set DATA to the data-bin of the task (input0/, [input1/,] label/), e.g. glue/RTE-bin of scripts/prepare_glue.sh}"
PRETRAINED="${PRETRAINED:?set PRETRAINED to a checkpoint of recipes/swishrnn/pretrain.sh}"
ARCH="${ARCH:-swishrnn_bert_base}"        # the pre-training arch
MAX_POSITIONS="${MAX_POSITIONS:-512}"     # the pre-training TOKENS_PER_SAMPLE
# Model flags of the arch, as in pretrain.sh (empty: not passed).
if [[ "${ARCH}" == bert_rab* || "${ARCH}" == swishrnn_bert* ]]; then
  RAB_NUM_BUCKETS="${RAB_NUM_BUCKETS:-32}"; RAB_MAX_DISTANCE="${RAB_MAX_DISTANCE:-128}"
fi
if [[ "${ARCH}" == swishrnn_bert* ]]; then SWISHRNN_STEP_SIZES="${SWISHRNN_STEP_SIZES:-1,2,4}"; fi
RAB_NUM_BUCKETS="${RAB_NUM_BUCKETS:-}"
RAB_MAX_DISTANCE="${RAB_MAX_DISTANCE:-}"
SWISHRNN_STEP_SIZES="${SWISHRNN_STEP_SIZES:-}"
LR="${LR:-1e-05}"                         # the paper's grid: 1e-05 5e-06 3e-06 2e-06
BATCH_SIZE="${BATCH_SIZE:-32}"            # effective batch, in sequences
MAX_SENTENCES="${MAX_SENTENCES:-16}"      # per GPU (or per CPU process); not a paper value
TOTAL_UPDATES="${TOTAL_UPDATES:-${task_updates}}"
[[ -n "${TOTAL_UPDATES}" ]] || die "TASK=${TASK} has no steps in Table 4: set TOTAL_UPDATES (e.g. 3 epochs: 3 x its training examples / BATCH_SIZE)"
WARMUP_UPDATES="${WARMUP_UPDATES:-1000}"
EVAL_INTERVAL_UPDATES="${EVAL_INTERVAL_UPDATES:-1000}"  # validate and save every N updates
SEED="${SEED:-1}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.0}"
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-06}"
CLIP_NORM="${CLIP_NORM:-0.0}"
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
CRITERION="${CRITERION:-sentence_prediction}"
OPTIMIZER="${OPTIMIZER:-fused_adamw}"     # with weight decay 0: Adam
SHORTEN_METHOD="${SHORTEN_METHOD:-truncate}"  # longer examples are cut to MAX_POSITIONS
NUM_CLASSES="${NUM_CLASSES:-${task_classes:-$(label_classes "${DATA}")}}"
BEST_METRIC="${BEST_METRIC:-${task_metric}}"
VALID_SUBSET="${VALID_SUBSET:-valid}"     # MNLI: valid,valid1 when DATA has both (m/mm)
SAVE_DIR="${SAVE_DIR:-checkpoints/glue/${ARCH}/${TASK}/lr${LR}_seed${SEED}}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
NUM_WORKERS="${NUM_WORKERS:-1}"
CPU="${CPU:-0}"                           # 1: train on the CPU
PRECISION="${PRECISION:-}"                # empty (fp32) or --fp16 on GPUs (bf16: docs/scaling.md)
POOLING="${POOLING:-}"                   # the head reads: empty: the model's default, first (<s>); mean: the mean of the tokens
case "${POOLING}" in
  ''|first|mean) ;;
  *) die "POOLING=${POOLING}: one of first or mean (the mean of the tokens' features)" ;;
esac

model_arch="${ARCH}"
# BERT-orig is fairseq's roberta, which has no pooling choice: its twin on roberta_pooled
if [[ -n "${POOLING}" && "${ARCH}" == bert_orig_* ]]; then model_arch="bert_orig_pooled_${ARCH#bert_orig_}"; fi
model_args=(--arch "${model_arch}")
if [[ -n "${RAB_NUM_BUCKETS}" ]]; then model_args+=(--rab-num-buckets "${RAB_NUM_BUCKETS}"); fi
if [[ -n "${RAB_MAX_DISTANCE}" ]]; then model_args+=(--rab-max-distance "${RAB_MAX_DISTANCE}"); fi
if [[ -n "${SWISHRNN_STEP_SIZES}" ]]; then
  model_args+=(--swishrnn-step-sizes "${SWISHRNN_STEP_SIZES}")
fi
if [[ -n "${POOLING}" ]]; then model_args+=(--classification-pooling "${POOLING}"); fi

# Lei et al.'s schedule: a fixed lr after the warmup, Table 4's steps, validation and saving
# every EVAL_INTERVAL_UPDATES updates, never at an epoch end (intervals of 1e6 epochs).
recipe_flags=(
  "${model_args[@]}" --reset-lr-scheduler
  --lr-scheduler fixed --lr "${LR}" --warmup-updates "${WARMUP_UPDATES}"
  --max-update "${TOTAL_UPDATES}"
  --validate-interval-updates "${EVAL_INTERVAL_UPDATES}" --validate-interval 1000000
  --save-interval-updates "${EVAL_INTERVAL_UPDATES}" --save-interval 1000000
  --keep-interval-updates 1 --no-epoch-checkpoints --no-last-checkpoints
)
run_sentence_prediction recipe_flags "$@"
