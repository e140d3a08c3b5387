#!/usr/bin/env bash
# The swishrnn study (docs/studies.md, fairseq_ext/experiments/studies.py STUDIES["swishrnn"]): every
# model x seed at equal analytic training FLOPs, two runs at a time on one thread each, then
# the study's tables (mean ± SE over seeds, paired differences, holds / fails / unresolved).
# Resumable: run it again and finished runs are read back.
#   DATA=data-bin/python-docs-spm8000 recipes/studies/swishrnn.sh [--runs-dir DIR] [--updates N] [--seeds S ...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
DATA="${DATA:-${REPO_ROOT}/data-bin/python-docs-spm8000}"
exec "$(recipe_python)" "${REPO_ROOT}/scripts/study.py" swishrnn --data "${DATA}" "$@"
