#!/usr/bin/env bash
# The bidirectional-flops study (docs/studies.md, fairseq_ext_lab/studies/catalog/bidirectional.py STUDIES["bidirectional-flops"]): each model's
# peak lr chosen on held-out training data, then every model x seed at the study's budget (equal
# training FLOPs or tokens), two runs at a time on one thread each, then the study's tables
# (mean ± SE over seeds, paired differences, 95% t intervals: holds / fails / unresolved).
# Resumable: run it again and finished runs are read back; --compare REF.json checks the figures.
#   DATA=data-bin/python-docs-spm8000 recipes/studies/bidirectional-flops.sh [--runs-dir DIR] [--updates N] [--seeds S ...] [--compare REF.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
DATA="${DATA:-${REPO_ROOT}/data-bin/python-docs-spm8000}"
exec "$(recipe_python)" "${REPO_ROOT}/scripts/study.py" bidirectional-flops --data "${DATA}" "$@"
