#!/usr/bin/env bash
# Fine-tune an exported 3ML encoder on one GLUE task: ONE point of the 3ML paper's grid (Liao et
# al. 2022, App. B, Table 5, borrowed from 24hBERT); recipes/3ml/finetune_glue_grid.sh runs the
# whole grid x 5 seeds. fairseq's stock `sentence_prediction` task and criterion on fairseq's
# `roberta` model, as in fairseq's RoBERTa GLUE README.
#
#   python scripts/export_encoder.py checkpoints/3ml/checkpoint_last.pt exports/3ml.pt
#   TASK=RTE DATA=glue/RTE-bin PRETRAINED=exports/3ml.pt LR=3e-05 BATCH_SIZE=16 EPOCHS=10 \
#     recipes/3ml/finetune_glue.sh
#
# Table 5: QQP/MNLI/QNLI: lr {5e-5, 8e-5}, batch 32, epochs {3, 5}; CoLA/SST-2/MRPC/STS-B/RTE:
# lr {1e-5, 3e-5, 5e-5, 8e-5}, batch {16, 32}, epochs {3, 5, 10}; all: weight decay 0.1, warmup
# 6% of the updates, linear decay. GLUE's defaults (lr 5e-5, batch 32, 3 epochs, the <s> head)
# are in the grid of every task. Adam (0.9, 0.98) eps 1e-6, dropout 0.1, no clipping are fairseq's RoBERTa
# GLUE settings.
#
# DATA: a data-bin laid out as sentence_prediction expects (scripts/prepare_glue.sh makes it):
# input0/ [input1/] with the pre-training dictionary, label/ (classification) or
# label/{train,valid}.label (STS-B). The number of training examples (for the warmup and
# total updates of the polynomial_decay schedule) is read from input0/train.idx.
# ARCH and MAX_POSITIONS default to those of PRETRAINED (scripts/export_encoder.py
# --print-finetune-args): a pre-LN export needs a pre-LN arch, e.g. roberta_large_prenorm.
# POOLING=mean puts the classification head on the mean of the tokens' features instead of
# <s> (fairseq-ext's roberta_pooled model, --classification-pooling mean).
# LAYER_LR_DECAY=D fine-tunes with ELECTRA's layer-wise lr decay (--layer-lr-decay D on
# roberta_pooled: a parameter at depth d of L layers learns at lr x D^(L+1-d)); it needs
# OPTIMIZER=fused_adamw (the default), which honours the per-layer rates.
# A downstream task of scripts/prepare_downstream.sh (DebSection, GlossTopic, FortuneTopic, GlossPair) is
# scored by accuracy, with the classes of DATA/label/dict.txt, and defaults to the protocol chosen
# on the suite's selection split for small encoders (docs/transfer.md): POOLING=mean, LR=3e-3,
# BATCH_SIZE=16, EPOCHS=10.
# The task sets NUM_CLASSES, --regression-target (STS-B) and the metric the paper reports (CoLA:
# Matthews corr.; MRPC, QQP: mean of F1 and accuracy; STS-B: mean of Pearson and Spearman;
# others: accuracy), which picks checkpoint_best.pt.
# Extra arguments are appended to the fairseq-train command line. DRY_RUN=1 prints it only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

TASK="${TASK:?set TASK to one of MNLI QQP QNLI SST-2 CoLA MRPC STS-B RTE, or ${DOWNSTREAM_TASKS}}"
TASK="$(finetune_task_name "${TASK}")" || exit 2
# Table 5's defaults for GLUE (in every task's grid, the <s> head); the downstream suite's tasks
# default to the protocol its levers chose for small encoders (docs/transfer.md): the mean of
# the tokens as the head's input, lr 3e-3, batch 16, 10 epochs.
default_lr=5e-05 default_batch=32 default_epochs=3 default_pooling=first
case "${TASK}" in
  MNLI) task_classes=3 task_metric=accuracy ;;
  STS-B) task_classes=1 task_metric=pearson_and_spearman ;;
  CoLA) task_classes=2 task_metric=mcc ;;
  MRPC|QQP) task_classes=2 task_metric=acc_and_f1 ;;
  DebSection|GlossTopic|FortuneTopic|GlossPair)  # classes: DATA's
    task_classes='' task_metric=accuracy
    default_lr=3e-3 default_batch=16 default_epochs=10 default_pooling=mean ;;
  *) task_classes=2 task_metric=accuracy ;;
