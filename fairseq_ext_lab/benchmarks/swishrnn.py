"""Benchmark SwishRNN: the ``fairseq_ext::swish_recurrence`` op (CUDA against the memory-bandwidth
bound, CPU against the pure-PyTorch reference) and a training step of SwishRNN-BERT against
BERT-rab.

    python scripts/bench_swishrnn.py --part a                      # CUDA op vs bound, vs reference
    python scripts/bench_swishrnn.py --seq-len 512 --batch-size 16 --hidden 2048 --steps 1,2,4
    python scripts/bench_swishrnn.py --part c --device cuda --dtype bf16 --batch-size 16
    python scripts/bench_swishrnn.py --part c --device cpu --arch-size tiny --seq-len 64

* ``--part b`` (default): the CPU kernels against :func:`swish_recurrence_reference`, forward +
  backward through autograd, ratio reference / op, at T=512, B=8, d'=512, k in {1, 2, 4} by
  default. The reference is the fair baseline a user would write: a loop over the
  ``ceil(T / k)`` steps that splits ``x1`` once (its backward is O(T): one concatenation). Beside
  it, the roofline of a memory-bound recurrence: the op's achieved bandwidth, the bytes it must
  read and write (forward: read ``x1``, write ``c``; backward: read ``grad_c``, ``x1``, ``c``,
  write ``grad_x1``: 6 N elements, N = T B d') divided by its time, against the measured
  bandwidth of a plain copy of the same bytes (``dst.copy_(src)`` of 3 N elements, which reads
  and writes them) on the same threads, timed in the same interleaved rounds. Also printed:
  the compute bound of the two sigmoids per element (two ``torch.sigmoid`` passes over N, the
  CPU's vectorized exp). Target: >= 10x the fair loop at every k, or, where the loop
  gains from k (with k chains it vectorises over k times more columns per step), >= 60% of the
  copy bandwidth at every k.
* ``--part a``: the same on CUDA (the op and its registered backward through autograd against
  the reference), timed with CUDA events, at T=512, B in {16, 64}, d'=2048, fp32 and bf16,
  k in {1, 2, 4} by default. The memory-bandwidth bound is the time to move the bytes the
  recurrence must move at the measured device-to-device copy bandwidth (``dst.copy_(src)`` of
  ``--copy-mib`` MiB, which reads and writes it: bandwidth = 2 bytes / time): forward reads
  ``x1`` and writes ``c`` (2 N elements), backward reads ``grad_c``, ``x1``, ``c`` and writes
  ``grad_x1`` (4 N), N = T B d'; ``alpha``, ``beta`` and their gradients (4 d' elements) are
  left out as negligible. Targets: op >= 60% of the bound (bound ms / op ms >= 0.6) and
  >= 50x the reference. The op is timed in the steady state, ``REPEATS`` calls between two
  events (the host's per-call work overlaps the GPU's, as in training; the second H200 run
  timed one call between two events, 0.9-1.8 ms whatever the kernels took), and beside it are
  one call's time and the bare kernels' (``kernels_fwd_bwd``: the forward and backward ops
  called directly, no autograd). For fp16/bf16 the bare kernels are also timed with one column
  per thread (``one_column_per_thread``), beside the two they run by default. Without CUDA or
  without the op's CUDA kernel it exits with code 2.
* ``--part c``: one training step (forward with ``masked_tokens``, cross-entropy on the masked
  positions, backward, ``torch.optim.AdamW`` step, fused on CUDA) of ``swishrnn_bert_{size}``
  against ``bert_rab_{size}`` on the same batch (15% of the positions corrupted, 80% of those
  ``<mask>``), bf16 under ``torch.autocast``. Target: swishrnn / bert_rab <= 1.10.

Each configuration is timed in interleaved rounds (op, reference, op, reference, ... or
swishrnn, bert_rab, swishrnn, ...), so that drift on a shared machine hits both alike, and the
median of the rounds after the warm-up is reported.
"""
import argparse
import os
import statistics
import sys
import time
from contextlib import nullcontext
from functools import partial

import torch
import torch.nn.functional as F

