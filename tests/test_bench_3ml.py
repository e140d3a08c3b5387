"""bench_3ml.py's bookkeeping: the shape overrides, the share outside matmuls and the guard
against hand computations, and a tiny run end to end (no timing target: speed figures belong
to the benchmark's output, docs/benchmarks.md)."""
import json
from types import SimpleNamespace

import pytest

from fairseq_ext_lab.benchmarks import three_ml
from fairseq_ext_lab.benchmarks.three_ml import Lengths, Result


def test_arch_overrides_follow_the_width():
    assert three_ml.arch_overrides() == {}
    assert three_ml.arch_overrides(6, 512, 0.0) == {
        "encoder_layers": 6, "encoder_embed_dim": 512, "encoder_ffn_embed_dim": 2048,
        "encoder_attention_heads": 8, "dropout": 0.0, "attention_dropout": 0.0}


@pytest.mark.parametrize("argv, message", [
    (["--encoder-embed-dim", "100"], "multiple of 64"),
    (["--encoder-layers", "0"], "--encoder-layers must be >= 1"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
    (["--share-updates", "-1"], "--share-updates must be >= 0"),
])
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        three_ml.parse_args(argv)
    assert message in capsys.readouterr().err


def event(name, self_us, device_us=0.0):
    return SimpleNamespace(name=name, self_cpu_time_total=self_us,
                           self_device_time_total=device_us)


def test_outside_matmul_share_by_hand():
    events = [event("aten::mm", 30_000), event("aten::addmm", 10_000),
              event("aten::_scaled_dot_product_flash_attention_for_cpu", 4_000),
              event("aten::_log_softmax", 5_000), event("aten::copy_", 1_000)]
    # 2 updates of 25 ms: 22 ms of matmuls per update
    assert three_ml.outside_matmul_share(events, step_ms=25.0, updates=2) == pytest.approx(0.12)
    cuda = [event("aten::mm", 50_000, device_us=8_000), event("aten::gelu", 9_000, 1_000)]
    assert three_ml.outside_matmul_share(cuda, 10.0, 1, "cuda") == pytest.approx(0.2)


def result(model, rate, ms, padded=False):
    lengths = Lengths(100.0, 100.0, None, 10.0)
    return Result(model, {"roberta": "roberta_small", "3ml-self": "3ml_self_small"}[model], rate,
                  128, 8000, ms, ms, ms, lengths, [ms], {}, 4, padded)


def test_guard_lines_by_hand():
    base = result("roberta", 0.15, 100.0)
    rows = [base, result("3ml-self", 0.5, 80.0), result("3ml-self", 0.5, 95.0, padded=True)]
    analytic = three_ml.analytic_speedup(rows[1], base)
    assert 1.0 < analytic < 1.5
    lines = three_ml.guard_lines(rows, base, 0.95, peak_flops=None)
    assert len(lines) == 2
    ratios = [100.0 / 80.0 / analytic, 100.0 / 95.0 / analytic]
    for line, ratio in zip(lines, ratios):
        assert f"measured/analytic {ratio:.3f}" in line
        assert line.endswith("ok" if ratio >= 0.95 else "BELOW")
    assert "(padded enc)" in lines[1]
    peak = 2 * three_ml.achieved_flops(base)
    roofline = three_ml.guard_lines(rows, base, 0.95, peak)[-1]
    assert "roberta 15% 50%" in roofline
    # achieved FLOP/s: App. D FLOPs of the batch's 4 sequences over the median time
    assert three_ml.achieved_flops(base) == pytest.approx(
        4 * three_ml.analytic_training_flops(base) / 0.1)


def test_tiny_run_end_to_end(tmp_path, capsys, one_thread):
    out = tmp_path / "bench.json"
    argv = ["--size", "tiny", "--encoder-layers", "1", "--seq-len", "24", "--batch-size", "2",
            "--vocab-size", "64", "--mask-rates", "0.5", "--roberta-rates", "0.15",
            "--models", "roberta,3ml-self,3ml-cross", "--padded-encoder", "--dropout", "0",
            "--warmup", "0", "--iters", "2", "--batches", "1", "--share-updates", "1",
            "--quiet", "--json", str(out)]
    assert three_ml.main(argv) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    rows = {(r["model"], r["padded"], r["mask_rate"]): r for r in record["results"]}
    assert set(rows) == {("roberta", False, 0.15), ("3ml-self", False, 0.5),
                         ("3ml-self", True, 0.5), ("3ml-cross", False, 0.5),
                         ("3ml-cross", True, 0.5)}
    base = rows["roberta", False, 0.15]
    for row in rows.values():
        assert row["overrides"]["encoder_layers"] == 1
        assert 0.0 <= row["outside_matmuls"] < 1.0
        assert row["measured_over_analytic"] == pytest.approx(
            base["ms"] / row["ms"] / row["analytic_speedup"])
    assert sum(line.startswith("guard: ") for line in printed.splitlines()) == 4
    assert record["gemm_flops_per_s"] > 0 and "roofline:" in printed
    assert record["guard"][0].startswith("guard: 3ml-self 50%")
