"""The SwishRNN CUDA kernels (``fairseq_ext/ops/csrc/swish_recurrence_kernels.cu``), line by line, on
the CPU: the .cu as committed and its torch binding compiled as plain C++ against a shim of CUDA
(``tests/cuda_host/``, built by ``tests/cuda_host_emulation.py``), each grid run as a loop over
(block, thread). Checked against the pure-PyTorch reference and the CPU op in fp64 (to 1e-12),
fp32, fp16 and bf16 with the GPU tests' tolerances, for k = 1..4, T = 0, T < k and T not a multiple
of k, column counts that leave the last block part empty, and non-contiguous inputs through the
binding; every output element written exactly once and nothing around it, threads independent of
one another, launches on the caller's stream with a grid that covers every item; fp16/bf16 with
two columns per thread (even column counts, aligned arrays) bit for bit as with one. With a GPU,
the CUDA op is compared with what the emulation predicts."""
import json
import os
import re

import cuda_host_emulation
import pytest
import torch

from fairseq_ext.ops import swish_recurrence as swish_ops
from fairseq_ext.ops.swish_recurrence import swish_recurrence_reference

native = pytest.mark.skipif(not swish_ops.NATIVE_OP_AVAILABLE,
                            reason="fairseq_ext.ops._C not built (run make install)")
cuda_kernel = pytest.mark.skipif(
    "cuda" not in swish_ops.NATIVE_OP_DEVICES or not torch.cuda.is_available(),
    reason="no CUDA kernel built (or no GPU)")

#: rtol of tests/test_swish_recurrence_op.py's CUDA tests (fp64: 1e-12);
#: against the CPU op atol = 5 rtol, as test_cuda_op_matches_cpu_op_at_odd_sizes.
TOLERANCES = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-2,
              torch.bfloat16: 2e-2}
DTYPES = list(TOLERANCES)
BATCH, HIDDEN = 5, 61  # 305 columns: k * 305 items never fill the last block of 256 threads
#: 244 columns, an even count: fp16/bf16 run two columns per thread (the packed kernels), and
#: k * 122 threads never fill the last block either
EVEN_BATCH = 4
HALF_DTYPES = [torch.float16, torch.bfloat16]
COLUMNS_ENV = swish_ops.COLUMNS_PER_THREAD_ENV  # "1": one column per thread for every dtype


@pytest.fixture(scope="module")
def emulation():
    return cuda_host_emulation.load()


def lengths_for(k: int) -> list:
    """T = 0, T < k, T = k + 1 and 67: the last two not multiples of k (for k > 1)."""
    return sorted({0, k - 1, k + 1, 67})


def recurrence_inputs(length, dtype, seed, batch=BATCH, hidden=HIDDEN):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(length, batch, hidden, generator=g, dtype=torch.float64)
    alpha = torch.rand(hidden, generator=g, dtype=torch.float64) + 0.5
    beta = torch.randn(hidden, generator=g, dtype=torch.float64)
    grad = torch.randn(length, batch, hidden, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (x1, alpha, beta, grad))


def emulated(emulation, x1, alpha, beta, grad, k):
    """(c, grad_x1, grad_alpha, grad_beta) of the emulated CUDA kernels through the binding."""
    c = emulation.swish_recurrence(x1, alpha, beta, k)
    return (c, *emulation.swish_recurrence_backward(grad, x1, c, alpha, beta, k))


def cpu_op(x1, alpha, beta, grad, k):
    c = torch.ops.fairseq_ext.swish_recurrence(x1, alpha, beta, k)
    return (c, *torch.ops.fairseq_ext.swish_recurrence_backward(grad, x1, c, alpha, beta, k))


def reference(x1, alpha, beta, grad, k):
    inputs = [t.detach().requires_grad_() for t in (x1, alpha, beta)]
    c = swish_recurrence_reference(*inputs, k)
    if c.numel() == 0:  # nothing to differentiate: zero gradients
        return (c, *(torch.zeros_like(t) for t in inputs))
    return (c.detach(), *torch.autograd.grad(c, inputs, grad))


NAMES = ("c", "grad_x1", "grad_alpha", "grad_beta")


