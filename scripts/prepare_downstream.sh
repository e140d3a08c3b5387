#!/usr/bin/env bash
# Build offline fine-tuning tasks from human-written labelled text that Debian installs
# (DebSection: package descriptions -> archive section; GlossTopic: WordNet noun definition ->
# lexicographer file; FortuneTopic: fortune -> category; GlossPair, when named: WordNet lemma +
# definition -> match/other), encoded with the pre-training sentencepiece model and dictionary,
# into fairseq's sentence_prediction layout (OUT_DIR/<TASK>-bin: train, valid = dev, valid1 =
# the selection rows the learning rate is chosen on), with
# OUT_DIR/downstream.json (sizes, overlap check, baselines); see fairseq_ext/corpus/downstream.py
# and docs/downstream.md.
#   scripts/prepare_downstream.sh DATA_BIN OUT_DIR [TASK ...] [--train-size N] [--dev-size N]
#       [--selection-size N] [--seed S] [--workers N] [--force]
#   scripts/prepare_downstream.sh data-bin/python-docs-spm8000 runs/downstream
# Runs `python -m fairseq_ext.corpus.downstream "$@"` with the repo's .venv if there is one.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/python_module.sh"
exec_python_module fairseq_ext.corpus.downstream "$@"
