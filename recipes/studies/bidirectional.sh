#!/usr/bin/env bash
# The bidirectional study (docs/studies.md, fairseq_ext_lab/studies/catalog/bidirectional.py STUDIES["bidirectional"]): each model's
# peak lr chosen on held-out training data, then every model x seed at the study's budget (equal
# training FLOPs or tokens), two runs at a time on one thread each, then the study's tables
# (mean ± SE over seeds, paired differences, 95% t intervals: holds / fails / unresolved).
# Resumable: run it again and finished runs are read back; --compare REF.json checks the figures.
# --downstream SUITE_DIR (scripts/prepare_downstream.sh) adds the fine-tuning stage: every
# checkpoint fine-tuned on the suite's tasks, the papers' fine-tuning claims (docs/studies.md).
#   DATA=data-bin/python-docs-spm8000 recipes/studies/bidirectional.sh [--runs-dir DIR] [--updates N] [--seeds S ...] [--downstream SUITE_DIR] [--compare REF.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
DATA="${DATA:-${REPO_ROOT}/data-bin/python-docs-spm8000}"
exec "$(recipe_python)" "${REPO_ROOT}/scripts/study.py" bidirectional --data "${DATA}" "$@"
