"""SwishRNN (Lei et al., Eqs. 2-4): the reference recurrence against a per-position loop,
gradients, step sizes, the layer, padding on either side, sizes and bad input. The custom op
(fairseq_ext::swish_recurrence) is tested in test_swish_recurrence_op.py."""
import pytest
import torch
import torch.nn.functional as F

from fairseq_ext.modules.swish_rnn import DIRECTIONS, SwishRNN, parameter_count
from fairseq_ext.ops.swish_recurrence import swish_recurrence, swish_recurrence_reference


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
