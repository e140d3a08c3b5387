"""Time per update as users get it: ``fairseq-train`` itself, eager and ``--torch-compile``.

``scripts/bench_cli_step.py`` (its thin CLI) times the command users type, not a harness: each
measurement is two ``fairseq-train`` processes of the same family, one stopped after
``--short`` updates and one after ``--long``, and the **steady-state time per update** is the
difference of their training times ("done training in X seconds", fairseq's own clock of its
training loop, to 0.1 s) over ``long - short`` updates. Start-up (imports, data loading,
building the model) is outside that clock, and the first updates (where ``--torch-compile``
compiles, or loads its compiled graphs from the cache) cancel; what remains is everything
``fairseq-train`` does per update: the data pipeline and collater, the epoch iterator, the progress bar and
``--log-interval`` logging, the criterion's logging outputs, the trainer's step (forward,
backward, clipping, optimizer). The families' runs are interleaved (A short, A long, B short,
B long, ..., round after round), so drift on a shared machine hits all alike; each ratio is the
geometric mean of the per-round ratios ± one standard error
(:func:`~fairseq_ext_lab.benchmarks.trainer_step_timing.paired_ratio`).

With ``compile`` a first, untimed run per family fills a fresh inductor cache
(``TORCHINDUCTOR_CACHE_DIR`` under ``--cache``) and its training time, minus an eager short
run's, is reported as the **cold compile** time; the timed runs then find the cache warm, and
the short run's time minus eager's is the **warm compile** (cache load) time. A user pays the
compile once per batch shape per process, and the steady state every update.

The families and their flags are
:data:`~fairseq_ext_lab.benchmarks.trainer_step_timing.FAMILIES` (the same ``fairseq-train``
command lines as ``bench_step.py``), with ``--log-format json``.

Example (the tiny width, where the host's time is the update's)::

    .venv/bin/python scripts/bench_cli_step.py --families roberta,3ml-self --modes eager,compile
"""
import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_ext_lab.benchmarks.common import environment
from fairseq_ext_lab.benchmarks.trainer_step_timing import (
    FAMILIES,
    TINY,
    paired_ratio,
    synthetic_data_bin,
    width_of,
)

PROG = "bench_cli_step.py"
MODES = ("eager", "compile")


def fairseq_train() -> str:
    """The ``fairseq-train`` beside this interpreter (else the one on ``PATH``)."""
    beside = Path(sys.executable).with_name("fairseq-train")
    return str(beside) if beside.is_file() else "fairseq-train"


@dataclasses.dataclass
class Case:
    """One family in one mode: its command line without ``--max-update``."""

    family: str
    mode: str
    argv: List[str]

    @property
    def label(self) -> str:
        return self.family + (" +compile" if self.mode == "compile" else "")


#: fairseq-train's last line: the training loop's time (fairseq's StopwatchMeter, 0.1 s)
DONE_TRAINING = re.compile(r"done training in ([0-9.]+) seconds")


