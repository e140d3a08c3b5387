"""The size tables (one per concept: encoders, decoder-only LMs) and the one helper that
registers sized architectures.

Every encoder family of fairseq-ext names its architectures ``<family>_<size>`` over the same
sizes (:data:`ENCODER_SIZES`): ``base`` and ``large`` are BERT's/RoBERTa's (the sizes of the 3ML
paper's Tables 3-4 and of Lei et al.'s Table 3); ``small``, ``mini`` and ``tiny`` are ours, for
CPU runs (``mini`` is the ``make demo`` size) and tests. Decoder-only language models
(:data:`DECODER_LM_SIZES`) have the GPT-3-style sizes of Artetxe et al. (2022), Table 2, and the
same ``small``, ``mini`` and ``tiny``. An
architecture only sets defaults where a flag is unset, so the command line and hydra win; before
that it checks the run it is built in (:func:`~fairseq_ext.models.validation.check_run_config`:
the criterion and the masking settings), so a mistake stops ``fairseq-train`` with a clear error
while its flags are read.
"""
import dataclasses
from typing import Callable, Dict, Mapping

from fairseq.models import register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_ext.models.validation import (
    check_attention_heads,
    check_flex_trains,
    check_run_config,
)

#: The transformer stacks a fairseq model has, each sized by its ``--{stack}-*`` flags.
STACKS = ("encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class StackSize:
    """A transformer stack's dimensions (an encoder's or a decoder's): blocks, hidden dim, FFN
    inner dim, attention heads."""

    layers: int
    dim: int
    ffn: int
    heads: int

    def as_args(self, stack: str) -> Dict[str, int]:
        """The fairseq ``--{stack}-*`` fields of this size; ``stack`` is one of :data:`STACKS`."""
        if stack not in STACKS:
            raise ValueError(f"stack must be one of {', '.join(STACKS)}; got {stack!r}")
        return {f"{stack}_layers": self.layers, f"{stack}_embed_dim": self.dim,
                f"{stack}_ffn_embed_dim": self.ffn, f"{stack}_attention_heads": self.heads}


#: Encoders (``--encoder-*``).
ENCODER_SIZES: Dict[str, StackSize] = {
    "base": StackSize(layers=12, dim=768, ffn=3072, heads=12),
    "large": StackSize(layers=24, dim=1024, ffn=4096, heads=16),
    "small": StackSize(layers=4, dim=256, ffn=1024, heads=4),  # about 3M non-embedding params
    "mini": StackSize(layers=2, dim=128, ffn=512, heads=2),  # the CPU demo: 0.4M non-embedding
    "tiny": StackSize(layers=2, dim=64, ffn=256, heads=2),  # for tests
}

#: Decoder-only LMs (``--decoder-*``): Artetxe et al. (2022), Table 2 (l, d, h; FFN 4 d as
#: GPT-3), named by their parameter count; ``small``/``mini``/``tiny`` as the encoders' for CPU
#: runs and tests.
DECODER_LM_SIZES: Dict[str, StackSize] = {
    "125m": StackSize(layers=12, dim=768, ffn=3072, heads=12),
    "355m": StackSize(layers=24, dim=1024, ffn=4096, heads=16),
    "1_3b": StackSize(layers=24, dim=2048, ffn=8192, heads=32),
    "2_7b": StackSize(layers=32, dim=2560, ffn=10240, heads=32),
    "6_7b": StackSize(layers=32, dim=4096, ffn=16384, heads=32),
    "small": StackSize(layers=4, dim=256, ffn=1024, heads=4),
    "mini": StackSize(layers=2, dim=128, ffn=512, heads=2),  # the CPU demo
    "tiny": StackSize(layers=2, dim=64, ffn=256, heads=2),  # for tests
}


def set_stack_size(args, stack: str, size: StackSize) -> None:
    """Set ``size``'s ``--{stack}-*`` fields (``stack``: ``"encoder"`` or ``"decoder"``) where the
    user left them unset."""
    for field, value in size.as_args(stack).items():
        setattr(args, field, safe_getattr(args, field, value))


def register_sized_architecture(model: str, arch: str, set_defaults: Callable, size: str,
                                description: str = "",
                                table: Mapping[str, StackSize] = ENCODER_SIZES) -> Callable:
    """Register ``arch`` of fairseq model ``model``: ``set_defaults(args, table[size])`` fills
    what the flags left unset, after :func:`check_run_config`; the filled config is checked
    (:func:`check_attention_heads`, :func:`check_flex_trains`). ``table`` is
    :data:`ENCODER_SIZES` or :data:`DECODER_LM_SIZES`. Returns the registered function."""
    encoder = table[size]

    def architecture(args):
        check_run_config(args, arch)
        set_defaults(args, encoder)
        check_attention_heads(args)
        check_flex_trains(args)

    architecture.__name__ = f"{arch}_architecture"
    architecture.__doc__ = (f"{arch}: {encoder.layers} layers, dim {encoder.dim}, FFN "
                            f"{encoder.ffn}, {encoder.heads} heads{description}.")
    return register_model_architecture(model, arch)(architecture)
