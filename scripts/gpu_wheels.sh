#!/usr/bin/env bash
# Prepare, on this CPU machine, what scripts/gpu_suite.sh needs on the lent GPU machine, which
# has Python 3.12, torch 2.11 + CUDA 13 and no fairseq, and reaches no package registry
# (docs/benchmarks.md, "GPU suite"):
#
#   .whl/       every cp312 wheel missing there: our patched fairseq (ve-fairseq 0.12.3 +
#               patches/series, scripts/build_fairseq_wheel.sh, SLIM=1: without the media of
#               its examples folder) and fairseq's
#               needs that the GPU image lacks (/work/.library/device/KINDS.md lists what it
#               has: torch, numpy, regex, sacrebleu, tqdm, scikit-learn, PyYAML, sentencepiece,
#               pytest, pytest-xdist... are there; hydra-core, omegaconf, antlr4, bitarray,
#               cffi, pycparser, tensorboardX are not), and fairscale (the sharding extra).
#               Versions are constraints.txt's pins.
#   .gpu-data/english-spm8000-share/
#               an evenly spread share of the embedded English corpus's data-bin (the demo's,
#               data-bin/english-spm8000, which scripts/prepare_corpus.sh builds first if it is
#               missing): SHARE_TRAIN_TOKENS [8,000,000] of its 31.1M training pieces and
#               SHARE_VALID_TOKENS [400,000] of its validation ones, about 21 MB, with its
#               dict.txt and spm.model and a share.json of what was kept
#               (python -m fairseq_ext_lab.benchmarks.gpu_data_share; the whole data-bin, 85 MB,
#               does not fit a call).
#   .gpu-data/english-spm8000-downstream/
#               the downstream suite the GPU study fine-tunes on (downstream.json and each
#               task's -bin, about 1.5 MB; not its prep/), copied from
#               data-bin/english-spm8000-downstream, which scripts/prepare_downstream.sh
#               builds first on the full data-bin if it is missing (its packages fetched into
#               data/cache, as make demo does); the share keeps the full data-bin's
#               dictionary, so the suite encodes alike.
#
#   scripts/gpu_wheels.sh            # both
#   scripts/gpu_wheels.sh --no-data  # the wheels only
#
# Both folders are ignored by git (.gitignore); the device call names them in `carry`. Prints
# every file's size and the total, and fails if the total passes LIMIT_MIB (default 48: the
# working tree and the carried paths travel together, 64 MiB at most).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEEL_DIR="${WHEEL_DIR:-.whl}"
DATA_DIR="${DATA_DIR:-.gpu-data}"
CORPUS="${CORPUS:-data-bin/english-spm8000}"
SUITE="${SUITE:-${CORPUS}-downstream}"
SHARE_TRAIN_TOKENS="${SHARE_TRAIN_TOKENS:-8000000}"
SHARE_VALID_TOKENS="${SHARE_VALID_TOKENS:-400000}"
LIMIT_MIB="${LIMIT_MIB:-48}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
with_data=1
case "${1:-}" in
  "") ;;
  --no-data) with_data=0 ;;
  *) echo "usage: scripts/gpu_wheels.sh [--no-data]" >&2; exit 2 ;;
esac

# Pure-Python or cp312 binary packages fairseq (and fairseq_ext) import that the GPU image lacks.
BINARY_PACKAGES=(hydra-core omegaconf bitarray cffi pycparser tensorboardX)
# No wheel on PyPI: built here (pure Python). fairscale is the optional `sharding` extra
# (requirements-sharding.txt): fairseq's --zero-sharding os and the fully_sharded check owed in
# docs/benchmarks.md ("GPU checks owed: scaling").
SDIST_ONLY_PACKAGES=(antlr4-python3-runtime fairscale)

pin() {  # pin NAME: NAME==VERSION from constraints.txt (case-insensitive)
  local line
  line="$(grep -i -E "^$1==" constraints.txt || true)"
  if [[ -z "${line}" ]]; then echo "error: $1 is not pinned in constraints.txt" >&2; return 1; fi
  echo "${line%%[[:space:]#]*}"
}

pip_() { "${PYTHON}" -m pip --disable-pip-version-check "$@"; }

rm -rf "${WHEEL_DIR}"
mkdir -p "${WHEEL_DIR}"
echo "== fairseq (ve-fairseq 0.12.3, patched), cp312"
PYTHON="${PYTHON}" SLIM=1 scripts/build_fairseq_wheel.sh "${WHEEL_DIR}" 3.12

pins=()
for name in "${BINARY_PACKAGES[@]}"; do pins+=("$(pin "${name}")"); done
echo "== ${pins[*]}"
pip_ download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "${WHEEL_DIR}" "${pins[@]}"

