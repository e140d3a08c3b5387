"""Python side of the custom ops of ``fairseq_ext/csrc`` (loading, fake kernels, autograd), as
pytorch/extension-cpp lays it out: one module per op, the op's pure-PyTorch reference beside it."""
from fairseq_ext.ops import swish_recurrence  # noqa: F401  (registers fake kernels and autograd)