esac

DATA="${DATA:?set DATA to the data-bin of the task (input0/, [input1/,] label/), e.g. glue/RTE-bin of scripts/prepare_glue.sh}"
PRETRAINED="${PRETRAINED:?set PRETRAINED to an exported 3ML encoder (scripts/export_encoder.py IN.pt OUT.pt)}"
LR="${LR:-${default_lr}}"
BATCH_SIZE="${BATCH_SIZE:-${default_batch}}"  # effective batch, in sequences
EPOCHS="${EPOCHS:-${default_epochs}}"
SEED="${SEED:-1}"
MAX_SENTENCES="${MAX_SENTENCES:-16}"      # per GPU (or per CPU process)
WEIGHT_DECAY="${WEIGHT_DECAY:-0.1}"
WARMUP_PROPORTION="${WARMUP_PROPORTION:-0.06}"  # warmup updates = this x total updates
ADAM_BETAS="${ADAM_BETAS:-(0.9,0.98)}"
ADAM_EPS="${ADAM_EPS:-1e-06}"
CLIP_NORM="${CLIP_NORM:-0.0}"
DROPOUT="${DROPOUT:-0.1}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
CRITERION="${CRITERION:-sentence_prediction}"
OPTIMIZER="${OPTIMIZER:-fused_adamw}"
ARCH="${ARCH:-}"                          # empty: the arch that rebuilds PRETRAINED's encoder
MAX_POSITIONS="${MAX_POSITIONS:-}"        # empty: PRETRAINED's (its position table)
POOLING="${POOLING:-${default_pooling}}"  # the head reads: first (<s>, RoBERTa's) or mean (of the tokens)
LAYER_LR_DECAY="${LAYER_LR_DECAY:-}"      # empty: none (every layer at LR); D in (0, 1]: lr x D^(L+1-d)
SHORTEN_METHOD="${SHORTEN_METHOD:-truncate}"  # longer examples are cut to MAX_POSITIONS
NUM_CLASSES="${NUM_CLASSES:-${task_classes:-$(label_classes "${DATA}")}}"
BEST_METRIC="${BEST_METRIC:-${task_metric}}"
VALID_SUBSET="${VALID_SUBSET:-valid}"     # MNLI: valid,valid1 when DATA has both (matched, mismatched)
TRAIN_EXAMPLES="${TRAIN_EXAMPLES:-}"      # empty: read from DATA/input0/train.idx
TOTAL_UPDATES="${TOTAL_UPDATES:-}"        # empty: EPOCHS x ceil(TRAIN_EXAMPLES / BATCH_SIZE)
WARMUP_UPDATES="${WARMUP_UPDATES:-}"      # empty: WARMUP_PROPORTION x TOTAL_UPDATES, rounded
SAVE_DIR="${SAVE_DIR:-checkpoints/3ml_glue/${TASK}/lr${LR}_bs${BATCH_SIZE}_ep${EPOCHS}_seed${SEED}}"
LOG_INTERVAL="${LOG_INTERVAL:-100}"
NUM_WORKERS="${NUM_WORKERS:-1}"
CPU="${CPU:-0}"                           # 1: train on the CPU
PRECISION="${PRECISION:-}"                # empty (fp32) or --fp16 on GPUs (bf16: docs/scaling.md)
DRY_RUN="${DRY_RUN:-0}"                   # 1: print the command, do not run it

[[ -f "${PRETRAINED}" ]] || die "PRETRAINED=${PRETRAINED}: no such file"  # before reading it
case "${POOLING}" in
  first|mean) ;;
  *) die "POOLING=${POOLING}: one of first (the <s> token) or mean (the mean of the tokens)" ;;
