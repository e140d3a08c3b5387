#!/usr/bin/env python
"""Benchmark the SwishRNN recurrence: the ``fairseq_ext::swish_recurrence`` op against the
pure-PyTorch reference, forward + backward, measured side by side (issue: SwishRNN, part (b)).

    python scripts/bench_swishrnn.py --seq-len 512 --batch-size 16 --hidden 2048 --steps 1,2,4

Each configuration is timed in interleaved rounds (op, reference, op, reference, ...) and the
median is reported with the ratio reference / op. CPU target: >= 10x. Parts (a) (the CUDA
kernel against the memory-bandwidth bound) and (c) (training step of swishrnn_bert_base against
bert_rab_base) need the CUDA kernel and the architectures, which are not built yet.
"""
import argparse
import statistics
import time

import torch

import fairseq_ext  # noqa: F401
from fairseq_ext.modules import swish_rnn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}


def time_once(function, x1, alpha, beta, step, grad) -> float:
    for tensor in (x1, alpha, beta):
        tensor.grad = None
    start = time.perf_counter()
    function(x1, alpha, beta, step).backward(grad)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=2048, help="d'")
    parser.add_argument("--steps", default="1,2,4", help="step sizes k")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if not swish_rnn.NATIVE_OP_AVAILABLE:
        raise SystemExit("error: fairseq_ext._C is not built; run `make install`")
    if args.threads:
        torch.set_num_threads(args.threads)
    op = torch.ops.fairseq_ext.swish_recurrence
    dtype = DTYPES[args.dtype]
    print(f"cpu, {torch.get_num_threads()} threads, torch {torch.__version__}, {args.dtype}, "
          f"T={args.seq_len} B={args.batch_size} d'={args.hidden}, forward+backward, "
          f"median of {args.rounds} interleaved rounds after 1 warm-up")
    print("| k | op ms | reference ms | reference / op |")
    print("|---|---|---|---|")
    for step in (int(s) for s in args.steps.split(",")):
        g = torch.Generator().manual_seed(step)
        x1 = torch.randn(args.seq_len, args.batch_size, args.hidden, generator=g).to(dtype)
        alpha = (torch.rand(args.hidden, generator=g) + 0.5).to(dtype)
        beta = torch.randn(args.hidden, generator=g).to(dtype)
        grad = torch.randn(x1.shape, generator=g).to(dtype)
        for tensor in (x1, alpha, beta):
            tensor.requires_grad_()
        times = {"op": [], "reference": []}
        functions = {"op": op, "reference": swish_rnn.swish_recurrence_reference}
        for round_index in range(args.rounds + 1):
            for name, function in functions.items():
                seconds = time_once(function, x1, alpha, beta, step, grad)
                if round_index:  # round 0 warms up
                    times[name].append(seconds)
        op_ms = 1e3 * statistics.median(times["op"])
        ref_ms = 1e3 * statistics.median(times["reference"])
        print(f"| {step} | {op_ms:.1f} | {ref_ms:.1f} | {ref_ms / op_ms:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
