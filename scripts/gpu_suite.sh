#!/usr/bin/env bash
# The GPU checks of issue 14 in one script, for the lent GPU machine (Python 3.12, torch 2.11 +
# CUDA 13, nvcc, no fairseq, no network). docs/benchmarks.md, "GPU suite", gives the device
# calls that run it.
#
#   scripts/gpu_suite.sh [--stages "LIST"] [--tar FILE] [--budget SECONDS] [--keep-going]
#                        [--dry-run] OUTDIR
#
# Stages, in this order (LIST: names separated by spaces or commas; `bench` = the three bench_*
# stages; default: all of them; also the STAGES variable):
#   setup           install the carried cp312 wheels (.whl/, made here by scripts/gpu_wheels.sh)
#                   into an environment beside the machine's torch, check `import fairseq, torch`,
#                   print the versions and nvidia-smi. Seconds, and a no-op when done already:
#                   start every device call with it. A venv rather than a bare --target folder
#                   on PYTHONPATH, so that fairseq's console scripts sit beside the interpreter,
#                   where tests/conftest.py (fairseq_cli) and the recipes look for them.
#   build           compile fairseq_ext._C with its CUDA kernels (setup.py build_ext --inplace),
#                   check that fairseq_ext::swish_recurrence has a CUDA kernel; copies the built
#                   module to OUTDIR/prebuilt/, which a later call can carry as .gpu-build/ to
#                   skip the compile (it is reused only if setup.py, fairseq_ext/csrc/*, torch
#                   and the GPU's compute capability are the same).
#   tests           pytest (junit xml: OUTDIR/junit-tests.xml) on the tests that exercise CUDA:
#                   the SwishRNN op/layer/model tests, tests/test_cuda_source.py, the benchmark
#                   script's tests, the fairseq install check, FlexAttention's (its backward
#                   against SDPA's, tests/test_block_sparse_attention.py), and every other
#                   tests/test_*.py that mentions torch.cuda / "cuda" / nvcc. A test skipped for want of a GPU,
#                   a CUDA kernel or nvcc fails the stage. tests/test_cuda_host_emulation.py
#                   compares the CUDA op with the CPU host emulation of its kernels and writes
#                   the differences to OUTDIR/cuda-vs-host-emulation.json.
#   bench_swishrnn  scripts/bench_swishrnn.py --part a; --part c (base, seq 512, bf16).
#   bench_3ml       scripts/bench_3ml.py --device cuda --dtype bf16: base/512 and large/128 at
#                   15/40/50% masking (JSON too; base/512 also with the padded encoder, to
#                   see whether packing pays on the GPU), and the bookkeeping profile at base/512.
#   bench_bidir     scripts/bench_bidirectional.py --device cuda at 125m, seq 1024, bf16; then
#                   its --part flex at 125m, bf16, T = 1024 and 2048: FlexAttention against
#                   SDPA's dense mask, attention alone, the fairseq-validate forward and the
#                   training step (issue 24's target: >= 1.3x at 125m, T = 2048), on the
#                   carried data-bin's valid split (else synthetic documents of 64-1024 tokens).
#   train           300 updates (TRAIN_UPDATES) in bf16 (TRAIN_PRECISION) for each of
#                   3ml_self_base, 3ml_cross_base, swishrnn_bert_base and bidir_lm_125m
#                   (TRAIN_ARCHS), seq 512, batch 32 (bidir_lm: 32 x 512 tokens), through their
#                   recipes' hydra YAML twins (recipes/config/3ml/pretrain_efficient.yaml,
#                   swishrnn/pretrain_base.yaml, bidirectional/pretrain_125m.yaml) with
#                   fairseq-hydra-train ... common.bf16=true: fairseq-train 0.12 makes --bf16
#                   TPU training, and the shell recipes refuse it. Then checks each json log:
#                   every update done, the loss fell, no NaN/inf, no gradient overflow (fp16:
#                   only while its loss scaler settles), words/s logged, the precision in
#                   fairseq's config, CUDA in use (OUTDIR/train-summary.tsv, train-ARCH.log).
#
# Training data: the embedded corpus's data-bin CARRIED in the tree, .gpu-data/python-docs-
# spm8000 (scripts/gpu_wheels.sh copies it there from data-bin/python-docs-spm8000, which needs
# apt-get and the network, so it is built on the CPU machine). If it is not there, the train
# stage builds a data-bin from text shipped in the repo (its Markdown, Python, shell and YAML
# files, about 1 MB) with fairseq_ext.corpus.prepare_corpus, and says so in its log.
#
# Output: OUTDIR/stages.tsv (stage, seconds, status: ok, failed(RC), timeout, dry-run), one log
# per stage (OUTDIR/STAGE.log), env.txt, junit-tests.xml, bench-*.txt/json, train-*.log; with
# --tar FILE (or GPU_SUITE_TAR) all of OUTDIR is packed into FILE on exit, whatever happened
# (a device call returns at most 8 files). The first stage that fails stops the suite: its log's
# tail is printed and the exit status is non-zero (the stage's, 124 on a timeout).
#
# Each stage runs as its own process (this script with --run-stage) under `timeout`:
# GPU_SUITE_TIMEOUT_<stage> seconds if set (e.g. GPU_SUITE_TIMEOUT_tests=170), else
# GPU_SUITE_STAGE_TIMEOUT (default 580), or what is left of --budget (GPU_SUITE_BUDGET, seconds
# for this whole invocation; 0 = none) where that is less, so the suite ends, and packs its tar,
# before a 10-minute device call is killed.
#
# Environment (defaults in brackets):
#   GPU_PYTHON [python3]            the interpreter that holds the machine's torch
#   GPU_ENV [/tmp/gpu-suite-env]    the environment setup makes (a venv whose site-packages
#                                   hold the wheels and that sees GPU_PYTHON's packages; if no
#                                   venv can be made: GPU_ENV/site on PYTHONPATH)
#   WHEEL_DIR [.whl]  GPU_SUITE_DATA [.gpu-data/python-docs-spm8000]  GPU_SUITE_PREBUILT [.gpu-build]
#   GPU_SUITE_WORK [/tmp/gpu-suite-work]  scratch: checkpoints, a built data-bin
#   GPU_SUITE_TESTS                 test files for the tests stage (default: as above)
#   GPU_SUITE_PYTEST_WORKERS [4]    pytest-xdist processes (0: none)
#   GPU_SUITE_PYTEST_TIMEOUT [120]  seconds per test (pytest-timeout, where installed: the GPU
#                                   image has it)
#   GPU_SUITE_REQUIRE_CUDA [1]      0: let setup/build/tests pass without a GPU (CPU trials)
#   BENCH_3ML_ITERS [30]  BENCH_BIDIR_ROUNDS [20]
#   TRAIN_UPDATES [300]  TRAIN_ARCHS [the four above; also bert_rab_*, bert_orig_*, roberta_*,
#                   any size]  TRAIN_SEQ_LEN [512]  TRAIN_BATCH [32]  TRAIN_LR [0.0003]
#                   TRAIN_LOG_INTERVAL [25]  (warmup: a tenth of TRAIN_UPDATES, linear decay)
#   GPU_SUITE_PEAK_TFLOPS [989]     the train summary's MFU is over this: dense bf16 of an
#                                   H100/H200 SXM by NVIDIA's datasheet (KINDS.md measured 788
#                                   on an 8192^3 bf16 matmul on the H200)
#   TRAIN_PRECISION [bf16]          bf16 (common.bf16=true), fp16 (memory-efficient, with
#                                   fairseq's adam) or fp32; checked before the first stage
#   GPU_SUITE_CMD_<stage>           run this shell command instead of the stage (tests of the
#                                   suite, e.g. GPU_SUITE_CMD_build=false)
#   DRY_RUN=1 (--dry-run)           every stage prints the commands it would run, runs none
set -euo pipefail
shopt -s inherit_errexit

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="${REPO}/scripts/gpu_suite.sh"
ALL_STAGES=(setup build tests bench_swishrnn bench_3ml bench_bidir train)

