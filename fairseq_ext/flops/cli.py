"""The FLOPs calculator: ``python -m fairseq_ext.flops --arch ARCH [...]``.

Training FLOPs per sequence, per update and in total of a model A and a baseline B, the
speedup B/A, an equal-budget update count (``--budget-of``), and with ``--measure`` the FLOPs
that ``FlopCounterMode`` counts on one real forward+backward beside the analytic figure.
Training = 3 x forward (FlopCounterMode's count); the 3ML paper counts 2 x forward, so absolute
FLOPs here are 1.5 x the paper's convention, while speedups and budgets are the same.
"""
import argparse
import math
import os
import sys

from fairseq_ext.flops.families import (
    NoFlopsFormula,
    flops_family,
    spec_for_arch,
    training_flops_per_sequence,
)
from fairseq_ext.flops.formulas import check_mask_prob, format_flops

ROBERTA_VOCAB_SIZE = 50265

#: The size flags of model A the calculator takes, each passed to the arch as an override: the
#: stacks the FLOPs formulas read and the attention heads the arch's size check reads
#: (:func:`~fairseq_ext.models.validation.check_attention_heads`).
SIZE_FLAGS = ("encoder-layers", "encoder-embed-dim", "encoder-ffn-embed-dim", "encoder-attention-heads",
              "decoder-layers", "decoder-embed-dim", "decoder-ffn-embed-dim", "decoder-attention-heads")


# --- the calculator CLI -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext.flops",
        description="Analytic training FLOPs of fairseq masked LMs (3ML paper, Appendix D). "
                    "Training FLOPs = 3 x forward (forward + backward, as FlopCounterMode "
                    "counts); the paper counts 2 x forward, so absolute FLOPs are 1.5 x its "
                    "convention while speedups and budgets agree.",
    )
    parser.add_argument("--arch", required=True, help="registered arch, e.g. 3ml_self_base")
    for name in SIZE_FLAGS:
        parser.add_argument(f"--{name}", type=int, help=f"override the arch's --{name} (model A)")
    parser.add_argument("--tokens-per-sample", type=int, default=512, help="sequence length L")
    parser.add_argument("--mask-prob", type=float, default=0.15, help="masking rate of model A")
    parser.add_argument("--mask-fraction", type=float, default=0.8,
                        help="share of corrupted tokens that become [MASK] "
                             "(1 - leave-unmasked - random-token; default 0.8)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"vocabulary size V (default {ROBERTA_VOCAB_SIZE}, RoBERTa's BPE)")
    parser.add_argument("--data", default=None,
                        help="a data-bin: take V from its dict.txt (+ 4 specials + <mask>)")
    parser.add_argument("--vs", default=None,
                        help="baseline arch B (default: the --budget-of arch if given, else "
                             "fairseq's roberta with A's encoder; for swishrnn_bert, bert_rab "
                             "of A's size with a 4d FFN)")
    parser.add_argument("--vs-mask-prob", type=float, default=0.15, help="masking rate of B")
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per update")
    parser.add_argument("--max-update", type=int, default=None, help="number of updates")
    parser.add_argument("--budget-of", default=None, metavar="B:UPDATES",
                        help="updates A gets for the FLOPs of B trained for UPDATES")
    parser.add_argument("--measure", action="store_true",
                        help="also count FLOPs of one forward+backward with FlopCounterMode")
    return parser


def vocab_size_of(args) -> int:
    if args.data is not None:
        from fairseq.data import Dictionary

        path = os.path.join(args.data, "dict.txt")
        if not os.path.exists(path):
            raise ValueError(f"--data {args.data}: no dict.txt there")
        return len(Dictionary.load(path)) + 1  # + <mask>, added by the masked_lm task
    return args.vocab_size or ROBERTA_VOCAB_SIZE


def parse_budget(text: str):
    arch, sep, updates = text.rpartition(":")
    if not sep or not arch:
        raise ValueError(f"--budget-of must be ARCH:UPDATES, e.g. roberta_base:125000; got {text!r}")
    try:
        value = float(updates)
    except ValueError:
        raise ValueError(f"--budget-of {text!r}: UPDATES must be a number") from None
    if not value > 0:
        raise ValueError(f"--budget-of {text!r}: UPDATES must be positive")
    return arch, value


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ValueError, NoFlopsFormula) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run(args) -> int:
    check_mask_prob(args.mask_prob)
    check_mask_prob(args.vs_mask_prob)
    budget = parse_budget(args.budget_of) if args.budget_of else None
    if not 0.0 < args.mask_fraction <= 1.0:
        raise ValueError(f"--mask-fraction must be in (0, 1]; got {args.mask_fraction}")
    for name in ("batch_size", "max_update", "tokens_per_sample"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive; got {value}")
    overrides = {name.replace("-", "_"): getattr(args, name.replace("-", "_")) for name in SIZE_FLAGS}
    vocab = vocab_size_of(args)
    length = args.tokens_per_sample
    spec_a = spec_for_arch(args.arch, **overrides)
    # B: --vs, else the arch whose budget --budget-of names, else the family's default baseline
    baseline_arch = args.vs or (budget[0] if budget else None)
    if baseline_arch:
        arch_b, spec_b, baseline_overrides = baseline_arch, spec_for_arch(baseline_arch), {}
    else:
        arch_b, spec_b, baseline_overrides = flops_family(spec_a.family).default_baseline(spec_a)
    models = [("A", args.arch, spec_a, args.mask_prob), ("B", arch_b, spec_b, args.vs_mask_prob)]
    per_sequence = {}
    for label, arch, spec, mask_prob in models:
        flops = training_flops_per_sequence(spec, length, mask_prob, vocab, args.mask_fraction)
        per_sequence[label] = flops
        print(f"{label}: {arch} ({spec.family}), L={length}, mask {mask_prob:.2f}, V={vocab}")
        print(f"   training FLOPs per sequence: {format_flops(flops)}")
        if args.batch_size:
            print(f"   per update (batch {args.batch_size}): {format_flops(flops * args.batch_size)}")
            if args.max_update:
                total = flops * args.batch_size * args.max_update
                print(f"   total ({args.max_update} updates): {format_flops(total)}")
    if budget:
        budget_arch, budget_updates = budget
        budget_spec = spec_for_arch(budget_arch)
        budget_flops = training_flops_per_sequence(budget_spec, length, args.vs_mask_prob, vocab,
                                                   args.mask_fraction)
        # rounded down, as the demo and the studies plan (fairseq_ext_lab/budget.py): the same
        # number on both lines
        updates = math.floor(budget_updates * budget_flops / per_sequence["A"] * (1 + 1e-12))
        print(f"budget: {args.arch} gets {updates} updates for the FLOPs of {budget_arch} "
              f"(mask {args.vs_mask_prob:.2f}) trained for {budget_updates:.0f} updates")
        print(f"updates: {updates}")
    if args.measure:
        from fairseq_ext.flops.measure import measure_training_flops

        for label, arch, spec, mask_prob in models:
            if label == "A":
                build_arch, build_overrides = args.arch, overrides
            else:
                build_arch, build_overrides = arch_b, baseline_overrides
            measured, analytic = measure_training_flops(
                build_arch, spec, length, mask_prob, vocab, args.mask_fraction, build_overrides)
            print(f"measure {label} ({arch}): measured {measured:.4e}, analytic {analytic:.4e} "
                  f"FLOPs per sequence, ratio {measured / analytic:.4f}")
    print(f"speedup: {per_sequence['B'] / per_sequence['A']:.2f}")
    return 0
