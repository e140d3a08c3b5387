"""Criteria registered with fairseq's ``--criterion``."""
from fairseq_ext.criterions import (  # noqa: F401
    bidirectional_lm,
    masked_lm_categories,
    masked_lm_flops,
)
