# Shared helpers for the bash recipes; sourced, not run.
# Conventions (README "Recipes"): `set -euo pipefail`; every hyperparameter is an environment
# variable whose default is the paper's; the full fairseq command is printed before it runs.

RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "${RECIPES_DIR}/.." && pwd)"
USER_DIR="${USER_DIR:-${REPO_ROOT}/fairseq_ext}"

# Prefer the project's virtualenv when it exists and the caller did not choose an interpreter.
if [[ -z "${FAIRSEQ_BIN:-}" && -x "${REPO_ROOT}/.venv/bin/fairseq-train" ]]; then
  FAIRSEQ_BIN="${REPO_ROOT}/.venv/bin"
fi
fairseq_cmd() { if [[ -n "${FAIRSEQ_BIN:-}" ]]; then echo "${FAIRSEQ_BIN}/$1"; else echo "$1"; fi; }

# Number of GPUs this process group will use: $NUM_GPUS, else what nvidia-smi sees, else 1 (CPU).
detect_num_gpus() {
  if [[ -n "${NUM_GPUS:-}" ]]; then echo "${NUM_GPUS}"; return; fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    nvidia-smi -L | grep -c '^GPU'
  else
    echo 1
  fi
}

# update_freq EFFECTIVE_BATCH PER_GPU_BATCH: gradient accumulation steps so that
# PER_GPU_BATCH x GPUs x NNODES x update_freq == EFFECTIVE_BATCH, on 1 GPU or many nodes.
update_freq() {
  local effective=$1 per_gpu=$2 gpus nodes replicas
  gpus=$(detect_num_gpus); nodes=${NNODES:-1}
  replicas=$(( per_gpu * gpus * nodes ))
  if (( effective % replicas != 0 )); then
    echo "error: BATCH_SIZE=${effective} is not a multiple of MAX_SENTENCES=${per_gpu} x ${gpus} GPU(s) x NNODES=${nodes};" \
         "change MAX_SENTENCES or BATCH_SIZE" >&2
    return 1
  fi
  echo $(( effective / replicas ))
}

# warmup_updates TOTAL_UPDATES PROPORTION: the warmup as a share of training, rounded to the
# nearest update (e.g. `warmup_updates 23000 0.06` prints 1380).
warmup_updates() {
  local total=$1 proportion=$2
  if ! [[ "${total}" =~ ^[0-9]+$ && "${proportion}" =~ ^(0|1|0?\.[0-9]+|1\.0*)$ ]]; then
    echo "error: warmup_updates needs TOTAL_UPDATES (an integer, got '${total}') and" \
         "WARMUP_PROPORTION (in [0, 1], got '${proportion}'); or set WARMUP_UPDATES" >&2
    return 1
  fi
  awk -v t="${total}" -v p="${proportion}" 'BEGIN { printf "%d\n", t * p + 0.5 }'
}

# run_printed CMD...: print the command (shell-quoted, one line) and run it; with DRY_RUN=1
# only print it (to check what a recipe would run, e.g. in tests/test_recipes.py).
run_printed() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ "${DRY_RUN:-0}" == 1 ]]; then return 0; fi
  "$@"
}

