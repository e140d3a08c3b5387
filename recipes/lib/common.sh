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

# update_freq EFFECTIVE_BATCH PER_GPU_BATCH [EFFECTIVE_NAME PER_GPU_NAME]: gradient
# accumulation steps so that PER_GPU_BATCH x GPUs x NNODES x update_freq == EFFECTIVE_BATCH, on
# 1 GPU or many nodes (in sequences: BATCH_SIZE / MAX_SENTENCES, the default names; or in
# tokens: BATCH_TOKENS / MAX_TOKENS).
update_freq() {
  local effective=$1 per_gpu=$2 effective_name=${3:-BATCH_SIZE} per_gpu_name=${4:-MAX_SENTENCES}
  local gpus nodes replicas
  gpus=$(detect_num_gpus); nodes=${NNODES:-1}
  replicas=$(( per_gpu * gpus * nodes ))
  if (( effective % replicas != 0 )); then
    echo "error: ${effective_name}=${effective} is not a multiple of ${per_gpu_name}=${per_gpu} x ${gpus} GPU(s) x NNODES=${nodes};" \
         "change ${per_gpu_name} or ${effective_name}" >&2
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

# require_data_bin DIR: stop (exit 2) before fairseq starts unless DIR is a fairseq data-bin
# (fairseq-train would fail deep in a traceback ending in dict.txt). Not checked with DRY_RUN=1.
require_data_bin() {
  if [[ "${DRY_RUN:-0}" == 1 || -f "$1/dict.txt" ]]; then return 0; fi
  die "DATA=$1 has no dict.txt: run scripts/prepare_corpus.sh (or make demo) first, or point" \
      "DATA at a fairseq data-bin"
}

# recipe_python: the Python beside fairseq (FAIRSEQ_BIN's), else the checkout's .venv, else python3.
recipe_python() {
  if [[ -x "${FAIRSEQ_BIN:-}/python" ]]; then echo "${FAIRSEQ_BIN}/python"
  elif [[ -x "${REPO_ROOT}/.venv/bin/python" ]]; then echo "${REPO_ROOT}/.venv/bin/python"
  else echo python3; fi
}

# print_memory_plan FAIRSEQ_TRAIN_CMD...: print the run's memory per GPU (weights, gradients,
# optimizer state, activations, total; `python -m fairseq_ext.flops.memory_plan`) on NUM_GPUS x NNODES
# GPUs before it starts. Not for CPU=1 runs (the plan is per GPU), DRY_RUN=1 or MEMORY_PLAN=0; a
# plan that cannot be made says why and the run goes on.
print_memory_plan() {
  if [[ "${DRY_RUN:-0}" == 1 || "${CPU:-0}" == 1 || "${MEMORY_PLAN:-1}" == 0 ]]; then return 0; fi
  local world
  world=$(( $(detect_num_gpus) * ${NNODES:-1} ))
  PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" PYTHONWARNINGS=ignore "$(recipe_python)" \
    -m fairseq_ext.flops.memory_plan --world-size "${world}" -- "$@" \
    || echo "memory plan: not printed (the error above); training anyway" >&2
}

# run_printed CMD...: print the command (shell-quoted, one line) and run it; with DRY_RUN=1
# only print it (to check what a recipe would run, e.g. in tests/test_recipes.py). SIGTERM and
# SIGUSR1 (a scheduler's notice, which SLURM sends to every process of the job step) are trapped
# while the command runs, so that they do not end this shell before fairseq-train has saved;
# the command's status is returned (75: stopped on the signal after its checkpoint; the same
# recipe resumes; docs/scaling.md, "Preemption").
run_printed() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ "${DRY_RUN:-0}" == 1 ]]; then return 0; fi
  local status=0
  trap ':' TERM USR1
  "$@" || status=$?
  trap - TERM USR1
  return "${status}"
}

