"""Small sizes of fairseq's own ``roberta`` model, for CPU demos and tests.

The model is fairseq's :class:`fairseq.models.roberta.RobertaModel` unchanged; only the default
dimensions differ. As with every fairseq architecture, flags given on the command line or in a
hydra config win over these defaults.
"""
from fairseq.models import register_model_architecture
from fairseq.models.roberta.model import base_architecture
from fairseq.utils import safe_getattr


def _set_encoder_size(args, layers, embed_dim, ffn_dim, heads):
    args.encoder_layers = safe_getattr(args, "encoder_layers", layers)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", embed_dim)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", ffn_dim)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", heads)
    base_architecture(args)


@register_model_architecture("roberta", "roberta_small")
def roberta_small_architecture(args):
    """4 layers, dim 256, FFN 1024, 4 heads (about 3M non-embedding parameters)."""
    _set_encoder_size(args, layers=4, embed_dim=256, ffn_dim=1024, heads=4)


@register_model_architecture("roberta", "roberta_large_prenorm")
def roberta_large_prenorm_architecture(args):
    """RoBERTa-large with pre-LN, as 24hBERT (Izsak et al., 2021) and 3ML-large use it."""
    args.encoder_normalize_before = safe_getattr(args, "encoder_normalize_before", True)
    args.layernorm_embedding = safe_getattr(args, "layernorm_embedding", False)
    _set_encoder_size(args, layers=24, embed_dim=1024, ffn_dim=4096, heads=16)


@register_model_architecture("roberta", "roberta_tiny")
def roberta_tiny_architecture(args):
    """2 layers, dim 64, FFN 256, 2 heads: for tests."""
    _set_encoder_size(args, layers=2, embed_dim=64, ffn_dim=256, heads=2)
