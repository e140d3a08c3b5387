#!/usr/bin/env bash
# Fine-tune a checkpoint of recipes/bidirectional/pretrain.sh on one GLUE task: ONE point of the
# grid of Artetxe et al. (2022), "On the Role of Bidirectionality in Language Model
# Pre-Training", §3.2 "Fine-tuning", Tables 9-11 and Appendix B;
# recipes/bidirectional/finetune_grid.sh runs the whole grid and prints Table 10's best dev
# accuracies. fairseq's stock `sentence_prediction` task and criterion on the `bidirectional_lm`
# model, whose --r-bidir sets the attention over each example (n_bidir = round(R x n)).
#
#   TASK=RTE DATA=glue/RTE-bin CKPT=checkpoints/bidirectional/hyb_pre_125m/checkpoint_last.pt \
#     R_BIDIR=1 LR=1e-05 BATCH=16 recipes/bidirectional/finetune_glue.sh
#
# The paper: a </s> ends each example and a new classification head is learned on its final
# representation (the head reads each row's last token); R_BIDIR=0 fine-tunes with causal
# attention, R_BIDIR=1 with full bidirectional attention over the example (Table 10 uses 0 for
# NxtUni, MskUni and HybUni, 1 for NxtPre, MskBi and HybPre: the attention the model was
# pre-trained with, so R_BIDIR has no default); the grid is lr {5e-6, 1e-5, 2e-5, 5e-5} x batch
# {16, 32, 64}; "the same numbers of updates for different setups": Table 11's, chosen "to follow
# the original settings from RoBERTa" (CoLA 5336, SST-2 20935, MNLI 123873, QNLI 33112, MRPC
# 2296, RTE 2036), whatever the batch; Adam and a polynomial decay schedule; "the rest of
# hyperparameters follow RoBERTa".
# Where the paper is silent, RoBERTa's GLUE settings (fairseq's RoBERTa GLUE README): warmup
# over 6% of the updates, RoBERTa's own counts (CoLA 320, SST-2 1256, MNLI 7432, QNLI 1986, MRPC
# 137, RTE 122), linear decay to 0; Adam (0.9, 0.98) eps 1e-6, weight decay 0.1, no clipping,
# dropout 0.1, attention dropout 0.1; `--init-token 0 --separator-token 2` (RoBERTa's
# `<s> A </s> </s> B </s>`; the head reads the final </s>); the default BATCH is RoBERTa's for
# the task (16: CoLA, MRPC, RTE; 32: MNLI, QNLI, SST-2), the batch Table 11's counts were made
# for. Table 10 reports accuracy for every task (CoLA and MRPC too), so the best checkpoint and
# the grid's score are dev accuracy (a downstream task of scripts/prepare_downstream.sh,
# DebSection, GlossTopic, FortuneTopic or GlossPair, too: it needs TOTAL_UPDATES, warms up over 6% of them
# and has the classes of DATA/label/dict.txt) (MNLI: the matched dev set, `valid`; the mismatched one,
# `valid1`, is scored beside it when DATA has it). Validation at every epoch end and at the
# last update.
#
# CKPT is the pre-training checkpoint itself (restored with --restore-file and all the
# --reset-* flags: a fresh optimizer, schedule, data loader and meters; the classification
# head is new). ARCH (or SIZE) must be its arch, and MAX_TARGET_POSITIONS its
# --tokens-per-sample (1024 in pretrain.sh): the size of its position table. MAX_POSITIONS (the
# longest example; longer ones are truncated, and their head then reads the last kept token
# instead of </s>) defaults to the same. DATA: a data-bin laid out as sentence_prediction
# expects, with the pre-training dictionary (scripts/prepare_glue.sh makes it).
# Extra arguments are appended to the fairseq-train command line. DRY_RUN=1 prints it only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

PAPER_TASKS="CoLA MNLI MRPC QNLI RTE SST-2"
TASK="${TASK:?set TASK to one of ${PAPER_TASKS} (Table 11), or ${DOWNSTREAM_TASKS}}"
TASK="$(finetune_task_name "${TASK}")" || exit 2
# Table 11's updates; RoBERTa's warmup (6% of them) and batch for the task; the classes.
case "${TASK}" in
  CoLA) task_updates=5336 task_warmup=320 task_batch=16 task_classes=2 ;;
  MNLI) task_updates=123873 task_warmup=7432 task_batch=32 task_classes=3 ;;
  MRPC) task_updates=2296 task_warmup=137 task_batch=16 task_classes=2 ;;
  QNLI) task_updates=33112 task_warmup=1986 task_batch=32 task_classes=2 ;;
  RTE) task_updates=2036 task_warmup=122 task_batch=16 task_classes=2 ;;
  SST-2) task_updates=20935 task_warmup=1256 task_batch=32 task_classes=2 ;;
  DebSection|GlossTopic|FortuneTopic|GlossPair)  # downstream: no Table 11 updates; batch 16, DATA's classes
    task_updates='' task_warmup='' task_batch=16 task_classes='' ;;
  *) die "TASK=${TASK} is not among the paper's fine-tuning tasks (Table 11: ${PAPER_TASKS})" ;;
esac

