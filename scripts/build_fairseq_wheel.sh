#!/usr/bin/env bash
# Build the fairseq wheel that `make install` installs: the hash-pinned ve-fairseq 0.12.3 wheel
# (requirements-fairseq.txt) with the patch series applied (patches/series: one item per file, in
# order), its version and items written into fairseq/__init__.py as __fairseq_ext_patch__ (the
# marker fairseq_ext checks on import), repacked with build tag 1fairseqext. Takes seconds: no
# compiler runs, the wheel's compiled helpers are kept.
#
#   scripts/build_fairseq_wheel.sh OUT_DIR [PYTHON_VERSION]
#
# PYTHON_VERSION (e.g. 3.12) builds the wheel for another interpreter, such as the GPU machine's
# (docs/benchmarks.md). Runs pip and `wheel` with $PYTHON: by default .venv's, else python3.
# SLIM=1 leaves out the media and sample arrays under fairseq/examples (.npy, .png, .ipynb,
# .flac...: about 8.5 of the wheel's 20 MB, read by no import), for a device call's 64 MiB.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR="${1:?usage: scripts/build_fairseq_wheel.sh OUT_DIR [PYTHON_VERSION]}"
PYTHON_VERSION="${2:-}"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
SERIES=patches/series
BUILD_TAG=1fairseqext

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
target=()
[ -n "$PYTHON_VERSION" ] && target=(--python-version "$PYTHON_VERSION" --only-binary=:all:)

"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
    -r requirements-fairseq.txt -d "$work/download" "${target[@]}"
"$PYTHON" -m wheel unpack -d "$work/tree" "$work"/download/ve_fairseq-*.whl >/dev/null
tree=("$work"/tree/ve_fairseq-*)
version="$(sed -n 's/^# version: *\([0-9][0-9]*\) *$/\1/p' "$SERIES")"
[ -n "$version" ] || { echo "$SERIES: no '# version: N' line" >&2; exit 1; }
items=()
while read -r name; do
    case "$name" in ''|'#'*) continue ;; esac
    patch -d "${tree[0]}" -p1 --forward --batch --no-backup-if-mismatch --quiet \
        < "patches/$name" || { echo "patches/$name does not apply (patches/series)" >&2; exit 1; }
    items+=("\"${name%.patch}\"")
done < "$SERIES"
{
    printf '\n# fairseq-ext (scripts/build_fairseq_wheel.sh): the patch series this build carries\n'
    printf '__fairseq_ext_patch__ = {"version": %s, "items": (%s,)}\n' "$version" \
        "$(IFS=,; echo "${items[*]}" | sed 's/,/, /g')"
} >> "${tree[0]}/fairseq/__init__.py"
if [ "${SLIM:-0}" = 1 ]; then
    find "${tree[0]}/fairseq/examples" -type f \( -name '*.npy' -o -name '*.png' -o -name '*.jpg' \
        -o -name '*.gif' -o -name '*.pdf' -o -name '*.ipynb' -o -name '*.flac' -o -name '*.wav' \) \
        -delete
fi
mkdir -p "$OUT_DIR"
"$PYTHON" -m wheel pack --build-number "$BUILD_TAG" -d "$OUT_DIR" "${tree[0]}"
