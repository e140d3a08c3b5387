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
from typing import Callable, ClassVar, Dict, Mapping

from fairseq.models import register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_ext.models.validation import check_attention_heads, check_run_config


@dataclasses.dataclass(frozen=True)
class EncoderSize:
    """Transformer encoder dimensions: blocks, hidden dim, FFN inner dim, attention heads."""

    layers: int
    dim: int
    ffn: int
    heads: int

    #: the fairseq flags this size sets: ``--{side}-layers`` ...
    side: ClassVar[str] = "encoder"

    def as_args(self) -> Dict[str, int]:
        """The fairseq ``--encoder-*`` fields of this size (``--decoder-*`` for a
        :class:`DecoderSize`)."""
        side = self.side
        return {f"{side}_layers": self.layers, f"{side}_embed_dim": self.dim,
                f"{side}_ffn_embed_dim": self.ffn, f"{side}_attention_heads": self.heads}


@dataclasses.dataclass(frozen=True)
class DecoderSize(EncoderSize):
    """Decoder-only LM dimensions; sets the ``--decoder-*`` fields."""

    side: ClassVar[str] = "decoder"


ENCODER_SIZES: Dict[str, EncoderSize] = {
    "base": EncoderSize(layers=12, dim=768, ffn=3072, heads=12),
    "large": EncoderSize(layers=24, dim=1024, ffn=4096, heads=16),
    "small": EncoderSize(layers=4, dim=256, ffn=1024, heads=4),  # about 3M non-embedding params
    "mini": EncoderSize(layers=2, dim=128, ffn=512, heads=2),  # the CPU demo: 0.4M non-embedding
    "tiny": EncoderSize(layers=2, dim=64, ffn=256, heads=2),  # for tests
}

#: Decoder-only LMs: Artetxe et al. (2022), Table 2 (l, d, h; FFN 4 d as GPT-3), named by their
#: parameter count; ``small``/``mini``/``tiny`` as the encoders' for CPU runs and tests.
DECODER_LM_SIZES: Dict[str, DecoderSize] = {
    "125m": DecoderSize(layers=12, dim=768, ffn=3072, heads=12),
    "355m": DecoderSize(layers=24, dim=1024, ffn=4096, heads=16),
    "1_3b": DecoderSize(layers=24, dim=2048, ffn=8192, heads=32),
    "2_7b": DecoderSize(layers=32, dim=2560, ffn=10240, heads=32),
    "6_7b": DecoderSize(layers=32, dim=4096, ffn=16384, heads=32),
    "small": DecoderSize(layers=4, dim=256, ffn=1024, heads=4),
    "mini": DecoderSize(layers=2, dim=128, ffn=512, heads=2),  # the CPU demo
    "tiny": DecoderSize(layers=2, dim=64, ffn=256, heads=2),  # for tests
}


def set_encoder_size(args, size: EncoderSize) -> None:
    """Set ``size``'s ``--encoder-*`` fields (``--decoder-*`` for a :class:`DecoderSize`) where
    the user left them unset."""
    for field, value in size.as_args().items():
        setattr(args, field, safe_getattr(args, field, value))


def register_sized_architecture(model: str, arch: str, set_defaults: Callable, size: str,
                                description: str = "",
                                table: Mapping[str, EncoderSize] = ENCODER_SIZES) -> Callable:
    """Register ``arch`` of fairseq model ``model``: ``set_defaults(args, table[size])`` fills
    what the flags left unset, after :func:`check_run_config`; the filled sizes are checked
    (:func:`check_attention_heads`). ``table`` is
    :data:`ENCODER_SIZES` or :data:`DECODER_LM_SIZES`. Returns the registered function."""
    encoder = table[size]

    def architecture(args):
        check_run_config(args, arch)
        set_defaults(args, encoder)
        check_attention_heads(args)

    architecture.__name__ = f"{arch}_architecture"
    architecture.__doc__ = (f"{arch}: {encoder.layers} layers, dim {encoder.dim}, FFN "
                            f"{encoder.ffn}, {encoder.heads} heads{description}.")
    return register_model_architecture(model, arch)(architecture)
