"""Optimizers registered with fairseq's ``--optimizer``."""
from fairseq_ext.optim import fused_adamw  # noqa: F401