from fairseq_ext.ops import swish_recurrence as swish_rnn
from fairseq_ext.training.model_building import corrupted_batch, masked_lm_task
from fairseq_ext_lab.benchmarks.common import interleaved_rounds, load_average, quartiles, timed

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}
#: Per-part defaults of the options left unset on the command line.
DEFAULTS = {
    "a": {"batch_size": "16,64", "hidden": 2048, "dtype": "fp32,bf16", "warmup": 3, "rounds": 10},
    "b": {"batch_size": "8", "hidden": 512, "dtype": "fp32", "warmup": 2, "rounds": 9},
    "c": {"batch_size": "16", "hidden": 2048, "dtype": "fp32", "warmup": 3, "rounds": 10},
}
TARGET_BOUND_FRACTION = 0.60  # part (a): op time within 1/0.6 of the bandwidth bound
TARGET_SPEEDUP = 50.0  # part (a): op >= 50x the reference on CUDA
TARGET_STEP_RATIO = 1.10  # part (c): swishrnn step <= 1.10 x bert_rab step
TARGET_CPU_SPEEDUP = 10.0  # part (b): op >= 10x the fair loop on the CPU at every k...
TARGET_CPU_COPY_FRACTION = 0.60  # ... or op >= 60% of the copy bandwidth at every k
MASK_PROB, MASK_FRACTION = 0.15, 0.8  # part (c) corruption: 15%, of which 80% <mask>


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def recurrence_inputs(seq_len: int, batch_size: int, hidden: int, dtype: torch.dtype,
                      seed: int, device="cpu"):
    """x1 (T, B, d'), alpha, beta (requiring grad) and grad_c, drawn on the CPU then moved."""
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(seq_len, batch_size, hidden, generator=g).to(device, dtype)
    alpha = (torch.rand(hidden, generator=g) + 0.5).to(device, dtype)
    beta = torch.randn(hidden, generator=g).to(device, dtype)
    grad = torch.randn(x1.shape, generator=g).to(device, dtype)
    for tensor in (x1, alpha, beta):
        tensor.requires_grad_()
    return x1, alpha, beta, grad


# --------------------------------------------------------------------------- part (b): CPU


def fwd_bwd_seconds(function, inputs, step: int) -> float:
    """Seconds of one forward + backward through autograd of ``function``."""
    return timed(lambda: fwd_bwd(function, inputs, step))


def copy_seconds(nbytes: int, dtype: torch.dtype):
    """A function that times ``dst.copy_(src)`` moving ``nbytes`` (``nbytes / 2`` read and as
    many written) of ``dtype`` on the CPU, on torch's threads, and returns its seconds."""
    elements = nbytes // 2 // torch.empty((), dtype=dtype).element_size()
    src = torch.randn(elements).to(dtype)
    dst = torch.empty_like(src)
    return lambda: timed(lambda: dst.copy_(src))


def cpu_sigmoid_seconds(elements: int, rounds: int = 9) -> float:
    """Seconds of one ``torch.sigmoid`` (vectorized exp) over ``elements`` fp32, into a
    preallocated output."""
    x, out = torch.randn(elements), torch.empty(elements)
    return statistics.median(timed(lambda: torch.sigmoid(x, out=out)) for _ in range(rounds))


