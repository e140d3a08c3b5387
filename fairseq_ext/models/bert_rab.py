"""The BERT baselines of "Simple Recurrence Improves Masked Language Models" (Lei et al., §4):
``bert_orig_*`` and ``bert_rab_*``. Trained with fairseq's stock ``masked_lm`` task.

* **BERT-orig** is "the original BERT model using the multi-head attention described in
  Vaswani et al. (2017) and learned absolute positional encoding": that is fairseq's own
  ``roberta`` model (post-LN, GeLU, learned positions, LayerNorm on the embeddings), so
  ``bert_orig_*`` are architectures of ``roberta`` with Appendix B, Table 3's sizes. (BERT's
  segment embeddings and next-sentence objective are not part of the comparison; RoBERTa
  dropped them and so does the paper's MLM-only pre-training.)
* **BERT-rab** "adds the relative attention bias to each attention layer, following the T5
  model": the same model with :class:`~fairseq_ext.modules.relative_attention.RelativeBiasSelfAttention`
  in every layer (bidirectional buckets, ``--rab-num-buckets 32``, ``--rab-max-distance 128``
  by default). The learned absolute positions stay, as "adds" says; T5 itself has none, and
  ``--no-token-positional-embeddings`` drops them. The bias table is per layer by default
  (the paper's "each attention layer"); ``--rab-shared-across-layers`` shares one table as T5
  does.

Parameter names are fairseq's RoBERTa names plus ``self_attn.position_bias.*``, so fairseq's
``sentence_prediction`` task fine-tunes these models unchanged (``--arch bert_rab_base
--restore-file ...``).
"""
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.roberta.model import RobertaEncoder, RobertaModel
from fairseq.models.transformer import TransformerEncoder
from fairseq.modules import TransformerEncoderLayer
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr, safe_hasattr
from omegaconf import OmegaConf

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.models.dictionary_check import DictionaryCheckedLoading
from fairseq_ext.models.roberta_pooled import (
    PooledClassificationMixin,
    add_pooling_args,
    set_finetuning_defaults,
)
from fairseq_ext.models.roberta_sizes import roberta_size_defaults
from fairseq_ext.models.sizes import ENCODER_SIZES, StackSize, register_sized_architecture
from fairseq_ext.models.validation import check_attention_heads
from fairseq_ext.modules.relative_attention import RelativeBiasSelfAttention, check_bucket_config


def validate_bert_config(args) -> None:
    """Clear errors, before anything is built, for sizes the encoder cannot take."""
    check_attention_heads(args)
    for flag in ("encoder_layers", "encoder_ffn_embed_dim"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1; got "
                              f"{getattr(args, flag)}")


class RelativeBiasEncoderLayer(TransformerEncoderLayer):
    """fairseq's encoder layer whose self-attention adds a T5 relative position bias."""

    def __init__(self, args):
        # read by build_self_attention, which fairseq's __init__ calls with a TransformerConfig
        # that does not carry our flags
        self.rab_num_buckets = args.rab_num_buckets
        self.rab_max_distance = args.rab_max_distance
        super().__init__(args)

    def build_self_attention(self, embed_dim, cfg):
        return RelativeBiasSelfAttention(
            embed_dim, cfg.encoder.attention_heads, dropout=cfg.attention_dropout,
            num_buckets=self.rab_num_buckets, max_distance=self.rab_max_distance,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )


class RelativeBiasTransformerEncoder(TransformerEncoder):
    """fairseq's ``TransformerEncoder`` built from :attr:`layer_class` layers, the relative
    bias table shared by all of them when ``--rab-shared-across-layers`` (T5)."""

    layer_class = RelativeBiasEncoderLayer

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        if args.rab_shared_across_layers:
            shared = self.layers[0].self_attn.position_bias
            for layer in self.layers[1:]:
                layer.self_attn.position_bias = shared

    # A copy of fairseq's TransformerEncoderBase.build_encoder_layer, which names its layer class.
    def build_encoder_layer(self, cfg):
        """As fairseq's, with our layer: activation checkpointing and FSDP wrapping honoured."""
        layer = self.layer_class(self.args)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class BertRabEncoder(RobertaEncoder):
    """RoBERTa's encoder (embeddings, LM head) around a :class:`RelativeBiasTransformerEncoder`."""

    transformer_class = RelativeBiasTransformerEncoder

    # A copy of fairseq's RobertaEncoder.build_encoder, which names TransformerEncoder.
    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = self.transformer_class(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder


@register_model("bert_rab")
class BertRabModel(DictionaryCheckedLoading, PooledClassificationMixin, RobertaModel):
    """BERT-rab (Lei et al., §4): BERT with a T5 relative attention bias in every layer."""

    encoder_class = BertRabEncoder

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        add_pooling_args(parser)
        parser.add_argument("--rab-num-buckets", type=int, metavar="N",
                            help="relative position buckets, half per direction (T5: 32)")
        parser.add_argument("--rab-max-distance", type=int, metavar="N",
                            help="distance from which all offsets share a bucket (T5: 128)")
        parser.add_argument("--rab-shared-across-layers", action="store_true",
                            help="one bias table for all layers, as T5 (default: one per layer)")
        parser.add_argument("--no-token-positional-embeddings", action="store_true",
                            help="drop the learned absolute positions (relative bias only)")

    @classmethod
    def set_defaults(cls, args):
        bert_rab_architecture(args)

    @classmethod
    def validate(cls, args):
        validate_bert_config(args)
        check_bucket_config(args.rab_num_buckets, args.rab_max_distance)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        cls.set_defaults(args)
        cls.validate(args)
        if not safe_hasattr(args, "max_positions"):
            if not safe_hasattr(args, "tokens_per_sample"):
                args.tokens_per_sample = task.max_positions()
            args.max_positions = args.tokens_per_sample
        encoder = cls.encoder_class(args, task.source_dictionary)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, encoder)


# --- architectures (Table 3 sizes; small and tiny for CPU demos and tests) ----------------------

def bert_rab_architecture(args, size: StackSize = ENCODER_SIZES["base"]):
    """T5 bias defaults (``--rab-num-buckets 32``, ``--rab-max-distance 128``, a table per
    layer), then ``size`` and RoBERTa's BERT defaults: post-LN, GeLU, learned positions,
    dropout 0.1 (Table 3). Only where not set: CLI and hydra overrides win."""
    args.rab_num_buckets = safe_getattr(args, "rab_num_buckets", 32)
    args.rab_max_distance = safe_getattr(args, "rab_max_distance", 128)
    args.rab_shared_across_layers = safe_getattr(args, "rab_shared_across_layers", False)
    set_finetuning_defaults(args)
    roberta_size_defaults(args, size)


register_sized_architecture("bert_rab", "bert_rab", bert_rab_architecture, "base")
for _size in ENCODER_SIZES:
    register_sized_architecture("roberta", f"bert_orig_{_size}", roberta_size_defaults, _size,
                                " (BERT-orig: fairseq's roberta)")
    # the same encoder whose classification heads may pool the mean (--classification-pooling)
    register_sized_architecture("roberta_pooled", f"bert_orig_pooled_{_size}",
                                roberta_size_defaults, _size,
                                " (BERT-orig on roberta_pooled: --classification-pooling)")
    register_sized_architecture("bert_rab", f"bert_rab_{_size}", bert_rab_architecture, _size)
