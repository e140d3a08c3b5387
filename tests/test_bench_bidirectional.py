"""scripts/bench_bidirectional.py (fairseq_ext_lab.benchmarks.bidirectional): main runs at tiny size
and prints both throughputs and their ratio; the batch it builds has the hyb_pre layout (full
packed rows, masks at the ends of documents with their original positions, bidirectional
prefixes within documents, predicted suffixes) and the baseline sees the same rows."""
import json
import re

import numpy as np
import pytest

from fairseq_ext.data.bidirectional_sampling import ObjectiveSampler
from fairseq_ext.training.model_building import MaskedLmTaskStub
from fairseq_ext_lab.benchmarks import bidirectional as bench

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def test_main_prints_both_throughputs_and_the_ratio(capsys, tmp_path):
    out = tmp_path / "bench.json"
    assert bench.main(["--arch-size", "tiny", "--seq-len", "64", "--batch-size", "2",
                       "--vocab-size", "100", "--rounds", "1", "--warmup", "0", "--quiet",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for name, arch in (("bidirectional_lm", "bidir_lm_tiny"), ("transformer_lm", "transformer_lm_gpt"),
                       ("bidirectional_lm_all_logits", "bidir_lm_tiny")):
        row = re.search(rf"^\| {name} \| {arch} \| [\d.]+ \([\d.]+-[\d.]+\) \| (\d+) \|$", printed,
                        re.M)
        assert row and int(row.group(1)) > 0, printed
    ratio = re.search(r"^ratio bidirectional_lm / transformer_lm: (\d+\.\d+)$", printed, re.M)
    assert ratio and float(ratio.group(1)) > 0, printed
    assert re.search(r"^ratio bidirectional_lm_all_logits / transformer_lm .*: \d+\.\d+$", printed,
                     re.M), printed
    record = json.loads(out.read_text())
    assert record["ratio"] == pytest.approx(
        record["results"]["bidirectional_lm"]["tokens_per_s"]
        / record["results"]["transformer_lm"]["tokens_per_s"])


def test_models_differ_only_in_mask_and_positions():
    task = MaskedLmTaskStub(100)
    models = bench.build_models("tiny", task, 64, seed=0)
    ours, theirs = (dict(models[name].named_parameters())
                    for name in ("bidirectional_lm", "transformer_lm"))
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for model in models.values():
        decoder = model.decoder
        assert decoder.share_input_output_embed and decoder.layer_norm is not None
        assert all(layer.normalize_before for layer in decoder.layers)
        assert type(decoder.embed_positions).__name__ == "LearnedPositionalEmbedding"


def test_all_logits_criterion_gives_the_same_loss():
    task = MaskedLmTaskStub(100)
    model = bench.build_models("tiny", task, 64, seed=0)["bidirectional_lm"].eval()
    sample = bench.build_batches(task, ObjectiveSampler.from_flags("hyb_pre"), 1, 2, 64, 4, 32,
                                 seed=0)["bidirectional_lm"][0]
    config = bench.MaskedLmConfig(tpu=False)
    loss, size, _ = bench.BidirectionalLmLoss(config, task)(model, sample)
    loss_all, size_all, _ = bench.AllLogitsBidirectionalLmLoss(config, task)(model, sample)
    assert int(size) == int(size_all) and float(loss) == pytest.approx(float(loss_all), rel=1e-5)


def test_batch_has_the_hyb_pre_layout():
    task = MaskedLmTaskStub(100)
    pad, mask_idx, eos = task.source_dictionary.pad(), task.mask_idx, task.source_dictionary.eos()
    seq_len, batch_size = 96, 3
    batches = bench.build_batches(task, ObjectiveSampler.from_flags("hyb_pre"), 2, batch_size,
                                  seq_len, min_doc_len=4, max_doc_len=48, seed=3)
    n_documents = n_masked = n_partial_prefix = 0
    for ours, theirs in zip(batches["bidirectional_lm"], batches["transformer_lm"]):
        net = ours["net_input"]
        tokens, positions = net["src_tokens"], net["src_positions"]
        assert tokens.shape == (batch_size, seq_len) and not tokens.eq(pad).any()  # full rows
        assert ours["ntokens"] == batch_size * seq_len
        original = theirs["net_input"]["src_tokens"]
        assert theirs["target"][:, :-1].equal(original[:, 1:])
        for b in range(batch_size):
            doc_ids = net["doc_ids"][b]
            assert doc_ids.ge(0).all() and doc_ids.diff().ge(0).all()
            for d in doc_ids.unique().tolist():
                span = doc_ids.eq(d).nonzero().squeeze(1)
                n = len(span)
                n_documents += 1
                doc_tokens, doc_positions = tokens[b, span], positions[b, span]
                source = original[b, span]  # the document before reordering
                assert source[-1] == eos
                # positions: a permutation of 0..n-1; unmasked in order, then the masks in order
                assert sorted(doc_positions.tolist()) == list(range(n))
                is_mask = doc_tokens.eq(mask_idx)
                n_mask = int(is_mask.sum())
                n_masked += n_mask
                assert not is_mask[: n - n_mask].any() and is_mask[n - n_mask:].all()
                kept = doc_positions[: n - n_mask]
                assert kept.diff().gt(0).all() and doc_positions[n - n_mask:].diff().gt(0).all()
                assert doc_tokens[: n - n_mask].equal(source[kept])
                # one bidirectional prefix per document, within it
                bidir = net["bidir_lens"][b, span]
                assert bidir.eq(bidir[0]).all() and 0 <= int(bidir[0]) <= n
                n_partial_prefix += 0 < int(bidir[0]) < n
                # predicted: a suffix covering every mask (the original last token, unless
                # masked, has no next token in its document: <pad>)
                predicted = ours["target"][b, span].ne(pad)
                assert predicted[is_mask].all()
                in_window = predicted | doc_positions.eq(n - 1)
                first = int(in_window.nonzero().min())
                assert in_window[first:].all()
                assert ours["target"][b, span][is_mask].equal(source[doc_positions[is_mask]])
    assert n_documents > 2 * batch_size and n_masked > 0 and n_partial_prefix > 0


def test_packed_rows_fill_the_sequence_exactly():
    rng = np.random.default_rng(0)
    rows = bench.packed_documents(rng, 20, 50, 3, 50, 4, 99, 2)
    for row in rows:
        assert sum(len(doc) for doc in row) == 50
        assert all(len(doc) <= 50 and doc[-1] == 2 for doc in row)
        assert all(len(doc) >= 3 for doc in row[:-1])


@pytest.mark.slow  # compiles FlexAttention
def test_flex_part_prints_each_ratio_beside_the_skipped_blocks(capsys, tmp_path):
    out = tmp_path / "flex.json"
    assert bench.main(["--part", "flex", "--arch-size", "tiny", "--seq-lens", "200,300",
                       "--vocab-size", "60", "--synthetic-tokens", "3000", "--max-tokens", "1200",
                       "--batch-size", "2", "--batches", "1", "--rounds", "1", "--quiet",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| (attention eval rows|attention train rows|validate)"
                      r"(?: \(attention \d+% of the forward\))? \| ([\d.]+) \| ([\d.]+) \| "
                      r"([\d.]+) \| ([\d.]+)% \| ([\d.]+) \|$", printed, re.M)
    assert len(rows) == 6, printed
    record = json.loads(out.read_text())
    assert len(record["results"]) == 6 and "train step: not timed" in printed
    for seq_len in (200, 300):
        auto = re.search(rf"^T = {seq_len}: validate with --attention-impl auto .* ([\d.]+) ms, "
                         r"ratio sdpa/auto ([\d.]+)$", printed, re.M)
        validate = next(r for r in record["results"]
                        if (r["seq_len"], r["what"]) == (seq_len, "validate"))
        assert auto and float(auto.group(2)) == pytest.approx(
            validate["sdpa_s"] / validate["auto_s"], abs=0.006), printed
    for (seq_len, what, sdpa_ms, flex_ms, ratio, skipped, bound), result in zip(
            rows, record["results"]):
        assert (int(seq_len), what) == (result["seq_len"], result["what"])
        assert float(ratio) == pytest.approx(result["sdpa_s"] / result["flex_s"], abs=0.006)
        assert float(sdpa_ms) == pytest.approx(1e3 * result["sdpa_s"], abs=0.06)
        assert float(flex_ms) == pytest.approx(1e3 * result["flex_s"], abs=0.06)
        assert float(skipped) == pytest.approx(100 * result["skipped"], abs=0.06)
        assert float(bound) == pytest.approx(result["bound"], abs=0.006)
        assert 0 <= result["skipped"] < 1 and result["bound"] >= 1.0
        if what != "validate":  # the attention's own bound: 1 / (1 - skipped)
            assert result["bound"] == pytest.approx(1 / (1 - result["skipped"]))
        else:  # Amdahl's, with the attention's measured share of the forward
            share = result["attention_share"]
            assert result["bound"] == pytest.approx(
                1 / (1 - share + share * (1 - result["skipped"])))


def test_skipped_fraction_of_a_causal_row_by_hand():
    """One causal document filling a row of 4 blocks: 10 of the 16 blocks computed (the lower
    triangle and the diagonal), so 6 / 16 skipped; the same with padding after 3 blocks: the
    padding block computes its diagonal only (7 of 16)."""
    import torch

    doc_ids = torch.zeros(1, 512, dtype=torch.long)
    summary = bench.block_summary([(doc_ids, torch.zeros_like(doc_ids), True)])
    assert summary == {"skipped": 6 / 16, "blocks": 16}
    doc_ids[0, 384:] = -1
    summary = bench.block_summary([(doc_ids, torch.zeros_like(doc_ids), True)])
    assert summary["skipped"] == pytest.approx(1 - 7 / 16)
    assert bench.amdahl_bound(0.5, 0.5) == pytest.approx(1 / 0.75)
