#!/usr/bin/env bash
# The fine-tuning protocol of "Simple Recurrence Improves Masked Language Models" (Lei et al.,
# §4 and Appendix B) for one task: every learning rate of the paper's grid {1e-5, 5e-6, 3e-6,
# 2e-6}, 3 independent runs (seeds) each, through recipes/swishrnn/finetune_glue.sh
# (fairseq-train --criterion sentence_prediction; batch 32, fixed lr after 1000 warmup steps,
# Table 4's steps, evaluation every 1000 steps), one save dir per run; then the paper's score:
# the learning rate "tuned separately for each model and fine-tuning task", and the "averaged
# results" of the 3 runs. That is, for each lr the mean over the seeds of each run's best dev
# score, and the best of those means.
#
#   TASK=RTE DATA=glue/RTE-bin PRETRAINED=checkpoints/swishrnn/swishrnn_bert_base/checkpoint_last.pt \
#     recipes/swishrnn/finetune_glue_grid.sh
#
# Grid (override with space-separated lists): LRS="1e-05 5e-06 3e-06 2e-06" SEEDS="1 2 3".
# Everything else (ARCH, SWISHRNN_STEP_SIZES, MAX_SENTENCES, NUM_GPUS, CPU, PRECISION, ...) is
# passed through the environment to finetune_glue.sh, and extra arguments are appended to each
# fairseq-train command. Each run writes SAVE_ROOT/<run>/train.log; a run whose DONE marker
# exists is skipped, so an interrupted grid resumes. results.tsv collects the best dev score of
# every run and validation subset (seed lr subset score); MNLI's mismatched dev set (valid1) is
# scored beside the matched one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

TASK="${TASK:?set TASK to one of BoolQ CoLA MNLI MRPC MultiRC QNLI QQP RTE SST-2 STS-B}"
TASK="$(glue_superglue_task_name "${TASK}")" || exit 2
ARCH="${ARCH:-swishrnn_bert_base}"        # the pre-training arch (finetune_glue.sh's default)
LRS="${LRS:-1e-05 5e-06 3e-06 2e-06}"
SEEDS="${SEEDS:-1 2 3}"
SAVE_ROOT="${SAVE_ROOT:-checkpoints/glue/${ARCH}/${TASK}}"
DRY_RUN="${DRY_RUN:-0}"                   # 1: print each run's command, run nothing

RECIPE="${FINETUNE_RECIPE:-${RECIPES_DIR}/swishrnn/finetune_glue.sh}"  # the run of one point
export TASK ARCH

if [[ "${DRY_RUN}" != 1 ]]; then mkdir -p "${SAVE_ROOT}"; fi
results="${SAVE_ROOT}/results.tsv"
runs=0
for seed in ${SEEDS}; do
  for lr in ${LRS}; do
    runs=$(( runs + 1 ))
    dir="${SAVE_ROOT}/lr${lr}_seed${seed}"
    if [[ "${DRY_RUN}" == 1 ]]; then
      LR="${lr}" SEED="${seed}" SAVE_DIR="${dir}" DRY_RUN=1 LOG_FILE="" "${RECIPE}" --log-format json "$@"
      continue
    fi
    LR="${lr}" SEED="${seed}" SAVE_DIR="${dir}" \
      run_grid_point "${dir}" "${results}" "${seed}"$'\t'"${lr}" "${RECIPE}" "$@"
  done
done
if [[ "${DRY_RUN}" == 1 ]]; then echo "${runs} runs"; exit 0; fi

# The paper's score, for each validation subset (MNLI: valid = MNLI-m, valid1 = MNLI-mm): the
# mean over the seeds for each lr, then the best lr.
order=gr  # higher is better, except for a loss (BEST_METRIC=loss)
if [[ "${BEST_METRIC:-}" == *loss ]]; then order=g; fi
for subset in $(grid_subsets "${results}"); do
  echo "== ${TASK} ${subset}: mean best dev score over the seeds for each lr (lr runs mean), and the best"
  awk -F '\t' -v s="${subset}" '$3 == s { sum[$2] += $4; n[$2]++ }
    END { for (lr in sum) printf "%s\t%d\t%.4f\n", lr, n[lr], sum[lr] / n[lr] }' "${results}" \
    | sort -t $'\t' -k3,3"${order}" | tee "${SAVE_ROOT}/mean_per_lr.${subset}.tsv"
  head -n 1 "${SAVE_ROOT}/mean_per_lr.${subset}.tsv" \
    | awk -F '\t' -v s="${subset}" '{ printf "%s: best lr %s: %s (mean of %d runs)\n", s, $1, $3, $2 }'
done
