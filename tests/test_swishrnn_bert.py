"""SwishRNN-BERT (Lei et al.): padding invariance (all three families), the SwishRNN layer
against its composition, Table 3 parameter counts against BERT-rab, step-size cycling, config
errors, FLOPs, fairseq-train / fairseq-validate end to end, compile and the classification head.
BERT-orig and BERT-rab (the T5 relative attention bias) are tested in test_bert_rab.py."""
import argparse
import math
import re

import pytest
import torch
from bert_models import build, count, padded_input
from fairseq.models import ARCH_CONFIG_REGISTRY

import fairseq_ext  # noqa: F401  (registers the archs)
from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli
from fairseq_ext import flops
from fairseq_ext.models.swishrnn_bert import matched_hidden_dim, parse_step_sizes

# --- whole models ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, overrides", [
    ("bert_orig_tiny", {}), ("bert_rab_tiny", {}), ("swishrnn_bert_tiny", {}),
    ("swishrnn_bert_tiny", dict(swishrnn_direction="bidirectional")),
], ids=["bert_orig", "bert_rab", "swishrnn_bert", "swishrnn_bert-bidirectional"])
@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
def test_padding_never_changes_real_positions(arch, overrides, left):
    model, task = build(arch, **overrides)
    model.eval()
    pad = task.source_dictionary.pad()
    torch.manual_seed(3)
    lengths = [12, 7, 4]
    rows = [torch.randint(5, 59, (n,)) for n in lengths]
    batch = torch.full((len(rows), max(lengths)), pad)
    for i, row in enumerate(rows):
        if left:
            batch[i, max(lengths) - len(row):] = row
        else:
            batch[i, :len(row)] = row
    with torch.no_grad():
        features = model(batch, features_only=True)[0]
        for i, row in enumerate(rows):
            alone = model(row[None], features_only=True)[0][0]
            real = features[i, -len(row):] if left else features[i, :len(row)]
            torch.testing.assert_close(real, alone, rtol=1e-4, atol=1e-5)


def test_swishrnn_layer_is_attention_then_swishrnn_with_add_norm():
    model, _ = build("swishrnn_bert_tiny")
    layer = model.encoder.sentence_encoder.layers[1].eval()
    x, pad = padded_input([10, 6], 64, seed=4)
    with torch.no_grad():
        attended, _ = layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)
        h = layer.self_attn_layer_norm(x + attended)
        expected = layer.final_layer_norm(h + layer.swish_rnn(h, pad))
        torch.testing.assert_close(layer(x, encoder_padding_mask=pad), expected)
    assert layer.fc1 is None and layer.fc2 is None
    assert layer.swish_rnn.step_size == 2


@pytest.mark.slow
@pytest.mark.parametrize("size", ["base", "large", "small", "tiny"])
def test_swishrnn_bert_parameters_within_one_percent_of_bert_rab(size, build_uninitialised):
    positions = 512 if size in ("base", "large") else 64
    vocab = 50265 if size in ("base", "large") else 60
    swish = build_uninitialised(f"swishrnn_bert_{size}", vocab_size=vocab, max_positions=positions)
    rab = build_uninitialised(f"bert_rab_{size}", vocab_size=vocab, max_positions=positions)
    assert count(swish) == pytest.approx(count(rab), rel=0.01)
    # the blocks alone (3 d d' + 4 d' + d against 2 d F + F + d), not just the embedding-heavy total
    layer_s = swish.encoder.sentence_encoder.layers[0]
    layer_r = rab.encoder.sentence_encoder.layers[0]
    assert count(layer_s) == pytest.approx(count(layer_r), rel=0.01)


def test_table_3_inner_sizes_and_step_cycle():
    for size, hidden in (("base", 2048), ("large", 2752)):
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[f"swishrnn_bert_{size}"](args)
        assert args.encoder_ffn_embed_dim == hidden and args.swishrnn_step_sizes == "1,2,4"
        assert args.swishrnn_direction == "forward"  # the paper's left-to-right recurrence
        assert not args.encoder_normalize_before and args.activation_fn == "gelu"
        assert (args.dropout, args.attention_dropout) == (0.1, 0.1)
    model, _ = build("swishrnn_bert_small")  # 4 layers
    assert model.encoder.sentence_encoder.step_sizes == (1, 2, 4, 1)
    model, _ = build("swishrnn_bert_small", swishrnn_step_sizes="2")
    assert model.encoder.sentence_encoder.step_sizes == (2, 2, 2, 2)
    assert matched_hidden_dim(768, 3072) == 2048  # the rule used for small/tiny gives base's d'


