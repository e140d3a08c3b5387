#!/usr/bin/env bash
# Build a fairseq data-bin from raw text (default: the English embedded corpus; --source
# python-docs: the Python 3.11 docs); see docs/corpus.md.
# Runs `python -m fairseq_ext.corpus.prepare_corpus "$@"` with the repo's .venv if there is one.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/python_module.sh"
exec_python_module fairseq_ext.corpus.prepare_corpus "$@"