GPU_PYTHON="${GPU_PYTHON:-python3}"
GPU_ENV="${GPU_ENV:-/tmp/gpu-suite-env}"
WHEEL_DIR="${WHEEL_DIR:-${REPO}/.whl}"
GPU_SUITE_DATA="${GPU_SUITE_DATA:-${REPO}/.gpu-data/python-docs-spm8000}"
GPU_SUITE_PREBUILT="${GPU_SUITE_PREBUILT:-${REPO}/.gpu-build}"
GPU_SUITE_WORK="${GPU_SUITE_WORK:-/tmp/gpu-suite-work}"
GPU_SUITE_PYTEST_WORKERS="${GPU_SUITE_PYTEST_WORKERS:-4}"
GPU_SUITE_PYTEST_TIMEOUT="${GPU_SUITE_PYTEST_TIMEOUT:-120}"
GPU_SUITE_REQUIRE_CUDA="${GPU_SUITE_REQUIRE_CUDA:-1}"
GPU_SUITE_STAGE_TIMEOUT="${GPU_SUITE_STAGE_TIMEOUT:-580}"
GPU_SUITE_BUDGET="${GPU_SUITE_BUDGET:-0}"
GPU_SUITE_KEEP_GOING="${GPU_SUITE_KEEP_GOING:-0}"
BENCH_3ML_ITERS="${BENCH_3ML_ITERS:-30}"
BENCH_BIDIR_ROUNDS="${BENCH_BIDIR_ROUNDS:-20}"
TRAIN_UPDATES="${TRAIN_UPDATES:-300}"
TRAIN_ARCHS="${TRAIN_ARCHS:-3ml_self_base 3ml_cross_base swishrnn_bert_base bidir_lm_125m}"
TRAIN_SEQ_LEN="${TRAIN_SEQ_LEN:-512}"
TRAIN_BATCH="${TRAIN_BATCH:-32}"
TRAIN_PRECISION="${TRAIN_PRECISION-bf16}"
TRAIN_LR="${TRAIN_LR:-0.0003}"
TRAIN_LOG_INTERVAL="${TRAIN_LOG_INTERVAL:-25}"
GPU_SUITE_PEAK_TFLOPS="${GPU_SUITE_PEAK_TFLOPS:-989}"
DRY_RUN="${DRY_RUN:-0}"
export PYTHONUNBUFFERED=1

die() { echo "error: $*" >&2; exit 1; }

# x CMD...: print the command (on stderr, like set -x), run it unless DRY_RUN=1.
x() {
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  if [[ "${DRY_RUN}" == 1 ]]; then return 0; fi
  "$@"
}

now() { date +%s.%N; }

# ------------------------------------------------------------------------- the environment