@pytest.mark.parametrize("arch, overrides, message", [
    ("swishrnn_bert_tiny", dict(swishrnn_step_sizes="1,0"), "--swishrnn-step-sizes"),
    ("swishrnn_bert_tiny", dict(swishrnn_step_sizes="one"), "--swishrnn-step-sizes"),
    ("swishrnn_bert_tiny", dict(swishrnn_step_sizes=""), "--swishrnn-step-sizes"),
    ("bert_rab_tiny", dict(rab_num_buckets=7), "--rab-num-buckets"),
    ("bert_rab_tiny", dict(rab_max_distance=8), "--rab-max-distance"),
    ("bert_rab_tiny", dict(encoder_attention_heads=3), "divisible by --encoder-attention-heads"),
    ("swishrnn_bert_tiny", dict(encoder_ffn_embed_dim=0), "--encoder-ffn-embed-dim"),
    ("swishrnn_bert_tiny", dict(swishrnn_direction="up"), "--swishrnn-direction"),
])
def test_bad_config_gets_a_clear_error(arch, overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(arch, **overrides)


def test_step_sizes_parse_from_cli_text_and_hydra_lists():
    assert parse_step_sizes("1,2,4") == (1, 2, 4)
    assert parse_step_sizes([1, 2]) == (1, 2)
    assert parse_step_sizes(3) == (3,)


def test_flops_formulas_of_the_three_families():
    length, vocab = 512, 50265
    rab = flops.spec_for_arch("bert_rab_base")
    orig = flops.spec_for_arch("bert_orig_base")
    swish = flops.spec_for_arch("swishrnn_bert_base")
    assert rab.encoder_only and swish.encoder_only and orig.family == "roberta"
    per_token_head = 2 * (768 * 768 + 768 * vocab)
    n = 0.15 * length
    expected = 12 * (2 * (4 * length * 768 ** 2 + 2 * length ** 2 * 768)
                     + 2 * 3 * length * 768 * 2048) + n * per_token_head
    assert flops.expected_forward_flops(swish, length, 0.15, vocab) == pytest.approx(expected)
    assert (flops.expected_forward_flops(rab, length, 0.15, vocab)
            == flops.expected_forward_flops(orig, length, 0.15, vocab))


# --- fairseq-train and fairseq-validate ------------------------------------------------------------

@pytest.mark.parametrize("arch, model_flags", [
    ("swishrnn_bert_tiny", ["--swishrnn-step-sizes", "2,1"]),
    ("bert_rab_tiny", ["--rab-shared-across-layers"]),
])
def test_trains_logs_flops_and_validates(tiny_data_bin, tmp_path, arch, model_flags):
    """fairseq-train with the stock masked_lm task, FLOPs logged every update, then
    fairseq-validate on the checkpoint (weights_only loading) with the saved model flags."""
    save_dir = tmp_path / "ckpt"
    common = ["--user-dir", USER_DIR, "--task", "masked_lm", "--criterion", "masked_lm_flops",
              "--tokens-per-sample", "64", "--batch-size", "8", "--num-workers", "0",
              "--log-format", "json", "--no-progress-bar"]
    train = run_cli([
        fairseq_cli("fairseq-train"), tiny_data_bin, *common, "--arch", arch, *model_flags,
        "--optimizer", "adam", "--lr", "1e-3", "--max-update", "4", "--log-interval", "1",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--seed", "3",
    ])
    records = [r for r in json_log_records(train.stdout + train.stderr) if "pflops" in r]
    assert len(records) >= 4
    assert all(math.isfinite(float(r["loss"])) and float(r["pflops"]) > 0 for r in records)
    valid = run_cli([fairseq_cli("fairseq-validate"), tiny_data_bin, *common,
                     "--path", save_dir / "checkpoint_last.pt"])
    output = valid.stdout + valid.stderr
    assert "Unsupported global" not in output
    losses = [float(r["valid_loss"]) for r in json_log_records(output, key="valid_loss")]
    assert losses and math.isfinite(losses[-1])
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    saved = state["args"] if state.get("args") is not None else state["cfg"]["model"]
    if arch.startswith("swishrnn"):
        assert saved.swishrnn_step_sizes == "2,1"
    else:
        assert saved.rab_shared_across_layers is True


@pytest.mark.slow
def test_layer_compiles_fullgraph_and_model_compiles():
    """Our layer (relative-bias attention + SwishRNN op) compiles without a graph break; the
    whole model compiles too (fairseq's encoder loop itself breaks the graph on `.any()`)."""
    model, task = build("swishrnn_bert_tiny")
    model.eval()
    layer = model.encoder.sentence_encoder.layers[1]  # step size 2
    x, pad = padded_input([9, 5], 64, seed=6)
    compiled_layer = torch.compile(layer, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled_layer(x, encoder_padding_mask=pad),
                                   layer(x, encoder_padding_mask=pad))
        tokens = torch.randint(5, 59, (3, 20))
        tokens[1, 14:] = task.source_dictionary.pad()
        compiled = torch.compile(model, backend="aot_eager")
        torch.testing.assert_close(compiled(tokens, features_only=True)[0],
                                   model(tokens, features_only=True)[0])


def test_classification_head_for_fine_tuning():
    """fairseq's sentence_prediction registers a head on the model and calls it by name."""
    model, _ = build("swishrnn_bert_tiny")
    model.eval()
    model.register_classification_head("sentence_classification_head", num_classes=3)
    tokens = torch.randint(5, 59, (2, 11))
    logits, _ = model(tokens, classification_head_name="sentence_classification_head")
    features = model(tokens, features_only=True)[0]
    head = model.classification_heads["sentence_classification_head"]
    torch.testing.assert_close(logits, head(features))
