#!/usr/bin/env bash
# The 3ml-gpu study (docs/studies.md, "3ML on the GPU"; fairseq_ext/experiments/studies/catalog/three_ml.py
# STUDIES["3ml-gpu"]; issue 47): RoBERTa-15% against 3ML-self-40% at 6 x 512, 512-token blocks,
# 32 a batch, fairseq fp16, 3 seeds at equal analytic training FLOPs, one run at a time on the
# GPU; reports the wall-clock time (and the FLOPs) 3ML-self-40% takes to reach RoBERTa-15%'s final
# [MASK] loss, mean ± SE over seeds. Needs a CUDA device (--device cpu to try it on the CPU).
# Resumable: run it again and finished runs are read back; --compare REF.json checks the figures.
# On the lent GPU machine: scripts/gpu_suite.sh --stages "setup study" (docs/benchmarks.md).
#   DATA=data-bin/python-docs-spm8000 recipes/studies/3ml-gpu.sh [--runs-dir DIR] [--updates N] [--seeds S ...] [--compare REF.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
DATA="${DATA:-${REPO_ROOT}/data-bin/python-docs-spm8000}"
exec "$(recipe_python)" "${REPO_ROOT}/scripts/study.py" 3ml-gpu --data "${DATA}" "$@"
