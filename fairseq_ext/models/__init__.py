"""Models and architectures (one module per family; architectures registered at the bottom)."""
from fairseq_ext.models import (  # noqa: F401
    bert_rab,
    bidirectional_lm,
    roberta_sizes,
    swishrnn_bert,
    three_ml,
)
