"""SwishRNN (Lei et al., Eqs. 2-4): the reference recurrence against a per-position loop,
gradients, step sizes, padding on either side, sizes and bad input."""
import pytest
import torch
import torch.nn.functional as F

from fairseq_ext.modules.swish_rnn import (
    DIRECTIONS, SwishRNN, parameter_count, swish_recurrence, swish_recurrence_reference)


def naive_recurrence(x1, alpha, beta, k):
    """Eq. 3 one position at a time: c[i] = Swish(c[i-k] - x1[i]) + x1[i], c[i<0] = 0."""
    c = []
    for i in range(x1.size(0)):
        previous = c[i - k] if i - k >= 0 else torch.zeros_like(x1[i])
        z = previous - x1[i]
        c.append(torch.sigmoid(alpha * z + beta) * z + x1[i])
    return torch.stack(c)


@pytest.mark.parametrize("k, length", [(1, 7), (2, 7), (4, 7), (4, 9), (3, 2), (5, 5)])
def test_reference_equals_per_position_loop(k, length):
    g = torch.Generator().manual_seed(k * 10 + length)
    x1 = torch.randn(length, 3, 5, generator=g, dtype=torch.float64)
    alpha = torch.rand(5, generator=g, dtype=torch.float64) + 0.5
    beta = torch.randn(5, generator=g, dtype=torch.float64)
    torch.testing.assert_close(swish_recurrence_reference(x1, alpha, beta, k),
                               naive_recurrence(x1, alpha, beta, k), rtol=0, atol=1e-12)


def test_step_size_k_makes_k_independent_chains():
    """With k = 2, even and odd positions are two separate k = 1 recurrences."""
    x1 = torch.randn(8, 2, 4, dtype=torch.float64)
    alpha, beta = torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    c = swish_recurrence_reference(x1, alpha, beta, 2)
    for parity in (0, 1):
        torch.testing.assert_close(c[parity::2], swish_recurrence_reference(x1[parity::2], alpha, beta, 1))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_reference_gradcheck(k):
    x1 = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    alpha = (torch.rand(3, dtype=torch.float64) + 0.5).requires_grad_()
    beta = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: swish_recurrence_reference(a, b, c, k),
                                    (x1, alpha, beta))


def test_bf16_input_accumulates_in_fp32():
    x1 = torch.randn(16, 2, 8)
    alpha, beta = torch.ones(8), torch.zeros(8)
    out = swish_recurrence_reference(x1.bfloat16(), alpha.bfloat16(), beta.bfloat16(), 2)
    assert out.dtype == torch.bfloat16
    expected = swish_recurrence_reference(x1.bfloat16().float(), alpha, beta, 2)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_layer_matches_equations_2_to_4(k):
    torch.manual_seed(0)
    layer = SwishRNN(6, 10, step_size=k).double()
    with torch.no_grad():
        layer.alpha.uniform_(0.5, 1.5)
        layer.beta.normal_()
        layer.bias_c.normal_()
        layer.bias_sigma.normal_()
    x = torch.randn(7, 2, 6, dtype=torch.float64)
    w1, w2 = layer.in_proj.weight[:10], layer.in_proj.weight[10:]
    c = naive_recurrence(x @ w1.T, layer.alpha, layer.beta, k)
    h = ((c + layer.bias_c) * F.gelu(x @ w2.T + layer.bias_sigma)) @ layer.out_proj.weight.T \
        + layer.out_proj.bias
    torch.testing.assert_close(layer(x), h)


@pytest.mark.parametrize("k", [1, 2])
def test_reverse_and_bidirectional_directions(k):
    """reverse: Eq. 3 right to left; bidirectional: first d'/2 channels forward, rest reverse."""
    torch.manual_seed(5)
    x1 = torch.randn(7, 3, 9, dtype=torch.float64)
    alpha = torch.rand(9, dtype=torch.float64) + 0.5
    beta = torch.randn(9, dtype=torch.float64)
    forward = naive_recurrence(x1, alpha, beta, k)
    backward = naive_recurrence(x1.flip(0), alpha, beta, k).flip(0)
    layers = {d: SwishRNN(2, 9, step_size=k, direction=d) for d in DIRECTIONS}
    torch.testing.assert_close(layers["forward"].recurrence(x1, alpha, beta), forward)
    torch.testing.assert_close(layers["reverse"].recurrence(x1, alpha, beta), backward)
    both = layers["bidirectional"].recurrence(x1, alpha, beta)
    torch.testing.assert_close(both[..., :4], forward[..., :4])
    torch.testing.assert_close(both[..., 4:], backward[..., 4:])


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_padding_does_not_change_real_positions(k, side, direction):
    torch.manual_seed(1)
    layer = SwishRNN(4, 8, step_size=k, direction=direction).double()
    with torch.no_grad():
        layer.beta.normal_()
    lengths = [7, 4, 2]
    width = max(lengths)
    x = torch.randn(width, len(lengths), 4, dtype=torch.float64)
    padding = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if side == "left":
            padding[b, : width - n] = True
        else:
            padding[b, n:] = True
    out = layer(x, padding)
    for b, n in enumerate(lengths):
        real = ~padding[b]
        alone = layer(x[real, b : b + 1])  # the sequence without any padding
        torch.testing.assert_close(out[real, b], alone[:, 0])