DATA="${DATA:?set DATA to the data-bin of the task (input0/, [input1/,] label/), e.g. glue/RTE-bin of scripts/prepare_glue.sh}"
CKPT="${CKPT:?set CKPT to a checkpoint of recipes/bidirectional/pretrain.sh}"
[[ -f "${CKPT}" ]] || die "CKPT=${CKPT}: no such file"
R_BIDIR="${R_BIDIR:?set R_BIDIR: 0 (causal attention; Table 10 for NxtUni, MskUni, HybUni) or 1 (bidirectional over the example; NxtPre, MskBi, HybPre), or a ratio in between}"
awk -v r="${R_BIDIR}" 'BEGIN { exit !(r ~ /^([0-9]+\.?[0-9]*|\.[0-9]+)$/ && r + 0 <= 1) }' \
  || die "R_BIDIR=${R_BIDIR} must be a number in [0, 1] (n_bidir = R x the example's length)"
SIZE="${SIZE:-125m}"                      # 125m 355m 1_3b 2_7b 6_7b (Table 2); small mini tiny
ARCH="${ARCH:-bidir_lm_${SIZE}}"          # the pre-training arch
MAX_TARGET_POSITIONS="${MAX_TARGET_POSITIONS:-1024}"  # the pre-training TOKENS_PER_SAMPLE
MAX_POSITIONS="${MAX_POSITIONS:-${MAX_TARGET_POSITIONS}}"  # longer examples are truncated
(( MAX_POSITIONS <= MAX_TARGET_POSITIONS )) \
  || die "MAX_POSITIONS=${MAX_POSITIONS} exceeds MAX_TARGET_POSITIONS=${MAX_TARGET_POSITIONS} (the model's position table)"
LR="${LR:-1e-05}"                         # the paper's grid: 5e-06 1e-05 2e-05 5e-05
BATCH="${BATCH:-${task_batch}}"           # effective batch, in examples; grid: 16 32 64
MAX_SENTENCES="${MAX_SENTENCES:-16}"      # per GPU (or per CPU process); not a paper value
TOTAL_UPDATES="${TOTAL_UPDATES:-${task_updates}}"
[[ -n "${TOTAL_UPDATES}" ]] || die "TASK=${TASK} has no updates in Table 11: set TOTAL_UPDATES (e.g. 3 epochs: 3 x its training examples / BATCH)"
WARMUP_UPDATES="${WARMUP_UPDATES:-${task_warmup:-$(warmup_updates "${TOTAL_UPDATES}" 0.06)}}"
LR_POWER="${LR_POWER:-1}"                 # polynomial decay of power 1: linear, to 0
SEED="${SEED:-1}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.1}"
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-06}"
CLIP_NORM="${CLIP_NORM:-0.0}"
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
CRITERION="${CRITERION:-sentence_prediction}"
OPTIMIZER="${OPTIMIZER:-fused_adamw}"     # Adam with decoupled weight decay, as fairseq's adam
SHORTEN_METHOD="${SHORTEN_METHOD:-truncate}"
NUM_CLASSES="${NUM_CLASSES:-${task_classes:-$(label_classes "${DATA}")}}"
BEST_METRIC="${BEST_METRIC:-accuracy}"    # Table 10: accuracy, every task
VALID_SUBSET="${VALID_SUBSET:-valid}"     # MNLI: valid,valid1 when DATA has both (m/mm)
NO_SAVE="${NO_SAVE:-0}"                   # 1: no checkpoint at all (the grid needs dev scores only)
SAVE_DIR="${SAVE_DIR:-checkpoints/bidirectional_glue/${TASK}/r${R_BIDIR}_lr${LR}_bs${BATCH}}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
NUM_WORKERS="${NUM_WORKERS:-1}"
CPU="${CPU:-0}"                           # 1: train on the CPU
PRECISION="${PRECISION:-}"                # empty (fp32) or --fp16 on GPUs (bf16: docs/scaling.md)
POOLING="${POOLING:-}"                   # the head reads: empty: the model's default, last (the final </s>, the paper's); mean: the mean of the tokens
case "${POOLING}" in
  ''|last|mean) ;;
  *) die "POOLING=${POOLING}: one of last or mean (the mean of the tokens' features)" ;;
esac

# run_sentence_prediction's names for the checkpoint and the batch
PRETRAINED="${CKPT}"
BATCH_SIZE="${BATCH}"

# Table 11's updates whatever the batch, linear decay after RoBERTa's warmup; checkpoint_best.pt
# (by dev accuracy) only, or nothing with NO_SAVE=1.
recipe_flags=(
  --arch "${ARCH}" --r-bidir "${R_BIDIR}" --max-target-positions "${MAX_TARGET_POSITIONS}"
  --lr-scheduler polynomial_decay --power "${LR_POWER}" --lr "${LR}"
  --total-num-update "${TOTAL_UPDATES}" --warmup-updates "${WARMUP_UPDATES}"
  --max-update "${TOTAL_UPDATES}" --no-epoch-checkpoints --no-last-checkpoints
)
if [[ -n "${POOLING}" ]]; then recipe_flags+=(--classification-pooling "${POOLING}"); fi
if [[ "${NO_SAVE}" == 1 ]]; then recipe_flags+=(--no-save); fi
run_sentence_prediction recipe_flags "$@"