# run_mlm_pretraining [EXTRA_ARGS...]: the fairseq-train command shared by every masked-LM
# pre-training recipe (fairseq's masked_lm task), built from the variables the recipe set to its
# paper's defaults; printed, then run, with EXTRA_ARGS appended. WARMUP_UPDATES may be empty:
# then it is WARMUP_PROPORTION of TOTAL_UPDATES.
run_mlm_pretraining() {
  if [[ -z "${WARMUP_UPDATES:-}" ]]; then
    WARMUP_UPDATES="$(warmup_updates "${TOTAL_UPDATES}" "${WARMUP_PROPORTION:?set WARMUP_UPDATES or WARMUP_PROPORTION}")"
  fi
  local update_freq_value
  update_freq_value="$(update_freq "${BATCH_SIZE}" "${MAX_SENTENCES}")"
  local cmd=(
    "$(fairseq_cmd fairseq-train)" "${DATA}"
    --user-dir "${USER_DIR}"
    --task masked_lm --criterion "${CRITERION}"
    --arch "${ARCH}" --max-positions "${TOKENS_PER_SAMPLE}"
    --tokens-per-sample "${TOKENS_PER_SAMPLE}" --sample-break-mode "${SAMPLE_BREAK_MODE}"
    --mask-prob "${MASK_PROB}" --leave-unmasked-prob "${LEAVE_UNMASKED_PROB}"
    --random-token-prob "${RANDOM_TOKEN_PROB}"
    --dropout "${DROPOUT}" --attention-dropout "${ATTENTION_DROPOUT}"
    --optimizer "${OPTIMIZER}" --adam-betas "${ADAM_BETAS}" --adam-eps "${ADAM_EPS}"
    --weight-decay "${WEIGHT_DECAY}" --clip-norm "${CLIP_NORM}"
    --lr-scheduler polynomial_decay --power "${LR_POWER}" --lr "${PEAK_LR}"
    --warmup-updates "${WARMUP_UPDATES}" --total-num-update "${TOTAL_UPDATES}"
    --max-update "${TOTAL_UPDATES}"
    --batch-size "${MAX_SENTENCES}" --update-freq "${update_freq_value}"
    --seed "${SEED}" --num-workers "${NUM_WORKERS}"
    --log-interval "${LOG_INTERVAL}" --skip-invalid-size-inputs-valid-test
    --save-dir "${SAVE_DIR}" --save-interval-updates "${SAVE_INTERVAL_UPDATES}"
    --keep-interval-updates 1 --no-epoch-checkpoints
  )
  if [[ "${CPU}" == 1 ]]; then cmd+=(--cpu); fi
  if [[ -n "${PRECISION}" ]]; then cmd+=("${PRECISION}"); fi
  run_printed "${cmd[@]}" "$@"
}

# glue_task_name NAME: the canonical GLUE task name (MNLI QQP QNLI SST-2 CoLA MRPC STS-B RTE) for
# any spelling of it (sst2, STS, cola, ...); an unknown name is an error.
glue_task_name() {
  case "${1^^}" in
    MNLI) echo MNLI ;; QQP) echo QQP ;; QNLI) echo QNLI ;; RTE) echo RTE ;; MRPC) echo MRPC ;;
    COLA) echo CoLA ;; SST|SST-2|SST2) echo SST-2 ;; STS|STS-B|STSB) echo STS-B ;;
    *) echo "error: unknown TASK=$1; one of MNLI QQP QNLI SST-2 CoLA MRPC STS-B RTE" >&2
       return 2 ;;
  esac
}

# glue_superglue_task_name NAME: glue_task_name, plus SuperGLUE's BoolQ and MultiRC (the ten
# fine-tuning tasks of Lei et al.'s recipes/swishrnn/); an unknown name is an error.
glue_superglue_task_name() {
  case "${1^^}" in
    BOOLQ) echo BoolQ ;; MULTIRC) echo MultiRC ;;
    *) glue_task_name "$1" 2>/dev/null && return 0
       echo "error: unknown TASK=$1; one of BoolQ CoLA MNLI MRPC MultiRC QNLI QQP RTE SST-2 STS-B" >&2
       return 2 ;;
  esac
}

# add_sentence_prediction_metric_flags ARRAY TASK METRIC: append to the array named ARRAY the
# flags fairseq's sentence_prediction needs for TASK's METRIC: --regression-target (STS-B), the
# --report-* flag that makes it compute METRIC on the valid set, and
# --maximize-best-checkpoint-metric unless METRIC is a loss.
add_sentence_prediction_metric_flags() {
  local -n flags="$1"
  local task="$2" metric="$3"
  if [[ "${task}" == STS-B ]]; then flags+=(--regression-target); fi
  case "${metric}" in
    mcc) flags+=(--report-mcc) ;;
    acc_and_f1|f1) flags+=(--report-acc-and-f1) ;;
    pearson_and_spearman|pearson|spearman) flags+=(--report-pearson-and-spearman) ;;
  esac
  if [[ "${metric}" != loss && "${metric}" != nll_loss ]]; then
    flags+=(--maximize-best-checkpoint-metric)
  fi
}
