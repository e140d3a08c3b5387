"""Python side of the custom ops of ``fairseq_ext/ops/csrc`` (loading, fake kernels, autograd), as
pytorch/extension-cpp lays it out: one module per op, the op's pure-PyTorch reference beside it.

May import: nothing of fairseq_ext but its own native module ``fairseq_ext.ops._C``.
"""
from fairseq_ext.ops import swish_recurrence  # noqa: F401  (registers fake kernels and autograd)