def part_b(args) -> int:
    if not swish_rnn.NATIVE_OP_AVAILABLE:
        raise SystemExit("error: fairseq_ext.ops._C is not built; run `make install`")
    op = torch.ops.fairseq_ext.swish_recurrence
    verdicts = []  # (>= 10x the loop, >= 60% of the copy bandwidth) per configuration and k
    for dtype_name in args.dtype:
        dtype = DTYPES[dtype_name]
        for batch_size in args.batch_size:
            n = args.seq_len * batch_size * args.hidden
            moved = recurrence_bytes(args.seq_len, batch_size, args.hidden, dtype)
            load_before = load_average()
            sigmoid_s = cpu_sigmoid_seconds(n)
            threads = torch.get_num_threads()
            print(f"cpu ({swish_rnn.cpu_kernels()} kernels), {threads} threads, torch "
                  f"{torch.__version__}, {dtype_name}, T={args.seq_len} B={batch_size} "
                  f"d'={args.hidden}, forward+backward; median of {args.rounds} interleaved rounds "
                  f"(op, fair loop, copy) after {args.warmup} warm-up; load average {load_before}")
            print(f"bytes the recurrence must move: 6 N = {6 * n:,} elements of {dtype_name} = "
                  f"{moved / 1e6:.1f} MB (forward reads x1, writes c; backward reads grad_c, x1, "
                  f"c, writes grad_x1); op GB/s = those bytes / op time")
            print(f"roofline: copy GB/s = the same bytes through dst.copy_(src) of 3 N elements "
                  f"(read and written) on the same {threads} threads; compute: 2 x torch.sigmoid "
                  f"over N = {2e3 * sigmoid_s:.2f} ms")
            print("| k | op ms | fair loop ms | loop / op | op GB/s | copy GB/s | op / copy "
                  "| >= 10x loop | >= 60% copy |")
            print("|---|---|---|---|---|---|---|---|---|")
            for step in args.steps:
                inputs = recurrence_inputs(args.seq_len, batch_size, args.hidden, dtype,
                                           seed=step)
                calls = {name: partial(fwd_bwd_seconds, function, inputs, step)
                         for name, function in (("op", op),
                                                ("loop", swish_rnn.swish_recurrence_reference))}
                calls["copy"] = copy_seconds(moved, dtype)
                times = interleaved_rounds(calls, args.warmup, args.rounds)
                op_s, loop_s, copy_s = (statistics.median(times[name])
                                        for name in ("op", "loop", "copy"))
                speedup, fraction = loop_s / op_s, copy_s / op_s
                verdicts.append((speedup >= TARGET_CPU_SPEEDUP,
                                 fraction >= TARGET_CPU_COPY_FRACTION))
                print(f"| {step} | {1e3 * op_s:.2f} | {1e3 * loop_s:.1f} | {speedup:.1f}x | "
                      f"{moved / op_s / 1e9:.1f} | {moved / copy_s / 1e9:.1f} | {fraction:.0%} | "
                      f"{verdict(verdicts[-1][0])} | {verdict(verdicts[-1][1])} |")
            print(f"load average after: {load_average()}")
    by_speedup = all(ok for ok, _ in verdicts)
    by_bandwidth = all(ok for _, ok in verdicts)
    print(f"target: >= {TARGET_CPU_SPEEDUP:.0f}x the fair loop at every k: {verdict(by_speedup)}; "
          f">= {TARGET_CPU_COPY_FRACTION:.0%} of the copy bandwidth at every k: "
          f"{verdict(by_bandwidth)}; {'met' if by_speedup or by_bandwidth else 'missed'}")
    return 0


# --------------------------------------------------------------------------- part (a): CUDA


def cuda_unavailable_reason():
    """Why part (a) cannot run here, or None."""
    if not torch.cuda.is_available():
        return (f"CUDA is not available (torch {torch.__version__}, "
                f"built with CUDA {torch.version.cuda})")
    if not swish_rnn.NATIVE_OP_AVAILABLE:
        return "fairseq_ext.ops._C is not built (run `make install` with a CUDA torch)"
    if "cuda" not in swish_rnn.NATIVE_OP_DEVICES:
        return (f"fairseq_ext::swish_recurrence has no CUDA kernel (kernels for: "
                f"{', '.join(swish_rnn.NATIVE_OP_DEVICES)}); rebuild `make install` with a CUDA "
                f"torch and nvcc")
    return None


def cuda_time_ms(function, warmup: int, repeats: int):
    """Per-call milliseconds of ``function`` measured with CUDA events (after ``warmup``
    untimed calls), one sample per repeat."""
    for _ in range(warmup):
        function()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def fwd_bwd(function, inputs, step: int) -> None:
    """Forward + backward through autograd of ``function`` (the op or the reference)."""
    x1, alpha, beta, grad = inputs
    for tensor in (x1, alpha, beta):
        tensor.grad = None
    function(x1, alpha, beta, step).backward(grad)


#: Calls queued between one pair of CUDA events for part (a)'s steady-state columns (the op
#: through autograd, the bare kernels): the host's per-call work overlaps the GPU's, as in a
#: training step, and the caching allocator serves every call after the first.
REPEATS = 20


def repeated(function) -> None:
    """``function()`` ``REPEATS`` times, back to back (no synchronization between them)."""
    for _ in range(REPEATS):
        function()