# The interpreter of the environment setup made, and PATH/PYTHONPATH for it (every stage after
# setup calls this; each device call must run setup first: a fresh machine is bare).
PY=""
use_env() {
  if [[ -x "${GPU_ENV}/bin/python" ]]; then
    PY="${GPU_ENV}/bin/python"
    export PATH="${GPU_ENV}/bin:${PATH}" VIRTUAL_ENV="${GPU_ENV}"
  elif [[ -d "${GPU_ENV}/site" ]]; then  # the fallback: --target install on PYTHONPATH
    PY="$(command -v "${GPU_PYTHON}")"
    export PYTHONPATH="${REPO}:${GPU_ENV}/site${PYTHONPATH:+:${PYTHONPATH}}"
    export PATH="${GPU_ENV}/site/bin:${PATH}"
  elif [[ "${DRY_RUN}" == 1 ]]; then
    PY="${GPU_ENV}/bin/python"
  else
    die "no environment at ${GPU_ENV}: run the setup stage first (in the same device call)"
  fi
  export FAIRSEQ_BIN
  FAIRSEQ_BIN="$(dirname "${PY}")"
  if [[ -d "${GPU_ENV}/site/bin" && ! -x "${GPU_ENV}/bin/python" ]]; then
    FAIRSEQ_BIN="${GPU_ENV}/site/bin"
  fi
}

