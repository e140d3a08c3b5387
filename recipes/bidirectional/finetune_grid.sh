#!/usr/bin/env bash
# The fine-tuning protocol of Artetxe et al. (2022), "On the Role of Bidirectionality in
# Language Model Pre-Training" (§3.2 "Fine-tuning", Appendix B, Tables 9-10), for one
# pre-training checkpoint: every task x lr {5e-6, 1e-5, 2e-5, 5e-5} x batch {16, 32, 64} x
# r_bidir {0, 1} (unidirectional and bidirectional attention), one run each through
# recipes/bidirectional/finetune_glue.sh (Table 11's updates whatever the batch); then "the best
# development accuracy" per task and attention setting (Table 10), their average over the tasks
# (Table 9), and the best over both settings, printed by `python -m fairseq_ext_lab.evaluation.finetune_grid`.
#
#   DATA_ROOT=glue CKPT=checkpoints/bidirectional/hyb_pre_125m/checkpoint_last.pt \
#     recipes/bidirectional/finetune_grid.sh
#
# DATA_ROOT holds <TASK>-bin for each task (scripts/prepare_glue.sh's layout; or DATA, for one
# task). Grid (override with space-separated lists): TASKS="CoLA MNLI MRPC QNLI RTE SST-2"
# LRS="5e-06 1e-05 2e-05 5e-05" BATCHES="16 32 64" R_BIDIRS="0 1": 24 runs per task, 144 in
# all. Everything else (SIZE, ARCH, MAX_TARGET_POSITIONS, MAX_SENTENCES, NUM_GPUS, CPU,
# PRECISION, SEED ...) is passed through the environment to finetune_glue.sh, and extra
# arguments are appended to each fairseq-train command. Each run writes
# SAVE_ROOT/<TASK>/r<R>_lr<LR>_bs<BATCH>/train.log (its command, then fairseq's json records);
# a run whose DONE marker exists is skipped, so an interrupted grid resumes. The runs save no
# checkpoint (NO_SAVE=1; NO_SAVE=0 keeps each run's checkpoint_best.pt): the grid's output is
# the dev accuracies, in SAVE_ROOT/report.md and SAVE_ROOT/grid.tsv (one row per run).
# DRY_RUN=1 prints every run's command and runs nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

CKPT="${CKPT:?set CKPT to a checkpoint of recipes/bidirectional/pretrain.sh}"
TASKS="${TASKS:-CoLA MNLI MRPC QNLI RTE SST-2}"
LRS="${LRS:-5e-06 1e-05 2e-05 5e-05}"
BATCHES="${BATCHES:-16 32 64}"
R_BIDIRS="${R_BIDIRS:-0 1}"
DATA_ROOT="${DATA_ROOT:-}"                # <TASK>-bin for each task; or DATA for a single task
NO_SAVE="${NO_SAVE:-1}"
SAVE_ROOT="${SAVE_ROOT:-checkpoints/bidirectional_glue/$(basename "$(dirname "${CKPT}")")}"
DRY_RUN="${DRY_RUN:-0}"                   # 1: print each run's command, run nothing
CRITERION="${CRITERION:-sentence_prediction}"  # finetune_glue.sh's (the grid's score is its accuracy)

RECIPE="${FINETUNE_RECIPE:-${RECIPES_DIR}/bidirectional/finetune_glue.sh}"  # one grid point
export CKPT NO_SAVE CRITERION

tasks=()
for task in ${TASKS}; do
  task="$(glue_task_name "${task}")" || exit 2
  case "${task}" in
    CoLA|MNLI|MRPC|QNLI|RTE|SST-2) tasks+=("${task}") ;;
    *) die "TASK ${task} in TASKS is not among the paper's fine-tuning tasks (Table 11: CoLA MNLI MRPC QNLI RTE SST-2)" ;;
  esac
done
if [[ -z "${DATA_ROOT}" && ( ${#tasks[@]} -ne 1 || -z "${DATA:-}" ) ]]; then
  die "set DATA_ROOT to the folder holding <TASK>-bin for each of TASKS (scripts/prepare_glue.sh), or DATA for a single task"
fi

runs=0
for task in "${tasks[@]}"; do
  data="${DATA:-}"
  if [[ -n "${DATA_ROOT}" ]]; then data="${DATA_ROOT}/${task}-bin"; fi
  if [[ "${DRY_RUN}" != 1 ]]; then mkdir -p "${SAVE_ROOT}/${task}"; fi
  for r_bidir in ${R_BIDIRS}; do
    for lr in ${LRS}; do
      for batch in ${BATCHES}; do
        runs=$(( runs + 1 ))
        dir="${SAVE_ROOT}/${task}/r${r_bidir}_lr${lr}_bs${batch}"
        if [[ "${DRY_RUN}" == 1 ]]; then
          TASK="${task}" DATA="${data}" R_BIDIR="${r_bidir}" LR="${lr}" BATCH="${batch}" \
            SAVE_DIR="${dir}" DRY_RUN=1 LOG_FILE="" "${RECIPE}" --log-format json "$@"
          continue
        fi
        TASK="${task}" DATA="${data}" R_BIDIR="${r_bidir}" LR="${lr}" BATCH="${batch}" \
          SAVE_DIR="${dir}" run_grid_point "${dir}" "${SAVE_ROOT}/results.tsv" \
          "${task}"$'\t'"${r_bidir}"$'\t'"${lr}"$'\t'"${batch}" "${RECIPE}" "$@"
      done
    done
  done
done
if [[ "${DRY_RUN}" == 1 ]]; then echo "${runs} runs"; exit 0; fi

report=("$(fairseq_cmd python)" -m fairseq_ext_lab.evaluation.finetune_grid "${SAVE_ROOT}" --tasks "${tasks[@]}")
# grid.tsv and report.md are this grid's own summaries of SAVE_ROOT's runs: a resumed or
# extended grid rewrites them (--force), as it adds to the runs
"${report[@]}" --tsv "${SAVE_ROOT}/grid.tsv" --force | tee "${SAVE_ROOT}/report.md"
# MNLI's mismatched dev set (valid1), when its runs scored one
if [[ " ${tasks[*]} " == *" MNLI "* ]] \
    && grep -qs '"valid1_accuracy"' "${SAVE_ROOT}"/MNLI/r*/train.log; then
  echo
  echo "MNLI mismatched (valid1):"
  "$(fairseq_cmd python)" -m fairseq_ext_lab.evaluation.finetune_grid "${SAVE_ROOT}" --tasks MNLI \
    --subset valid1 | tee -a "${SAVE_ROOT}/report.md"
fi
