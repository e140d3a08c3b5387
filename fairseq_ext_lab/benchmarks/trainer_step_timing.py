"""Where one ``fairseq-train`` update goes, for every model family: time, ops, device reads.

``scripts/bench_step.py`` (its thin CLI) runs, in one process, the update users run: fairseq's
own :class:`fairseq.trainer.Trainer` built from a ``fairseq-train`` command line (task, model,
criterion, optimizer, lr scheduler, gradient clipping, logging reduction: all of
``Trainer.train_step``), on the batches fairseq's own data pipeline makes from a data-bin. For
each family (:data:`FAMILIES`) it reports:

* **ms per update**: the median (and quartiles) of ``--updates`` timed updates after
  ``--warmup``, the families' rounds interleaved (A, B, C, A, B, C, ...) so that drift on a
  shared machine hits all alike. At the default tiny width (12 layers of 64, 64 tokens, batch
  2) this is mostly the **host's** time: Python, dispatch and one small op at a time, the part
  of a GPU step that the device cannot hide when the host must wait for it;
* **matmul share**: the share of the update spent in matmul and attention kernels (profiled,
  ``--share-updates``): what is left is the host's (and the small elementwise kernels');
* **ops per update**: the aten ops dispatched (forward, backward, optimizer, logging);
* **device reads per update**, named by where they come from (our model, our criterion,
  fairseq's model, criterion or trainer): each is a host wait on a GPU
  (:mod:`fairseq_ext_lab.benchmarks.device_reads`).

On CUDA the profiled updates also give the device's side: kernels per update, the time a
kernel or copy runs (busy) against the gaps the host leaves (idle), and the device-to-host
copies; ``--trace`` keeps them as Chrome traces; ``--peak-tflops`` adds the MFU of the
masked-LM families (App. D training FLOPs over time and peak). ``--compile eager,compile``
times each family eager and with ``fairseq-train --torch-compile`` side by side.

The data-bin is ``--data``, or a synthetic one written once to ``--cache`` (documents of random
words, blank-line separated, as ``scripts/prepare_corpus.sh`` lays them out).

Examples::

    # the host's time where compute vanishes (width 16), eager against compiled
    .venv/bin/python scripts/bench_step.py --dim 16 --compile eager,compile \
        --fairseq-args=--reduce-stats-at-log-interval
    # on a GPU: base/512 in bf16, MFU against the H200's dense bf16 peak
    python scripts/bench_step.py --families roberta,3ml-self,3ml-cross --dim 768 \
        --seq-len 512 --batch-size 32 --dtype bf16 --optimizer fused_adamw \
        --compile eager,compile --peak-tflops 989 --trace traces/ \
        --fairseq-args=--reduce-stats-at-log-interval
"""
import argparse
import dataclasses
import json
import logging
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from fairseq_ext.reporting.uncertainty import mean_over_seeds
from fairseq_ext.training.fairseq_bin import PLUGIN_DIR
from fairseq_ext.training.trainer_harness import TrainerStep
from fairseq_ext_lab.benchmarks.common import environment, interleaved_rounds, quartiles, timed
from fairseq_ext_lab.benchmarks.device_reads import (
    Counts,
    count_step,
    format_sites,
    sized_as_on_cuda,
)
from fairseq_ext_lab.benchmarks.three_ml import MATMUL_OPS

PROG = "bench_step.py"

