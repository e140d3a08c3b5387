"""Criteria registered with fairseq's ``--criterion``."""
from fairseq_ext.criterions import masked_lm_categories, masked_lm_flops  # noqa: F401
