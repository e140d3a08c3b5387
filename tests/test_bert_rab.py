"""BERT-orig and BERT-rab (Lei et al., §4): T5 relative-position buckets against the formula,
the relative-bias attention against fairseq's attention and a hand-written softmax(QK^T/sqrt(d)
+ bias) reference, BERT-orig as fairseq's roberta, one bias table per layer or one shared."""
import math

import pytest
import torch
from bert_models import build, count, padded_input
from fairseq.modules import MultiheadAttention

import fairseq_ext  # noqa: F401  (registers the archs)
from fairseq_ext.modules.relative_attention import (
    RelativeBiasSelfAttention,
    relative_position_bucket,
)

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


# --- the models ----------------------------------------------------------------------------------

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