esac
decay_args=()
if [[ -n "${LAYER_LR_DECAY}" ]]; then
  [[ "${OPTIMIZER}" == fused_adamw ]] || die "LAYER_LR_DECAY=${LAYER_LR_DECAY} needs OPTIMIZER=fused_adamw (OPTIMIZER=${OPTIMIZER} would train every layer at LR)"
  decay_args=(--layer-lr-decay "${LAYER_LR_DECAY}")
fi

# Number of sequences in a fairseq indexed dataset, from its .idx header (mmap or cached format).
count_examples() {
  local idx="$1" magic
  [[ -f "${idx}" ]] || { echo "error: ${idx} not found: DATA must hold input0/train.{bin,idx} (or set TRAIN_EXAMPLES)" >&2; return 1; }
  magic="$(head -c 7 "${idx}" | tr -d '\0')"
  case "${magic}" in
    MMIDIDX) od -An -t u8 -j 18 -N 8 "${idx}" | tr -d ' ' ;;
    TNTIDX) od -An -t u8 -j 32 -N 8 "${idx}" | tr -d ' ' ;;
    *) echo "error: ${idx}: not a fairseq index (set TRAIN_EXAMPLES)" >&2; return 1 ;;
  esac
}
if [[ -z "${TRAIN_EXAMPLES}" ]]; then
  TRAIN_EXAMPLES="$(count_examples "${DATA}/input0/train.idx")"
fi
(( TRAIN_EXAMPLES > 0 )) || die "no training examples in ${DATA}/input0/train"

UPDATES_PER_EPOCH=$(( (TRAIN_EXAMPLES + BATCH_SIZE - 1) / BATCH_SIZE ))
if [[ -z "${TOTAL_UPDATES}" ]]; then TOTAL_UPDATES=$(( EPOCHS * UPDATES_PER_EPOCH )); fi
if [[ -z "${WARMUP_UPDATES}" ]]; then
  WARMUP_UPDATES="$(warmup_updates "${TOTAL_UPDATES}" "${WARMUP_PROPORTION}")"
fi

# Model flags: the encoder of PRETRAINED (--arch ... --max-positions N), unless given.
arch_args=()
if [[ -z "${ARCH}" || -z "${MAX_POSITIONS}" ]]; then
  derived="$("$(fairseq_cmd python)" "${REPO_ROOT}/scripts/export_encoder.py" --print-finetune-args --pooling "${POOLING}" "${decay_args[@]}" "${PRETRAINED}")"
  read -r -a derived_args <<< "${derived}"
  n=${#derived_args[@]}
  if [[ -z "${MAX_POSITIONS}" ]]; then MAX_POSITIONS="${derived_args[n-1]}"; fi
  if [[ -z "${ARCH}" ]]; then arch_args=("${derived_args[@]:0:n-2}"); fi
fi
if [[ -n "${ARCH}" ]]; then
  arch_args=(--arch "${ARCH}")
  # an ARCH of one's own: a mean-pooling head needs a model that has one (roberta_pooled*)
  if [[ "${POOLING}" == mean ]]; then
    [[ "${ARCH}" == roberta_pooled* ]] || die "POOLING=mean with ARCH=${ARCH}: give ARCH=roberta_pooled or roberta_pooled_prenorm (with the encoder's flags), or leave ARCH unset"
    arch_args+=(--classification-pooling mean)
  fi
  arch_args+=("${decay_args[@]}")  # ARCH must be one of the plugin's (roberta_pooled*, bert_*)
fi

# The 3ML paper's schedule (Table 5): linear decay over EPOCHS after a warmup share; the best
# checkpoint by the task's metric, no others.
recipe_flags=(
  "${arch_args[@]}"
  --lr-scheduler polynomial_decay --lr "${LR}"
  --total-num-update "${TOTAL_UPDATES}" --warmup-updates "${WARMUP_UPDATES}"
  --max-epoch "${EPOCHS}" --no-epoch-checkpoints --no-last-checkpoints
)
run_sentence_prediction recipe_flags "$@"
