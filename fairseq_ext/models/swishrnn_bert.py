"""SwishRNN-BERT, "Simple Recurrence Improves Masked Language Models" (Lei et al.):
``swishrnn_bert_*``. Trained with fairseq's stock ``masked_lm`` task.

"Our model is the same as BERT-rab except we replace every FFN block with SwishRNN" (§4): each
layer is relative-bias self-attention -> Add+Norm -> :class:`~fairseq_ext.modules.swish_rnn.SwishRNN`
(Eqs. 2-4) -> Add+Norm (post-LN, Appendix A), with the same dropout after the block as BERT's
FFN. The padding mask reaches the recurrence, so padding (left or right) never changes the
outputs at real positions.

* ``--encoder-ffn-embed-dim`` is SwishRNN's inner hidden size ``d'`` (Table 3, "Inner hidden
  size - SwishRNN"): 2048 for base and 2752 for large, which keeps the parameter count within
  1% of BERT-rab's (``3 d d' + 4 d' + d`` against the FFN's ``2 d F + F + d``). The small and
  tiny sizes take ``d' = (2 d F + F) / (3 d + 4)`` rounded to a multiple of 8, for the same reason.
* ``--swishrnn-step-sizes 1,2,4``: layer ``i`` uses step size ``k = sizes[i mod len(sizes)]``
  (§3 "Speeding up recurrence": "we interleave the step size k in {1, 2, 4} across recurrent
  layers"). ``--swishrnn-step-sizes 1`` is the slower all-k=1 model of Table 2.
* ``--swishrnn-direction forward`` (the paper's left-to-right recurrence; ``reverse`` and
  ``bidirectional``, half of the channels each way, are options beyond the paper).
"""
import dataclasses
from typing import Optional, Tuple

import torch
from fairseq.models import register_model
from fairseq.utils import safe_getattr
from torch import Tensor

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.models.bert_rab import (
    BertRabEncoder,
    BertRabModel,
    RelativeBiasEncoderLayer,
    RelativeBiasTransformerEncoder,
    bert_rab_architecture,
)
from fairseq_ext.models.sizes import ENCODER_SIZES, StackSize, register_sized_architecture
from fairseq_ext.modules.swish_rnn import DIRECTIONS, SwishRNN