# add_log_flags ARRAY: append to the array named ARRAY the logging flags every training recipe
# passes: --log-format json, and --log-file LOG_FILE (default SAVE_DIR/train.log; LOG_FILE= (empty)
# logs to stdout only), so that every run leaves its JSON records where scripts/plot_curves.py
# reads them (`scripts/plot_curves.py SAVE_DIR`). fairseq appends to the file: a resumed run, or
# a second run into the same SAVE_DIR, adds to the log and never truncates it. A --log-format or
# --log-file among the recipe's extra arguments wins (fairseq takes the last one). The log's
# folder is created unless DRY_RUN=1 (fairseq opens the file before it makes SAVE_DIR).
add_log_flags() {
  local -n flags="$1"
  local log_file="${LOG_FILE-${SAVE_DIR}/train.log}"
  flags+=(--log-format json)
  if [[ -n "${log_file}" ]]; then
    flags+=(--log-file "${log_file}")
    if [[ "${DRY_RUN:-0}" != 1 ]]; then mkdir -p "$(dirname "${log_file}")"; fi
  fi
}

# run_mlm_pretraining [EXTRA_ARGS...]: the fairseq-train command shared by every masked-LM
# add_pretraining_flags CMD_ARRAY: the flags every pre-training recipe shares, appended to the
# array named CMD_ARRAY: dropout, optimizer, the polynomial-decay schedule (PEAK_LR,
# WARMUP_UPDATES, TOTAL_UPDATES), seed, workers, logging, checkpointing, the JSON log
# (add_log_flags), --cpu (CPU=1), the precision flag (PRECISION, add_precision_flag) and
# optimizer-state sharding (ZERO_SHARDING, add_zero_sharding_flags).
add_pretraining_flags() {
  local -n _pretraining_cmd="$1"
  _pretraining_cmd+=(
    --dropout "${DROPOUT}" --attention-dropout "${ATTENTION_DROPOUT}"
    --optimizer "${OPTIMIZER}" --adam-betas "${ADAM_BETAS}" --adam-eps "${ADAM_EPS}"
    --weight-decay "${WEIGHT_DECAY}" --clip-norm "${CLIP_NORM}"
    --lr-scheduler polynomial_decay --power "${LR_POWER}" --lr "${PEAK_LR}"
    --warmup-updates "${WARMUP_UPDATES}" --total-num-update "${TOTAL_UPDATES}"
    --max-update "${TOTAL_UPDATES}"
    --seed "${SEED}" --num-workers "${NUM_WORKERS}"
    --log-interval "${LOG_INTERVAL}" --skip-invalid-size-inputs-valid-test
    --save-dir "${SAVE_DIR}" --save-interval-updates "${SAVE_INTERVAL_UPDATES}"
    --keep-interval-updates 1 --no-epoch-checkpoints
  )
  add_log_flags _pretraining_cmd
  # DATA_BUFFER_SIZE (empty: fairseq's default of 10 batches prefetched by a background thread)
  if [[ -n "${DATA_BUFFER_SIZE:-}" ]]; then
    _pretraining_cmd+=(--data-buffer-size "${DATA_BUFFER_SIZE}")
  fi
  add_save_on_signal_flag _pretraining_cmd
  if [[ "${CPU}" == 1 ]]; then _pretraining_cmd+=(--cpu); fi
  add_precision_flag _pretraining_cmd
  add_zero_sharding_flags _pretraining_cmd
}

# add_save_on_signal_flag ARRAY: SAVE_ON_SIGNAL=1 (the default) lets fairseq-train save and exit
# with status 75 on SIGTERM or SIGUSR1, so that the same command resumes (docs/scaling.md,
# "Preemption"); SAVE_ON_SIGNAL=0 appends --no-save-on-signal (the signals end the run at once).
add_save_on_signal_flag() {
  local -n _signal_cmd="$1"
  case "${SAVE_ON_SIGNAL:-1}" in
    1) ;;
    0) _signal_cmd+=(--no-save-on-signal) ;;
    *) die "SAVE_ON_SIGNAL=${SAVE_ON_SIGNAL} must be 1 (save and exit 75 on SIGTERM/SIGUSR1)" \
           "or 0 (--no-save-on-signal)" ;;
  esac
}

