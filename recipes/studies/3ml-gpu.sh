#!/usr/bin/env bash
# The 3ml-gpu study (docs/studies.md, "3ML on the GPU"; fairseq_ext_lab/studies/catalog/three_ml.py
# STUDIES["3ml-gpu"]): RoBERTa-15% against 3ML-self-40% at 6 x 512, 512-token
# blocks, 32 a batch, fairseq fp16, 3 seeds of the same 600 updates (Table 3's first block),
# pre-trained one run at a time on the GPU; with --downstream SUITE_DIR, both checkpoints and a
# random-init control fine-tuned on the offline suite (4 runs at a time). Reports the fine-tuned
# accuracies (3ML-self on par with, and better than, RoBERTa-15%) and the pre-training wall
# clock of each (3ML-self's over RoBERTa's, paired on the seed): the time to RoBERTa's fine-tuned
# accuracy, mean ± SE over seeds. Needs a CUDA device (--device cpu to try it on the CPU).
# Resumable: run it again and finished runs are read back; --compare REF.json checks the figures.
# On the lent GPU machine: scripts/gpu_suite.sh --stages "setup study" (docs/benchmarks.md).
# Default DATA: the embedded English corpus (the demo's); the GPU suite gives it a carried share.
#   recipes/studies/3ml-gpu.sh --downstream data-bin/english-spm8000-downstream \
#       [--runs-dir DIR] [--updates N] [--seeds S ...] [--compare REF.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
DATA="${DATA:-${REPO_ROOT}/data-bin/english-spm8000}"
exec "$(recipe_python)" "${REPO_ROOT}/scripts/study.py" 3ml-gpu --data "${DATA}" "$@"
