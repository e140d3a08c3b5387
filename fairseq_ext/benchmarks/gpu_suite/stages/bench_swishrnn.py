"""The bench_swishrnn stage (scripts/gpu_suite.sh --help):

scripts/bench_swishrnn.py --part a; --part c (base, seq 512, bf16).
"""
import os

from ..runner import Stage, StageRun, use_env
from ..settings import REPO


def stage_bench_swishrnn(run: StageRun) -> None:
    """scripts/bench_swishrnn.py --part a, then --part c at base, seq 512, bf16 on CUDA."""
    py, out = use_env(run), run.outdir
    os.chdir(REPO)
    run.run([py, "scripts/bench_swishrnn.py", "--part", "a"], tee=out / "bench-swishrnn-a.txt")
    run.run([py, "scripts/bench_swishrnn.py", "--part", "c", "--device", "cuda", "--dtype", "bf16",
             "--arch-size", "base", "--seq-len", "512", "--batch-size", "16"],
            tee=out / "bench-swishrnn-c.txt")


STAGE = Stage("bench_swishrnn", stage_bench_swishrnn, "scripts/bench_swishrnn.py parts a and c", __doc__)
