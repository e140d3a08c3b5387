#!/usr/bin/env bash
# A data lever of the transfer diagnosis (docs/transfer.md): GCIDE's English prose (Debian's dict-gcide,
# fetched without root), encoded with DATA_BIN's sentencepiece model and dictionary into a new
# data-bin, for recipes/roberta/english_prose.sh; see fairseq_ext/corpus/english_prose.py.
#   scripts/prepare_english_prose.sh DATA_BIN OUT [--cache-dir data/cache] [--workers N]
#   scripts/prepare_english_prose.sh data-bin/python-docs-spm8000 data-bin/gcide-spm8000
# Runs `python -m fairseq_ext.corpus.english_prose "$@"` with the repo's .venv if there is one.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/python_module.sh"
exec_python_module fairseq_ext.corpus.english_prose "$@"