stage_setup() {
  x "${GPU_PYTHON}" --version
  local wheels=("${WHEEL_DIR}"/*.whl)
  if [[ ! -f "${wheels[0]}" && "${DRY_RUN}" != 1 ]]; then
    die "no wheels in ${WHEEL_DIR}: run scripts/gpu_wheels.sh on the CPU machine and name" \
        ".whl in the device call's carry"
  fi
  # The wheels' names and sizes: a second setup with the same wheels installs nothing.
  local key
  key="$(find "${WHEEL_DIR}" -maxdepth 1 -name '*.whl' -printf '%s %f\n' 2>/dev/null | sort || true)"
  if [[ -f "${GPU_ENV}/.wheels-installed" && "$(cat "${GPU_ENV}/.wheels-installed")" == "${key}" ]]; then
    echo "wheels already installed in ${GPU_ENV}"
  else
    x rm -rf "${GPU_ENV}"
    if x "${GPU_PYTHON}" -m venv --without-pip "${GPU_ENV}"; then
      # The venv sees the base interpreter's packages (torch...) after its own, and the repo.
      if [[ "${DRY_RUN}" != 1 ]]; then
        local site_dir
        site_dir="$("${GPU_ENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        "${GPU_PYTHON}" - "${REPO}" > "${site_dir}/zz_gpu_suite_base.pth" <<'EOF'
import sys
# One .pth line per site directory of the interpreter that holds torch (processed like the
# venv's own, .pth files included), then the repository (fairseq_ext, built in place).
for path in sys.path:
    if path.endswith(("site-packages", "dist-packages")):
        print(f"import site; site.addsitedir({path!r})")
print(sys.argv[1])
EOF
      fi
      # pip runs from the base interpreter's packages; --ignore-installed: into the venv even
      # where the base has the same version.
      x "${GPU_ENV}/bin/python" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --disable-pip-version-check --ignore-installed "${wheels[@]}"
    else
      echo "no venv could be made: installing into ${GPU_ENV}/site, on PYTHONPATH"
      x rm -rf "${GPU_ENV}"
      x "${GPU_PYTHON}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --disable-pip-version-check --upgrade --target "${GPU_ENV}/site" "${wheels[@]}"
    fi
    [[ "${DRY_RUN}" == 1 ]] || printf '%s\n' "${key}" > "${GPU_ENV}/.wheels-installed"
  fi
  use_env
  x "${PY}" - "${GPU_SUITE_REQUIRE_CUDA}" "${GPU_ENV}" <<'EOF' | tee "${OUTDIR}/env.txt"
import os, platform, sys
import fairseq, hydra, numpy, omegaconf, torch
if not os.path.realpath(fairseq.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep):
    sys.exit(f"fairseq comes from {fairseq.__file__}, not from the wheels in {sys.argv[2]}")
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| cuDNN",
      torch.backends.cudnn.version())
print("fairseq", fairseq.__version__, fairseq.__file__)
print("numpy", numpy.__version__, "| hydra", hydra.__version__, "| omegaconf",
      omegaconf.__version__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device {p.name}, capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.1f} GiB")
elif sys.argv[1] == "1":
    sys.exit("torch sees no CUDA device")
else:
    print("device: none (GPU_SUITE_REQUIRE_CUDA=0)")
EOF
  if [[ "${DRY_RUN}" == 1 ]] || command -v nvidia-smi >/dev/null; then
    x nvidia-smi | tee -a "${OUTDIR}/env.txt"
  elif [[ "${GPU_SUITE_REQUIRE_CUDA}" == 1 ]]; then
    die "nvidia-smi not found"
  fi
  if [[ "${DRY_RUN}" == 1 ]] || command -v nvcc >/dev/null; then x nvcc --version | tee -a "${OUTDIR}/env.txt"; fi
}

# ------------------------------------------------------------------------------ the build

stage_build() {
  use_env
  cd "${REPO}"
  local suffix=.cpython-312-x86_64-linux-gnu.so key=dry-run so
  if [[ "${DRY_RUN}" != 1 ]]; then
    suffix="$("${PY}" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
    # What the module depends on: a prebuilt one is used only if this key matches.
    key="$( { cat setup.py fairseq_ext/csrc/*; "${PY}" -c 'import torch; print(torch.__version__,
              torch.cuda.is_available() and torch.cuda.get_device_capability())'; } |
            sha256sum | cut -c1-16)"
  fi
  so="fairseq_ext/_C${suffix}"
  if [[ -f "${GPU_SUITE_PREBUILT}/_C${suffix}" && -f "${GPU_SUITE_PREBUILT}/key" &&
        "$(cat "${GPU_SUITE_PREBUILT}/key")" == "${key}" ]]; then
    echo "using the prebuilt ${GPU_SUITE_PREBUILT}/_C${suffix} (key ${key})"
    x cp "${GPU_SUITE_PREBUILT}/_C${suffix}" "${so}"
  elif [[ -f "${so}" && -f "${GPU_ENV}/.build-key" && "$(cat "${GPU_ENV}/.build-key")" == "${key}" ]]; then
    echo "${so} is built already (key ${key})"
  else
    # setup.py's CUDA_ARCH_LIST (TORCH_CUDA_ARCH_LIST=native: only the GPU's own).
    x env MAX_JOBS="${MAX_JOBS:-16}" "${PY}" setup.py -q build_ext --inplace
    [[ "${DRY_RUN}" == 1 ]] || printf '%s\n' "${key}" > "${GPU_ENV}/.build-key"
  fi
  x "${PY}" - "${GPU_SUITE_REQUIRE_CUDA}" <<'EOF'
import sys
import torch
from fairseq_ext.ops import swish_recurrence as ops
print("fairseq_ext._C:", getattr(ops.EXTENSION, "__file__", None))
print("kernels of fairseq_ext::swish_recurrence for:", ops.NATIVE_OP_DEVICES,
      "| CPU kernels:", ops.cpu_kernels())
want = "cuda" if sys.argv[1] == "1" else "cpu"
if want not in ops.NATIVE_OP_DEVICES:
    sys.exit(f"no {want} kernel registered: the build failed (setup.py only warns), see above")
if want == "cuda":
    x = torch.randn(64, 4, 32, device="cuda")
    a, b = torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
    out = torch.ops.fairseq_ext.swish_recurrence(x, a, b, 2)
    ref = ops.swish_recurrence_reference(x, a, b, 2)
    torch.testing.assert_close(out, ref)
    print("CUDA kernel ran; matches the reference at (64, 4, 32), k = 2")
EOF
  x mkdir -p "${OUTDIR}/prebuilt"
  x cp "${so}" "${OUTDIR}/prebuilt/"
  [[ "${DRY_RUN}" == 1 ]] || printf '%s\n' "${key}" > "${OUTDIR}/prebuilt/key"
}

# ------------------------------------------------------------------------------ the tests

test_files() {
  if [[ -n "${GPU_SUITE_TESTS:-}" ]]; then echo "${GPU_SUITE_TESTS}"; return; fi
  {
    printf '%s\n' tests/test_swish_recurrence_op.py tests/test_cuda_source.py \
      tests/test_bench_swishrnn.py tests/test_fairseq_build.py tests/test_swish_rnn.py \
      tests/test_swishrnn_bert.py tests/test_block_sparse_attention.py
    grep -l -E "torch\.cuda|[\"']cuda[\"']|nvcc|NATIVE_OP_DEVICES" tests/test_*.py || true
  } | grep -v -x tests/test_gpu_suite.py | sort -u | tr '\n' ' '
}

stage_tests() {
  use_env
  cd "${REPO}"
  local files xdist=() per_test=() rc=0
  read -r -a files <<< "$(test_files)"
  if [[ "${GPU_SUITE_PYTEST_WORKERS}" != 0 ]]; then xdist=(-n "${GPU_SUITE_PYTEST_WORKERS}"); fi
  # A test that hangs fails alone, with its stacks, instead of the stage timing out without
  # its junit XML (the first GPU run's tests stage did: every test reported, pytest never ended).
  if [[ "${DRY_RUN}" == 1 ]] || "${PY}" -c "import pytest_timeout" 2>/dev/null; then
    per_test=(--timeout "${GPU_SUITE_PYTEST_TIMEOUT}")
  fi
  x env CUDA_HOST_EMULATION_REPORT="${OUTDIR}/cuda-vs-host-emulation.json" \
    "${PY}" -m pytest -q -rs -p no:cacheprovider "${xdist[@]}" "${per_test[@]}" \
    --junitxml="${OUTDIR}/junit-tests.xml" "${files[@]}" || rc=$?
  # Skips for want of a GPU, a CUDA kernel or nvcc mean the CUDA paths did not run.
  x "${PY}" - "${OUTDIR}/junit-tests.xml" "${OUTDIR}/tests-skipped.txt" \
    "${GPU_SUITE_REQUIRE_CUDA}" <<'EOF' || rc=$((rc ? rc : 1))
import re, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
skipped = []
for case in root.iter("testcase"):
    for skip in case.findall("skipped"):
        skipped.append((f"{case.get('classname')}::{case.get('name')}", skip.get("message", "")))
with open(sys.argv[2], "w") as f:
    f.writelines(f"{name}\t{reason}\n" for name, reason in skipped)
print(f"{len(skipped)} skipped (list: {sys.argv[2]})")
missing = [s for s in skipped if re.search(r"\bno\b.*(gpu|cuda|nvcc)", s[1], re.I)]
for name, reason in missing:
    print(f"  skipped without the GPU path: {name}: {reason}")
if missing and sys.argv[3] == "1":
    sys.exit(f"{len(missing)} CUDA test(s) skipped on the GPU machine")
EOF
  return "${rc}"
}

# ------------------------------------------------------------------------- the benchmarks

# A stage run again in the same OUTDIR (a later device call) measures again: its files are the
# suite's own, so the benchmarks' --json files are rewritten (--force), as the logs are.
stage_bench_swishrnn() {
  use_env
  cd "${REPO}"
  x "${PY}" scripts/bench_swishrnn.py --part a | tee "${OUTDIR}/bench-swishrnn-a.txt"
  x "${PY}" scripts/bench_swishrnn.py --part c --device cuda --dtype bf16 --arch-size base \
    --seq-len 512 --batch-size 16 | tee "${OUTDIR}/bench-swishrnn-c.txt"
}

stage_bench_3ml() {
  use_env
  cd "${REPO}"
  local common=(--device cuda --dtype bf16 --mask-rates "0.15,0.4,0.5" --warmup 5
                --iters "${BENCH_3ML_ITERS}")
  x "${PY}" scripts/bench_3ml.py --size base --seq-len 512 --batch-size 32 "${common[@]}" \
    --padded-encoder --json "${OUTDIR}/bench-3ml-base-512.json" --force | tee "${OUTDIR}/bench-3ml-base-512.txt"
  x "${PY}" scripts/bench_3ml.py --size large --seq-len 128 --batch-size 128 "${common[@]}" \
    --json "${OUTDIR}/bench-3ml-large-128.json" --force | tee "${OUTDIR}/bench-3ml-large-128.txt"
  x "${PY}" scripts/bench_3ml.py --size base --seq-len 512 --batch-size 32 --device cuda \
    --dtype bf16 --profile --profile-rate 0.5 | tee "${OUTDIR}/bench-3ml-profile.txt"
}

stage_bench_bidir() {
  use_env
  cd "${REPO}"
  x "${PY}" scripts/bench_bidirectional.py --arch-size 125m --seq-len 1024 --batch-size 8 \
    --device cuda --dtype bf16 --rounds "${BENCH_BIDIR_ROUNDS}" \
    --json "${OUTDIR}/bench-bidir-125m.json" --force | tee "${OUTDIR}/bench-bidir-125m.txt"
  local data=()
  if [[ -f "${GPU_SUITE_DATA}/dict.txt" ]]; then data=(--data "${GPU_SUITE_DATA}"); fi
  x "${PY}" scripts/bench_bidirectional.py --part flex --arch-size 125m --seq-lens 1024,2048 \
    --batch-size 4 --max-batches 4 --device cuda --dtype bf16 --rounds "${BENCH_BIDIR_ROUNDS}" \
    "${data[@]}" --json "${OUTDIR}/bench-bidir-flex-125m.json" --force \
    | tee "${OUTDIR}/bench-bidir-flex-125m.txt"
}

# -------------------------------------------------------------------------- the training

# The data-bin the train stage uses: the carried one, else one built from the repo's text.
training_data() {
  if [[ -f "${GPU_SUITE_DATA}/dict.txt" ]]; then
    echo "training data: ${GPU_SUITE_DATA} (carried)" >&2
    echo "${GPU_SUITE_DATA}"
    return
  fi
  local text="${GPU_SUITE_WORK}/repo-text.txt" dest="${GPU_SUITE_WORK}/data-bin-repo-text"
  echo "training data: no ${GPU_SUITE_DATA}; building ${dest} from the repo's own text" >&2
  if [[ ! -f "${dest}/dict.txt" ]]; then
    mkdir -p "${GPU_SUITE_WORK}"
    # Documents separated by blank lines, one output line per line (prepare_corpus, file input).
    (cd "${REPO}" && find README.md docs fairseq_ext recipes scripts tests -type f \
       \( -name '*.md' -o -name '*.py' -o -name '*.sh' -o -name '*.yaml' \) -print) | sort |
      while read -r f; do cat "${REPO}/${f}"; printf '\n\n'; done > "${text}"
    x "${PY}" -m fairseq_ext.corpus.prepare_corpus --input "${text}" --destdir "${dest}" \
      --workers 8 >&2
  fi
  echo "${dest}"
}

# The hydra overrides that make TRAIN_PRECISION's run; anything else is a one-line error.
# fairseq-train 0.12 turns --bf16 into TPU training (it asks for torch_xla on any machine, and
# the shell recipes refuse PRECISION=--bf16: docs/scaling.md, "Low precision"), so the stage
# trains through the recipes' YAML twins with fairseq-hydra-train, where common.bf16=true is
# bf16 on the GPU. fp16 is fairseq's memory-efficient form, with its own adam (our fused_adamw
# wraps torch.optim.AdamW, which that wrapper does not take; tests/test_low_precision.py).
train_precision_overrides() {
  case "${TRAIN_PRECISION}" in
    bf16) echo common.bf16=true ;;
    fp16) echo common.fp16=true common.memory_efficient_fp16=true optimizer._name=adam ;;
    fp32) ;;
    *) echo "error: TRAIN_PRECISION=${TRAIN_PRECISION}: use bf16, fp16 (memory-efficient) or" \
            "fp32 (the train stage runs fairseq-hydra-train; fairseq-train's --bf16 is TPU" \
            "training in fairseq 0.12)" >&2
       return 2 ;;
  esac
}

# train_command ARRAY ARCH DATA: fill the array named ARRAY with the fairseq-hydra-train command
# that trains ARCH for TRAIN_UPDATES updates of TRAIN_BATCH x TRAIN_SEQ_LEN tokens through the
# YAML twin of its recipe (recipes/config/*), in TRAIN_PRECISION, json records on stdout, no
# checkpoints; an arch with no YAML twin is a one-line error (status 2).
train_command() {
  local -n _train_cmd="$1"
  local arch="$2" data="$3" config=() sizes=() precision=() overrides
  local len="${TRAIN_SEQ_LEN}" batch="${TRAIN_BATCH}"
  local mlm_sizes=("task.tokens_per_sample=${len}" "model.max_positions=${len}"
                   "dataset.batch_size=${batch}")
  case "${arch}" in
    3ml_*) config=(3ml pretrain_efficient); sizes=("${mlm_sizes[@]}") ;;
    swishrnn_bert_*) config=(swishrnn pretrain_base); sizes=("${mlm_sizes[@]}") ;;
    # The baselines of the same YAML, without the keys their archs do not take (its comment).
    bert_rab_*) config=(swishrnn pretrain_base)
                sizes=("${mlm_sizes[@]}" "~model.swishrnn_step_sizes") ;;
    bert_orig_*) config=(swishrnn pretrain_base)
                 sizes=("${mlm_sizes[@]}" "~model.rab_num_buckets" "~model.rab_max_distance"
                        "~model.swishrnn_step_sizes") ;;
    roberta_*) config=(roberta pretrain); sizes=("${mlm_sizes[@]}") ;;
    # The bidirectional_lm recipe batches by tokens: TRAIN_BATCH sequences' worth.
    bidir_lm_*) config=(bidirectional pretrain_125m)
                sizes=("task.tokens_per_sample=${len}" "model.max_target_positions=${len}"
                       "dataset.max_tokens=$((batch * len))") ;;
    *) echo "error: TRAIN_ARCHS: ${arch} has no recipe YAML here; use a 3ml_*, swishrnn_bert_*," \
            "bert_rab_*, bert_orig_*, roberta_* or bidir_lm_* arch" >&2
       return 2 ;;
  esac
  overrides="$(train_precision_overrides)" || return
  read -r -a precision <<< "${overrides}"
  _train_cmd=(
    "${FAIRSEQ_BIN}/fairseq-hydra-train" --config-dir "${REPO}/recipes/config/${config[0]}"
    --config-name "${config[1]}"
    "task.data=${data}" "checkpoint.save_dir=${GPU_SUITE_WORK}/train/${arch}"
    checkpoint.no_save=true common.log_format=json common.log_file=null
    common.no_progress_bar=true "common.log_interval=${TRAIN_LOG_INTERVAL}"
    "model._name=${arch}" "${sizes[@]}"
    "optimization.max_update=${TRAIN_UPDATES}" "lr_scheduler.total_num_update=${TRAIN_UPDATES}"
    "lr_scheduler.warmup_updates=$((TRAIN_UPDATES / 10))" "optimization.lr=[${TRAIN_LR}]"
    "optimization.update_freq=[1]" distributed_training.distributed_world_size=1
    dataset.num_workers=2 "${precision[@]}"
  )
}

# check_train_settings: TRAIN_PRECISION, TRAIN_ARCHS and the sizes are usable (the driver runs
# it before the first stage, so that a typo does not surface after the benchmarks' minutes).
check_train_settings() {
  # shellcheck disable=SC2034  # probe: filled by train_command through its name, not read
  local name arch probe=()
  for name in TRAIN_UPDATES TRAIN_SEQ_LEN TRAIN_BATCH TRAIN_LOG_INTERVAL; do
    if ! [[ "${!name}" =~ ^[1-9][0-9]*$ ]]; then
      echo "error: ${name}=${!name}: use a positive integer" >&2
      return 2
    fi
  done
  train_precision_overrides > /dev/null || return
  for arch in ${TRAIN_ARCHS}; do FAIRSEQ_BIN=. train_command probe "${arch}" DATA || return; done
}

stage_train() {
  use_env
  cd "${REPO}"
  local data arch cmd=() failed=0
  if [[ "${DRY_RUN}" == 1 ]]; then data="${GPU_SUITE_DATA}"; else data="$(training_data)"; fi
  printf 'arch\tprecision\tupdates\tfirst_loss\tlast_loss\tvalid_loss\twps_median\ts_per_update\ttflops\tmfu\toverflows\tverdict\n' \
    > "${OUTDIR}/train-summary.tsv"
  for arch in ${TRAIN_ARCHS}; do
    train_command cmd "${arch}" "${data}"
    echo "== ${arch}: ${cmd[2]#"${REPO}/"}/${cmd[4]}.yaml, ${TRAIN_UPDATES} updates of ${TRAIN_BATCH} x" \
         "${TRAIN_SEQ_LEN} tokens, ${TRAIN_PRECISION}"
    local rc=0
    # The command line is the first line of its log (x prints it on stderr).
    x "${cmd[@]}" > "${OUTDIR}/train-${arch}.log" 2>&1 || rc=$?
    if (( rc != 0 )); then
      echo "fairseq-hydra-train failed (exit ${rc}); the end of ${OUTDIR}/train-${arch}.log:"
      tail -n 40 "${OUTDIR}/train-${arch}.log"
      printf '%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\tfailed(%s)\n' "${arch}" "${TRAIN_PRECISION}" "${rc}" \
        >> "${OUTDIR}/train-summary.tsv"
      failed=1
      continue
    fi
    x "${PY}" - "${OUTDIR}/train-${arch}.log" "${arch}" "${TRAIN_PRECISION}" "${TRAIN_UPDATES}" \
      "${GPU_SUITE_REQUIRE_CUDA}" "${GPU_SUITE_PEAK_TFLOPS}" >> "${OUTDIR}/train-summary.tsv" <<'EOF' || failed=1
"""Check a fairseq-hydra-train log (--log-format json records on stdout) and print its summary
row: every update done, the loss fell, no NaN/inf, words/s logged, the precision asked for in
fairseq's config, CUDA when the suite requires it; the achieved TFLOP/s (our criteria's FLOPs
per update, the records' pflops, times updates per second) and MFU, that over the peak given.
Gradient overflow: none in bf16 and fp32;
in fp16 the dynamic loss scaler (starting at 128) skips a few updates while it settles, so
overflow fails the run only when it persists (any in the second half of the run, or more than a
tenth of the updates skipped) or the loss scale reaches fairseq's minimum (1e-4)."""
import json, math, re, statistics, sys
path, arch, precision, updates, require_cuda, peak_tflops = sys.argv[1:7]
updates = int(updates)
MIN_LOSS_SCALE = 1e-4  # fairseq's common.min_loss_scale, where it gives up
# fairseq's output, without the command line the stage printed first (paths may say anything).
lines = [line for line in open(path).read().splitlines() if not line.startswith("+ ")]
train, valid, done, overflows, late_overflows, other_overflow = [], [], 0, 0, 0, []
for line in lines:
    brace = line.find("{")
    try:
        record = json.loads(line[brace:]) if brace >= 0 else None
    except json.JSONDecodeError:
        record = None
    if isinstance(record, dict):
        if "loss" in record and "num_updates" in record:
            train.append(record)
        elif "valid_loss" in record:
            valid.append(record)
        for key in ("num_updates", "train_num_updates", "valid_num_updates"):
            done = max(done, int(float(record.get(key, 0))))
    elif "gradient overflow detected" in line:
        overflows += 1
        late_overflows += done >= updates // 2
    elif "overflow" in line.lower() and "overflow in param" not in line:
        other_overflow.append(line)
problems = []
inner = [r for r in train if "wps" in r]
if not inner:
    problems.append("no training records")
else:
    losses = [float(r["loss"]) for r in inner]
    if not all(math.isfinite(v) for v in losses):
        problems.append(f"non-finite loss: {losses}")
    elif not losses[-1] < losses[0]:
        problems.append(f"the loss did not fall: {losses[0]} -> {losses[-1]}")
if done < updates:
    problems.append(f"only {done} of {updates} updates")
bad = [line for line in lines if re.search(r'"(-?inf|nan)"', line, re.I)] + other_overflow
if bad:
    problems.append(f"{len(bad)} NaN/inf/overflow lines, first: {bad[0][:200]}")
if overflows and precision != "fp16":  # no loss scaler: an overflow is a real one
    problems.append(f"{overflows} gradient overflows in {precision}")
elif late_overflows or overflows > updates // 10:
    problems.append(f"the loss scale did not settle: {overflows} gradient overflows, "
                    f"{late_overflows} in the second half of the run")
scales = [float(r["loss_scale"]) for r in train if "loss_scale" in r]
if any(s <= MIN_LOSS_SCALE for s in scales) or any("Minimum loss scale" in x for x in lines):
    problems.append(f"the loss scale reached fairseq's minimum ({MIN_LOSS_SCALE})")
# fairseq logs its config (a dict's repr) as it starts: the override reached the trainer.
flag = {"bf16": "'bf16': True", "fp16": "'memory_efficient_fp16': True"}.get(precision)
if flag and not any(flag in line for line in lines):
    problems.append(f"fairseq's config does not say {flag}: not trained in {precision}")
if require_cuda == "1" and not any("CUDA enviroments" in line for line in lines):
    problems.append("fairseq trained without CUDA (no 'CUDA enviroments' banner in the log)")
wps = [float(r["wps"]) for r in inner[1:] or inner]
ups = [float(r["ups"]) for r in inner[1:] or inner if float(r.get("ups", 0)) > 0]
tflops = [float(r["pflops"]) * float(r["ups"]) * 1e3 for r in inner[1:] or inner
          if "pflops" in r and float(r.get("ups", 0)) > 0]
row = [arch, precision, done,
       inner[0]["loss"] if inner else "-", inner[-1]["loss"] if inner else "-",
       valid[-1]["valid_loss"] if valid else "-",
       f"{statistics.median(wps):.0f}" if wps else "-",
       f"{1 / statistics.median(ups):.3f}" if ups else "-",
       f"{statistics.median(tflops):.1f}" if tflops else "-",
       f"{statistics.median(tflops) / float(peak_tflops):.1%}" if tflops else "-", overflows,
       "ok" if not problems else "FAIL: " + "; ".join(problems)]
print("\t".join(map(str, row)))
for problem in problems:
    print(f"{arch}: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
  done
  column -t -s $'\t' "${OUTDIR}/train-summary.tsv" 2>/dev/null || cat "${OUTDIR}/train-summary.tsv"
  return "${failed}"
}

# ---------------------------------------------------------------- running one stage (inner)

if [[ "${1:-}" == "--run-stage" ]]; then
  name="$2" OUTDIR="$3"
  override_var="GPU_SUITE_CMD_${name}"
  if [[ -n "${!override_var:-}" ]]; then
    echo "+ ${override_var}: ${!override_var}"
    exec bash -c "${!override_var}"
  fi
  "stage_${name}"
  exit 0
fi

# ------------------------------------------------------------------------- the driver

usage() {
  echo "usage: scripts/gpu_suite.sh [--stages \"${ALL_STAGES[*]}\"] [--tar FILE]" \
       "[--budget SECONDS] [--keep-going] [--dry-run] OUTDIR" >&2
  exit 2
}

stages_arg="${STAGES:-}"
tar_file="${GPU_SUITE_TAR:-}"
OUTDIR=""
while (( $# )); do
  case "$1" in
    --stages) stages_arg="${2:?--stages needs a list}"; shift 2 ;;
    --stages=*) stages_arg="${1#*=}"; shift ;;
    --tar) tar_file="${2:?--tar needs a file}"; shift 2 ;;
    --budget) GPU_SUITE_BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
    --keep-going) GPU_SUITE_KEEP_GOING=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) [[ -z "${OUTDIR}" ]] || usage; OUTDIR="$1"; shift ;;
  esac
done
[[ -n "${OUTDIR}" ]] || usage
export DRY_RUN GPU_SUITE_BUDGET

stages=()
for name in ${stages_arg//,/ }; do
  case "${name}" in
    all) stages+=("${ALL_STAGES[@]}") ;;
    bench) stages+=(bench_swishrnn bench_3ml bench_bidir) ;;
    *)
      if [[ " ${ALL_STAGES[*]} " != *" ${name} "* ]]; then
        echo "unknown stage: ${name} (stages: ${ALL_STAGES[*]}, bench, all)" >&2
        exit 2
      fi
      stages+=("${name}") ;;
  esac
done
if (( ${#stages[@]} == 0 )); then stages=("${ALL_STAGES[@]}"); fi
if [[ " ${stages[*]} " == *" train "* ]]; then check_train_settings || exit 2; fi

mkdir -p "${OUTDIR}"
OUTDIR="$(cd "${OUTDIR}" && pwd)"
if [[ ! -f "${OUTDIR}/stages.tsv" ]]; then printf 'stage\tseconds\tstatus\n' > "${OUTDIR}/stages.tsv"; fi

pack() {
  local rc=$?
  if [[ -n "${tar_file}" ]]; then
    mkdir -p "$(dirname "${tar_file}")"
    tar -czf "${tar_file}" -C "$(dirname "${OUTDIR}")" "$(basename "${OUTDIR}")" &&
      echo "packed ${OUTDIR} into ${tar_file} ($(du -h "${tar_file}" | cut -f1))"
  fi
  exit "${rc}"
}
trap pack EXIT

suite_start="$(now)"
echo "gpu_suite: stages ${stages[*]} -> ${OUTDIR}$([[ "${DRY_RUN}" == 1 ]] && echo ' (dry run)')"
i=0
first_failure=0
for name in "${stages[@]}"; do
  i=$((i + 1))
  log="${OUTDIR}/${name}.log"
  stage_timeout_var="GPU_SUITE_TIMEOUT_${name}"
  limit="${!stage_timeout_var:-${GPU_SUITE_STAGE_TIMEOUT}}"
  if (( GPU_SUITE_BUDGET > 0 )); then
    left="$(awk -v b="${GPU_SUITE_BUDGET}" -v s="${suite_start}" -v n="$(now)" \
            'BEGIN { printf "%d", b - (n - s) - 5 }')"
    if (( left < limit )); then limit="${left}"; fi
  fi
  echo "== [${i}/${#stages[@]}] ${name} (limit ${limit} s, log ${log})"
  start="$(now)"
  rc=0
  if (( limit < 10 )); then
    echo "no time left in --budget ${GPU_SUITE_BUDGET} for ${name}" > "${log}"
    rc=124
  else
    timeout -k 15 "${limit}" bash "${SELF}" --run-stage "${name}" "${OUTDIR}" > "${log}" 2>&1 || rc=$?
  fi
  seconds="$(awk -v a="${start}" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
  if (( rc == 0 )); then
    status=ok; [[ "${DRY_RUN}" == 1 ]] && status=dry-run
  elif (( rc == 124 || rc == 137 )); then
    status=timeout
  else
    status="failed(${rc})"
  fi
  printf '%s\t%s\t%s\n' "${name}" "${seconds}" "${status}" >> "${OUTDIR}/stages.tsv"
  if (( rc != 0 )); then
    echo "== ${name}: ${status} after ${seconds} s; the last 60 lines of ${log}:"
    tail -n 60 "${log}"
    if [[ "${GPU_SUITE_KEEP_GOING}" == 1 ]]; then
      (( first_failure != 0 )) || first_failure="${rc}"
      continue
    fi
    echo "== stopped at ${name}; stages.tsv:"
    cat "${OUTDIR}/stages.tsv"
    exit "${rc}"
  fi
  echo "   ${status} in ${seconds} s; the last lines of its log:"
  tail -n "${GPU_SUITE_ECHO_LINES:-8}" "${log}" | sed 's/^/   | /'
done
if (( first_failure != 0 )); then
  echo "== some stages failed (--keep-going); stages.tsv:"
  cat "${OUTDIR}/stages.tsv"
  exit "${first_failure}"
fi
echo "== all stages passed; stages.tsv:"
cat "${OUTDIR}/stages.tsv"
