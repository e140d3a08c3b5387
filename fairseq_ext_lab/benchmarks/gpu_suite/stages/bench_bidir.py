"""The bench_bidir stage (scripts/gpu_suite.sh --help):

scripts/bench_bidirectional.py --device cuda at 125m, seq 1024, bf16; then
its --part flex at 125m, bf16, T = 1024 and 2048: FlexAttention against
SDPA's dense mask, attention alone, the fairseq-validate forward and the
training step (target: >= 1.3x at 125m, T = 2048), on the
carried data-bin's valid split (else synthetic documents of 64-1024 tokens).
"""
import os

from ..runner import Bench, Stage, StageRun, run_bench, use_env
from ..settings import REPO

#: The stage's invocations, in order ({rounds}: BENCH_BIDIR_ROUNDS; {data}: --data and the
#: carried data-bin, where there is one).
BENCHES = (
    Bench("125m", "bench_bidirectional.py", ("--arch-size", "125m", "--seq-len", "1024",
                                             "--batch-size", "8", "--device", "cuda", "--dtype",
                                             "bf16", "--rounds", "{rounds}"), "bench-bidir-125m"),
    Bench("flex", "bench_bidirectional.py", ("--part", "flex", "--arch-size", "125m", "--seq-lens",
                                             "1024,2048", "--batch-size", "4", "--max-batches",
                                             "4", "--device", "cuda", "--dtype", "bf16",
                                             "--rounds", "{rounds}", "{data}"),
          "bench-bidir-flex-125m"),
)


def stage_bench_bidir(run: StageRun) -> None:
    """scripts/bench_bidirectional.py on CUDA in bf16 at 125m, seq 1024; then its --part flex
    (FlexAttention against SDPA) at T = 1024 and 2048 on the carried data-bin if there is one
    (BENCHES)."""
    s, py = run.settings, use_env(run)
    os.chdir(REPO)
    data = ["--data", s.data] if (s.data / "dict.txt").is_file() else []
    for bench in BENCHES:
        run_bench(run, py, bench, {"rounds": s.bench_bidir_rounds, "data": data})


STAGE = Stage("bench_bidir", stage_bench_bidir, "scripts/bench_bidirectional.py at 125m, flex",
              __doc__)
