"""The bench_swishrnn stage (scripts/gpu_suite.sh --help):

scripts/bench_swishrnn.py --part a; --part c (base, seq 512, bf16).
"""
import os

from ..runner import Bench, Stage, StageRun, run_bench, use_env
from ..settings import REPO

#: The stage's invocations, in order.
BENCHES = (
    Bench("a", "bench_swishrnn.py", ("--part", "a"), "bench-swishrnn-a", json=False),
    Bench("c", "bench_swishrnn.py", ("--part", "c", "--device", "cuda", "--dtype", "bf16",
                                     "--arch-size", "base", "--seq-len", "512", "--batch-size",
                                     "16"), "bench-swishrnn-c", json=False),
)


def stage_bench_swishrnn(run: StageRun) -> None:
    """scripts/bench_swishrnn.py --part a, then --part c at base, seq 512, bf16 on CUDA
    (BENCHES)."""
    py = use_env(run)
    os.chdir(REPO)
    for bench in BENCHES:
        run_bench(run, py, bench, {})


STAGE = Stage("bench_swishrnn", stage_bench_swishrnn, "scripts/bench_swishrnn.py parts a and c",
              __doc__)
