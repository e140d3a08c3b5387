"""The step stage (scripts/gpu_suite.sh --help):

scripts/bench_step.py on CUDA in bf16 at base/512 (STEP_SHAPE): fairseq's own
Trainer.train_step for RoBERTa, 3ML-self and 3ML-cross, eager and
--torch-compile side by side, at micro-batch 32, 64 and 128 (STEP_BATCHES),
with --reduce-stats-at-log-interval and fused_adamw: ms per update, MFU over
GPU_SUITE_PEAK_TFLOPS, kernels, device busy and idle ms, device-to-host
copies and the device reads by source; the first micro-batch also writes
each case's profiled updates as Chrome traces (OUTDIR/step-traces/).
"""
import os
import re

from ..runner import Bench, Stage, StageRun, run_bench, use_env
from ..settings import REPO, Settings, SettingsError

#: The stage's invocation, once per STEP_BATCHES micro-batch ({batch}); {families},
#: {compile}, {peak}, {updates}: STEP_FAMILIES, STEP_COMPILE, GPU_SUITE_PEAK_TFLOPS,
#: STEP_UPDATES; {dim}, {layers}, {seq_len}: STEP_SHAPE; {data}: the carried data-bin or a
#: synthetic one; {trace}: the first batch's.
BENCH = Bench("step", "bench_step.py", (
    "--families", "{families}", "--dim", "{dim}", "--layers", "{layers}", "--seq-len", "{seq_len}",
    "--batch-size", "{batch}", "--dtype", "bf16", "--optimizer", "fused_adamw", "--compile",
    "{compile}", "--peak-tflops", "{peak}", "--warmup", "5", "--updates", "{updates}",
    "--share-updates", "3", "--count-updates", "1", "{data}", "{trace}",
    "--fairseq-args=--reduce-stats-at-log-interval --required-seq-len-multiple 64"),
    "bench-step-{dim}x{layers}-{seq_len}-b{batch}")


def check_step_settings(settings: Settings) -> None:
    """Raise SettingsError unless STEP_SHAPE is three positive integers and STEP_BATCHES
    positive integers (the driver checks before the first stage)."""
    shape = settings.step_shape
    if len(shape) != 3 or not all(re.fullmatch(r"[1-9][0-9]*", v) for v in shape):
        raise SettingsError(f"STEP_SHAPE={' '.join(shape)}: give width, layers and sequence "
                            "length, three positive integers, e.g. \"768 12 512\"")
    for batch in settings.step_batches:
        if not re.fullmatch(r"[1-9][0-9]*", batch):
            raise SettingsError(f"STEP_BATCHES: {batch} is not a positive integer")


def stage_step(run: StageRun) -> None:
    """scripts/bench_step.py on CUDA in bf16 at base/512: STEP_FAMILIES [RoBERTa, 3ML-self and
    3ML-cross] through fairseq's Trainer.train_step, STEP_COMPILE [eager and compiled], at each
    of STEP_BATCHES; the first micro-batch also keeps the profiles as Chrome traces. bench_step
    reports on stderr (the stage's log) as it goes: each trainer built, each case's first
    update (its compile), each round, each case's result."""
    s, py, out = run.settings, use_env(run), run.outdir
    os.chdir(REPO)
    data = ["--data", s.data] if (s.data / "dict.txt").is_file() else [
        "--cache", s.work / "bench-step", "--vocab", "8000"]
    dim, layers, seq_len = s.step_shape
    for index, batch in enumerate(s.step_batches):
        trace = ["--trace", out / "step-traces"] if index == 0 else []
        run_bench(run, py, BENCH, {"families": s.step_families, "batch": batch,
                                   "compile": s.step_compile, "peak": s.peak_tflops,
                                   "updates": s.step_updates, "data": data, "trace": trace,
                                   "dim": dim, "layers": layers, "seq_len": seq_len})


STAGE = Stage("step", stage_step, ("scripts/bench_step.py: the train step at base/512, eager and "
              "compiled, micro-batch 32/64/128, MFU, device timeline"), __doc__)