for name in "${SDIST_ONLY_PACKAGES[@]}"; do
  spec="$(pin "${name}")"
  echo "== ${spec} (built here: no wheel on the registry)"
  pip_ wheel -q --no-deps --no-binary=:all: -w "${WHEEL_DIR}" "${spec}"
done

# A wheel that is not cp312/abi3/pure could not be installed there.
for wheel in "${WHEEL_DIR}"/*.whl; do
  tags="$(basename "${wheel}" .whl | awk -F- '{print $(NF-2) "-" $(NF-1) "-" $NF}')"
  case "${tags}" in
    cp312-cp312-*x86_64* | py3-none-any | py2.py3-none-any | cp3*-abi3-*x86_64*) ;;
    *) echo "error: ${wheel} ($tags) does not install on CPython 3.12 x86_64" >&2; exit 1 ;;
  esac
done

if [[ "${with_data}" == 1 ]]; then
  if [[ ! -f "${CORPUS}/dict.txt" ]]; then
    echo "== ${CORPUS} is missing: scripts/prepare_corpus.sh builds it"
    scripts/prepare_corpus.sh --destdir "${CORPUS}"
  fi
  dest="${DATA_DIR}/$(basename "${CORPUS}")-share"  # replaced by the share tool, if a share
  echo "== ${CORPUS} -> ${dest} (a share: ${SHARE_TRAIN_TOKENS} training, ${SHARE_VALID_TOKENS} validation tokens)"
  PYTHONWARNINGS=ignore "${PYTHON}" -m fairseq_ext_lab.benchmarks.gpu_data_share "${CORPUS}" \
    "${dest}" --train-tokens "${SHARE_TRAIN_TOKENS}" --valid-tokens "${SHARE_VALID_TOKENS}"
  if [[ ! -f "${SUITE}/downstream.json" ]]; then
    echo "== ${SUITE} is missing: scripts/prepare_downstream.sh builds it"
    scripts/prepare_downstream.sh "${CORPUS}" "${SUITE}" --fetch --cache-dir data/cache
  fi
  suite_dest="${DATA_DIR}/$(basename "${SUITE}")"
  echo "== ${SUITE} -> ${suite_dest} (the suite, without prep/)"
  rm -rf "${suite_dest}"
  mkdir -p "${suite_dest}"
  cp "${SUITE}/downstream.json" "${suite_dest}/"
  for task_bin in "${SUITE}"/*-bin; do cp -r "${task_bin}" "${suite_dest}/"; done
  for other in "${DATA_DIR}"/*; do  # counted below and carried too
    if [[ "${other}" != "${dest}" && "${other}" != "${suite_dest}" ]]; then
      echo "warning: ${other} is carried too (not written by this script): remove it if unused" >&2
    fi
  done
fi

echo "== sizes"
folders=("${WHEEL_DIR}")
if [[ "${with_data}" == 1 ]]; then folders+=("${DATA_DIR}"); fi
find "${folders[@]}" -type f -printf '%s\t%p\n' | sort -k2 |
  awk -F'\t' '{printf "%10.2f MiB  %s\n", $1 / 1048576, $2}'
total=0
for folder in "${folders[@]}"; do
  bytes="$(du -sb "${folder}" | cut -f1)"
  printf '%10.2f MiB  %s (total)\n' "$(awk -v b="${bytes}" 'BEGIN { print b / 1048576 }')" "${folder}"
  total=$(( total + bytes ))
done
printf '%10.2f MiB  these carried paths\n' "$(awk -v b="${total}" 'BEGIN { print b / 1048576 }')"
if (( total > LIMIT_MIB * 1048576 )); then
  echo "error: over LIMIT_MIB=${LIMIT_MIB} MiB (the device call carries 64 MiB with the tree)" >&2
  exit 1
fi
# What a call carries beside them: the working tree (tracked and untracked, not ignored), the
# study's runs (.gpu-study) and the prebuilt extension (.gpu-build; BUILD_RESERVE_MIB [8] for it
# while it is not built yet).
tree="$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
        awk '{ s += $1 } END { print s + 0 }')"
others=0
for folder in .gpu-study .gpu-build; do
  if [[ -d "${folder}" ]]; then others=$(( others + $(du -sb "${folder}" | cut -f1) )); fi
done
if [[ ! -d .gpu-build ]] || [[ -z "$(ls -A .gpu-build)" ]]; then
  others=$(( others + ${BUILD_RESERVE_MIB:-8} * 1048576 ))
fi
call=$(( total + tree + others ))
printf '%10.2f MiB  a device call with the tree (%.2f), .gpu-study and .gpu-build (or its reserve)\n' \
  "$(awk -v b="${call}" 'BEGIN { print b / 1048576 }')" "$(awk -v b="${tree}" 'BEGIN { print b / 1048576 }')"
if (( call > 64 * 1048576 )); then
  echo "error: a device call would carry more than 64 MiB: shrink SHARE_TRAIN_TOKENS" >&2
  exit 1
fi
