"""Memory plan of a training run, per GPU, from the fairseq-train flags a recipe passes.

``python -m fairseq_ext.flops.memory_plan [--world-size N] -- fairseq-train DATA --arch ... [flags]``
prints, before the run starts (every ``recipes/*/pretrain*.sh`` calls it through
``recipes/lib/common.sh``): the arch's parameters
(:meth:`~fairseq_ext.flops.families.FlopsFamily.parameters`), weights, gradients, the fp32 master
copy under ``--fp16`` / ``--bf16``, optimizer state, DDP's gradient buckets, the activations of
one micro-batch (:meth:`~fairseq_ext.flops.families.FlopsFamily.activation_bytes`: Korthikanti
et al. (2022), ``s b h (34 + 5 a s / h)`` bytes per block at 16-bit, or each block's input plus
one block under ``--checkpoint-activations``), each divided as ``--zero-sharding os`` or
``--ddp-backend fully_sharded`` shards it, and the total per GPU. What each term counts and the
large recipes' plans: docs/scaling.md ("Memory plan", "Activation recomputation").
"""
import argparse
import dataclasses
import logging
import os
import sys
from typing import List, Optional, Sequence

from fairseq_ext.flops.cli import ROBERTA_VOCAB_SIZE
from fairseq_ext.flops.families import NoFlopsFormula, flops_family, spec_from_args

#: Bytes of optimizer state per parameter, by fairseq optimizer name.
OPTIMIZER_STATE_BYTES = {"adam": 8, "fused_adamw": 8, "adamw": 8, "cpu_adam": 8, "sgd": 0,
                         "nag": 4, "adagrad": 4, "adafactor": 4}


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU of one training run (each term: docs/scaling.md, "Memory plan")."""

    arch: str
    parameters: int
    weights: float
    gradients: float
    master_weights: float
    optimizer_state: float
    activations: float
    ddp_buckets: float
    sequences: int
    length: int
    world_size: int
    sharding: str
    recompute: bool = False  # --checkpoint-activations: activations under full recomputation

    @property
    def model_states(self) -> float:
        return (self.weights + self.gradients + self.master_weights + self.optimizer_state
                + self.ddp_buckets)

    @property
    def total(self) -> float:
        return self.model_states + self.activations

    def lines(self) -> List[str]:
        return [
            f"memory plan per GPU ({self.arch}, {self.parameters / 1e6:,.1f}M parameters, "
            f"micro-batch {self.sequences} x {self.length} tokens, {self.world_size} GPU(s), "
            f"sharding: {self.sharding}):",
            f"  weights          {format_bytes(self.weights)}",
            f"  gradients        {format_bytes(self.gradients)}",
            f"  fp32 master copy {format_bytes(self.master_weights)}",
            f"  optimizer state  {format_bytes(self.optimizer_state)}",
            f"  DDP grad buckets {format_bytes(self.ddp_buckets)}",
            f"  activations      {format_bytes(self.activations)}  (Korthikanti et al. 2022, "
            + ("full recomputation: every layer's input + one layer)" if self.recompute
               else "no recomputation)"),
            f"  total            {format_bytes(self.total)}  (+ CUDA context, buffers, "
            "fragmentation)",
        ]


def format_bytes(size: float) -> str:
    """``12.34 GB`` (decimal units, as GPU memory is quoted), or MB below 0.1 GB."""
    return f"{size / 1e9:10.2f} GB" if size >= 1e8 else f"{size / 1e6:10.2f} MB"


def training_parser() -> argparse.ArgumentParser:
    """The fairseq-train flags the plan reads; the others are ignored."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("data", nargs="?")
    parser.add_argument("--arch", "-a", required=True)
    parser.add_argument("--task", default="masked_lm")
    parser.add_argument("--tokens-per-sample", type=int, default=512)
    parser.add_argument("--batch-size", "--max-sentences", type=int)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--update-freq", default="1")
    parser.add_argument("--mask-prob", type=float, default=0.15)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--memory-efficient-fp16", action="store_true")
    parser.add_argument("--memory-efficient-bf16", action="store_true")
    parser.add_argument("--ddp-backend", default="pytorch_ddp")
    parser.add_argument("--zero-sharding", default="none")
    parser.add_argument("--checkpoint-activations", action="store_true")
    parser.add_argument("--gradient-as-bucket-view", action="store_true")
    for flag in ("--encoder-layers", "--encoder-embed-dim", "--encoder-ffn-embed-dim",
                 "--encoder-attention-heads", "--decoder-layers", "--decoder-embed-dim",
                 "--decoder-ffn-embed-dim", "--decoder-attention-heads"):
        parser.add_argument(flag, type=int)
    return parser


