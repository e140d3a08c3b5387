#!/usr/bin/env bash
# Build a fairseq data-bin from raw text (default: the Python 3.11 docs); see docs/corpus.md.
# Runs `python -m fairseq_ext.corpus.prepare_corpus "$@"` with the repo's .venv if there is one.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "${repo_root}/.venv/bin/python" ]]; then
    python="${repo_root}/.venv/bin/python"
else
    python="python3"
fi
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${python}" -m fairseq_ext.corpus.prepare_corpus "$@"
