"""The bench_3ml stage (scripts/gpu_suite.sh --help):

scripts/bench_3ml.py --device cuda --dtype bf16: base/512 and large/128 at
15/40/50% masking (JSON too; base/512 also with the padded encoder, to
see whether packing pays on the GPU), and the bookkeeping profile at base/512.
"""
import os

from ..runner import Bench, Stage, StageRun, run_bench, use_env
from ..settings import BENCH_3ML_RUNS, REPO, Settings, SettingsError


def check_bench_3ml_runs(settings: Settings) -> None:
    """SettingsError unless BENCH_3ML_RUNS names only bench_3ml's runs (BENCH_3ML_RUNS)."""
    unknown = sorted(set(settings.bench_3ml_runs) - set(BENCH_3ML_RUNS))
    if unknown:
        raise SettingsError(f"BENCH_3ML_RUNS: unknown {' '.join(unknown)}; use some of "
                            f"{' '.join(BENCH_3ML_RUNS)}")


#: The timed runs' common arguments ({iters}: BENCH_3ML_ITERS).
TIMED = ("--device", "cuda", "--dtype", "bf16", "--mask-rates", "0.15,0.4,0.5", "--warmup", "5",
         "--iters", "{iters}")
#: The stage's invocations, in order; BENCH_3ML_RUNS picks among them by name.
BENCHES = (
    Bench("base", "bench_3ml.py", ("--size", "base", "--seq-len", "512", "--batch-size", "32",
                                   *TIMED, "--padded-encoder"), "bench-3ml-base-512"),
    Bench("large", "bench_3ml.py", ("--size", "large", "--seq-len", "128", "--batch-size", "128",
                                    *TIMED), "bench-3ml-large-128"),
    Bench("profile", "bench_3ml.py", ("--size", "base", "--seq-len", "512", "--batch-size", "32",
                                      "--device", "cuda", "--dtype", "bf16", "--profile",
                                      "--profile-rate", "0.5"), "bench-3ml-profile", json=False),
)
assert tuple(bench.name for bench in BENCHES) == BENCH_3ML_RUNS


def stage_bench_3ml(run: StageRun) -> None:
    """scripts/bench_3ml.py on CUDA in bf16: base/512 (with the padded encoder too) and
    large/128 at 15/40/50% masking, JSON and text; then the bookkeeping profile at base/512.
    BENCH_3ML_RUNS picks among these three runs (BENCHES: base, large, profile)."""
    check_bench_3ml_runs(run.settings)
    py, runs = use_env(run), run.settings.bench_3ml_runs
    os.chdir(REPO)
    for bench in BENCHES:
        if bench.name in runs:
            run_bench(run, py, bench, {"iters": run.settings.bench_3ml_iters})


STAGE = Stage("bench_3ml", stage_bench_3ml,
              "scripts/bench_3ml.py at base/512 and large/128, profile", __doc__)