#: The tiny width: 12 layers of 64 (FFN 256, one head), where compute is small next to the host.
TINY = {"layers": 12, "dim": 64, "ffn": 256, "heads": 1}


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's ``fairseq-train`` flags (data-bin and shape flags added later)."""

    name: str
    task: str
    arch: str
    criterion: str
    side: str = "encoder"  # which --{side}-* flags set the width
    extra: Sequence[str] = ()
    mask_prob: Optional[float] = 0.15  # masked_lm's --mask-prob

    def argv(self, data: str, width: Dict[str, int], seq_len: int, batch_size: int,
             optimizer: str, extra: Sequence[str] = ()) -> List[str]:
        side = self.side
        argv = [data, "--user-dir", str(PLUGIN_DIR), "--task", self.task, "--arch", self.arch,
                "--criterion", self.criterion, "--optimizer", optimizer, "--lr", "1e-4",
                "--batch-size", str(batch_size), "--tokens-per-sample", str(seq_len),
                f"--{side}-layers", str(width["layers"]),
                f"--{side}-embed-dim", str(width["dim"]),
                f"--{side}-ffn-embed-dim", str(width["ffn"]),
                f"--{side}-attention-heads", str(width["heads"]),
                "--dropout", "0", "--attention-dropout", "0", "--seed", "1",
                "--max-update", "1000000", "--log-format", "none", "--log-interval", "100",
                "--disable-validation", "--num-workers", "0", "--clip-norm", "1.0"]
        if self.task == "masked_lm":
            argv += ["--sample-break-mode", "none", "--mask-prob", str(self.mask_prob)]
        if not torch.cuda.is_available():
            argv.append("--cpu")
        return argv + list(self.extra) + list(extra)


#: The families, each with the criterion its recipes train it with. ``roberta`` is fairseq's
#: own model and criterion: the reference for the device reads.
FAMILIES: Dict[str, Family] = {f.name: f for f in (
    Family("roberta", "masked_lm", "roberta_base", "masked_lm"),
    Family("roberta+flops", "masked_lm", "roberta_base", "masked_lm_flops"),
    Family("3ml-self", "masked_lm", "3ml_self_base", "masked_lm_flops", mask_prob=0.5),
    Family("3ml-cross", "masked_lm", "3ml_cross_base", "masked_lm_flops", mask_prob=0.5),
    Family("3ml-self+categories", "masked_lm", "3ml_self_base", "masked_lm_categories",
           mask_prob=0.5),
    Family("bert-rab", "masked_lm", "bert_rab_base", "masked_lm_flops"),
    Family("swishrnn-bert", "masked_lm", "swishrnn_bert_base", "masked_lm_flops"),
    Family("bidir-sdpa", "bidirectional_lm", "bidir_lm_125m", "bidirectional_lm",
           side="decoder", extra=("--attention-impl", "sdpa", "--document-format", "lines",
                                  "--sample-break-mode", "complete"), mask_prob=None),
    Family("bidir-flex", "bidirectional_lm", "bidir_lm_125m", "bidirectional_lm",
           side="decoder", extra=("--attention-impl", "flex", "--document-format", "lines",
                                  "--sample-break-mode", "complete"), mask_prob=None),
    Family("transformer_lm", "language_modeling", "transformer_lm_gpt", "cross_entropy",
           side="decoder", extra=("--sample-break-mode", "none"), mask_prob=None),
)}


# --------------------------------------------------------------------------- data


