"""The custom op fairseq_ext::swish_recurrence (SwishRNN, Lei et al., Eq. 3): its CPU kernels
(vectorized fp32, exact fp64) against the pure-PyTorch reference, gradcheck, opcheck (contiguous
and transposed inputs), torch.compile (aot_eager and inductor), the fallback, and the CUDA
kernels (skipped without a GPU and a CUDA build)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from fairseq_ext.modules.swish_rnn import SwishRNN
from fairseq_ext.ops import swish_recurrence as ops
from fairseq_ext.ops.swish_recurrence import swish_recurrence, swish_recurrence_reference

native = pytest.mark.skipif(not ops.NATIVE_OP_AVAILABLE,
                            reason="fairseq_ext.ops._C not built (run make install)")


def _inputs(length, k_batch=3, hidden=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(length, k_batch, hidden, generator=g, dtype=dtype)
    alpha = (torch.rand(hidden, generator=g, dtype=dtype) + 0.5)
    beta = torch.randn(hidden, generator=g, dtype=dtype)
    return x1, alpha, beta


def test_fallback_warns_once_naming_the_implementation(caplog, monkeypatch):
    monkeypatch.setattr(ops, "NATIVE_OP_AVAILABLE", False)
    ops._warn_reference_in_use.cache_clear()
    with caplog.at_level("WARNING"):
        for _ in range(3):
            swish_recurrence(torch.zeros(2, 1, 3), torch.ones(3), torch.zeros(3))
    warnings = [r for r in caplog.records if "reference" in r.getMessage()]
    assert len(warnings) == 1 and "not built" in warnings[0].getMessage()


@native
def test_native_op_is_used_on_cpu_without_a_fallback_warning(caplog):
    ops._warn_reference_in_use.cache_clear()
    x1, alpha, beta = _inputs(5, dtype=torch.float32)
    with caplog.at_level("WARNING"):
        out = swish_recurrence(x1, alpha, beta, 2)
    assert not [r for r in caplog.records if "reference" in r.getMessage()]
    torch.testing.assert_close(out, torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, 2),
                               rtol=0, atol=0)


@native
@pytest.mark.parametrize("k, length", [(1, 9), (2, 9), (4, 9), (4, 3), (3, 11)])
def test_native_op_gradcheck_fp64(k, length):
    x1, alpha, beta = (t.requires_grad_() for t in _inputs(length))
    op = torch.ops.fairseq_ext.swish_recurrence
    assert torch.autograd.gradcheck(lambda a, b, c: op(a, b, c, k), (x1, alpha, beta))


DEVICES = [pytest.param(device, marks=pytest.mark.skipif(
    device not in ops.NATIVE_OP_DEVICES, reason=f"no {device} kernel built (or no GPU)"))
    for device in ("cpu", "cuda")]


@native
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_native_op_matches_reference(device, dtype, tol, k):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    x1, alpha, beta = (t.detach().to(device, dtype).requires_grad_()
                       for t in _inputs(10, 4, 6, torch.float32, k))
    out = torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, k)
    grad = torch.randn_like(out)
    out.backward(grad)
    native_grads = [t.grad.clone() for t in (x1, alpha, beta)]
    for t in (x1, alpha, beta):
        t.grad = None
    ref = swish_recurrence_reference(x1, alpha, beta, k)
    ref.backward(grad)
    torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol)
    for ours, theirs in zip(native_grads, (x1.grad, alpha.grad, beta.grad)):
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=tol * 5, atol=tol * 5)


@native
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_op_opcheck(layout, dtype):
    """torch.library.opcheck: schema, fake kernel (shapes and strides), autograd registration.
    A transposed x1 checks that the fake kernel reports the contiguous strides the real kernels
    return."""
    for k in (1, 3):
        x1, alpha, beta = (t.to(dtype) for t in _inputs(7))
        if layout == "transposed":  # (B, T, D) storage viewed as (T, B, D)
            x1 = x1.transpose(0, 1).contiguous().transpose(0, 1)
            assert not x1.is_contiguous()
        args = (x1.requires_grad_(), alpha.requires_grad_(), beta.requires_grad_(), k)
        torch.library.opcheck(torch.ops.fairseq_ext.swish_recurrence, args)


@native
def test_native_op_non_contiguous_input():
    base = torch.randn(3, 8, 5, dtype=torch.float64)  # (B, T, D): transposed view is (T, B, D)
    x1 = base.transpose(0, 1)
    assert not x1.is_contiguous()
    _, alpha, beta = _inputs(8)
    torch.testing.assert_close(torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, 2),
                               swish_recurrence_reference(x1.contiguous(), alpha, beta, 2))


@native
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_native_op_under_torch_compile_fullgraph(backend):
    """The layer compiles whole; with inductor the op's input is a non-contiguous chunk of the
    projection, so the fake kernel's strides must match the real output's."""
    torch._dynamo.reset()
    layer = SwishRNN(6, 8, step_size=2)
    x = torch.randn(7, 2, 6, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    out = compiled(x)
    out.sum().backward()
    compiled_grad = x.grad.clone()
    x.grad = None
    eager = layer(x)
    eager.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(compiled_grad, x.grad)


# --- CUDA only (skipped without a GPU and a CUDA build of the extension) --------------------------

cuda_kernel = pytest.mark.skipif(
    "cuda" not in ops.NATIVE_OP_DEVICES or not torch.cuda.is_available(),
    reason="no CUDA kernel built (or no GPU)")


@cuda_kernel
@pytest.mark.parametrize("k", [1, 2, 4])
def test_cuda_op_gradcheck_fp64(k):
    x1, alpha, beta = (t.cuda().requires_grad_() for t in _inputs(9, 3, 5, torch.float64, k))
    op = torch.ops.fairseq_ext.swish_recurrence
    assert torch.autograd.gradcheck(lambda a, b, c: op(a, b, c, k), (x1, alpha, beta))


@cuda_kernel
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 1e-2),
                                        (torch.bfloat16, 2e-2)])
def test_cuda_op_matches_cpu_op_at_odd_sizes(dtype, tol):
    """Sizes that are not multiples of a warp or a block, T not divisible by k; an odd and an
    even column count (fp16/bf16 then run two columns per thread)."""
    for k, batch in [(1, 5), (2, 5), (4, 5), (1, 4), (3, 4)]:
        x1, alpha, beta = _inputs(67, batch, 301, torch.float32, k)
        grad = torch.randn_like(x1)
        results = []
        for device in ("cpu", "cuda"):
            # detach: .to() of a tensor already of that device and dtype returns it itself
            inputs = [t.detach().to(device, dtype).requires_grad_() for t in (x1, alpha, beta)]
            out = torch.ops.fairseq_ext.swish_recurrence(*inputs, k)
            out.backward(grad.to(device, dtype))
            results.append([out.float().cpu()] + [t.grad.float().cpu() for t in inputs])
        for cpu, cuda in zip(*results):
            torch.testing.assert_close(cuda, cpu, rtol=tol, atol=tol * 5)


@cuda_kernel
def test_cuda_op_on_a_side_stream_and_in_a_cuda_graph():
    """The kernel runs on the caller's current stream, so a side stream and a captured CUDA
    graph (replayed on new data) give the reference's result."""
    x1, alpha, beta = (t.cuda() for t in _inputs(33, 4, 40, torch.float32, 2))
    expected = swish_recurrence_reference(x1, alpha, beta, 2)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, 2)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(on_side, expected)

    static_x1 = x1.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):  # warm up outside capture, as torch's CUDA-graph docs do
        torch.ops.fairseq_ext.swish_recurrence(static_x1, alpha, beta, 2)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        static_out = torch.ops.fairseq_ext.swish_recurrence(static_x1, alpha, beta, 2)
    new_x1 = torch.randn_like(x1)
    static_x1.copy_(new_x1)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, swish_recurrence_reference(new_x1, alpha, beta, 2))