def vocab_size_of(data: Optional[str]) -> int:
    """Embedding rows: the data-bin's dictionary (as fairseq loads it, with its 4 specials) +
    ``<mask>``, or RoBERTa's 50,265 without one."""
    from fairseq.data import Dictionary
    from fairseq.utils import split_paths

    path = os.path.join(split_paths(data)[0], "dict.txt") if data else None
    if path is None or not os.path.isfile(path):
        return ROBERTA_VOCAB_SIZE
    return len(Dictionary.load(path)) + 1  # + <mask>, added by the task


def model_args(flags: argparse.Namespace) -> argparse.Namespace:
    """The arch's full config (its function run on the flags, as fairseq-train does)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    if flags.arch not in ARCH_CONFIG_REGISTRY:
        from fairseq_ext.training.model_building import unknown_arch_message

        raise NoFlopsFormula(unknown_arch_message(flags.arch))
    args = argparse.Namespace(**{k: v for k, v in vars(flags).items() if v is not None})
    args.max_positions = args.max_target_positions = flags.tokens_per_sample
    ARCH_CONFIG_REGISTRY[flags.arch](args)
    return args


def plan(argv: Sequence[str], world_size: int = 1) -> MemoryPlan:
    """The :class:`MemoryPlan` of ``fairseq-train`` with arguments ``argv`` (the program name
    and anything the plan does not read may be included) on ``world_size`` GPUs."""
    flags, _ = training_parser().parse_known_args(
        [a for a in argv if not a.endswith("fairseq-train")])
    args = model_args(flags)
    spec = spec_from_args(args)
    family = flops_family(spec.family)
    vocab_size = vocab_size_of(flags.data)
    length = flags.tokens_per_sample
    if flags.batch_size:
        sequences = flags.batch_size
    elif flags.max_tokens:
        sequences = max(1, flags.max_tokens // length)
    else:
        raise ValueError("give --batch-size or --max-tokens: the micro-batch sets the activations")
    parameters = family.parameters(spec, vocab_size, length)
    half = flags.fp16 or flags.bf16 or flags.memory_efficient_fp16 or flags.memory_efficient_bf16
    master = 4 if (flags.fp16 or flags.bf16) else 0  # memory-efficient: no fp32 copy
    weight_bytes = 2 if half else 4
    optimizer_bytes = OPTIMIZER_STATE_BYTES.get(flags.optimizer, 4)
    # the bidirectional_lm task predicts about every token (next-token or [MASK] targets)
    predicted = sequences * length * (1.0 if flags.task == "bidirectional_lm" else flags.mask_prob)
    heads = (getattr(args, "encoder_attention_heads", None)
             or getattr(args, "decoder_attention_heads", None) or 1)
    activations = family.activation_bytes(spec, length, sequences, heads, predicted, vocab_size,
                                          weight_bytes, recompute=flags.checkpoint_activations)
    shards = {"model": 1, "optimizer": 1}
    sharding = "none"
    if flags.ddp_backend == "fully_sharded":
        shards = {"model": world_size, "optimizer": world_size}
        sharding = f"fully_sharded over {world_size}"
    elif flags.zero_sharding == "os":
        shards["optimizer"] = world_size
        sharding = f"optimizer state over {world_size}"
    return MemoryPlan(
        arch=flags.arch, parameters=parameters,
        weights=weight_bytes * parameters / shards["model"],
        gradients=weight_bytes * parameters / shards["model"],
        master_weights=master * parameters / shards["model"],  # FSDP shards it; OSS does not
        optimizer_state=optimizer_bytes * parameters / shards["optimizer"],
        ddp_buckets=(weight_bytes * parameters if world_size > 1
                     and flags.ddp_backend in ("pytorch_ddp", "c10d")
                     and not flags.gradient_as_bucket_view else 0.0),
        activations=activations, sequences=sequences, length=length, world_size=world_size,
        sharding=sharding, recompute=flags.checkpoint_activations)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext.flops.memory_plan",
        description="Memory per GPU of a fairseq-train command: weights, gradients, optimizer "
                    "state, activations (docs/scaling.md, \"Memory plan\").",
        usage="%(prog)s [--world-size N] -- fairseq-train DATA --arch ARCH [flags]")
    parser.add_argument("--world-size", type=int, default=1,
                        help="data-parallel processes (GPUs x nodes); default 1")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the fairseq-train command line (after --)")
    args = parser.parse_args(argv)
    command = [a for a in args.command if a != "--"]
    if args.world_size < 1:
        parser.error(f"--world-size must be at least 1; got {args.world_size}")
    # the plugin's import-time log lines stay out (the plan is the output); the caller's logging
    # is as it was afterwards (an in-process caller, e.g. a test, goes on logging at INFO)
    disabled_before = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        result = plan(command, args.world_size)
    except (ValueError, NoFlopsFormula) as error:
        print(f"memory plan: error: {error}", file=sys.stderr)
        return 2
    finally:
        logging.disable(disabled_before)
    print("\n".join(result.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
