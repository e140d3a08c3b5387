#!/usr/bin/env bash
# The GPU checks, for the lent GPU machine: docs/benchmarks.md, "GPU suite", gives the
# device calls that run it, and `scripts/gpu_suite.sh --help` every stage, option and variable.
#
#   scripts/gpu_suite.sh [--stages "LIST"] [--tar FILE] [--budget SECONDS] [--keep-going]
#                        [--dry-run] OUTDIR
#
# A thin wrapper: the stages, the driver and the checks are the package
# fairseq_ext_lab/benchmarks/gpu_suite/, run here by its path (its __main__.py) with GPU_PYTHON
# [python3], the machine's interpreter that holds torch. fairseq is not installed there until
# the setup stage has run, so that package uses the standard library only (-S: not even
# site-packages) and is not imported as part of the fairseq_ext_lab package, whose __init__
# imports the plugin and so fairseq.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONUNBUFFERED=1
exec "${GPU_PYTHON:-python3}" -S "${REPO}/fairseq_ext_lab/benchmarks/gpu_suite/__main__.py" "$@"