def run_seconds(argv: Sequence[str], updates: int, env: Dict[str, str], save_dir: Path) -> float:
    """Seconds of one ``fairseq-train`` run of ``updates`` updates: its training loop as it
    reports it ("done training in X seconds": from the first batch to the last update,
    start-up excluded, to 0.1 s). Its output is kept in ``save_dir/train.log``; a failure
    raises with its tail."""
    save_dir.mkdir(parents=True, exist_ok=True)
    command = [fairseq_train(), *argv, "--max-update", str(updates), "--save-dir", str(save_dir),
               "--no-save"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (save_dir / "train.log").write_text(log)
    done = DONE_TRAINING.findall(log)
    if proc.returncode != 0 or not done:
        raise RuntimeError(f"fairseq-train failed ({proc.returncode}): {' '.join(command)}\n"
                           + log[-3000:])
    return float(done[-1])


@dataclasses.dataclass
class CliResult:
    label: str
    arch: str
    criterion: str
    ms: float  # steady-state ms per update: the mean over rounds
    ms_se: float
    per_round_ms: List[float]
    # the first case's time over this one's, paired by round: (ratio, standard error)
    vs_first: Optional[Tuple[float, float]] = None
    # compiled: the same family's eager steady state over this one's, paired by round
    compile_speedup: Optional[Tuple[float, float]] = None
    cold_compile_s: Optional[float] = None
    warm_compile_s: Optional[float] = None
    compiled_shapes: Optional[int] = None  # the log's "torch.compile: ... shape" lines


def compiled_shapes(log: str) -> int:
    """Batch shapes the patched trainer logged a compile for (fairseq patch item 7c)."""
    return sum(1 for line in log.splitlines() if "| torch.compile: " in line
               and " graph(s) for " in line)


def measure(cases: Sequence[Case], short: int, long: int, rounds: int, cache: Path,
            threads: int, progress=print) -> List[CliResult]:
    """Interleaved rounds of (short, long) runs per case; see the module docstring."""
    base_env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    envs = {}
    for case in cases:
        env = dict(base_env)
        if case.mode == "compile":
            env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor" / case.family)
        envs[case.label] = env
    cold: Dict[str, float] = {}
    for case in cases:  # the compiled cases' cold compile, beside an eager short run
        if case.mode != "compile":
            continue
        eager = run_seconds(case.argv, short, base_env, cache / "runs" / case.family / "eager")
        first = run_seconds(case.argv + ["--torch-compile"], short, envs[case.label],
                            cache / "runs" / case.family / "cold")
        cold[case.label] = first - eager
        progress(f"{case.label}: cold compile {cold[case.label]:.1f} s")
    per_round: Dict[str, List[float]] = {case.label: [] for case in cases}
    shorts: Dict[str, List[float]] = {case.label: [] for case in cases}
    for index in range(rounds):
        for case in cases:
            argv = case.argv + (["--torch-compile"] if case.mode == "compile" else [])
            where = cache / "runs" / case.label.replace(" +", "-")
            a = run_seconds(argv, short, envs[case.label], where / "short")
            b = run_seconds(argv, long, envs[case.label], where / "long")
            shorts[case.label].append(a)
            per_round[case.label].append((b - a) / (long - short))
        progress(f"round {index + 1}/{rounds}: " + ", ".join(
            f"{label} {1000 * values[-1]:.1f} ms" for label, values in per_round.items()))
    negative = [label for label, values in per_round.items() if min(values) <= 0]
    if negative:
        raise RuntimeError(f"{', '.join(negative)}: a long run was not slower than its short "
                           "run (start-up noise beyond the updates between them): raise --long")
    results = []
    first = cases[0].label
    for case in cases:
        family = FAMILIES[case.family]
        values = per_round[case.label]
        mean = statistics.fmean(values)
        se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
        result = CliResult(case.label, family.arch, family.criterion, 1000 * mean, 1000 * se,
                           [1000 * v for v in values])
        if case.label != first:
            result.vs_first = paired_ratio(per_round[first], values)
        eager_label = case.family
        if case.mode == "compile":
            result.cold_compile_s = cold.get(case.label)
            if eager_label in shorts:
                result.compile_speedup = paired_ratio(per_round[eager_label], values)
                result.warm_compile_s = statistics.fmean(
                    a - b for a, b in zip(shorts[case.label], shorts[eager_label]))
            log = (cache / "runs" / case.label.replace(" +", "-") / "long" / "train.log")
            result.compiled_shapes = compiled_shapes(log.read_text())
        results.append(result)
    return results


def format_table(results: Sequence[CliResult]) -> str:
    def pair(value):
        return "-" if value is None else f"{value[0]:.3f} ± {value[1]:.3f}"

    def seconds(value):
        return "-" if value is None else f"{value:.1f}"

    lines = ["| case (arch, criterion) | ms/update ± SE | first / this ± SE | eager / compiled "
             "± SE | cold compile s | warm compile s | shapes compiled |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.label} (`{r.arch}`, `{r.criterion}`) | {r.ms:.1f} ± {r.ms_se:.1f} "
                     f"| {pair(r.vs_first)} | {pair(r.compile_speedup)} | "
                     f"{seconds(r.cold_compile_s)} | {seconds(r.warm_compile_s)} | "
                     f"{'-' if r.compiled_shapes is None else r.compiled_shapes} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--families", default="roberta,3ml-self",
                   help=f"comma-separated subset of {','.join(FAMILIES)}; the first is the "
                        "baseline of the ratios")
    p.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    p.add_argument("--data", type=Path, default=None,
                   help="a fairseq data-bin (default: a synthetic one under --cache)")
    p.add_argument("--cache", type=Path, default=Path(".cache/bench_cli_step"),
                   help="runs, logs and the inductor caches (a fresh one per invocation)")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--layers", type=int, default=TINY["layers"])
    p.add_argument("--dim", type=int, default=TINY["dim"], help="width (FFN 4x, heads of 64)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--log-interval", type=int, default=2)
    p.add_argument("--short", type=int, default=4, help="updates of the short run")
    p.add_argument("--long", type=int, default=104, help="updates of the long run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run")
    p.add_argument("--fairseq-args", default="", help="more fairseq-train flags for every run")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    args = p.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        p.error(f"--families: unknown {unknown}; choose from {', '.join(FAMILIES)}")
    if not args.modes or set(args.modes) - set(MODES):
        p.error(f"--modes: eager and/or compile; got {','.join(args.modes)}")
    if not 0 < args.short < args.long:
        p.error(f"--short {args.short} and --long {args.long}: need 0 < short < long")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    return args


def main(argv=None) -> int:
    import shutil

    from fairseq_ext.training.output_files import refused, write_text

    args = parse_args(argv)
    if refused(PROG, [args.json], args.force):
        return 2
    data = str(args.data or synthetic_data_bin(args.cache, args.vocab))
    for stale in ("inductor", "runs"):  # a cold cache for every invocation
        shutil.rmtree(args.cache / stale, ignore_errors=True)
    width = width_of(args.dim, args.layers)
    extra = args.fairseq_args.split()
    cases = []
    for mode in args.modes:
        for name in args.families:
            argv_ = FAMILIES[name].argv(data, width, args.seq_len, args.batch_size,
                                        args.optimizer, extra)
            argv_ += ["--log-format", "json", "--log-interval", str(args.log_interval)]
            cases.append(Case(name, mode, argv_))
    started = time.perf_counter()

    def say(text):
        print(f"[{time.perf_counter() - started:6.1f} s] {text}", file=sys.stderr, flush=True)

    results = measure(cases, args.short, args.long, args.rounds, args.cache, args.threads, say)
    import torch

    env = environment(torch.device("cpu"))
    print(f"fairseq-train, {width['layers']} layers x {width['dim']}, seq len {args.seq_len}, "
          f"batch {args.batch_size}, --optimizer {args.optimizer}, --log-interval "
          f"{args.log_interval} {args.fairseq_args}; {env['device']}, OMP_NUM_THREADS="
          f"{args.threads}, torch {env['torch']}; steady state = (time to {args.long} updates "
          f"- time to {args.short}) / {args.long - args.short}, mean of {args.rounds} "
          "interleaved rounds")
    print(format_table(results))
    if args.json:
        write_text(args.json, json.dumps({
            "command": sys.argv, "args": {k: (str(v) if isinstance(v, Path) else v)
                                          for k, v in vars(args).items()},
            "environment": env, "results": [dataclasses.asdict(r) for r in results],
        }, indent=2), args.force)
    return 0


def epoch_batch_shapes(argv: Sequence[str], splits: Sequence[str] = ("train", "valid"),
                       ) -> Dict[str, Dict[Tuple[int, ...], int]]:
    """The padded ``src_tokens`` shapes of one epoch's batches per split, and how many batches
    have each, for a ``fairseq-train`` command line (its own batching, break mode and, with
    ``--torch-compile``, the length buckets it chooses): the shapes a compiled model compiles
    for, counted without training."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import torch_compile_seq_len_multiple

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, list(argv)))
    utils.import_user_module(cfg.common)
    if cfg.common.torch_compile:
        torch_compile_seq_len_multiple(cfg)
    task = tasks.setup_task(cfg.task)
    shapes: Dict[str, Dict[Tuple[int, ...], int]] = {}
    for split in splits:
        task.load_dataset(split, combine=False, epoch=1)
        dataset = task.dataset(split)
        batches = task.get_batch_iterator(
            dataset, max_tokens=cfg.dataset.max_tokens,
            max_sentences=cfg.dataset.batch_size,
            max_positions=utils.resolve_max_positions(task.max_positions(), (
                cfg.model.max_positions if "max_positions" in cfg.model else None)),
            ignore_invalid_inputs=True,
            required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
            seed=cfg.common.seed, num_workers=0, epoch=1,
        ).next_epoch_itr(shuffle=False)
        counts: Dict[Tuple[int, ...], int] = {}
        for batch in batches:
            shape = tuple(batch["net_input"]["src_tokens"].shape)
            counts[shape] = counts.get(shape, 0) + 1
        shapes[split] = counts
    return shapes


def count_shapes_main(argv=None) -> int:
    """``python -m fairseq_ext_lab.benchmarks.cli_update_timing FAIRSEQ_TRAIN_ARGS...``: print
    each split's batch shapes (see :func:`epoch_batch_shapes`)."""
    import logging

    logging.disable(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    for split, counts in epoch_batch_shapes(argv).items():
        print(f"{split}: {len(counts)} shapes, {sum(counts.values())} batches: " + ", ".join(
            f"{shape} x{n}" for shape, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(count_shapes_main())
