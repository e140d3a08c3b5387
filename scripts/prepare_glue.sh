#!/usr/bin/env bash
# Binarize GLUE tasks you have on disk for fine-tuning (recipes/*/finetune_glue.sh), with the
# pre-training sentencepiece model and dictionary, into fairseq's sentence_prediction layout
# (OUT_DIR/<TASK>-bin/input0, input1, label); see fairseq_ext/corpus/glue.py.
#   scripts/prepare_glue.sh GLUE_DIR SPM_MODEL DICT OUT_DIR [TASKS...] [--workers N] [--force]
#   scripts/prepare_glue.sh glue_data data-bin/python-docs-spm8000/spm.model \
#     data-bin/python-docs-spm8000/dict.txt glue RTE STS-B    # -> glue/RTE-bin, glue/STS-B-bin
# Runs `python -m fairseq_ext.corpus.glue "$@"` (which encodes, then runs fairseq-preprocess)
# with the repo's .venv if there is one.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/python_module.sh"
exec_python_module fairseq_ext.corpus.glue "$@"