def synthetic_data_bin(cache: Path, vocab: int = 1000, documents: int = 400,
                       seed: int = 0) -> Path:
    """A fairseq data-bin of random words (``vocab`` of them), blank-line separated documents of
    3-8 lines, written once under ``cache`` by ``fairseq-preprocess``."""
    dest = cache / f"data-bin-v{vocab}-d{documents}-s{seed}"
    if (dest / "dict.txt").is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab - 5)]
    for split, count in (("train", documents), ("valid", max(documents // 20, 5))):
        with open(cache / f"{split}.txt", "w") as out:
            for _ in range(count):
                for _ in range(rng.randint(3, 8)):
                    out.write(" ".join(rng.choices(words, k=rng.randint(8, 30))) + "\n")
                out.write("\n")
    preprocess = Path(sys.executable).parent / "fairseq-preprocess"
    subprocess.run([str(preprocess), "--only-source", "--trainpref", str(cache / "train.txt"),
                    "--validpref", str(cache / "valid.txt"), "--destdir", str(dest),
                    "--workers", "1"], check=True, capture_output=True)
    return dest


# --------------------------------------------------------------------------- the timing


def timed_updates(step: TrainerStep):
    """A callable that makes one update of ``step`` and returns its seconds (the device
    synchronised, :func:`~fairseq_ext_lab.benchmarks.common.timed`)."""
    return lambda: timed(step.update, step.trainer.device)


@dataclasses.dataclass
class DeviceTimeline:
    """What the profiler saw of ``updates`` updates on CUDA, per update."""

    kernels: float  # kernels launched
    busy_ms: float  # time with a kernel or copy running (their union)
    idle_ms: float  # the rest of the update's wall time: the gaps the host left
    host_to_device_waits: float  # device-to-host copies (each one a wait for the device)


def device_timeline(intervals: Sequence[Tuple[float, float]], copies_to_host: int,
                    wall_us: float, updates: int) -> DeviceTimeline:
    """:class:`DeviceTimeline` from the device events' ``(start, end)`` intervals (µs)."""
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return DeviceTimeline(len(intervals) / updates, busy / 1000 / updates,
                          max(wall_us - busy, 0.0) / 1000 / updates, copies_to_host / updates)


#: fairseq's own profiler ranges in an update (FairseqTask.train_step, Trainer.train_step):
#: the breakdown column; the rest of the update is "other" (the trainer's own Python: seeding,
#: train mode, zeroing gradients, set_num_updates, logging).
STEP_RANGES = {"forward": ("forward",), "backward": ("backward",),
               "optimizer": ("optimizer", "clip-grads", "multiply-grads", "reduce-grads")}


@dataclasses.dataclass
class UpdateProfile:
    """What :func:`profile_updates` read off the profiler, per update."""

    #: share of the wall time in matmul and attention kernels (host time on the CPU, kernel
    #: time on CUDA; :data:`~fairseq_ext_lab.benchmarks.three_ml.MATMUL_OPS`)
    matmul_share: float
    #: aten ops called from Python or the compiled code (nested ones, such as
    #: ``aten::linear``'s ``aten::addmm``, not counted twice). A compiled graph's fused kernels
    #: are no ops, so this counts a compiled update's ops too, where the dispatch count of
    #: :mod:`~fairseq_ext_lab.benchmarks.device_reads` sees the eager path.
    ops: float
    timeline: Optional[DeviceTimeline]  # CUDA only
    #: ms in fairseq's :data:`STEP_RANGES`, and the rest ("other")
    breakdown: Dict[str, float]
    #: (op or range, self ms per update, calls per update) of the most expensive ops and
    #: ranges by self time: where an update's host time goes, op by op
    top_ops: List[Tuple[str, float, float]] = dataclasses.field(default_factory=list)


def profile_updates(step: TrainerStep, updates: int,
                    trace: Optional[Path] = None) -> UpdateProfile:
    """The :class:`UpdateProfile` of ``updates`` profiled updates (their Chrome trace written
    to ``trace``)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(updates):
            step.update()
        if cuda:
            torch.cuda.synchronize()
        wall_us = (time.perf_counter() - start) * 1e6
    matmul_us = sum((e.self_device_time_total if cuda else e.self_cpu_time_total)
                    for e in prof.key_averages() if e.key in MATMUL_OPS)
    events = prof.events()
    ops = sum(1 for e in events if e.name.startswith("aten::") and not (
        e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::")))
    timeline = None
    if cuda:
        from torch.autograd import DeviceType

        on_device = [e for e in events if e.device_type == DeviceType.CUDA]
        timeline = device_timeline(
            [(e.time_range.start, e.time_range.end) for e in on_device],
            sum(1 for e in on_device if "DtoH" in e.name), wall_us, updates)
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
    breakdown = {part: sum(totals.get(name, 0.0) for name in names) / 1000 / updates
                 for part, names in STEP_RANGES.items()}
    breakdown["other"] = max(wall_us / 1000 / updates - sum(breakdown.values()), 0.0)
    ranked = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    top_ops = [(e.key, e.self_cpu_time_total / 1000 / updates, e.count / updates)
               for e in ranked[:TOP_OPS]]
    return UpdateProfile(matmul_us / wall_us, ops / updates, timeline, breakdown, top_ops)


#: ops and ranges :func:`profile_updates` keeps, by self time
TOP_OPS = 15


def update_flops(step: TrainerStep, family: Family) -> Optional[float]:
    """Analytic training FLOPs of one update of a masked-LM family (App. D formulas,
    :mod:`fairseq_ext.flops`, at the batch's shape and the task's masking rate, the MFU's
    numerator); ``None`` for the other families."""
    from fairseq_ext import flops
    from fairseq_ext.flops.families import NoFlopsFormula

    if family.mask_prob is None:
        return None
    sample = step.samples[0]["net_input"]["src_tokens"]
    rows, length = sample.shape
    try:
        spec = flops.spec_from_args(step.trainer.get_model().args)
    except (NoFlopsFormula, AttributeError):
        return None
    vocab = len(step.task.source_dictionary)
    return rows * flops.training_flops_per_sequence(spec, length, family.mask_prob, vocab)


def paired_ratio(baseline: List[float], other: List[float]) -> Tuple[float, float]:
    """``baseline / other`` time per update as ``(geometric mean, its standard error)`` over
    the rounds, each round's two updates paired (they ran side by side): the mean log-ratio ±
    its standard error over rounds (:func:`~fairseq_ext.reporting.uncertainty.mean_over_seeds`
    is that mean and error), through the delta method."""
    logs = mean_over_seeds([math.log(b / o) for b, o in zip(baseline, other)])
    return math.exp(logs.value), math.exp(logs.value) * logs.standard_error


@dataclasses.dataclass
class StepResult:
    family: str
    arch: str
    criterion: str
    ms: float
    ms_p25: float
    ms_p75: float
    ops: float  # aten ops per update, dispatched on the eager path
    reads: float  # device-to-host reads per update
    reads_by_source: Dict[str, float]
    read_sites: str
    matmul_share: Optional[float] = None
    error: Optional[str] = None
    # the first family's time over this one's, paired by round: (ratio, standard error)
    speedup: Optional[Tuple[float, float]] = None
    # compiled: the same family's eager time over this one's, paired by round
    compile_speedup: Optional[Tuple[float, float]] = None
    profiled_ops: Optional[float] = None  # aten ops per update the profiler saw
    timeline: Optional[DeviceTimeline] = None  # CUDA only
    mfu: Optional[float] = None  # analytic training FLOPs / time / --peak-tflops
    # profiled ms per update in fairseq's forward, backward, optimizer ranges, and the rest
    breakdown: Optional[Dict[str, float]] = None
    top_ops: List[Tuple[str, float, float]] = dataclasses.field(default_factory=list)

    @property
    def host_ms(self) -> Optional[float]:
        """The update's time outside matmul and attention kernels."""
        return None if self.matmul_share is None else self.ms * (1 - self.matmul_share)


def summarize(family: Family, seconds: List[float], counts: Counts,
              profile: Optional[UpdateProfile]) -> StepResult:
    p25, p50, p75 = quartiles([1000 * s for s in seconds])
    per_step = counts.per_step()
    result = StepResult(family.name, family.arch, family.criterion, p50, p25, p75,
                        per_step["ops"], per_step["reads"], per_step["reads_by_source"],
                        format_sites(counts))
    if profile is not None:
        result.matmul_share, result.profiled_ops = profile.matmul_share, profile.ops
        result.timeline, result.breakdown = profile.timeline, profile.breakdown
        result.top_ops = profile.top_ops
    return result


def format_table(results: Sequence[StepResult]) -> str:
    lines = ["| family | arch | criterion | ms/update (p25-p75) | speedup vs first ± SE | "
             "compiled vs eager ± SE | matmul share | ms outside matmuls | ops/update "
             "(profiled) | ops/update (eager dispatch) | device reads/update | "
             "reads by source | MFU | CUDA: kernels, busy ms, idle ms, DtoH copies | "
             "profiled ms: forward, backward, optimizer, other |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|"]

    def ratio(value):
        return "-" if value is None else f"{value[0]:.3f} ± {value[1]:.3f}"

    for r in results:
        if r.error:
            lines.append(f"| {r.family} | {r.arch} | {r.criterion} | n/a: {r.error} "
                         "| | | | | | | | | | | |")
            continue
        speedup = f"{ratio(r.speedup)} | {ratio(r.compile_speedup)}"
        share = "-" if r.matmul_share is None else f"{r.matmul_share:.0%}"
        host = "-" if r.host_ms is None else f"{r.host_ms:.1f}"
        profiled = "-" if r.profiled_ops is None else f"{r.profiled_ops:.0f}"
        sources = ", ".join(f"{k} {v:g}" for k, v in r.reads_by_source.items()) or "none"
        mfu = "-" if r.mfu is None else f"{r.mfu:.1%}"
        parts = "-" if not r.breakdown else ", ".join(f"{v:.1f}" for v in r.breakdown.values())
        t = r.timeline
        cuda = "-" if t is None else (f"{t.kernels:.0f}, {t.busy_ms:.1f}, {t.idle_ms:.1f}, "
                                      f"{t.host_to_device_waits:g}")
        lines.append(f"| {r.family} | {r.arch} | {r.criterion} | {r.ms:.1f} ({r.ms_p25:.1f}-"
                     f"{r.ms_p75:.1f}) | {speedup} | {share} | {host} | {profiled} | "
                     f"{r.ops:.0f} | "
                     f"{r.reads:g} | "
                     f"{sources} | {mfu} | {cuda} | {parts} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--families", default="roberta,roberta+flops,3ml-self,3ml-cross,"
                   "3ml-self+categories,bert-rab,swishrnn-bert,bidir-sdpa,transformer_lm",
                   help=f"comma-separated subset of {','.join(FAMILIES)}")
    p.add_argument("--data", type=Path, default=None,
                   help="a fairseq data-bin (default: a synthetic one under --cache)")
    p.add_argument("--cache", type=Path, default=Path(".cache/bench_step"))
    p.add_argument("--vocab", type=int, default=1000,
                   help="words of the synthetic data-bin (without --data)")
    p.add_argument("--layers", type=int, default=TINY["layers"])
    p.add_argument("--dim", type=int, default=TINY["dim"],
                   help="model width (FFN 4x, heads of 64)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--optimizer", default="adam", help="fairseq's --optimizer")
    p.add_argument("--warmup", type=int, default=10, help="untimed updates first")
    p.add_argument("--updates", type=int, default=40, help="timed updates (median reported)")
    p.add_argument("--count-updates", type=int, default=3,
                   help="updates over which ops and device reads are counted")
    p.add_argument("--share-updates", type=int, default=5,
                   help="profiled updates for the matmul share (0: skip)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: the model and its gradients in bfloat16, as fairseq-hydra-train "
                        "common.bf16=true (fairseq-train's --bf16 means a TPU)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's peak (dense, in --dtype) for an MFU column: analytic "
                        "training FLOPs of the masked-LM families over time and peak")
    p.add_argument("--trace", type=Path, default=None,
                   help="write each case's profiled updates as a Chrome trace in this folder")
    p.add_argument("--compile", default="eager",
                   help="comma-separated: eager, compile (fairseq-train --torch-compile), or "
                        "both, each family timed in each, side by side")
    p.add_argument("--fairseq-args", default="",
                   help="more fairseq-train flags for every family, e.g. '--torch-compile'")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    args = p.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    modes = [m.strip() for m in args.compile.split(",") if m.strip()]
    if not modes or set(modes) - {"eager", "compile"}:
        p.error(f"--compile: eager and/or compile; got {args.compile!r}")
    args.compile = [m == "compile" for m in modes]
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        p.error(f"--families: unknown {unknown}; choose from {', '.join(FAMILIES)}")
    if args.dim < 1 or args.layers < 1 or args.updates < 1 or args.warmup < 0:
        p.error("--dim, --layers and --updates must be >= 1, --warmup >= 0")
    return args


def width_of(dim: int, layers: int) -> Dict[str, int]:
    return {"layers": layers, "dim": dim, "ffn": 4 * dim, "heads": max(1, dim // 64)}


def main(argv=None) -> int:
    from fairseq_ext.training.output_files import refused, write_text

    args = parse_args(argv)
    if refused(PROG, [args.json], args.force):
        return 2
    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)  # fairseq's INFO lines for every trainer built
    data = str(args.data or synthetic_data_bin(args.cache, args.vocab))
    width = width_of(args.dim, args.layers)
    extra = args.fairseq_args.split()
    cases = [(name, compiled) for name in args.families for compiled in args.compile]
    label = {case: case[0] + (" +compile" if case[1] else "") for case in cases}
    steps: Dict[tuple, TrainerStep] = {}
    failed: Dict[tuple, str] = {}
    started = time.perf_counter()

    def say(text: str) -> None:  # progress on stderr: a run cut off still says where it was
        print(f"[{time.perf_counter() - started:6.1f} s] {text}", file=sys.stderr, flush=True)

    for case in cases:
        family = FAMILIES[case[0]]
        try:
            steps[case] = TrainerStep(family.argv(
                data, width, args.seq_len, args.batch_size, args.optimizer,
                extra + (["--torch-compile"] if case[1] else [])), bf16=args.dtype == "bf16")
            say(f"built {label[case]}")
        except Exception as error:  # e.g. FlexAttention's training step on the CPU
            failed[case] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            say(f"{label[case]} not built: {failed[case]}")
    times = interleaved_rounds({label[case]: timed_updates(step) for case, step in steps.items()},
                               args.warmup, args.updates, progress=True)
    times = {case: times[label[case]] for case in steps}
    results = []
    first = next(iter(steps), None)
    for case in cases:
        family = FAMILIES[case[0]]
        if case in failed:
            results.append(StepResult(label[case], family.arch, family.criterion, 0, 0, 0, 0, 0,
                                      {}, "", error=failed[case]))
            continue
        step = steps[case]
        profile = None
        if args.share_updates:  # before the count, whose model settings may recompile
            trace = None
            if args.trace:
                args.trace.mkdir(parents=True, exist_ok=True)
                trace = args.trace / (label[case].replace(" +", "-") + ".json")
            profile = profile_updates(step, args.share_updates, trace)
        with sized_as_on_cuda(step.trainer.model):
            counts = count_step(step.update, max(args.count_updates, 1))
        result = summarize(family, times[case], counts, profile)
        if args.peak_tflops:
            flops = update_flops(step, family)
            if flops is not None:
                result.mfu = flops / (result.ms / 1000) / (args.peak_tflops * 1e12)
        result.family = label[case]
        if case != first:
            result.speedup = paired_ratio(times[first], times[case])
        eager = (case[0], False)
        if case[1] and eager in times:
            result.compile_speedup = paired_ratio(times[eager], times[case])
        results.append(result)
        say(f"{label[case]}: {result.ms:.2f} ms/update" + (
            "" if result.mfu is None else f", MFU {result.mfu:.1%}") + " (profiled, counted)")
    env = environment(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"{width['layers']} layers x {width['dim']}, seq len {args.seq_len}, batch "
          f"{args.batch_size}, {args.dtype}, --optimizer {args.optimizer} {args.fairseq_args}; "
          f"{env['device']} ({env['threads']} threads), torch {env['torch']}; median of "
          f"{args.updates} interleaved updates after {args.warmup}")
    print(format_table(results))
    for r in results:
        if r.read_sites:
            print(f"{r.family}: {r.read_sites}")
    for r in results:  # where the host time goes, op by op (the profiled updates)
        if r.top_ops:
            print(f"{r.family}, self ms per update by op or range (calls): " + "; ".join(
                f"{name} {ms:.2f} ({calls:.0f})" for name, ms, calls in r.top_ops))
    if args.json:
        write_text(args.json, json.dumps({
            "command": sys.argv, "args": {k: (str(v) if isinstance(v, Path) else v)
                                          for k, v in vars(args).items()},
            "environment": env, "results": [dataclasses.asdict(r) for r in results],
        }, indent=2), args.force)
    return 0
