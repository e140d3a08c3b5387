#!/usr/bin/env bash
# The 3ML paper's GLUE fine-tuning protocol for one task (Liao et al. 2022, App. B, Table 5,
# from 24hBERT): every point of the task's grid, 5 seeds each, through
# recipes/3ml/finetune_glue.sh (fairseq-train --criterion sentence_prediction), one save dir per
# point; then the paper's score: for each seed the best dev score over the grid, and the median
# of those over the seeds.
#
#   TASK=RTE DATA=glue/RTE-bin PRETRAINED=exports/3ml.pt recipes/3ml/finetune_glue_grid.sh
#
# Grid (override with space-separated lists): QQP, MNLI, QNLI: LRS="5e-05 8e-05" BATCH_SIZES=32
# EPOCHS_LIST="3 5"; CoLA, SST-2, MRPC, STS-B, RTE: LRS="1e-05 3e-05 5e-05 8e-05"
# BATCH_SIZES="16 32" EPOCHS_LIST="3 5 10". SEEDS="1 2 3 4 5".
# Everything else (MAX_SENTENCES, NUM_GPUS, CPU, PRECISION, ARCH, ...) is passed through the
# environment to finetune_glue.sh, and extra arguments are appended to each fairseq-train command.
# Each point writes SAVE_ROOT/<point>/train.log; a point whose DONE marker exists is skipped, so
# an interrupted grid resumes. results.tsv collects the best dev score of every point and
# validation subset (seed lr batch epochs subset score); MNLI's mismatched dev set (valid1) is
# scored beside the matched one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

TASK="${TASK:?set TASK to one of MNLI QQP QNLI SST-2 CoLA MRPC STS-B RTE}"
TASK="$(glue_task_name "${TASK}")" || exit 2
case "${TASK}" in
  QQP|MNLI|QNLI)
    default_lrs="5e-05 8e-05" default_batch_sizes="32" default_epochs="3 5" ;;
  *)
    default_lrs="1e-05 3e-05 5e-05 8e-05" default_batch_sizes="16 32" default_epochs="3 5 10" ;;
esac
LRS="${LRS:-${default_lrs}}"
BATCH_SIZES="${BATCH_SIZES:-${default_batch_sizes}}"
EPOCHS_LIST="${EPOCHS_LIST:-${default_epochs}}"
SEEDS="${SEEDS:-1 2 3 4 5}"
SAVE_ROOT="${SAVE_ROOT:-checkpoints/3ml_glue/${TASK}}"
DRY_RUN="${DRY_RUN:-0}"                   # 1: print each point's command, run nothing

RECIPE="${FINETUNE_RECIPE:-${RECIPES_DIR}/3ml/finetune_glue.sh}"  # the run of one point
export TASK

mkdir -p "${SAVE_ROOT}"
results="${SAVE_ROOT}/results.tsv"
points=0
for seed in ${SEEDS}; do
  for lr in ${LRS}; do
    for batch_size in ${BATCH_SIZES}; do
      for epochs in ${EPOCHS_LIST}; do
        points=$(( points + 1 ))
        dir="${SAVE_ROOT}/lr${lr}_bs${batch_size}_ep${epochs}_seed${seed}"
        if [[ "${DRY_RUN}" == 1 ]]; then
          LR="${lr}" BATCH_SIZE="${batch_size}" EPOCHS="${epochs}" SEED="${seed}" SAVE_DIR="${dir}" \
            DRY_RUN=1 LOG_FILE="" "${RECIPE}" --log-format json "$@"
          continue
        fi
        LR="${lr}" BATCH_SIZE="${batch_size}" EPOCHS="${epochs}" SEED="${seed}" SAVE_DIR="${dir}" \
          run_grid_point "${dir}" "${results}" "${seed}"$'\t'"${lr}"$'\t'"${batch_size}"$'\t'"${epochs}" \
          "${RECIPE}" "$@"
      done
    done
  done
done
if [[ "${DRY_RUN}" == 1 ]]; then echo "${points} points"; exit 0; fi

# The paper's score, for each validation subset (MNLI: valid = MNLI-m, valid1 = MNLI-mm): the
# best dev score over the grid for each seed, then the median over the seeds.
order=gr  # higher is better, except for a loss (BEST_METRIC=loss)
if [[ "${BEST_METRIC:-}" == *loss ]]; then order=g; fi
for subset in $(grid_subsets "${results}"); do
  echo "== ${TASK} ${subset}: best dev score per seed over the grid (seed lr batch epochs score), and the median"
  awk -F '\t' -v s="${subset}" '$5 == s { print $1 "\t" $2 "\t" $3 "\t" $4 "\t" $6 }' "${results}" \
    | sort -t $'\t' -k1,1n -k5,5"${order}" | awk -F '\t' '!seen[$1]++' \
    | tee "${SAVE_ROOT}/best_per_seed.${subset}.tsv"
  cut -f 5 "${SAVE_ROOT}/best_per_seed.${subset}.tsv" | sort -g \
    | awk -v s="${subset}" '{ v[NR] = $1 } END { if (NR) printf "%s: median over %d seeds: %s\n", s, NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
done
