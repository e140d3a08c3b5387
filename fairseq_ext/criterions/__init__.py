"""Criteria registered with fairseq's ``--criterion``."""
from fairseq_ext.criterions import masked_lm_categories  # noqa: F401
