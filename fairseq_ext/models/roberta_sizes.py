"""Sizes of fairseq's own ``roberta`` model for CPU demos and tests, and 24hBERT's pre-LN
large (:data:`~fairseq_ext.models.sizes.ENCODER_SIZES`).

The model is fairseq's :class:`fairseq.models.roberta.RobertaModel` unchanged; only the default
dimensions differ. As with every fairseq architecture, flags given on the command line or in a
hydra config win over these defaults.
"""
from fairseq.models.roberta.model import base_architecture
from fairseq.utils import safe_getattr

from fairseq_ext.models.sizes import register_sized_architecture, set_stack_size


def roberta_size_defaults(args, size) -> None:
    """``size``'s encoder, then fairseq's RoBERTa defaults."""
    set_stack_size(args, "encoder", size)
    base_architecture(args)


def roberta_prenorm_size_defaults(args, size) -> None:
    """RoBERTa with pre-LN (no embedding LayerNorm), as 24hBERT (Izsak et al., 2021) and
    3ML-large use it."""
    args.encoder_normalize_before = safe_getattr(args, "encoder_normalize_before", True)
    args.layernorm_embedding = safe_getattr(args, "layernorm_embedding", False)
    roberta_size_defaults(args, size)


register_sized_architecture("roberta", "roberta_small", roberta_size_defaults, "small",
                            " (fairseq's roberta)")
register_sized_architecture("roberta", "roberta_mini", roberta_size_defaults, "mini",
                            " (fairseq's roberta; the make demo size)")
register_sized_architecture("roberta", "roberta_mini_prenorm", roberta_prenorm_size_defaults,
                            "mini", ", pre-LN (the make demo baseline, as 3ML's demo runs)")
register_sized_architecture("roberta", "roberta_tiny", roberta_size_defaults, "tiny",
                            " (fairseq's roberta)")
register_sized_architecture("roberta", "roberta_large_prenorm", roberta_prenorm_size_defaults,
                            "large", ", pre-LN (24hBERT)")
