"""BERT-orig, BERT-rab and SwishRNN-BERT (Lei et al.): T5 relative buckets against the formula,
relative-bias attention against fairseq's attention and a hand-written reference, padding
invariance, the SwishRNN layer against its composition, Table 3 parameter counts, step-size
cycling, config errors, and fairseq-train / fairseq-validate end to end."""
import argparse
import math
import re

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.modules import MultiheadAttention

import fairseq_ext  # noqa: F401  (registers the archs)
from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli
from fairseq_ext import flops
from fairseq_ext.model_building import MaskedLmTaskStub, build_arch
from fairseq_ext.models.swishrnn_bert import matched_hidden_dim, parse_step_sizes
from fairseq_ext.modules.relative_attention import (
    RelativeBiasSelfAttention,
    relative_position_bucket,
)


def build(arch, vocab_size=60, max_positions=64, **overrides):
    task = MaskedLmTaskStub(vocab_size)
    return build_arch(arch, task, max_positions, **overrides), task


def count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture
def build_uninitialised(monkeypatch):
    """``build`` without BERT's weight initialisation (a CPU-side normal_ over every weight,
    seconds at large size), for tests that only count parameters."""
    import fairseq.models.roberta.model as roberta_model

    import fairseq_ext.models.bert_rab as bert_rab

    for module in (roberta_model, bert_rab):
        monkeypatch.setattr(module, "init_bert_params", lambda _: None)
    return lambda arch, **kwargs: build(arch, **kwargs)[0]


# --- T5 buckets ------------------------------------------------------------------------------------

def t5_bucket(offset, num_buckets=32, max_distance=128):
    """Raffel et al. (2020), bidirectional, one offset at a time in plain Python."""
    half = num_buckets // 2
    bucket = half if offset > 0 else 0
    distance, exact = abs(offset), half // 2
    if distance < exact:
        return bucket + distance
    large = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (half - exact))
    return bucket + min(large, half - 1)


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20)])
def test_buckets_match_the_t5_formula(num_buckets, max_distance):
    offsets = torch.arange(-300, 301)
    got = relative_position_bucket(offsets, num_buckets, max_distance).tolist()
    assert got == [t5_bucket(o, num_buckets, max_distance) for o in offsets.tolist()]


def test_bucket_landmarks_at_the_defaults():
    at = dict(zip(range(-200, 201), relative_position_bucket(torch.arange(-200, 201)).tolist()))
    assert [at[o] for o in (0, -1, -7, 1, 7)] == [0, 1, 7, 17, 23]  # exact distances
    assert at[-8] == 8 and at[8] == 24  # first logarithmic bucket
    assert at[-127] == 15 and at[-128] == 15 and at[-200] == 15  # far left shares the last
    assert at[128] == 31 and at[200] == 31
    values = [at[o] for o in range(0, -201, -1)]
    assert values == sorted(values)  # monotone in distance


# --- the attention ---------------------------------------------------------------------------------

def attention_pair(dim=16, heads=4, seed=0):
    torch.manual_seed(seed)
    ours = RelativeBiasSelfAttention(dim, heads).eval()
    stock = MultiheadAttention(dim, heads, self_attention=True).eval()
    stock.load_state_dict({k: v for k, v in ours.state_dict().items() if "position_bias" not in k})
    return ours, stock


def padded_input(lengths, dim, left=False, seed=1):
    torch.manual_seed(seed)
    length = max(lengths)
    x = torch.randn(length, len(lengths), dim)
    pad = torch.zeros(len(lengths), length, dtype=torch.bool)
    for row, n in enumerate(lengths):
        if left:
            pad[row, :length - n] = True
        else:
            pad[row, n:] = True
    return x, pad


def test_zero_bias_equals_fairseq_attention():
    ours, stock = attention_pair()
    torch.nn.init.zeros_(ours.position_bias.relative_attention_bias.weight)
    x, pad = padded_input([9, 6, 3], 16)
    expected, _ = stock(x, x, x, key_padding_mask=pad, need_weights=False)
    got, _ = ours(x, x, x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_bias_is_added_per_head_to_the_logits():
    ours, _ = attention_pair()
    table = ours.position_bias.relative_attention_bias.weight  # (buckets, heads)
    torch.nn.init.normal_(table, std=1.0)
    x, pad = padded_input([11, 7], 16)
    length, bsz, dim = x.shape
    heads, head_dim = 4, 4
    q, k, v = (p(x).view(length, bsz, heads, head_dim).permute(1, 2, 0, 3)
               for p in (ours.q_proj, ours.k_proj, ours.v_proj))
    offsets = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    buckets = [[t5_bucket(o) for o in row] for row in offsets.tolist()]
    bias = table[torch.tensor(buckets)].permute(2, 0, 1)  # (H, T, S)
    logits = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + bias
    logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
    probs = logits.softmax(-1)
    expected = ours.out_proj((probs @ v).permute(2, 0, 1, 3).reshape(length, bsz, dim))
    fused, _ = ours(x, x, x, key_padding_mask=pad, need_weights=False)
    explicit, weights = ours(x, x, x, key_padding_mask=pad, need_head_weights=True)
    torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(explicit, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights, probs.transpose(0, 1), rtol=1e-5, atol=1e-6)


def test_attention_refuses_cross_attention():
    ours, _ = attention_pair()
    x, other = torch.randn(5, 2, 16), torch.randn(5, 2, 16)
    with pytest.raises(ValueError, match="self-attention"):
        ours(x, other, other)


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


def test_bert_orig_is_fairseqs_roberta_and_rab_adds_one_table_per_layer(build_uninitialised):
    orig = build_uninitialised("bert_orig_base", vocab_size=50265, max_positions=512)
    roberta = build_uninitialised("roberta_base", vocab_size=50265, max_positions=512)
    rab = build_uninitialised("bert_rab_base", vocab_size=50265, max_positions=512)
    shared = build_uninitialised("bert_rab_base", vocab_size=50265, max_positions=512,
                           rab_shared_across_layers=True)
    assert type(orig) is type(roberta) and count(orig) == count(roberta)
    assert count(rab) - count(orig) == 12 * 32 * 12
    assert count(shared) - count(orig) == 32 * 12
    assert count(orig) / 1e6 == pytest.approx(124.7, abs=0.1)


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


def test_shared_table_is_one_module_and_survives_a_state_dict_round_trip():
    model, _ = build("bert_rab_tiny", rab_shared_across_layers=True)
    layers = model.encoder.sentence_encoder.layers
    assert layers[0].self_attn.position_bias is layers[1].self_attn.position_bias
    torch.nn.init.normal_(layers[0].self_attn.position_bias.relative_attention_bias.weight)
    clone, _ = build("bert_rab_tiny", rab_shared_across_layers=True)
    clone.load_state_dict(model.state_dict())
    tokens = torch.randint(5, 59, (2, 9))
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(tokens)[0], model(tokens)[0])


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
