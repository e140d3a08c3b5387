#!/usr/bin/env bash
# Tables 3-5 of Artetxe et al. (2022) for bidirectional_lm checkpoints: full-document perplexity
# (Table 3), the suffix-perplexity R sweep (Table 4) and the single-token infilling R sweep
# (Table 5), each a stock `fairseq-validate --task bidirectional_lm --eval-mode ...` run, printed
# as one table with a row per checkpoint ("-" where a checkpoint was never trained for a mode:
# perplexity for msk_*, direct infilling for nxt_*).
#   DATA=data-bin/python-docs-spm8000 recipes/bidirectional/evaluate.sh CKPT [CKPT ...] \
#     [--json FILE] [--force]
# R_BIDIR (default 0,0.25,0.5,0.75,1), INFILL_POSITIONS (masked positions per document, default
# 1, the paper's; more give smaller standard errors), VALID_SUBSET (valid), BATCH_SIZE (16), CPU=1
# for CPUs, LOG_DIR to keep each fairseq-validate log and its scored rows
# (LOG_DIR/<checkpoint name>.<mode>.log, .scores.jsonl). Figures print ± their standard error,
# then each model's paired difference to the best of each column. Arguments
# after the checkpoints go to fairseq_ext_lab.evaluation.bidirectional_report: --json FILE also writes
# the rows as JSON; an existing --json file or LOG_DIR log is not overwritten without --force.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

DATA="${DATA:?set DATA to the data-bin to score (scripts/prepare_corpus.sh makes one)}"
[[ $# -ge 1 ]] || die "usage: DATA=... $0 CHECKPOINT [CHECKPOINT ...]"
R_BIDIR="${R_BIDIR:-0,0.25,0.5,0.75,1}"
INFILL_POSITIONS="${INFILL_POSITIONS:-1}"
VALID_SUBSET="${VALID_SUBSET:-valid}"
BATCH_SIZE="${BATCH_SIZE:-16}"
CPU="${CPU:-0}"
require_data_bin "${DATA}"

args=(-m fairseq_ext_lab.evaluation.bidirectional_report "${DATA}" "$@" --r-bidir "${R_BIDIR}"
      --infill-positions "${INFILL_POSITIONS}"
      --valid-subset "${VALID_SUBSET}" --batch-size "${BATCH_SIZE}")
[[ "${CPU}" == 1 ]] && args+=(--cpu)
[[ -n "${LOG_DIR:-}" ]] && args+=(--log-dir "${LOG_DIR}")
run_printed "$(fairseq_cmd python)" "${args[@]}"
