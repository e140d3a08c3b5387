"""Optimizers registered with fairseq's ``--optimizer``: ``fused_adamw`` (apex's fused Adam
where installed, else ``torch.optim.AdamW(fused=True)``; the choice is
:mod:`fairseq_ext.training.fused_kernels`'s). May import: training.
"""
from fairseq_ext.optim import fused_adamw  # noqa: F401