def kernels_fwd_bwd(inputs, step: int) -> None:
    """The forward op, then the backward op on its output, called directly without autograd:
    the kernels' own work, apart from autograd's per-call host work."""
    x1, alpha, beta, grad = inputs
    ops = torch.ops.fairseq_ext
    with torch.no_grad():
        c = ops.swish_recurrence(x1, alpha, beta, step)
        ops.swish_recurrence_backward(grad, x1, c, alpha, beta, step)


def one_column_per_thread(function) -> None:
    """``function()`` with the CUDA launchers set to one column per thread for every dtype
    (``COLUMNS_PER_THREAD_ENV``): for fp16/bf16, the kernels before they ran two columns per
    thread, timed beside them."""
    saved = os.environ.get(swish_rnn.COLUMNS_PER_THREAD_ENV)
    os.environ[swish_rnn.COLUMNS_PER_THREAD_ENV] = "1"
    try:
        function()
    finally:
        if saved is None:
            del os.environ[swish_rnn.COLUMNS_PER_THREAD_ENV]
        else:
            os.environ[swish_rnn.COLUMNS_PER_THREAD_ENV] = saved


def copy_bandwidth(mib: int, warmup: int = 3, repeats: int = 20) -> float:
    """Device-to-device bandwidth in bytes/s: ``dst.copy_(src)`` of ``mib`` MiB reads and
    writes it (2 x bytes moved); median of ``repeats``."""
    nbytes = mib << 20
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = statistics.median(cuda_time_ms(lambda: dst.copy_(src), warmup, repeats))
    src = dst = None
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms / 1e3)


def recurrence_bytes(seq_len: int, batch_size: int, hidden: int, dtype: torch.dtype) -> int:
    """Bytes forward + backward must move: 2 N (forward) + 4 N (backward) elements."""
    n = seq_len * batch_size * hidden
    return 6 * n * torch.empty((), dtype=dtype).element_size()