# add_precision_flag ARRAY: append PRECISION (empty: fp32; --fp16, --memory-efficient-fp16) to
# the array named ARRAY. fairseq-train 0.12 turns --bf16 into TPU training (it sets --tpu, and
# the trainer then needs torch_xla on any machine), so --bf16 is refused with the way that works:
# the recipe's YAML with fairseq-hydra-train common.bf16=true (docs/scaling.md).
add_precision_flag() {
  local -n _precision_flags="$1"
  case "${PRECISION}" in
    "") ;;
    --bf16|--memory-efficient-bf16)
      die "PRECISION=${PRECISION}: fairseq-train 0.12 makes ${PRECISION} TPU training (it needs" \
          "torch_xla); for bf16 on GPUs or the CPU run the recipe's YAML twin with" \
          "fairseq-hydra-train common.bf16=true (docs/scaling.md), or use PRECISION=--fp16" ;;
    *) _precision_flags+=("${PRECISION}") ;;
  esac
}

# add_zero_sharding_flags ARRAY: with ZERO_SHARDING=os, append --zero-sharding os to the array
# named ARRAY: fairseq's optimizer-state sharding (ZeRO stage 1, fairscale's OSS): each of the
# NUM_GPUS x NNODES data-parallel processes keeps 1/N of Adam's moments and updates 1/N of the
# weights, then broadcasts them. Left out with one process, where there is nothing to shard
# (fairseq would stop: it needs a process group). fairseq's fully_sharded backend is not used:
# docs/scaling.md says why.
add_zero_sharding_flags() {
  local -n _sharding_flags="$1"
  case "${ZERO_SHARDING:-none}" in
    none) ;;
    os) if (( $(detect_num_gpus) * ${NNODES:-1} > 1 )); then
          if [[ "${DRY_RUN:-0}" != 1 ]] && ! "$(recipe_python)" -c "import fairscale" 2>/dev/null; then
            die "ZERO_SHARDING=os needs fairscale (the optional sharding extra): pip install -r requirements-sharding.txt -c constraints.txt"
          fi
          _sharding_flags+=(--zero-sharding os)
        fi ;;
    *) die "ZERO_SHARDING=${ZERO_SHARDING}: use none or os (optimizer-state sharding)" ;;
  esac
}

# pre-training recipe (fairseq's masked_lm task), built from the variables the recipe set to its
# paper's defaults; printed, then run, with EXTRA_ARGS appended. WARMUP_UPDATES may be empty:
# then it is WARMUP_PROPORTION of TOTAL_UPDATES. JSON records go to LOG_FILE (add_log_flags).
run_mlm_pretraining() {
  require_data_bin "${DATA}"
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
    --batch-size "${MAX_SENTENCES}" --update-freq "${update_freq_value}"
  )
  add_pretraining_flags cmd
  print_memory_plan "${cmd[@]}" "$@"
  run_printed "${cmd[@]}" "$@"
}

# generalized-bidirectionality pre-training (our bidirectional_lm task, model and criterion),
# built from the variables recipes/bidirectional/pretrain.sh set; the batch is in tokens
# (BATCH_TOKENS, MAX_TOKENS per GPU); CHECKPOINT_ACTIVATIONS=1 adds --checkpoint-activations
# (full activation recomputation; default 0). Printed, then run, with EXTRA_ARGS appended.
run_bidirectional_pretraining() {
  require_data_bin "${DATA}"
  local update_freq_value
  update_freq_value="$(update_freq "${BATCH_TOKENS}" "${MAX_TOKENS}" BATCH_TOKENS MAX_TOKENS)"
  local cmd=(
    "$(fairseq_cmd fairseq-train)" "${DATA}"
    --user-dir "${USER_DIR}"
    --task bidirectional_lm --variant "${VARIANT}" --criterion "${CRITERION}"
    --arch "${ARCH}" --max-target-positions "${TOKENS_PER_SAMPLE}"
    --tokens-per-sample "${TOKENS_PER_SAMPLE}" --sample-break-mode "${SAMPLE_BREAK_MODE}"
    --document-format "${DOCUMENT_FORMAT}"
    --mask-prob "${MASK_PROB}" --plain-lm-prob "${PLAIN_LM_PROB}"
    --max-tokens "${MAX_TOKENS}" --update-freq "${update_freq_value}"
  )
  case "${CHECKPOINT_ACTIVATIONS:-0}" in
    0) ;;
    1) cmd+=(--checkpoint-activations) ;;
    *) die "CHECKPOINT_ACTIVATIONS=${CHECKPOINT_ACTIVATIONS}: use 1 (recompute every layer's" \
           "activations in the backward pass) or 0" ;;
  esac
  add_pretraining_flags cmd
  print_memory_plan "${cmd[@]}" "$@"
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

