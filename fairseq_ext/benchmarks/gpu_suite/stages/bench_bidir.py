"""The bench_bidir stage (scripts/gpu_suite.sh --help):

scripts/bench_bidirectional.py --device cuda at 125m, seq 1024, bf16; then
its --part flex at 125m, bf16, T = 1024 and 2048: FlexAttention against
SDPA's dense mask, attention alone, the fairseq-validate forward and the
training step (issue 24's target: >= 1.3x at 125m, T = 2048), on the
carried data-bin's valid split (else synthetic documents of 64-1024 tokens).
"""
import os

from ..runner import Stage, StageRun, use_env
from ..settings import REPO


def stage_bench_bidir(run: StageRun) -> None:
    """scripts/bench_bidirectional.py on CUDA in bf16 at 125m, seq 1024; then its --part flex
    (FlexAttention against SDPA) at T = 1024 and 2048 on the carried data-bin if there is one."""
    s, py, out = run.settings, use_env(run), run.outdir
    os.chdir(REPO)
    rounds = s.bench_bidir_rounds
    run.run([py, "scripts/bench_bidirectional.py", "--arch-size", "125m", "--seq-len", "1024",
             "--batch-size", "8", "--device", "cuda", "--dtype", "bf16", "--rounds", rounds,
             "--json", out / "bench-bidir-125m.json", "--force"], tee=out / "bench-bidir-125m.txt")
    data = ["--data", s.data] if (s.data / "dict.txt").is_file() else []
    run.run([py, "scripts/bench_bidirectional.py", "--part", "flex", "--arch-size", "125m",
             "--seq-lens", "1024,2048", "--batch-size", "4", "--max-batches", "4", "--device", "cuda",
             "--dtype", "bf16", "--rounds", rounds, *data, "--json", out / "bench-bidir-flex-125m.json",
             "--force"], tee=out / "bench-bidir-flex-125m.txt")


STAGE = Stage("bench_bidir", stage_bench_bidir, "scripts/bench_bidirectional.py at 125m, flex", __doc__)
