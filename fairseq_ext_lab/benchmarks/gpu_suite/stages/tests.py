"""The tests stage (scripts/gpu_suite.sh --help):

pytest (junit xml: OUTDIR/junit-tests.xml) on the tests that exercise CUDA:
the SwishRNN op/layer/model tests, tests/test_cuda_source.py, the benchmark
script's tests, the fairseq install check, FlexAttention's (its backward
against SDPA's, tests/test_block_sparse_attention.py), and every other
tests/test_*.py that mentions torch.cuda / "cuda" / nvcc. A test skipped for
want of a GPU, a CUDA kernel, nvcc or FlexAttention fails the stage, and so does a
test module whose every test is skipped for a reason outside the accepted ones
(checks.ACCEPTED_MODULE_SKIPS; OUTDIR/tests-skipped.txt lists the skips).
tests/test_cuda_host_emulation.py compares the CUDA op with the CPU host emulation
of its kernels and writes the differences to
OUTDIR/cuda-vs-host-emulation.json.
"""
import os
import re
import subprocess
from typing import List

from ..checks import check_junit_skips
from ..runner import Stage, StageRun, use_env
from ..settings import REPO, Settings

#: The tests stage's files besides those that mention CUDA (CUDA_TEST_PATTERN).
DEFAULT_TEST_FILES = ("tests/test_swish_recurrence_op.py", "tests/test_cuda_source.py",
                      "tests/test_bench_swishrnn.py", "tests/test_fairseq_build.py",
                      "tests/test_swish_rnn.py", "tests/test_swishrnn_bert.py",
                      "tests/test_block_sparse_attention.py")
CUDA_TEST_PATTERN = re.compile(r"""torch\.cuda|["']cuda["']|nvcc|NATIVE_OP_DEVICES""")


def stage_test_files(settings: Settings) -> List[str]:
    """The tests stage's files, relative to the repo: GPU_SUITE_TESTS if set, else
    DEFAULT_TEST_FILES and every tests/test_*.py that mentions CUDA, but this suite's own
    (tests/test_gpu_suite*.py: they run the suite)."""
    if settings.tests:
        return settings.tests.split()
    files = set(DEFAULT_TEST_FILES)
    for path in (REPO / "tests").glob("test_*.py"):
        if CUDA_TEST_PATTERN.search(path.read_text(errors="replace")):
            files.add(f"tests/{path.name}")
    return sorted(f for f in files if not f.startswith("tests/test_gpu_suite"))


def stage_tests(run: StageRun) -> int:
    """pytest on stage_test_files (junit XML in OUTDIR, each test limited to GPU_SUITE_PYTEST_TIMEOUT
    where pytest-timeout is installed), then check_junit_skips. Returns pytest's status, else 1
    if the skip check fails."""
    s = run.settings
    py = use_env(run)
    os.chdir(REPO)
    xdist = ["-n", s.pytest_workers] if s.pytest_workers != "0" else []
    # A test that hangs fails alone, with its stacks, instead of the stage timing out without
    # its junit XML (the first GPU run's tests stage did: every test reported, pytest never ended).
    per_test = []
    if s.dry_run or subprocess.run([py, "-c", "import pytest_timeout"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL).returncode == 0:
        per_test = ["--timeout", s.pytest_timeout]
    junit = run.outdir / "junit-tests.xml"
    # -v: a line per test as it ends, so that the log names the tests a stage timeout cut off
    # (with -q, the second GPU run's log had only dots: 116 of 143 reported, but which?).
    rc = run.run([py, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", *xdist, *per_test,
                  f"--junitxml={junit}", *s.pytest_args, *stage_test_files(s)],
                 extra_env={"CUDA_HOST_EMULATION_REPORT": str(run.outdir / "cuda-vs-host-emulation.json")},
                 check=False)
    # Skips for want of a GPU, a CUDA kernel or nvcc mean the CUDA paths did not run.
    listing = run.outdir / "tests-skipped.txt"
    run.note(f"check_junit_skips({str(junit)!r}, {str(listing)!r}, require_cuda={s.require_cuda})")
    if not s.dry_run and not check_junit_skips(junit, listing, s.require_cuda):
        rc = rc or 1
    return rc


STAGE = Stage("tests", stage_tests, "pytest on the tests that exercise CUDA; CUDA skips fail", __doc__)