# The fine-tuning tasks of scripts/prepare_downstream.sh (docs/downstream.md): classification
# from real text on the machine, scored by accuracy, their classes those of DATA/label/dict.txt.
DOWNSTREAM_TASKS="DebSection GlossTopic FortuneTopic GlossPair"

# downstream_task_name NAME: the canonical spelling of one of DOWNSTREAM_TASKS (any case);
# nothing and status 1 for another name.
downstream_task_name() {
  local task
  for task in ${DOWNSTREAM_TASKS}; do
    if [[ "${1^^}" == "${task^^}" ]]; then echo "${task}"; return 0; fi
  done
  return 1
}

# finetune_task_name NAME [GLUE_NAMER]: NAME as a downstream task (downstream_task_name) or as
# GLUE_NAMER (default glue_task_name) spells it; an unknown name is an error naming both lists.
finetune_task_name() {
  local namer="${2:-glue_task_name}"
  downstream_task_name "$1" && return 0
  "${namer}" "$1" 2>/dev/null && return 0
  "${namer}" "$1" 2>&1 | sed "s/\$/, or a downstream task (${DOWNSTREAM_TASKS// /, })/" >&2
  return 2
}

# label_classes DATA: the number of classes of a classification data-bin: the labels in its
# label/dict.txt (fairseq-preprocess pads a dictionary to a multiple of 8 entries with
# madeupword0000, ...: those are no classes).
label_classes() {
  local labels="$1/label/dict.txt"
  [[ -f "${labels}" ]] || { echo "error: ${labels} not found: DATA must be a sentence_prediction data-bin (scripts/prepare_downstream.sh makes one)" >&2; return 2; }
  grep -cv '^madeupword[0-9]* ' "${labels}"
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

# --- fine-tuning (recipes/*/finetune_glue.sh and their grids) ---------------------------------

# die MESSAGE: a one-line error, exit status 2.
die() { echo "error: $*" >&2; exit 2; }

# run_sentence_prediction RECIPE_FLAGS [EXTRA_ARGS...]: the fairseq-train command shared by the
# GLUE fine-tuning recipes (fairseq's stock sentence_prediction task and criterion on the
# pre-trained model restored from PRETRAINED, as in fairseq's RoBERTa GLUE README), built from
# the variables the recipe set (TASK DATA PRETRAINED NUM_CLASSES SHORTEN_METHOD CRITERION
# MAX_POSITIONS DROPOUT ATTENTION_DROPOUT OPTIMIZER ADAM_BETAS ADAM_EPS WEIGHT_DECAY CLIP_NORM
# BATCH_SIZE MAX_SENTENCES VALID_SUBSET BEST_METRIC SEED NUM_WORKERS LOG_INTERVAL SAVE_DIR CPU
# PRECISION LOG_FILE), with the recipe's own model, schedule and checkpointing flags from the
# array named RECIPE_FLAGS; printed, then run (DRY_RUN=1: printed only). MNLI validates on valid
# (matched) and valid1 (mismatched) when DATA has both.
run_sentence_prediction() {
  local -n _sentence_prediction_flags="$1"; shift
  # fairseq-train silently trains from scratch when --restore-file does not exist.
  [[ -f "${PRETRAINED}" ]] || die "PRETRAINED=${PRETRAINED}: no such file"
  if [[ "${TASK}" == MNLI && "${VALID_SUBSET}" == valid && -f "${DATA}/input0/valid1.idx" ]]; then
    VALID_SUBSET="valid,valid1"
  fi
  local update_freq_value
  update_freq_value="$(update_freq "${BATCH_SIZE}" "${MAX_SENTENCES}")"
  local cmd=(
    "$(fairseq_cmd fairseq-train)" "${DATA}"
    --user-dir "${USER_DIR}"
    --restore-file "${PRETRAINED}" --reset-optimizer --reset-dataloader --reset-meters
    --task sentence_prediction --num-classes "${NUM_CLASSES}"
    --init-token 0 --separator-token 2 --shorten-method "${SHORTEN_METHOD}"
    --criterion "${CRITERION}"
    "${_sentence_prediction_flags[@]}" --max-positions "${MAX_POSITIONS}"
    --dropout "${DROPOUT}" --attention-dropout "${ATTENTION_DROPOUT}"
    --optimizer "${OPTIMIZER}" --adam-betas "${ADAM_BETAS}" --adam-eps "${ADAM_EPS}"
    --weight-decay "${WEIGHT_DECAY}" --clip-norm "${CLIP_NORM}"
    --batch-size "${MAX_SENTENCES}" --update-freq "${update_freq_value}"
    --required-batch-size-multiple 1 --find-unused-parameters
    --valid-subset "${VALID_SUBSET}" --best-checkpoint-metric "${BEST_METRIC}"
    --seed "${SEED}" --num-workers "${NUM_WORKERS}" --log-interval "${LOG_INTERVAL}"
    --save-dir "${SAVE_DIR}"
  )
  add_sentence_prediction_metric_flags cmd "${TASK}" "${BEST_METRIC}"
  add_log_flags cmd
  add_save_on_signal_flag cmd
  if [[ "${CPU}" == 1 ]]; then cmd+=(--cpu); fi
  add_precision_flag cmd
  run_printed "${cmd[@]}" "$@"
}

# best_score LOG [SUBSET]: the best score of validation subset SUBSET (default valid; fairseq
# logs a second subset such as MNLI's valid1 as valid1_*) in a fairseq --log-format json log.
# The metric and its direction are read off the command line the recipe logged first.
best_score() {
  local log="$1" subset="${2:-valid}" metric direction
  metric="$(sed -n '1s/.*--best-checkpoint-metric \([^ ]*\).*/\1/p' "${log}")"
  direction=min
  if head -n 1 "${log}" | grep -q -- '--maximize-best-checkpoint-metric'; then direction=max; fi
  grep -o "\"${subset}_${metric}\": \"[^\"]*\"" "${log}" | sed 's/.*: "\(.*\)"/\1/' \
    | sort -g | { if [[ "${direction}" == max ]]; then tail -n 1; else head -n 1; fi; }
}

# run_grid_point DIR RESULTS KEY RECIPE [ARGS...]: one run of a fine-tuning grid. Runs RECIPE
# (its settings in the environment) with --log-format json and ARGS, logging its stdout (the
# command line, then the JSON records) to DIR/train.log in place of fairseq's --log-file,
# then appends one row "KEY<TAB>SUBSET<TAB>SCORE" to RESULTS per validation subset of the run
# (MNLI: valid, the matched, and valid1, the mismatched dev set) and marks DIR/DONE. A point
# whose DONE marker exists is skipped, so an interrupted grid resumes.
run_grid_point() {
  local dir="$1" results="$2" key="$3" recipe="$4" subsets subset score
  shift 4
  if [[ -f "${dir}/DONE" ]]; then echo "done already: ${dir}"; return 0; fi
  mkdir -p "${dir}"
  LOG_FILE="" "${recipe}" --log-format json "$@" 2>&1 | tee "${dir}/train.log"
  subsets="$(sed -n '1s/.*--valid-subset \([^ ]*\).*/\1/p' "${dir}/train.log")"
  for subset in ${subsets//,/ }; do
    score="$(best_score "${dir}/train.log" "${subset}")"
    printf '%s\t%s\t%s\n' "${key}" "${subset}" "${score:-nan}" >> "${results}"
  done
  touch "${dir}/DONE"
}

# grid_subsets RESULTS: the validation subsets found in a grid's RESULTS, in first-seen order.
grid_subsets() { awk -F '\t' '{ print $(NF - 1) }' "$1" | awk '!seen[$0]++'; }