def part_a(args) -> int:
    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"bench_swishrnn: part (a) needs the CUDA kernel: {reason}", file=sys.stderr)
        return 2
    op = torch.ops.fairseq_ext.swish_recurrence
    bandwidth = copy_bandwidth(args.copy_mib)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"T={args.seq_len} d'={args.hidden}, forward+backward through autograd; median of "
          f"{args.rounds} interleaved rounds (CUDA events) after {args.warmup} warm-up")
    print(f"device-to-device copy bandwidth: {bandwidth / 1e9:.0f} GB/s (copy_ of "
          f"{args.copy_mib} MiB, 2 x bytes / time); bound = (2 N forward + 4 N backward "
          f"elements) x element size / bandwidth, N = T B d', alpha/beta negligible")
    print(f"targets: bound / op >= {TARGET_BOUND_FRACTION:.0%}, reference / op >= "
          f"{TARGET_SPEEDUP:.0f}x")
    print(f"op: forward + backward through autograd, {REPEATS} calls between two events (steady "
          "state: the host's work overlaps the GPU's); one call: a single call between two events "
          "(the GPU waits for the host, and allocations may miss the cache); kernels: the forward "
          f"and backward ops called directly, no autograd, {REPEATS} pairs between two events "
          "(fp16/bf16: two columns per thread where they fit); 1-column kernels: the same with "
          f"{swish_rnn.COLUMNS_PER_THREAD_ENV}=1 (fp16/bf16 only)")
    print("| dtype | B | k | op ms | reference ms | speedup | bound ms | bound / op "
          "| >= 60% bound | >= 50x ref | one call ms | kernels ms | bound / kernels "
          "| 1-column kernels ms | bound / 1-column kernels |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    failures = 0
    for dtype_name in args.dtype:
        dtype = DTYPES[dtype_name]
        for batch_size in args.batch_size:
            for step in args.steps:
                inputs = recurrence_inputs(args.seq_len, batch_size, args.hidden, dtype,
                                           seed=step, device="cuda")
                call = partial(fwd_bwd, op, inputs, step)
                functions = {"op": partial(repeated, call), "one call": call,
                             "reference": partial(fwd_bwd, swish_rnn.swish_recurrence_reference,
                                                  inputs, step),
                             "kernels": partial(repeated, partial(kernels_fwd_bwd, inputs, step))}
                packed = dtype.itemsize == 2  # fp16/bf16: two columns per thread, or one
                if packed:
                    functions["1-column kernels"] = partial(one_column_per_thread,
                                                            functions["kernels"])
                times = {name: [] for name in functions}
                for function in functions.values():  # warm-up
                    cuda_time_ms(function, args.warmup, 0)
                for _ in range(args.rounds):
                    for name, function in functions.items():
                        times[name] += cuda_time_ms(function, 0, 1)
                inputs = functions = None  # free before the next configuration
                op_ms = statistics.median(times["op"]) / REPEATS
                once_ms = statistics.median(times["one call"])
                ref_ms = statistics.median(times["reference"])
                kernels_ms = statistics.median(times["kernels"]) / REPEATS
                one_column_ms = (statistics.median(times["1-column kernels"]) / REPEATS
                                 if packed else None)
                bound_ms = 1e3 * recurrence_bytes(args.seq_len, batch_size, args.hidden,
                                                  dtype) / bandwidth
                fraction, speedup = bound_ms / op_ms, ref_ms / op_ms
                ok_bound = fraction >= TARGET_BOUND_FRACTION
                ok_speedup = speedup >= TARGET_SPEEDUP
                failures += not (ok_bound and ok_speedup)
                print(f"| {dtype_name} | {batch_size} | {step} | {op_ms:.3f} | {ref_ms:.2f} | "
                      f"{speedup:.0f}x | {bound_ms:.3f} | {fraction:.0%} | {verdict(ok_bound)} "
                      f"| {verdict(ok_speedup)} | {once_ms:.3f} | {kernels_ms:.3f} "
                      f"| {bound_ms / kernels_ms:.0%} | "
                      + (f"{one_column_ms:.3f} | {bound_ms / one_column_ms:.0%} |" if packed
                         else "- | - |"))
    print(f"{'all targets met' if not failures else f'{failures} configuration(s) FAIL'}")
    return 0


# --------------------------------------------------------------------------- part (c): training


class StepRunner:
    """One model with its AdamW optimizer; :meth:`step` is one training step on the batch."""

    def __init__(self, arch: str, task, seq_len: int, device: torch.device, dtype: torch.dtype,
                 seed: int):
        from fairseq_ext.training.model_building import build_arch

        torch.manual_seed(seed)
        self.arch = arch
        self.model = build_arch(arch, task, seq_len).to(device).train()
        self.parameters = sum(p.numel() for p in self.model.parameters())
        self.device = device
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01,
            fused=device.type == "cuda")
        self.autocast = (nullcontext() if dtype is torch.float32
                         else torch.autocast(device_type=device.type, dtype=dtype))

    def step(self, src: torch.Tensor, target: torch.Tensor, masked: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            logits = self.model(src, masked_tokens=masked)[0]
        loss = F.cross_entropy(logits.float(), target[masked])
        loss.backward()
        self.optimizer.step()

    def timed_step(self, *batch) -> float:
        """Wall-clock seconds of one step, device work included."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        self.step(*batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start


def part_c(args) -> int:
    if len(args.batch_size) != 1 or len(args.dtype) != 1:
        raise SystemExit("error: --part c takes one --batch-size and one --dtype")
    (batch_size,), (dtype_name,) = args.batch_size, args.dtype
    if dtype_name not in ("fp32", "bf16"):
        raise SystemExit(f"error: --part c runs fp32 or bf16; got {dtype_name}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"bench_swishrnn: --device cuda: CUDA is not available (torch {torch.__version__})",
              file=sys.stderr)
        return 2
    if device.type not in swish_rnn.NATIVE_OP_DEVICES:  # the comparison would be meaningless
        print(f"bench_swishrnn: the SwishRNN recurrence has no {device.type} kernel here "
              f"(kernels for: {', '.join(swish_rnn.NATIVE_OP_DEVICES) or 'none'}); "
              f"swishrnn_bert would run the pure-PyTorch reference", file=sys.stderr)
        return 2
    task = masked_lm_task(args.vocab_size, MASK_PROB, MASK_FRACTION)
    src, target, _, _ = corrupted_batch(task, batch_size, args.seq_len, MASK_PROB, MASK_FRACTION,
                                        torch.Generator().manual_seed(args.seed))
    masked = target.ne(task.source_dictionary.pad())
    batch = tuple(t.to(device) for t in (src, target, masked))
    runners = {name: StepRunner(f"{name}_{args.arch_size}", task, args.seq_len, device,
                                DTYPES[dtype_name], args.seed)
               for name in ("swishrnn_bert", "bert_rab")}
    times = {name: [] for name in runners}
    load_before = load_average()
    for round_index in range(args.warmup + args.rounds):
        for name, runner in runners.items():
            seconds = runner.timed_step(*batch)
            if round_index >= args.warmup:
                times[name].append(seconds)
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"cpu, {torch.get_num_threads()} threads")
    print(f"{where}, torch {torch.__version__}, {dtype_name}, batch {batch_size} x seq len "
          f"{args.seq_len}, vocab {args.vocab_size}, {int(masked.sum())} masked positions; one "
          f"step = forward + cross-entropy on the masked positions + backward + AdamW"
          f"{' (fused)' if device.type == 'cuda' else ''}; median of {args.rounds} interleaved "
          f"rounds after {args.warmup} warm-up; load average {load_before} before, "
          f"{load_average()} after")
    print("| model | arch | parameters | s/step | p25-p75 |")
    print("|---|---|---|---|---|")
    medians = {}
    for name, runner in runners.items():
        p25, medians[name], p75 = quartiles(times[name])
        print(f"| {name} | {runner.arch} | {runner.parameters / 1e6:.1f}M | "
              f"{medians[name]:.4f} | {p25:.4f}-{p75:.4f} |")
    ratio = medians["swishrnn_bert"] / medians["bert_rab"]
    print(f"swishrnn_bert / bert_rab = {ratio:.3f} (target <= {TARGET_STEP_RATIO:.2f}): "
          f"{verdict(ratio <= TARGET_STEP_RATIO)}")
    return 0


# --------------------------------------------------------------------------- main


def int_list(text: str):
    return [int(s) for s in text.split(",") if s.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("a", "b", "c"), default="b",
                        help="a: CUDA op vs bandwidth bound and reference; b: CPU op vs "
                             "reference; c: training step swishrnn_bert vs bert_rab")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", default=None,
                        help="comma-separated (parts a, b); one for part c "
                             "(default: a 16,64; b 8; c 16)")
    parser.add_argument("--hidden", type=int, default=None,
                        help="d' (parts a, b; default: a 2048, b 512)")
    parser.add_argument("--steps", default="1,2,4", help="step sizes k (parts a, b)")
    parser.add_argument("--dtype", default=None,
                        help=f"comma-separated of {','.join(DTYPES)} (default: a fp32,bf16; b, c "
                             f"fp32); part c: one, fp32 or bf16 (autocast)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed rounds first (default: a 3, b 2, c 3)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds, median reported (default: a 10, b 9, c 10)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--copy-mib", type=int, default=1024,
                        help="part a: size of the copy that measures the bandwidth (>= 256)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="part c")
    parser.add_argument("--arch-size", choices=("base", "large", "small", "tiny"),
                        default="base", help="part c: swishrnn_bert_SIZE vs bert_rab_SIZE")
    parser.add_argument("--vocab-size", type=int, default=50265,
                        help="part c: dictionary size, <mask> included (RoBERTa's: 50265)")
    parser.add_argument("--seed", type=int, default=1, help="part c")
    args = parser.parse_args(argv)
    for key, value in DEFAULTS[args.part].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.batch_size, args.steps = int_list(args.batch_size), int_list(args.steps)
    except ValueError:
        parser.error("--batch-size and --steps take comma-separated integers")
    args.dtype = [s.strip() for s in args.dtype.split(",") if s.strip()]
    if not set(args.dtype) <= set(DTYPES) or not args.dtype:
        parser.error(f"--dtype: choose from {','.join(DTYPES)}; got {args.dtype}")
    if args.warmup < 0 or args.rounds < 1 or args.copy_mib < 256:
        parser.error("--warmup must be >= 0, --rounds >= 1, --copy-mib >= 256")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return {"a": part_a, "b": part_b, "c": part_c}[args.part](args)