@cuda_kernel
def test_cuda_layer_matches_cpu_layer_with_padding():
    torch.manual_seed(2)
    layer = SwishRNN(16, 24, step_size=4, direction="bidirectional")
    x = torch.randn(21, 3, 16)
    padding = torch.zeros(3, 21, dtype=torch.bool)
    padding[1, 15:] = True
    padding[2, :6] = True
    expected = layer(x, padding)
    got = layer.cuda()(x.cuda(), padding.cuda())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


KERNEL_CHECK = """
import json, sys, torch
from fairseq_ext.ops import _C
from fairseq_ext.ops.swish_recurrence import swish_recurrence_reference
torch.manual_seed(0)
errors = []
for k in (1, 2, 4):
    # 37 channels x 3: row segments that are not multiples of 8 or 16 lanes (the tails)
    x1 = torch.randn(29, 3, 37, requires_grad=True)
    alpha = (torch.rand(37) + 0.5).requires_grad_()
    beta = torch.randn(37, requires_grad=True)
    grad = torch.randn(29, 3, 37)
    ours = torch.autograd.grad(torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, k),
                               (x1, alpha, beta), grad)
    ref_out = swish_recurrence_reference(x1, alpha, beta, k)
    theirs = torch.autograd.grad(ref_out, (x1, alpha, beta), grad)
    out = torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, k)
    errors.append(max([(out - ref_out).abs().max().item()]
                      + [((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours, theirs)]))
print(json.dumps({"kernels": _C.cpu_kernels(), "error": max(errors)}))
"""


@native
@pytest.mark.parametrize("cap, expected", [("", None), ("avx2", "AVX2"), ("portable", "portable")])
def test_every_cpu_kernel_build_matches_the_reference(cap, expected):
    """The widest kernels this CPU runs, and the capped AVX2 and portable builds
    (FAIRSEQ_EXT_CPU_KERNELS), each against the reference, forward and gradients."""
    proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], capture_output=True, text=True,
                          env=dict(os.environ, FAIRSEQ_EXT_CPU_KERNELS=cap), check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if expected == "AVX2" and result["kernels"] == "portable":
        pytest.skip("this CPU has no AVX2+FMA")
    if expected is not None:
        assert result["kernels"] == expected
    assert result["error"] < 1e-5, result