def assert_all_close(ours, theirs, rtol, atol, what, names=NAMES):
    for name, a, b in zip(names, ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (what, name)
        torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{what}, {name}: {m}")


GUARD = 2048  # guard elements before and after every array: more than k = 4 rows of columns


def guarded(values: torch.Tensor, fill: float) -> torch.Tensor:
    """A flat buffer: GUARD elements of ``fill``, ``values``, GUARD elements of ``fill``."""
    flat = values.reshape(-1)
    buffer = torch.full((flat.numel() + 2 * GUARD,), fill, dtype=values.dtype)
    buffer[GUARD:GUARD + flat.numel()] = flat
    return buffer


def check_written(buffer, before, count, what):
    """The guards are as they were (nothing written outside), and each of the ``count`` elements
    between them was written (none still holds the fill, none NaN: read from an input guard)."""
    assert torch.equal(buffer[:GUARD], before[:GUARD]), f"{what}: written before its start"
    assert torch.equal(buffer[GUARD + count:], before[GUARD + count:]), f"{what}: written past its end"
    inside, fill = buffer[GUARD:GUARD + count], before[0]
    assert not torch.isnan(inside).any(), f"{what}: NaN inside (read outside an input?)"
    assert not (inside == fill).any(), f"{what}: elements never written"


@pytest.mark.parametrize("batch", [BATCH, EVEN_BATCH])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernels_write_every_element_once_and_nothing_else(emulation, dtype, batch):
    """The raw launchers on buffers with guard elements on both sides: the inputs' guards are
    NaN (a read outside an input makes NaNs), the outputs' guards and insides a fill value (a
    write outside an output, or an element left unwritten, shows). The insides equal what the
    binding returns; the per-item alpha/beta partial sums, all k * columns of them, sum to its
    alpha/beta gradients. With an even column count, fp16/bf16 run the packed kernels. (The
    guarded launches come first: an out-of-bounds write through the binding's unguarded buffers
    could corrupt the heap before any check.)"""
    acc_dtype = torch.float64 if dtype is torch.float64 else torch.float32
    fill, nan = -1234.5, float("nan")
    for k, length in [(1, 67), (3, 67), (4, 2), (2, 0)]:
        what = f"k={k}, T={length}"
        x1, alpha, beta, grad = recurrence_inputs(length, dtype, seed=k, batch=batch)
        x1_b, alpha_b, beta_b, grad_b = (guarded(t, nan) for t in (x1, alpha, beta, grad))
        c_b = guarded(torch.empty_like(x1), fill)
        c_before = c_b.clone()
        error = emulation.launch_forward(x1_b, alpha_b, beta_b, c_b, GUARD, length, batch,
                                         HIDDEN, k)
        assert error == 0
        check_written(c_b, c_before, x1.numel(), f"c, {what}")
        c = c_b[GUARD:GUARD + x1.numel()].view(x1.shape)

        c_in = guarded(c, nan)
        gx_b = guarded(torch.empty_like(x1), fill)
        items = torch.empty(k * batch * HIDDEN, dtype=acc_dtype)
        ga_b, gb_b = guarded(items, fill), guarded(items, fill)
        before = [b.clone() for b in (gx_b, ga_b, gb_b)]
        error = emulation.launch_backward(grad_b, x1_b, c_in, alpha_b, beta_b, gx_b, ga_b, gb_b,
                                          GUARD, length, batch, HIDDEN, k)
        assert error == 0
        for name, buffer, old, count in [("grad_x1", gx_b, before[0], x1.numel()),
                                         ("grad_alpha_items", ga_b, before[1], items.numel()),
                                         ("grad_beta_items", gb_b, before[2], items.numel())]:
            check_written(buffer, old, count, f"{name}, {what}")

        c_ref, gx_ref, ga_ref, gb_ref = emulated(emulation, x1, alpha, beta, grad, k)
        assert torch.equal(c, c_ref)
        assert torch.equal(gx_b[GUARD:GUARD + x1.numel()], gx_ref.reshape(-1))
        for buffer, expected in [(ga_b, ga_ref), (gb_b, gb_ref)]:
            sums = buffer[GUARD:GUARD + items.numel()].view(k, batch, HIDDEN).sum((0, 1))
            assert torch.equal(sums.to(dtype), expected)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_emulated_kernels_match_the_reference(emulation, dtype, k):
    """Forward and backward (through autograd of the reference), with the tolerances of
    test_native_op_matches_reference: rtol = atol = tol for c, 5 tol for the gradients."""
    tol = TOLERANCES[dtype]
    for length in lengths_for(k):
        inputs = recurrence_inputs(length, dtype, seed=10 * k + length)
        ours, theirs = emulated(emulation, *inputs, k), reference(*inputs, k)
        what = f"{dtype}, k={k}, T={length}"
        assert_all_close(ours[:1], theirs[:1], tol, tol, what)
        grad_tol = tol if dtype is torch.float64 else 5 * tol
        assert_all_close(ours[1:], theirs[1:], grad_tol, grad_tol, what, NAMES[1:])
        if length <= k:  # at most one step per chain: c[t] = Swish(-x1[t]) + x1[t]
            x = inputs[0].double()
            z = -x
            expected = torch.sigmoid(inputs[1].double() * z + inputs[2].double()) * z + x
            torch.testing.assert_close(ours[0].double(), expected, rtol=tol, atol=tol)


@native
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_emulated_kernels_match_the_cpu_op(emulation, dtype, k):
    """As test_cuda_op_matches_cpu_op_at_odd_sizes compares the CUDA op with the CPU op:
    rtol = tol, atol = 5 tol (fp64: 1e-12)."""
    tol = TOLERANCES[dtype]
    atol = tol if dtype is torch.float64 else 5 * tol
    for length in lengths_for(k):
        inputs = recurrence_inputs(length, dtype, seed=10 * k + length + 1)
        ours, theirs = emulated(emulation, *inputs, k), cpu_op(*inputs, k)
        what = f"{dtype}, k={k}, T={length}"
        assert_all_close(ours, theirs, tol, atol, what)
        if dtype in (torch.float16, torch.bfloat16) and length > 0:
            # Both compute in fp32 and round once to 16 bits (to nearest even): only where the
            # fp32 results straddle a rounding boundary (their exps differ in the last bits)
            # can they differ. Tolerances alone would let a wrong rounding through (bf16
            # precision in an fp16 output is within fp16's tolerance).
            for name, a, b in zip(NAMES[:2], ours, theirs):
                identical = (a == b).double().mean().item()
                assert identical >= 0.99, f"{what}, {name}: {identical:.2%} bit-identical"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_inputs_through_the_binding(emulation, dtype):
    """The binding makes x1, alpha, beta, c and grad_c contiguous (and grad_c of x1's dtype)
    before it hands raw pointers to the launchers: strided views give the results of their
    contiguous copies, bit for bit."""
    k = 3
    x1, alpha, beta, grad = recurrence_inputs(67, dtype, seed=5)
    strided = {
        "x1": x1.transpose(0, 1).contiguous().transpose(0, 1),  # (B, T, D) storage
        "alpha": torch.stack([alpha, -alpha], 1)[:, 0],  # stride 2
        "beta": beta.repeat_interleave(3)[1::3],  # stride 3
        "grad": grad.permute(2, 0, 1).contiguous().permute(1, 2, 0),
    }
    assert not any(t.is_contiguous() for t in strided.values())
    expected = emulated(emulation, x1, alpha, beta, grad, k)
    c = emulation.swish_recurrence(strided["x1"], strided["alpha"], strided["beta"], k)
    c_strided = c.transpose(0, 1).contiguous().transpose(0, 1)
    grads = emulation.swish_recurrence_backward(strided["grad"], strided["x1"], c_strided,
                                                strided["alpha"], strided["beta"], k)
    for name, a, b in zip(NAMES, (c, *grads), expected):
        assert torch.equal(a, b), name
    if dtype is not torch.float64:  # grad_c of another dtype is converted to x1's
        wide = emulation.swish_recurrence_backward(grad.double(), x1, c, alpha, beta, k)
        narrow = emulation.swish_recurrence_backward(grad.double().to(dtype), x1, c, alpha,
                                                     beta, k)
        for a, b in zip(wide, narrow):
            assert torch.equal(a, b)


def test_threads_do_not_depend_on_one_another(emulation):
    """The grid run with blocks and threads in reverse order gives the same bits: no thread
    reads what another writes (on the GPU, they run in no set order)."""
    for dtype, batch in [*((d, BATCH) for d in DTYPES), *((d, EVEN_BATCH) for d in HALF_DTYPES)]:
        for k in (1, 4):
            inputs = recurrence_inputs(67, dtype, seed=k, batch=batch)
            forward_order = emulated(emulation, *inputs, k)
            emulation.set_reverse_thread_order(True)
            try:
                reverse_order = emulated(emulation, *inputs, k)
            finally:
                emulation.set_reverse_thread_order(False)
            for name, a, b in zip(NAMES, forward_order, reverse_order):
                assert torch.equal(a, b), (dtype, batch, k, name)


def launch_records(emulation):
    flat = emulation.launches()
    return [dict(zip(("grid", "block", "shared", "stream", "threads"),
                     (tuple(r[0:3]), tuple(r[3:6]), r[6], r[7], r[8])))
            for r in (flat[i:i + 9] for i in range(0, len(flat), 9))]


@pytest.mark.parametrize("batch, length, k", [(BATCH, 67, 3), (BATCH, 0, 2), (1, 5, 1),
                                              (0, 5, 2)])
def test_launches_cover_every_item_on_the_callers_stream(emulation, batch, length, k):
    """One launch each for the forward and the backward, on the stream the binding hands the
    launcher (the current stream, not the default one), without shared memory; a 1-D grid of
    warp-multiple blocks just large enough for the k * columns items (one thread each). No
    launch where there are no columns (a grid of 0 blocks is an invalid configuration)."""
    x1, alpha, beta, grad = recurrence_inputs(length, torch.float32, seed=1, batch=batch)
    emulation.clear_launches()
    c = emulation.swish_recurrence(x1, alpha, beta, k)
    emulation.swish_recurrence_backward(grad, x1, c, alpha, beta, k)
    records = launch_records(emulation)
    items = k * batch * HIDDEN
    if items == 0:
        assert records == []
        return
    assert len(records) == 2
    for record in records:
        (grid_x, grid_y, grid_z), (block_x, block_y, block_z) = record["grid"], record["block"]
        assert (grid_y, grid_z, block_y, block_z) == (1, 1, 1, 1)
        assert block_x % 32 == 0 and block_x <= 1024
        assert grid_x * block_x >= items > (grid_x - 1) * block_x
        assert record["shared"] == 0
        assert record["stream"] == emulation.current_stream() != 0
        assert record["threads"] == grid_x * block_x


def covers(record, items: int) -> bool:
    """The launch's 1-D grid is just large enough for ``items`` threads."""
    threads_per_block, blocks = record["block"][0], record["grid"][0]
    return blocks * threads_per_block >= items > (blocks - 1) * threads_per_block


@pytest.mark.parametrize("dtype, batch, columns_per_thread", [
    (torch.float16, EVEN_BATCH, 2), (torch.bfloat16, EVEN_BATCH, 2),
    (torch.float16, BATCH, 1), (torch.bfloat16, BATCH, 1),  # an odd column count
    (torch.float32, EVEN_BATCH, 1), (torch.float64, EVEN_BATCH, 1)], ids=str)
def test_columns_per_thread(emulation, dtype, batch, columns_per_thread, monkeypatch):
    """Two columns per thread exactly for fp16/bf16 with an even column count (the grid covers
    half the items), one otherwise, and one for every dtype when the environment says 1."""
    monkeypatch.delenv(COLUMNS_ENV, raising=False)
    x1, alpha, beta, grad = recurrence_inputs(67, dtype, seed=1, batch=batch)
    items = 2 * batch * HIDDEN  # k = 2
    for setting, expected in [(None, columns_per_thread), ("1", 1), ("2", columns_per_thread)]:
        if setting is not None:
            monkeypatch.setenv(COLUMNS_ENV, setting)
        emulation.clear_launches()
        c = emulation.swish_recurrence(x1, alpha, beta, 2)
        emulation.swish_recurrence_backward(grad, x1, c, alpha, beta, 2)
        records = launch_records(emulation)
        assert len(records) == 2
        assert all(covers(record, items // expected) for record in records), (setting, records)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_packed_kernels_give_the_one_column_bits(emulation, dtype, k, monkeypatch):
    """fp16/bf16 with two columns per thread give bit for bit what one column per thread gives
    (each column the same chain with the same arithmetic), for T = 0, T < k, T not a multiple of
    k; the one-column kernels match the reference (test_emulated_kernels_match_the_reference)."""
    for length in lengths_for(k):
        inputs = recurrence_inputs(length, dtype, seed=k, batch=EVEN_BATCH)
        monkeypatch.delenv(COLUMNS_ENV, raising=False)
        packed = emulated(emulation, *inputs, k)
        monkeypatch.setenv(COLUMNS_ENV, "1")
        one_column = emulated(emulation, *inputs, k)
        for name, a, b in zip(NAMES, packed, one_column):
            assert torch.equal(a, b), (length, name)


def unaligned_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` that starts one element past an aligned address (as a
    slice of a larger tensor may): ``contiguous()`` keeps it where it is."""
    buffer = torch.empty(tensor.numel() + 1, dtype=tensor.dtype)
    view = buffer[1:].view(tensor.shape)
    view.copy_(tensor)
    assert view.is_contiguous() and view.data_ptr() % 4 != 0
    return view


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_unaligned_16_bit_inputs_run_one_column_per_thread(emulation, dtype, monkeypatch):
    """A 16-bit input that starts off a 4-byte boundary cannot be read in pairs: the launchers
    fall back to one column per thread, with the same bits as from aligned inputs."""
    monkeypatch.delenv(COLUMNS_ENV, raising=False)
    k = 3
    x1, alpha, beta, grad = recurrence_inputs(67, dtype, seed=k, batch=EVEN_BATCH)
    aligned = emulated(emulation, x1, alpha, beta, grad, k)
    emulation.clear_launches()
    c = emulation.swish_recurrence(unaligned_copy(x1), alpha, beta, k)
    grads = emulation.swish_recurrence_backward(unaligned_copy(grad), x1, c, alpha, beta, k)
    records = launch_records(emulation)
    assert len(records) == 2
    assert all(covers(record, k * EVEN_BATCH * HIDDEN) for record in records), records
    for name, a, b in zip(NAMES, (c, *grads), aligned):
        assert torch.equal(a, b), name


def finite_float32_samples() -> torch.Tensor:
    """float32 values that exercise a rounding to 16 bits: random bit patterns of every
    exponent, the exact midpoints between neighbouring float16 and bfloat16 values (ties) and
    the floats next to them, half's subnormals and the overflow boundary 65504..65520."""
    g = torch.Generator().manual_seed(0)
    random_bits = torch.randint(-2 ** 31, 2 ** 31, (200_000,), generator=g, dtype=torch.int64)
    samples = [random_bits.to(torch.int32).view(torch.float32)]
    all_bits = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    for dtype in (torch.float16, torch.bfloat16):
        values = all_bits.view(dtype).float()
        values = values[torch.isfinite(values)].sort().values
        midpoints = (values[:-1].double() + values[1:].double()) / 2
        midpoints = midpoints[midpoints.abs() < 3e38].float()
        samples += [midpoints, torch.nextafter(midpoints, torch.tensor(float("inf"))),
                    torch.nextafter(midpoints, torch.tensor(float("-inf")))]
    samples.append(torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e-8, 2.0 ** -25,
                                 2.0 ** -24, 3.0 * 2 ** -26, float("inf"), float("-inf")]))
    values = torch.cat(samples)
    return values[~torch.isnan(values)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_shim_conversions_round_to_nearest_even(emulation, dtype):
    """float -> 16 bits rounds as torch does (round to nearest, ties to even, as CUDA's
    __float2half and __float2bfloat16), and 16 bits -> float is exact for all 65536 patterns."""
    name = "half" if dtype is torch.float16 else "bfloat16"
    to_bits = getattr(emulation, f"float_to_{name}_bits")
    from_bits = getattr(emulation, f"{name}_bits_to_float")
    values = finite_float32_samples()
    assert torch.equal(to_bits(values), values.to(dtype).view(torch.int16))
    assert torch.isnan(to_bits(torch.tensor([float("nan")])).view(dtype)).all()
    all_bits = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    expected = all_bits.view(dtype).float()
    ours = from_bits(all_bits)
    finite = ~torch.isnan(expected)
    assert torch.equal(ours[finite].view(torch.int32), expected[finite].view(torch.int32))
    assert torch.isnan(ours[~finite]).all()


@native
def test_schemas_are_the_real_ops(emulation):
    for name in ("swish_recurrence", "swish_recurrence_backward"):
        real = str(getattr(torch.ops.fairseq_ext, name).default._schema)
        ours = str(getattr(emulation, name).default._schema)
        assert ours == real.replace("fairseq_ext::", f"{cuda_host_emulation.NAMESPACE}::")


def test_launch_rewrite():
    """Each ``kernel<<<config>>>(args)`` becomes a cuda_host::launch call, on its own line, and
    anything else with ``<<<`` is refused; the committed .cu has its four launches (forward and
    backward, each with two columns per thread and with one) and keeps its line count."""
    rewritten, count = cuda_host_emulation.rewrite_launches(
        "  forward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);\n"
        "  init<<<1, 32>>>();\n")
    assert count == 2
    assert rewritten == (
        "  cuda_host::launch(forward_kernel<scalar_t>, "
        "cuda_host::LaunchConfig{blocks_for(n), kThreads, 0, stream}, x, y, n);\n"
        "  cuda_host::launch(init, cuda_host::LaunchConfig{1, 32});\n")
    with pytest.raises(ValueError, match="line 1"):
        cuda_host_emulation.rewrite_launches("table[i]<<<1, 32>>>(x);")
    source = cuda_host_emulation.KERNELS.read_text()
    rewritten, count = cuda_host_emulation.rewrite_launches(source)
    assert count == 4 == source.count("<<<")
    assert rewritten.count("\n") == source.count("\n")
    assert re.findall(r"cuda_host::launch\((\w+)<scalar_t, (\d)>", rewritten) == [
        ("forward_kernel", "2"), ("forward_kernel", "1"), ("backward_kernel", "2"),
        ("backward_kernel", "1")]


# --- with a GPU: the CUDA op against what the emulation predicts -------------------------------

#: Where the GPU suite collects the comparison (scripts/gpu_suite.sh sets it).
REPORT_ENV = "CUDA_HOST_EMULATION_REPORT"


@cuda_kernel
def test_cuda_op_matches_the_host_emulation(emulation, monkeypatch):
    """The CUDA kernels on the GPU against their host emulation on the same inputs, with the GPU
    tests' tolerances: an odd column count (one column per thread) and an even one (fp16/bf16
    two, the packed kernels; also their one-column kernels, with the environment's switch). The
    largest differences and the share of bit-identical elements go to
    $CUDA_HOST_EMULATION_REPORT (JSON) when it is set. fp16/bf16 outputs are expected nearly
    all bit-identical; fp32 to differ by a few ulps (nvcc's FMA contraction, --use_fast_math's
    division and ex2.approx, which the emulation does not reproduce); fp64 by rounding only."""
    report = []
    cases = [(dtype, batch, None) for dtype in DTYPES for batch in (5, 4)]
    cases += [(dtype, 4, "1") for dtype in HALF_DTYPES]
    for dtype, batch, columns_setting in cases:
        if columns_setting is None:
            monkeypatch.delenv(COLUMNS_ENV, raising=False)
        else:
            monkeypatch.setenv(COLUMNS_ENV, columns_setting)
        packed = dtype in HALF_DTYPES and batch % 2 == 0 and columns_setting is None
        tol = TOLERANCES[dtype]
        atol = tol if dtype is torch.float64 else 5 * tol
        for k in (1, 2, 4):
            inputs = recurrence_inputs(67, dtype, seed=k, batch=batch, hidden=301)
            predicted = emulated(emulation, *inputs, k)
            c = torch.ops.fairseq_ext.swish_recurrence(*(t.cuda() for t in inputs[:3]), k)
            grads = torch.ops.fairseq_ext.swish_recurrence_backward(
                inputs[3].cuda(), inputs[0].cuda(), c, inputs[1].cuda(), inputs[2].cuda(), k)
            measured = [t.cpu() for t in (c, *grads)]
            for name, a, b in zip(NAMES, measured, predicted):
                report.append({"dtype": str(dtype), "shape": [67, batch, 301], "k": k,
                               "columns_per_thread": 2 if packed else 1, "output": name,
                               "max_abs_diff": (a.double() - b.double()).abs().max().item(),
                               "bit_identical": (a == b).double().mean().item()})
            assert_all_close(measured, predicted, tol, atol,
                             f"CUDA vs emulation, {dtype}, B={batch}, k={k}, "
                             f"{2 if packed else 1} column(s) per thread")
    if os.environ.get(REPORT_ENV):
        with open(os.environ[REPORT_ENV], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cuda": torch.version.cuda, "rows": report}, f, indent=1)
