"""Models and architectures (one module per family; architectures registered at the bottom)."""
from fairseq_ext.models import bert_rab, roberta_sizes, swishrnn_bert, three_ml  # noqa: F401