def parse_step_sizes(text) -> Tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; a clear error for anything else."""
    error = ConfigError(f"--swishrnn-step-sizes must be a comma-separated list of integers >= 1, "
                        f"e.g. 1,2,4; got {text!r}")
    if isinstance(text, int):
        text = str(text)
    if isinstance(text, (list, tuple)):  # hydra may hand over a list
        text = ",".join(str(item) for item in text)
    try:
        sizes = tuple(int(item) for item in str(text).split(","))
    except ValueError:
        raise error from None
    if not sizes or any(size < 1 for size in sizes):
        raise error
    return sizes


class SwishRNNEncoderLayer(RelativeBiasEncoderLayer):
    """A BERT-rab layer whose FFN block is a :class:`SwishRNN` of inner size
    ``--encoder-ffn-embed-dim`` (its step size is set by the encoder)."""

    def __init__(self, args):
        super().__init__(args)
        self.swish_rnn = SwishRNN(self.embed_dim, args.encoder_ffn_embed_dim,
                                  direction=args.swishrnn_direction)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return None  # no FFN: SwishRNN takes its place

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return None

    # A copy of fairseq's TransformerEncoderLayerBase.forward, which runs fc1/fc2 inline: no hook
    # to replace the FFN block.
    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor],
                attn_mask: Optional[Tensor] = None) -> Tensor:
        """fairseq's encoder layer (Add+Norm after each block, or before with
        ``--encoder-normalize-before``) with SwishRNN, given the padding, in place of the FFN."""
        if attn_mask is not None:  # fairseq's convention: a boolean mask of forbidden pairs
            attn_mask = attn_mask.masked_fill(attn_mask.bool(), -1e8 if x.dtype == torch.float32
                                              else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=encoder_padding_mask,
                              need_weights=False, attn_mask=attn_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.swish_rnn(x, encoder_padding_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class SwishRNNTransformerEncoder(RelativeBiasTransformerEncoder):
    """The encoder stack; layer ``i`` runs its recurrence with step size
    ``sizes[i mod len(sizes)]`` of ``--swishrnn-step-sizes``."""

    layer_class = SwishRNNEncoderLayer

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        step_sizes = parse_step_sizes(args.swishrnn_step_sizes)
        for index, layer in enumerate(self.layers):
            layer.swish_rnn.step_size = step_sizes[index % len(step_sizes)]

    @property
    def step_sizes(self) -> Tuple[int, ...]:
        return tuple(layer.swish_rnn.step_size for layer in self.layers)


class SwishRNNBertEncoder(BertRabEncoder):
    transformer_class = SwishRNNTransformerEncoder


@register_model("swishrnn_bert")
class SwishRNNBertModel(BertRabModel):
    """SwishRNN-BERT (Lei et al., §4): BERT-rab with every FFN block replaced by SwishRNN."""

    encoder_class = SwishRNNBertEncoder

    @staticmethod
    def add_args(parser):
        BertRabModel.add_args(parser)
        parser.add_argument("--swishrnn-step-sizes", type=str, metavar="K1,K2,...",
                            help="recurrence step size of each layer, cycled over the layers "
                                 "(paper: 1,2,4); --encoder-ffn-embed-dim is SwishRNN's d'")
        parser.add_argument("--swishrnn-direction", choices=DIRECTIONS,
                            help="recurrence direction (paper: forward, left to right; "
                                 "bidirectional runs half of the channels each way)")

    @classmethod
    def set_defaults(cls, args):
        swishrnn_bert_architecture(args)

    @classmethod
    def validate(cls, args):
        super().validate(args)
        parse_step_sizes(args.swishrnn_step_sizes)
        if args.swishrnn_direction not in DIRECTIONS:
            raise ConfigError(f"--swishrnn-direction must be one of {', '.join(DIRECTIONS)}; got "
                              f"{args.swishrnn_direction!r}")


# --- architectures: Table 3 (d' 2048 / 2752); small and tiny for CPU demos and tests ------------

def matched_hidden_dim(dim: int, ffn_dim: int) -> int:
    """The SwishRNN ``d'`` whose block has about the parameters of a ``dim -> ffn_dim -> dim``
    FFN (``3 d d' + 4 d' + d ~ 2 d F + F + d``), rounded to a multiple of 8."""
    return max(8, round((2 * dim * ffn_dim + ffn_dim) / (3 * dim + 4) / 8) * 8)


#: Table 3's d' for base and large; small and tiny take :func:`matched_hidden_dim`.
SWISHRNN_HIDDEN_DIMS = {ENCODER_SIZES["base"]: 2048, ENCODER_SIZES["large"]: 2752}


def swishrnn_bert_architecture(args, size: StackSize = ENCODER_SIZES["base"]):
    """BERT-rab's defaults with ``--encoder-ffn-embed-dim`` = SwishRNN's ``d'`` (Table 3), step
    sizes 1,2,4 cycled over the layers, left-to-right recurrence."""
    hidden = SWISHRNN_HIDDEN_DIMS.get(size) or matched_hidden_dim(size.dim, size.ffn)
    args.swishrnn_step_sizes = safe_getattr(args, "swishrnn_step_sizes", "1,2,4")
    args.swishrnn_direction = safe_getattr(args, "swishrnn_direction", "forward")
    bert_rab_architecture(args, dataclasses.replace(size, ffn=hidden))


register_sized_architecture("swishrnn_bert", "swishrnn_bert", swishrnn_bert_architecture, "base")
for _size in ENCODER_SIZES:
    register_sized_architecture("swishrnn_bert", f"swishrnn_bert_{_size}",
                                swishrnn_bert_architecture, _size,
                                f" (bert_rab_{_size}'s size, SwishRNN in place of the FFN; d' per Table 3)")