def test_parameter_count_matches_a_bert_ffn_within_one_percent():
    for d, d_hidden, ffn in [(768, 2048, 3072), (1024, 2752, 4096)]:
        layer = SwishRNN(d, d_hidden)
        assert sum(p.numel() for p in layer.parameters()) == parameter_count(d, d_hidden)
        ffn_params = 2 * d * ffn + ffn + d
        assert abs(parameter_count(d, d_hidden) - ffn_params) / ffn_params < 0.01


@pytest.mark.parametrize("make_call, message", [
    (lambda: SwishRNN(4, 8, step_size=0), "step_size"),
    (lambda: SwishRNN(4, 0), "hidden_dim"),
    (lambda: SwishRNN(4, 8, direction="sideways"), "direction must be one of"),
    (lambda: swish_recurrence(torch.zeros(3, 4), torch.ones(4), torch.zeros(4)), "rank 3"),
    (lambda: swish_recurrence(torch.zeros(3, 2, 4), torch.ones(4).double(), torch.zeros(4)), "dtype"),
    (lambda: swish_recurrence(torch.zeros(3, 2, 4), torch.ones(5), torch.zeros(5)), "size d'"),
    (lambda: swish_recurrence(torch.zeros(3, 2, 4), torch.ones(4), torch.zeros(4), 0), "step_size"),
])
def test_bad_input_gets_a_clear_error(make_call, message):
    with pytest.raises(ValueError, match=message):
        make_call()


def test_fallback_warns_once_naming_the_implementation(caplog, monkeypatch):
    from fairseq_ext.modules import swish_rnn

    monkeypatch.setattr(swish_rnn, "NATIVE_OP_AVAILABLE", False)
    swish_rnn._warn_reference_in_use.cache_clear()
    with caplog.at_level("WARNING"):
        for _ in range(3):
            swish_recurrence(torch.zeros(2, 1, 3), torch.ones(3), torch.zeros(3))
    warnings = [r for r in caplog.records if "reference" in r.getMessage()]
    assert len(warnings) == 1 and "not built" in warnings[0].getMessage()


# --- the custom op: fairseq_ext::swish_recurrence (CPU kernels) ---------------------------------

from fairseq_ext.modules import swish_rnn as _swish_rnn  # noqa: E402

native = pytest.mark.skipif(not _swish_rnn.NATIVE_OP_AVAILABLE,
                            reason="fairseq_ext._C not built (run make install)")


def _inputs(length, k_batch=3, hidden=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(length, k_batch, hidden, generator=g, dtype=dtype)
    alpha = (torch.rand(hidden, generator=g, dtype=dtype) + 0.5)
    beta = torch.randn(hidden, generator=g, dtype=dtype)
    return x1, alpha, beta


@native
def test_native_op_is_used_on_cpu_without_a_fallback_warning(caplog):
    _swish_rnn._warn_reference_in_use.cache_clear()
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
    device not in _swish_rnn.NATIVE_OP_DEVICES, reason=f"no {device} kernel built (or no GPU)"))
    for device in ("cpu", "cuda")]


@native
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_native_op_matches_reference(device, dtype, tol, k):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    x1, alpha, beta = (t.to(device, dtype).requires_grad_()
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
def test_native_op_opcheck():
    for k in (1, 3):
        x1, alpha, beta = (t.float().requires_grad_() for t in _inputs(7))
        torch.library.opcheck(torch.ops.fairseq_ext.swish_recurrence, (x1, alpha, beta, k))


@native
def test_native_op_non_contiguous_input():
    base = torch.randn(3, 8, 5, dtype=torch.float64)  # (B, T, D): transposed view is (T, B, D)
    x1 = base.transpose(0, 1)
    assert not x1.is_contiguous()
    _, alpha, beta = _inputs(8)
    torch.testing.assert_close(torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, 2),
                               swish_recurrence_reference(x1.contiguous(), alpha, beta, 2))


@native
def test_native_op_under_torch_compile_fullgraph():
    layer = SwishRNN(6, 8, step_size=2)
    x = torch.randn(7, 2, 6, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
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
    "cuda" not in _swish_rnn.NATIVE_OP_DEVICES or not torch.cuda.is_available(),
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
    """Sizes that are not multiples of a warp or a block, T not divisible by k."""
    for k in (1, 2, 4):
        x1, alpha, beta = _inputs(67, 5, 301, torch.float32, k)
        grad = torch.randn_like(x1)
        results = []
        for device in ("cpu", "cuda"):
            inputs = [t.to(device, dtype).requires_grad_() for t in (x1, alpha, beta)]
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
