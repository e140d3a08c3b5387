"""fairseq_ext_lab.benchmarks.swishrnn (scripts/bench_swishrnn.py): part (b) (CPU op against the
fair loop, with its roofline) and part (c) (training step swishrnn_bert vs bert_rab) run at tiny
sizes on the CPU and print consistent tables; part (a) without CUDA or without the op's CUDA
kernel exits 2 with a one-line message; the shared timing helpers."""
import os
import re
import sys

import pytest
import torch

from conftest import REPO_ROOT, run_cli
from fairseq_ext.ops import swish_recurrence as swish_rnn
from fairseq_ext_lab.benchmarks import common
from fairseq_ext_lab.benchmarks import swishrnn as bench_swishrnn


def test_interleaved_rounds_alternate_and_drop_the_warm_up():
    calls = []

    def call(name, seconds):
        return lambda: calls.append(name) or seconds

    times = common.interleaved_rounds({"a": call("a", 1.0), "b": call("b", 2.0)}, warmup=2,
                                      rounds=3)
    assert calls == ["a", "b"] * 5
    assert times == {"a": [1.0] * 3, "b": [2.0] * 3}
    assert common.quartiles([4.0, 1.0, 3.0, 2.0]) == (1.75, 2.5, 3.25)


def printed_range(text: str):
    """The values a printed, rounded decimal can stand for: ``0.021`` is 0.0205 .. 0.0215."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    half = 0.5 * 10 ** -decimals
    return max(float(text) - half, 1e-12), float(text) + half


@pytest.mark.skipif("cpu" not in swish_rnn.NATIVE_OP_DEVICES,
                    reason="fairseq_ext.ops._C is not built (make install)")
def test_part_b_tiny_prints_the_ratio_to_the_fair_loop_and_the_bandwidth_roofline(capsys):
    """Each row: the ratio to the fair loop from the printed times, the op's bandwidth = the 6 N
    elements it must move / its time, the copy's bandwidth beside it, their ratio, and verdicts
    that agree with the figures; the closing line agrees with the rows."""
    assert bench_swishrnn.main(["--part", "b", "--seq-len", "24", "--batch-size", "2",
                                "--hidden", "16", "--steps", "1,4", "--warmup", "1",
                                "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    moved = 6 * 24 * 2 * 16 * 4  # bytes: 6 N fp32
    assert "bytes the recurrence must move: 6 N = 4,608 elements of fp32" in out
    assert "roofline: copy GB/s = the same bytes through dst.copy_(src) of 3 N elements" in out
    assert "compute: 2 x torch.sigmoid over N = " in out
    rows = re.findall(r"^\| (\d) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+) \| ([\d.]+) \| "
                      r"(\d+)% \| (PASS|FAIL) \| (PASS|FAIL) \|$", out, re.M)
    assert [int(r[0]) for r in rows] == [1, 4]
    for _, op_ms, loop_ms, ratio, op_gbs, copy_gbs, fraction, by_loop, by_copy in rows:
        # the ratios come from the unrounded times: check them against the ranges the printed
        # (rounded) figures allow, which are wide at this tiny size (e.g. 0.02 ms)
        low, high = (printed_range(loop_ms)[0] / printed_range(op_ms)[1],
                     printed_range(loop_ms)[1] / printed_range(op_ms)[0])
        assert low * 0.95 - 0.05 <= float(ratio) <= high * 1.05 + 0.05, (ratio, op_ms, loop_ms)
        assert by_loop == ("PASS" if float(ratio) >= 10 else "FAIL")
        low, high = (moved / printed_range(op_ms)[1] / 1e6, moved / printed_range(op_ms)[0] / 1e6)
        assert low * 0.95 - 0.05 <= float(op_gbs) <= high * 1.05 + 0.05, (op_gbs, op_ms)
        low, high = (printed_range(op_gbs)[0] / printed_range(copy_gbs)[1],
                     printed_range(op_gbs)[1] / printed_range(copy_gbs)[0])
        assert low * 100 - 1 <= int(fraction) <= high * 100 + 1, (fraction, op_gbs, copy_gbs)
        assert by_copy == ("PASS" if int(fraction) >= 60 else "FAIL") or int(fraction) == 60
    all_loop = all(r[7] == "PASS" for r in rows)
    all_copy = all(r[8] == "PASS" for r in rows)
    assert (f"target: >= 10x the fair loop at every k: {'PASS' if all_loop else 'FAIL'}; "
            f">= 60% of the copy bandwidth at every k: {'PASS' if all_copy else 'FAIL'}; "
            f"{'met' if all_loop or all_copy else 'missed'}") in out


@pytest.mark.skipif("cpu" not in swish_rnn.NATIVE_OP_DEVICES,
                    reason="fairseq_ext.ops._C is not built (make install)")
def test_part_c_tiny_on_cpu_prints_both_timings_and_the_ratio(capsys):
    threads = torch.get_num_threads()
    try:  # one thread: a busy shared host stalls small multi-threaded ops
        assert bench_swishrnn.main([
            "--part", "c", "--device", "cpu", "--arch-size", "tiny", "--seq-len", "32",
            "--batch-size", "2", "--vocab-size", "500", "--warmup", "1", "--rounds", "1",
            "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    seconds = {}
    for name, arch in (("swishrnn_bert", "swishrnn_bert_tiny"), ("bert_rab", "bert_rab_tiny")):
        row = re.search(rf"^\| {name} \| {arch} \| [\d.]+M \| ([\d.]+) \| [\d.]+-[\d.]+ \|$",
                        out, re.M)
        assert row, out
        seconds[name] = float(row.group(1))
        assert seconds[name] > 0
    ratio = re.search(r"^swishrnn_bert / bert_rab = ([\d.]+) \(target <= 1\.10\): (PASS|FAIL)$",
                      out, re.M)
    assert ratio, out
    assert float(ratio.group(1)) == pytest.approx(
        seconds["swishrnn_bert"] / seconds["bert_rab"], rel=0.05, abs=2e-3)  # rounded figures
    assert ratio.group(2) == ("PASS" if float(ratio.group(1)) <= 1.10 else "FAIL")


def test_part_a_without_cuda_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_swishrnn.main(["--part", "a"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("bench_swishrnn: part (a) needs the CUDA kernel: "
                                   "CUDA is not available")


def test_part_a_without_the_cuda_kernel_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(swish_rnn, "NATIVE_OP_AVAILABLE", True)
    monkeypatch.setattr(swish_rnn, "NATIVE_OP_DEVICES", ("cpu",))
    assert bench_swishrnn.main(["--part", "a"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no CUDA kernel" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_part_a_exit_code_from_the_command_line():
    proc = run_cli([sys.executable, REPO_ROOT / "scripts/bench_swishrnn.py", "--part", "a"],
                   check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "bench_swishrnn: part (a) needs the CUDA kernel: CUDA is not available" in proc.stderr


@pytest.mark.skipif("cpu" not in swish_rnn.NATIVE_OP_DEVICES,
                    reason="fairseq_ext.ops._C is not built (make install)")
def test_part_a_table_with_cuda_faked_on_the_cpu(monkeypatch, capsys):
    """Part (a)'s bookkeeping (bytes, bound, ratios, verdicts, the steady-state division by
    REPEATS), run on the CPU kernel under a fake clock: a call of the op through autograd, or of
    the bare kernels, takes 1 ms, one of the reference 50 ms, one of the bare kernels with one
    column per thread (bf16 only, the environment's switch set during the call) 2 ms."""
    clock = {"ms": 0.0}
    calls = {"op": 0, "reference": 0, "kernels": 0, "1-column kernels": 0}
    fwd_bwd, kernels_fwd_bwd = bench_swishrnn.fwd_bwd, bench_swishrnn.kernels_fwd_bwd

    def counting_fwd_bwd(function, *args):
        reference = function is swish_rnn.swish_recurrence_reference
        calls["reference" if reference else "op"] += 1
        clock["ms"] += 50.0 if reference else 1.0
        return fwd_bwd(function, *args)

    def counting_kernels_fwd_bwd(inputs, step):
        one_column = os.environ.get(swish_rnn.COLUMNS_PER_THREAD_ENV) == "1"
        assert not one_column or inputs[0].dtype == torch.bfloat16
        calls["1-column kernels" if one_column else "kernels"] += 1
        clock["ms"] += 2.0 if one_column else 1.0
        return kernels_fwd_bwd(inputs, step)

    def fake_ms(function, warmup, repeats):
        for _ in range(warmup):
            function()
        samples = []
        for _ in range(repeats):
            clock["ms"] = 0.0
            function()
            samples.append(clock["ms"])
        return samples

    inputs = bench_swishrnn.recurrence_inputs
    monkeypatch.setattr(bench_swishrnn, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_swishrnn, "copy_bandwidth", lambda mib: 1e6)  # 1 MB/s
    monkeypatch.setattr(bench_swishrnn, "cuda_time_ms", fake_ms)
    monkeypatch.setattr(bench_swishrnn, "recurrence_inputs",
                        lambda *args, device, **kw: inputs(*args, device="cpu", **kw))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "fake")
    monkeypatch.setattr(bench_swishrnn, "fwd_bwd", counting_fwd_bwd)
    monkeypatch.setattr(bench_swishrnn, "kernels_fwd_bwd", counting_kernels_fwd_bwd)
    monkeypatch.setattr(bench_swishrnn, "REPEATS", 3)
    assert bench_swishrnn.main(["--part", "a", "--seq-len", "16", "--batch-size", "2,3",
                                "--hidden", "8", "--steps", "1,2", "--dtype", "fp32,bf16",
                                "--warmup", "1", "--rounds", "2"]) == 0
    # per configuration (8): 1 warm-up + 2 rounds of the op's REPEATS calls and of its one call,
    # of the reference's one call and of the kernels' REPEATS pairs; for bf16 (4) also of the
    # 1-column kernels' REPEATS pairs
    assert calls == {"op": 8 * 3 * (3 + 1), "reference": 8 * 3, "kernels": 8 * 3 * 3,
                     "1-column kernels": 4 * 3 * 3}
    assert swish_rnn.COLUMNS_PER_THREAD_ENV not in os.environ  # restored
    rows = re.findall(r"^\| (fp32|bf16) \| (\d+) \| (\d) \| ([\d.]+) \| ([\d.]+) \| (\d+)x \| "
                      r"([\d.]+) \| (\d+)% \| (PASS|FAIL) \| (PASS|FAIL) \| ([\d.]+) \| ([\d.]+) \| "
                      r"(\d+)% \| ([\d.]+|-) \| (\d+%|-) \|$",
                      capsys.readouterr().out, re.M)
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [
        (dtype, b, k) for dtype in ("fp32", "bf16") for b in (2, 3) for k in (1, 2)]
    for (dtype, b, _, op_ms, ref_ms, speedup, bound_ms, fraction, ok_bound, ok_speedup, once_ms,
         kernels_ms, kernels_fraction, one_column_ms, one_column_fraction) in rows:
        # 3 ms per sample of REPEATS = 3 calls: 1 ms a call; one call 1 ms; reference 50 ms
        assert (op_ms, once_ms, kernels_ms, ref_ms, speedup) == ("1.000", "1.000", "1.000",
                                                                 "50.00", "50")
        assert ok_speedup == "PASS"  # 50x, the target
        assert int(fraction) == int(kernels_fraction) == round(100 * float(bound_ms))
        if dtype == "bf16":  # 6 ms per sample of REPEATS = 3 pairs: 2 ms a pair
            assert one_column_ms == "2.000"
            assert int(one_column_fraction[:-1]) == round(100 * float(bound_ms) / 2)
        else:
            assert one_column_ms == one_column_fraction == "-"
        assert ok_bound == ("PASS" if float(bound_ms) >= 0.6 else "FAIL")
        size = 4 if dtype == "fp32" else 2
        assert float(bound_ms) == pytest.approx(1e3 * 6 * 16 * int(b) * 8 * size / 1e6,
                                                abs=5e-4)
