"""Models and architectures (one module per family; architectures registered at the bottom)."""
from fairseq_ext.models import roberta_sizes, three_ml  # noqa: F401
