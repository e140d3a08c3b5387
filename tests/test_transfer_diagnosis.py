"""The transfer diagnosis (:mod:`fairseq_ext_lab.transfer_diagnosis`) and its random
control (:mod:`fairseq_ext.export.random_init`): each statistic
(:mod:`fairseq_ext_lab.evaluation.feature_statistics`) against a hand or brute-force
computation, a collapse planted in a tiny RoBERTa, the random-init checkpoint of a tiny trained
one, and the command line's refusals."""
import dataclasses
import itertools
import json
import math
import random
import shlex

import numpy as np
import pytest
import torch
from bert_models import build
from recipe_checks import flag_values

from conftest import WORDS
from fairseq_ext.export import random_init
from fairseq_ext.export.checkpoints import load_checkpoint, plain_config
from fairseq_ext.training.output_files import OutputError
from fairseq_ext_lab import finetuning, studies
from fairseq_ext_lab import transfer_diagnosis as td
from fairseq_ext_lab.evaluation import feature_statistics as fs

# ----------------------------------------------------------------------------------------------
# Brute-force references


def brute_mean_cosine(vectors):
    """The mean over ordered pairs ``i != j`` of the cosine, a zero row counting 0."""
    values = []
    for i, j in itertools.permutations(range(len(vectors)), 2):
        a, b = vectors[i], vectors[j]
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        values.append(0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb)))
    return float(np.mean(values))


def brute_effective_rank(vectors):
    """Roy & Vetterli's effective rank from the singular values of ``vectors`` themselves."""
    singular = np.linalg.svd(np.asarray(vectors, np.float64), compute_uv=False)
    p = singular[singular > 1e-12 * singular.max()] / singular.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def brute_jackknife_se(statistic, vectors, groups):
    """``sqrt((G - 1) / G * sum_g (theta_g - mean theta)^2)``, ``theta_g`` the statistic of the
    rows outside group ``g``, recomputed from scratch."""
    ids = sorted(set(groups.tolist()))
    thetas = np.array([statistic(vectors[groups != g]) for g in ids])
    return math.sqrt((len(ids) - 1) / len(ids) * np.sum((thetas - thetas.mean()) ** 2))


#: Non-contiguous group ids of different sizes (3, 1, 4, 2 rows), not in order.
GROUPS = np.array([7, 7, 2, 7, 9, 9, 9, 9, 4, 4])


# ----------------------------------------------------------------------------------------------
# Statistics

def test_mean_pairwise_cosine_of_three_vectors_by_hand():
    # cos(e1, e2) = 0, cos(e1, (1, 1)) = cos(e2, (1, 1)) = 1/sqrt(2): mean over the 6 ordered
    # pairs (2 * (0 + 2 / sqrt 2)) / 6 = sqrt(2) / 3
    vectors = np.array([[1.0, 0.0], [0.0, 3.0], [2.0, 2.0]])
    estimate = fs.mean_pairwise_cosine(vectors, np.array([0, 1, 2]))
    assert estimate.value == pytest.approx(math.sqrt(2) / 3, abs=1e-12)
    assert estimate.value == pytest.approx(brute_mean_cosine(vectors), abs=1e-12)


def test_mean_pairwise_cosine_and_its_jackknife_against_brute_force():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(GROUPS), 5)) + np.array([1.0, 0.5, 0, 0, 0])
    vectors[5] = 0.0  # a zero row counts as cosine 0 with every other row
    estimate = fs.mean_pairwise_cosine(vectors, GROUPS)
    assert estimate.value == pytest.approx(brute_mean_cosine(vectors), abs=1e-12)
    assert estimate.standard_error == pytest.approx(
        brute_jackknife_se(brute_mean_cosine, vectors, GROUPS), rel=1e-9)
    assert estimate.standard_error > 0


def test_identical_directions_have_cosine_one():
    vectors = np.outer(np.array([1.0, 2.0, 0.5, 3.0, 1.0, 7.0]), np.array([0.3, -1.2, 2.0]))
    estimate = fs.mean_pairwise_cosine(vectors, np.array([0, 0, 1, 1, 2, 2]))
    assert estimate.value == pytest.approx(1.0, abs=1e-12)
    assert estimate.standard_error == pytest.approx(0.0, abs=1e-12)


def test_effective_rank_of_a_planted_collapse_and_of_orthonormal_rows():
    row = np.array([0.3, -1.2, 2.0, 0.1])
    collapsed = fs.effective_rank(np.tile(row, (6, 1)), np.array([0, 0, 1, 1, 1, 2]))
    assert collapsed.value == pytest.approx(1.0, abs=1e-5)
    assert collapsed.standard_error == pytest.approx(0.0, abs=1e-5)
    for k in (1, 3, 7):
        assert fs.effective_rank(np.eye(k), np.arange(k)).value == pytest.approx(k, rel=1e-9)
    # k orthogonal rows of different lengths: p = (3, 1, 1) / 5, exp of its entropy
    p = np.array([3.0, 1.0, 1.0]) / 5
    assert fs.effective_rank(np.diag([3.0, 1.0, 1.0]), np.arange(3)).value == pytest.approx(
        math.exp(-np.sum(p * np.log(p))), rel=1e-9)


def test_effective_rank_and_its_jackknife_against_the_svd():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(len(GROUPS), 4)) * np.array([3.0, 1.0, 0.5, 0.1])
    estimate = fs.effective_rank(vectors, GROUPS)
    assert estimate.value == pytest.approx(brute_effective_rank(vectors), rel=1e-9)
    assert 1.0 < estimate.value < 4.0
    assert estimate.standard_error == pytest.approx(
        brute_jackknife_se(brute_effective_rank, vectors, GROUPS), rel=1e-6)
    assert fs.effective_rank_of_gram(np.zeros((3, 3))) == 0.0


def test_mean_over_groups_and_its_jackknife_by_hand():
    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 6.0])
    groups = np.array([5, 5, 1, 1, 1, 3])
    estimate = fs.mean_over_groups(values, groups)
    assert estimate.value == pytest.approx(26.0 / 6)
    # leave out group 5: (3 + 4 + 10 + 6) / 4; group 1: (1 + 2 + 6) / 3; group 3: 20 / 5
    thetas = np.array([23.0 / 4, 9.0 / 3, 20.0 / 5])
    expected = math.sqrt(2.0 / 3.0 * np.sum((thetas - thetas.mean()) ** 2))
    assert estimate.standard_error == pytest.approx(expected, rel=1e-12)
    assert estimate.standard_error == pytest.approx(
        brute_jackknife_se(np.mean, values, groups), rel=1e-12)
    assert math.isnan(fs.mean_over_groups(values, np.zeros(6)).standard_error)  # one group


def test_attention_entropy_of_uniform_one_hot_and_padded_attention():
    heads, batch, length = 2, 3, 6
    rng = np.random.default_rng(2)
    weights = rng.random((heads, batch, length, length))  # junk wherever a text is padded
    lengths = [6, 4, 1]
    # text 0: uniform over its 6 keys on both heads -> log2 6
    weights[:, 0] = 1.0 / 6
    # text 1 (4 real positions): head 0 uniform over 4 keys (2 bits), head 1 one-hot (0 bits);
    # the padded queries and keys keep their junk
    weights[0, 1, :4, :4] = 0.25
    weights[1, 1, :4, :4] = np.eye(4)
    # text 2: one position attends to itself
    weights[:, 2, :1, :1] = 1.0
    entropy = fs.attention_entropy_bits(weights, lengths)
    assert entropy == pytest.approx([math.log2(6), (2.0 + 0.0) / 2, 0.0], abs=1e-12)
    # queries are averaged: head 0 of text 1 with its first query one-hot, the rest uniform
    weights[0, 1, 0, :4] = [0.0, 1.0, 0.0, 0.0]
    weights[1, 1, :4, :4] = 0.25
    assert fs.attention_entropy_bits(weights, lengths)[1] == pytest.approx(
        (3 * 2.0 / 4 + 2.0) / 2, abs=1e-12)
    # a row (0.5, 0.25, 0.25, 0) has 1.5 bits
    weights[:, 1, :4, :4] = [0.5, 0.25, 0.25, 0.0]
    assert fs.attention_entropy_bits(weights, lengths)[1] == pytest.approx(1.5, abs=1e-12)


def test_accuracy_and_the_paired_difference_by_hand():
    estimate = fs.accuracy_estimate(np.array([1, 1, 1, 0]))
    assert estimate.value == pytest.approx(75.0)
    assert estimate.standard_error == pytest.approx(100 * math.sqrt(0.75 * 0.25 / 4))
    a, b = np.array([1, 1, 0, 1, 0]), np.array([1, 0, 0, 0, 1])
    # d = (0, 1, 0, 1, -1): mean 0.2; squared deviations 0.04 + 0.64 + 0.04 + 0.64 + 1.44 = 2.8,
    # sd^2 = 2.8 / 4 = 0.7, SE = sqrt(0.7 / 5)
    difference = fs.paired_accuracy_difference(a, b)
    assert difference.value == pytest.approx(20.0)
    assert difference.standard_error == pytest.approx(100 * math.sqrt(0.14))
    assert fs.paired_accuracy_difference(a, a).value == 0.0
    assert fs.paired_accuracy_difference(a, a).standard_error == 0.0


def test_linear_probe_separates_a_separable_problem():
    rng = np.random.default_rng(3)

    def rows(n):
        labels = rng.integers(0, 2, n)
        x = rng.normal(size=(n, 3)) * 0.3
        x[:, 1] += np.where(labels == 1, 4.0, -4.0) + 100.0  # far from the origin: standardised
        return x, labels

    train_x, train_y = rows(60)
    dev_x, dev_y = rows(40)
    assert set(dev_y.tolist()) == {0, 1}
    correct = fs.linear_probe(train_x, train_y, dev_x, dev_y)
    assert correct.shape == (40,) and correct.tolist() == [1.0] * 40


def test_linear_probe_of_collapsed_features_predicts_the_majority():
    train_y = np.array([1, 0, 1, 1, 0, 2, 1])  # majority: class 1
    train_x = np.tile([3.0, -1.0, 250.0], (len(train_y), 1))  # no variance at all
    dev_x = np.random.default_rng(4).normal(size=(6, 3))  # whatever dev looks like
    dev_y = np.array([0, 1, 1, 2, 1, 0])
    assert fs.linear_probe(train_x, train_y, dev_x, dev_y).tolist() == [0, 1, 1, 0, 1, 0]
    # one training label only: that label, whatever the features
    assert fs.linear_probe(np.random.default_rng(5).normal(size=(4, 3)), np.array([2] * 4),
                           dev_x, dev_y).tolist() == [0, 0, 0, 1, 0, 0]


def test_linear_probe_of_features_collapsed_up_to_float32_rounding_predicts_the_majority():
    # What mean pooling makes of a layer that writes one float32 vector at every token: the sum
    # of L copies over L, the vector up to its last bit, which depends on L.
    rng = np.random.default_rng(6)
    vector = rng.normal(size=16).astype(np.float32)
    lengths = rng.integers(3, 40, 70)
    copies = torch.from_numpy(vector).repeat(int(lengths.max()), 1)
    rows = np.stack([(copies[:n].sum(0) / n).numpy() for n in lengths]).astype(np.float64)
    rounding = rows - vector.astype(np.float64)
    assert np.abs(rounding).max() <= 4 * np.spacing(np.abs(vector).max())
    # labels that happen to follow the last bit of one feature
    feature = np.argmax(np.count_nonzero(rounding, axis=0))
    labels = (rounding[:, feature] > 0).astype(np.int64)
    majority = np.bincount(labels[:40]).argmax()
    assert not np.all(labels[40:] == majority)
    correct = fs.linear_probe(rows[:40], labels[:40], rows[40:], labels[40:])
    assert correct.tolist() == (labels[40:] == majority).astype(float).tolist()


# ----------------------------------------------------------------------------------------------
# A tiny RoBERTa, in this process

def tiny_roberta(seed=0, **overrides):
    """``roberta_tiny`` (2 blocks of dim 64, 2 heads; post-LN unless overridden) in eval mode
    and its dictionary."""
    torch.manual_seed(seed)
    model, task = build("roberta_tiny", vocab_size=60, max_positions=64, **overrides)
    return model.eval(), task.source_dictionary


def random_split(dictionary, lengths, seed):
    """``<s> w ... </s>`` rows of the given lengths (1: ``<s>``), and labels (30% class 1)."""
    rng = np.random.default_rng(seed)
    words = len(dictionary) - 1  # <mask> last
    tokens = [np.concatenate([[dictionary.bos()],
                              rng.integers(dictionary.nspecial, words, max(n - 2, 0)),
                              [dictionary.eos()]])[:n].astype(np.int64) for n in lengths]
    return td.Split(tokens, (rng.random(len(lengths)) < 0.3).astype(np.int64))


def loaded_model(model, dictionary):
    return td.LoadedModel(model=model, checkpoint=None, head_reads_last=False,
                          padding_idx=dictionary.pad())


def plant_collapse(model, block: int):
    """Block ``block`` writes one large constant vector for every token: its FFN's output is
    ``fc2.bias`` alone; post-LN, its attention sublayer's LayerNorm outputs 0 (so the block's
    output is ``LN(fc2.bias)``, up to float32 rounding); pre-LN, its attention writes
    nothing."""
    layer = model.encoder.sentence_encoder.layers[block]
    with torch.no_grad():
        layer.fc2.weight.zero_()
        layer.fc2.bias.copy_(torch.randn(layer.fc2.bias.shape) * 1e4)
        if layer.normalize_before:
            layer.self_attn.out_proj.weight.zero_()
            layer.self_attn.out_proj.bias.zero_()
        else:
            layer.self_attn_layer_norm.weight.zero_()
            layer.self_attn_layer_norm.bias.zero_()


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post-LN", "pre-LN"])
def test_collect_features_sees_a_collapse_planted_in_the_first_block(normalize_before,
                                                                      one_thread):
    model, dictionary = tiny_roberta(encoder_normalize_before=normalize_before)
    split = random_split(dictionary, [5, 9, 12, 7, 20, 3, 15, 11], seed=0)
    before = td.collect_features(loaded_model(model, dictionary), split, batch_size=3)
    plant_collapse(model, 0)
    after = td.collect_features(loaded_model(model, dictionary), split, batch_size=3)
    assert before.names == after.names == ["embeddings", "block 1", "block 2", "head features"]
    total = sum(len(t) for t in split.tokens)
    for features in (before, after):
        assert [t.shape for t in features.tokens] == [(total, 64)] * 4
        assert features.text_of_token.tolist() == np.repeat(
            np.arange(8), [len(t) for t in split.tokens]).tolist()
    groups = after.text_of_token
    # the embedding output is not touched by the collapse
    np.testing.assert_array_equal(before.tokens[0], after.tokens[0])
    for layer in range(4):
        cosine = fs.mean_pairwise_cosine(before.tokens[layer], groups).value
        rank = fs.effective_rank(before.tokens[layer], groups).value
        assert cosine < 0.5 and rank > 20, (layer, cosine, rank)
    for layer in (1, 2, 3):  # block 1 on
        cosine = fs.mean_pairwise_cosine(after.tokens[layer], groups).value
        rank = fs.effective_rank(after.tokens[layer], groups).value
        assert cosine > 0.9999 and rank < 1.05, (layer, cosine, rank)
        assert cosine == pytest.approx(brute_mean_cosine(after.tokens[layer][::4]), abs=1e-4)


def test_collect_features_pools_what_it_reports_and_ignores_padding(one_thread):
    model, dictionary = tiny_roberta()
    split = random_split(dictionary, [5, 17, 2, 9, 12], seed=1)
    loaded = loaded_model(model, dictionary)
    batched = td.collect_features(loaded, split, batch_size=2)  # padded batches
    single = td.collect_features(loaded, split, batch_size=1)  # no padding at all
    for layer in range(4):
        np.testing.assert_allclose(batched.tokens[layer], single.tokens[layer], atol=1e-5)
        for text in range(5):
            rows = batched.tokens[layer][batched.text_of_token == text]
            np.testing.assert_allclose(batched.mean_pooled[layer][text], rows.mean(0),
                                       atol=1e-5)
    firsts = [np.flatnonzero(batched.text_of_token == text)[0] for text in range(5)]
    np.testing.assert_array_equal(batched.head_pooled, batched.tokens[3][firsts])  # <s>
    np.testing.assert_allclose(batched.uniform_entropy, np.log2([5, 17, 2, 9, 12]))


def test_attention_entropy_of_zeroed_queries_and_keys_is_uniform(one_thread):
    model, dictionary = tiny_roberta()
    for layer in model.encoder.sentence_encoder.layers:
        with torch.no_grad():
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                projection.weight.zero_()
                projection.bias.zero_()
    lengths = [5, 17, 2, 9, 1]
    features = td.collect_features(loaded_model(model, dictionary),
                                   random_split(dictionary, lengths, seed=2), batch_size=3)
    assert len(features.attention_entropy) == 2  # one per block
    for entropy in features.attention_entropy:
        np.testing.assert_allclose(entropy, np.log2(lengths), atol=1e-5)


@torch.no_grad()
def direct_attention_entropy(attention, x, lengths):
    """Per text, the entropy (bits) of fairseq's ``MultiheadAttention`` probabilities on
    ``x`` (T, B, C), recomputed from its q and k projections, over real queries and keys,
    averaged over heads and queries."""
    heads = attention.num_heads
    length, batch, dim = x.shape
    q = (torch.nn.functional.linear(x, attention.q_proj.weight, attention.q_proj.bias)
         * (dim // heads) ** -0.5)
    k = torch.nn.functional.linear(x, attention.k_proj.weight, attention.k_proj.bias)
    q = q.view(length, batch, heads, -1).permute(1, 2, 0, 3).double()
    k = k.view(length, batch, heads, -1).permute(1, 2, 0, 3).double()
    out = []
    for b, n in enumerate(lengths):
        p = torch.softmax(q[b, :, :n] @ k[b, :, :n].transpose(-1, -2), dim=-1)
        out.append(float((-(p * torch.log2(p.clamp(min=1e-300)))).sum(-1).mean()))
    return np.array(out)


def test_attention_entropy_against_a_direct_recomputation(one_thread):
    model, dictionary = tiny_roberta(seed=3)
    layers = model.encoder.sentence_encoder.layers
    with torch.no_grad():  # sharpen the attention well below uniform
        for layer in layers:
            layer.self_attn.q_proj.weight.mul_(40.0)
    lengths = [6, 13, 3, 9]
    split = random_split(dictionary, lengths, seed=3)
    loaded = loaded_model(model, dictionary)
    features = td.collect_features(loaded, split, batch_size=4)
    tokens, _, _ = next(td.batches(split, 4, dictionary.pad()))
    with torch.no_grad():
        _, inner = td.forward_features(model, tokens)  # post-LN: block l reads inner[l]
    for block, layer in enumerate(layers):
        expected = direct_attention_entropy(layer.self_attn, inner[block], lengths)
        np.testing.assert_allclose(features.attention_entropy[block], expected, atol=1e-4)
        assert np.all(expected < np.log2(lengths) - 0.3), expected  # far from uniform
    # the recorder is gone: no hooks left, the fused path's switch put back
    for layer in layers:
        assert not layer.self_attn._forward_hooks and not layer.self_attn._forward_pre_hooks
        assert layer.self_attn.skip_embed_dim_check is False


def test_a_planted_collapse_probes_at_the_majority_class(one_thread):
    model, dictionary = tiny_roberta()
    rng = np.random.default_rng(7)
    train = random_split(dictionary, rng.integers(3, 20, 40), seed=8)
    dev = random_split(dictionary, rng.integers(3, 20, 30), seed=9)
    plant_collapse(model, 0)  # post-LN: every token's block-1 output is LN(fc2.bias)
    report = td.diagnose_model(loaded_model(model, dictionary), train, dev)
    majority = np.bincount(train.labels).argmax()
    at_majority = (dev.labels == majority).astype(float).tolist()
    assert report["_probe_head_correct"].tolist() == at_majority
    for row in report["layers"][1:]:  # block 1, block 2, head features
        assert row["_probe_correct"].tolist() == at_majority, row["layer"]


# ----------------------------------------------------------------------------------------------
# A sentence_prediction data-bin, written in this process

def write_data_bin(root, dictionary, splits, label_names=("neg", "pos")):
    """``root/input0`` (and ``input1`` for pairs) and ``root/label`` as fairseq-preprocess
    writes them (each row ending in ``</s>``); ``splits``: name -> (first texts, second texts or
    None, labels as indices into ``label_names``)."""
    from fairseq.data import Dictionary, indexed_dataset

    def write(folder, name, rows, vocabulary):
        (root / folder).mkdir(parents=True, exist_ok=True)
        vocabulary.save(str(root / folder / "dict.txt"))
        builder = indexed_dataset.make_builder(str(root / folder / f"{name}.bin"), "mmap",
                                               vocab_size=len(vocabulary))
        for row in rows:
            builder.add_item(torch.IntTensor([*row, vocabulary.eos()]))
        builder.finalize(str(root / folder / f"{name}.idx"))

    labels = Dictionary()
    for name in label_names:
        labels.add_symbol(name)
    for name, (first, second, classes) in splits.items():
        write("input0", name, [[dictionary.index(w) for w in text.split()] for text in first],
              dictionary)
        if second is not None:
            write("input1", name, [[dictionary.index(w) for w in text.split()]
                                   for text in second], dictionary)
        write("label", name, [[labels.index(label_names[c])] for c in classes], labels)
    return root


def test_read_split_builds_rows_as_sentence_prediction_does(tmp_path):
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for word in ("a", "b", "c", "d"):
        dictionary.add_symbol(word)
    data = write_data_bin(tmp_path / "bin", dictionary, {
        "train": (["a b", "c", "d d a b c"], ["c d", "a", "b"], [1, 0, 1]),
        "valid": (["b"], ["d"], [0])})
    index = dictionary.index
    bos, eos = dictionary.bos(), dictionary.eos()
    split = td.read_split(data, "train", max_positions=6)
    assert [row.tolist() for row in split.tokens] == [
        [bos, index("a"), index("b"), eos, eos, index("c")],  # cut at 6
        [bos, index("c"), eos, eos, index("a"), eos],
        [bos, index("d"), index("d"), index("a"), index("b"), index("c")]]
    assert split.labels.tolist() == [1, 0, 1]
    assert td.read_split(data, "train", 512, max_rows=2).tokens[1].tolist() == [
        bos, index("c"), eos, eos, index("a"), eos]
    assert len(td.read_split(data, "train", 512, max_rows=2).labels) == 2
    with pytest.raises(FileNotFoundError, match="sentence_prediction data-bin"):
        td.read_split(data, "test", 512)


# ----------------------------------------------------------------------------------------------
# The random control of a tiny trained RoBERTa (fairseq-train: slow)

@pytest.fixture(scope="module")
def trained_checkpoint(shell_trained):
    """roberta_tiny after a few updates of the demo recipe (conftest's ``shell_trained``)."""
    return shell_trained[0] / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def random_inits(trained_checkpoint, tmp_path_factory):
    """seed -> random-init checkpoint of ``trained_checkpoint`` (seed 1 twice)."""
    root = tmp_path_factory.mktemp("random_init")
    out = {}
    for name, seed in (("1", 1), ("1-again", 1), ("2", 2)):
        out[name] = root / f"seed{name}.pt"
        random_init.write_random_init(trained_checkpoint, out[name], seed)
    return out


def is_layer_norm(name):
    return "layer_norm" in name or "layernorm" in name


@pytest.mark.slow
def test_random_init_has_the_trained_names_and_shapes_and_fresh_weights(trained_checkpoint,
                                                                        random_inits):
    source = load_checkpoint(trained_checkpoint)
    trained = source["model"]
    states = {name: load_checkpoint(path) for name, path in random_inits.items()}
    fresh = states["1"]["model"]
    assert set(fresh) == set(trained)
    assert all(fresh[k].shape == trained[k].shape and fresh[k].dtype == trained[k].dtype
               for k in fresh)
    # the same draw for the same seed; another for another seed
    assert all(torch.equal(fresh[k], states["1-again"]["model"][k]) for k in fresh)
    matrices = [k for k in fresh if fresh[k].dim() == 2]
    assert len(matrices) >= 10
    for k in matrices:
        assert not torch.equal(fresh[k], states["2"]["model"][k]), k
        assert not torch.equal(fresh[k], trained[k]), k
    # init_bert_params: normal(0, 0.02) matrices, zero biases and padding rows, unit LayerNorm
    # (which training moved off 1 and 0)
    embedding = fresh["encoder.sentence_encoder.embed_tokens.weight"]
    assert float(embedding.std()) == pytest.approx(0.02, rel=0.1)
    assert float(embedding.mean()) == pytest.approx(0.0, abs=0.002)
    assert not embedding[1].any()  # <pad>
    norms = [k for k in fresh if is_layer_norm(k)]
    assert len(norms) == 2 * (1 + 2 * 2 + 1)  # embedding, 2 per block, the LM head's
    for k in norms:
        expected = torch.ones_like if k.endswith("weight") else torch.zeros_like
        assert torch.equal(fresh[k], expected(fresh[k])), k
    assert any(not torch.equal(trained[k], fresh[k]) for k in norms)
    for k in fresh:
        if k.endswith("bias"):
            assert not fresh[k].any(), k
    # no training state; the source's cfg
    for state in states.values():
        assert state["optimizer_history"][-1]["num_updates"] == 0
        assert state["cfg"] == plain_config(source["cfg"])  # arch, sizes, task and data
    assert plain_config(source["cfg"])["model"]["arch"] == "roberta_tiny"
    assert source["optimizer_history"][-1]["num_updates"] > 0
    assert states["2"]["export"]["seed"] == 2


@pytest.mark.slow
def test_random_init_refuses_to_overwrite_without_force(trained_checkpoint, random_inits,
                                                        capsys):
    out = random_inits["2"]
    before = out.read_bytes()
    with pytest.raises(OutputError, match="exists; pass --force"):
        random_init.write_random_init(trained_checkpoint, out, seed=1)
    assert out.read_bytes() == before
    assert random_init.main([str(trained_checkpoint), str(out), "--seed", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_bytes() == before
    random_init.write_random_init(trained_checkpoint, out, seed=1, force=True)
    again = load_checkpoint(out)["model"]
    seed1 = load_checkpoint(random_inits["1"])["model"]
    assert all(torch.equal(again[k], seed1[k]) for k in seed1)
    random_init.write_random_init(trained_checkpoint, out, seed=2, force=True)  # as it was


@pytest.mark.slow
def test_the_diagnosis_control_is_the_random_init_checkpoint(trained_checkpoint, random_inits,
                                                            tmp_path):
    loaded = td.load_model(trained_checkpoint, tmp_path)
    control = td.with_random(loaded, 1).model.state_dict()
    written = load_checkpoint(random_inits["1"])["model"]
    assert set(control) == set(written)
    assert all(torch.equal(control[k], written[k]) for k in written)
    # the trained model is left as it was
    trained = load_checkpoint(trained_checkpoint)["model"]
    assert all(torch.equal(loaded.model.state_dict()[k], trained[k]) for k in trained)


@pytest.mark.slow
def test_fresh_weights_leaves_the_callers_rng_as_it_was(trained_checkpoint):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    random_init.fresh_weights(trained_checkpoint, 1)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.fixture(scope="module")
def task_bin(trained_checkpoint, tmp_path_factory):
    """``(data-bin, train labels, dev labels)``: 24 train and 16 dev texts of the trained
    checkpoint's words, labelled by whether "the" is among them, as a downstream task's
    data-bin (``FortuneTopic-bin``: the fine-tune's recipe reads its TASK off the name)."""
    from fairseq.data import Dictionary

    cfg = plain_config(load_checkpoint(trained_checkpoint)["cfg"])
    dictionary = Dictionary.load(str(cfg["task"]["data"]) + "/dict.txt")
    rng = random.Random(0)

    def texts(n):
        rows = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]
        return rows, [int("the" in row.split()) for row in rows]

    (train, train_y), (valid, valid_y) = texts(24), texts(16)
    data = write_data_bin(tmp_path_factory.mktemp("task") / "FortuneTopic-bin", dictionary,
                          {"train": (train, None, train_y), "valid": (valid, None, valid_y)})
    return data, train_y, valid_y


@pytest.mark.slow
def test_the_command_line_reports_a_tiny_checkpoint_beside_its_control(trained_checkpoint,
                                                                       task_bin, tmp_path,
                                                                       capsys, one_thread):
    data, train_y, valid_y = task_bin
    out = tmp_path / "report.json"
    assert td.main([str(trained_checkpoint), str(data), "--no-finetune", "--seeds", "1",
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "transfer diagnosis of" in printed and "effective rank" in printed
    report = json.loads(out.read_text())
    assert (report["train_rows"], report["dev_rows"]) == (24, 16)
    majority = max(set(train_y), key=train_y.count)
    assert report["majority"]["value"] == pytest.approx(
        100 * sum(y == majority for y in valid_y) / 16)
    assert [row["layer"] for row in report["layers"]] == [
        "embeddings", "block 1", "block 2", "head features"]
    assert report["finetune"] == {}
    # the figures are those of the checkpoint and of its draw-1 control on the dev split
    loaded = td.load_model(trained_checkpoint, tmp_path)
    dev = td.read_split(data, "valid", 64)
    for model, key in ((loaded, "pretrained"), (td.with_random(loaded, 1), "random")):
        features = td.collect_features(model, dev)
        for layer, row in zip(features.tokens, report["layers"]):
            rank = fs.effective_rank(layer, features.text_of_token)
            cosine = fs.mean_pairwise_cosine(layer, features.text_of_token)
            assert row[key]["effective_rank"]["value"] == pytest.approx(rank.value, rel=1e-6)
            assert row[key]["effective_rank"]["se"] == pytest.approx(rank.standard_error,
                                                                     rel=1e-4)
            assert row[key]["cosine"]["value"] == pytest.approx(cosine.value, abs=1e-9)


# ----------------------------------------------------------------------------------------------
# The fixed fine-tune: the recipe, through fairseq_ext_lab.finetuning (fairseq-train: slow)

#: A short schedule for the tiny data: 3 epochs of 3 updates (24 rows, batch 8), 1 of warmup.
TINY_FINETUNE = ["--epochs", "3", "--batch", "8", "--lr", "1e-3"]
TINY_PROTOCOL = dataclasses.replace(finetuning.DIAGNOSIS_PROTOCOL, lrs=("1e-3",), epochs=3,
                                    batch=8)


def whole_rows(accuracy, rows):
    """``accuracy`` (%, fairseq's rounding to 0.1) is some number of ``rows`` right."""
    return 0 <= accuracy <= 100 and abs(accuracy / 100 * rows - round(accuracy / 100 * rows)) < 0.02


def recipe_dev_accuracy(checkpoint, data, save_dir, seed=1):
    """The dev accuracy of ``recipes/3ml/finetune_glue.sh`` run by hand on ``checkpoint`` with
    :data:`TINY_PROTOCOL`'s settings and the head on the mean of the tokens: its last
    validation (it validates after every epoch)."""
    from conftest import REPO_ROOT, json_log_records, run_cli

    proc = run_cli([REPO_ROOT / "recipes/3ml/finetune_glue.sh", "--log-format", "json",
                    "--no-progress-bar"],
                   env={"TASK": "FortuneTopic", "DATA": str(data), "PRETRAINED": str(checkpoint),
                        "LR": "1e-3", "SEED": str(seed), "EPOCHS": "3", "BATCH_SIZE": "8",
                        "MAX_SENTENCES": "8", "POOLING": "mean", "CPU": "1", "NUM_WORKERS": "0",
                        "SAVE_DIR": str(save_dir), "LOG_FILE": ""})
    return [float(r["valid_accuracy"]) for r in json_log_records(proc.stdout, "valid_accuracy")][-1]


@pytest.fixture(scope="module")
def fine_tuned(trained_checkpoint, task_bin, tmp_path_factory):
    """(result, run dir) of :func:`finetuning.fine_tune_checkpoint` on the trained checkpoint,
    seed 1, the mean head, scored on train and dev by fairseq-validate."""
    root = tmp_path_factory.mktemp("fine_tuned")
    result = finetuning.fine_tune_checkpoint(
        TINY_PROTOCOL, trained_checkpoint, task_bin[0], "FortuneTopic", 1, root / "exports",
        root / "run", env={"POOLING": "mean"}, score=("train", "valid"))
    return result, root / "run"


@pytest.mark.slow
def test_a_checkpoint_s_fine_tune_is_the_recipe_s_run_scored_on_train_by_fairseq_validate(
        trained_checkpoint, task_bin, fine_tuned, tmp_path, one_thread):
    from fairseq import checkpoint_utils

    data, train_y, valid_y = task_bin
    result, run_dir = fine_tuned
    # the recipe run by hand with the same settings ends at the same dev accuracy
    assert result["accuracy"] == recipe_dev_accuracy(trained_checkpoint, data, tmp_path)
    # the kept model is the final one: fairseq-validate scores dev as the run did, every row
    assert result["valid_accuracy"] == result["accuracy"]
    assert (result["train_rows"], result["valid_rows"]) == (24, 16)
    assert whole_rows(result["train_accuracy"], 24) and whole_rows(result["accuracy"], 16)
    # the train accuracy is the final model's argmax on each train row, recomputed here
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(run_dir / "checkpoints" / finetuning.FINAL_MODEL)])
    model = models[0].eval()
    train = td.read_split(data, "train", 64)
    assert train.labels.tolist() == train_y
    with torch.no_grad():
        right = sum(int(model(torch.from_numpy(tokens)[None], features_only=True,
                              classification_head_name="sentence_classification_head")[0]
                        .argmax(-1)) == label for tokens, label in zip(train.tokens, train.labels))
    assert result["train_accuracy"] == pytest.approx(round(100 * right / 24, 1))
    log = (run_dir / "train.log").read_text()
    assert "--lr 1e-3" in log and "--max-epoch 3" in log and "--total-num-update 9" in log
    assert "--warmup-updates 1" in log and "--seed 1" in log and "--batch-size 8" in log


@pytest.mark.slow
def test_the_diagnosis_fine_tunes_each_arm_through_the_recipe(trained_checkpoint, task_bin,
                                                              random_inits, fine_tuned,
                                                              tmp_path, capsys, one_thread):
    data, _, _ = task_bin
    out = tmp_path / "report.json"
    assert td.main([str(trained_checkpoint), str(data), "--seeds", "1", "--pooling", "mean",
                    *TINY_FINETUNE, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    entry = report["finetune"]["mean"]
    result, _ = fine_tuned
    # the pre-trained arm is fine_tune_checkpoint's run of the same checkpoint and seed
    assert entry["dev"]["per_seed"]["pretrained"] == [result["accuracy"]]
    assert entry["train"]["per_seed"]["pretrained"] == [result["train_accuracy"]]
    # the control is random_init's draw 1 of the checkpoint, through the same recipe
    assert entry["dev"]["per_seed"]["random"] == [
        recipe_dev_accuracy(random_inits["1"], data, tmp_path / "random")]
    assert whole_rows(entry["train"]["per_seed"]["random"][0], 24)
    assert report["settings"]["task"] == "FortuneTopic"
    assert report["settings"]["finetune"] == {
        "recipe": "recipes/3ml/finetune_glue.sh", "lr": "1e-3", "epochs": 3, "batch": 8,
        "warmup_share": 0.06, "schedule": studies.THREE_ML_FINETUNE.schedule}
    assert "fixed fine-tune (recipes/3ml/finetune_glue.sh, 3 epochs of batch 8, lr 1e-3" \
        in capsys.readouterr().out


def test_the_command_line_maps_its_fine_tune_onto_the_recipe(tmp_path, monkeypatch):
    from fairseq.data import Dictionary
    from recipe_checks import dry_run

    from conftest import REPO_ROOT

    dictionary = Dictionary()
    for word in ("a", "b", "c"):
        dictionary.add_symbol(word)
    data = write_data_bin(tmp_path / "GlossTopic-bin", dictionary, {
        "train": (["a b", "c", "b"] * 7, None, [0, 1, 1] * 7), "valid": (["a"], None, [0])})
    asked = {}
    monkeypatch.setattr(td, "diagnose", lambda checkpoint, data, settings: asked.setdefault(
        "settings", settings) and {})
    monkeypatch.setattr(td, "format_report", lambda report: "")
    # the defaults are the chosen protocol's, through the demo's recipe
    td.main([str(tmp_path / "model.pt"), str(data)])
    defaults = asked.pop("settings")
    assert defaults.finetune == finetuning.DIAGNOSIS_PROTOCOL == td.DiagnosisSettings().finetune
    assert (defaults.finetune.recipe, defaults.finetune.lrs, defaults.finetune.epochs,
            defaults.finetune.batch, defaults.finetune.warmup_share) == (
        "recipes/3ml/finetune_glue.sh", (finetuning.CHOSEN_LR,), finetuning.CHOSEN_EPOCHS, 16,
        0.06)
    td.main([str(tmp_path / "model.pt"), str(data), "--lr", "2e-4", "--epochs", "4",
             "--batch", "6", "--seeds", "5"])
    settings = asked.pop("settings")
    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    protocol = td.family_protocol(td.LoadedModel(None, encoder, False, 1, "roberta"),
                                  settings.finetune)
    run = finetuning.checkpoint_run(protocol, data, "GlossTopic", 5,
                                    {"POOLING": td.recipe_pooling("roberta", "head")})
    env, args = finetuning.recipe_inputs(
        protocol, run, None, encoder, ["--arch", "roberta_tiny", "--max-positions", "64"],
        save_dir=tmp_path / "kept")
    assert (env["LR"], env["EPOCHS"], env["BATCH_SIZE"], env["SEED"], env["POOLING"]) == (
        "2e-4", "4", "6", "5", "first")
    _, flags = dry_run(REPO_ROOT / protocol.recipe, *args, **{
        k: v for k, v in env.items() if k not in ("PATH", "HOME")})
    # 21 rows in batches of 6: 4 updates an epoch, 16 in all, 6% of them (1) warming up
    assert (flags["--lr"], flags["--max-epoch"], flags["--total-num-update"],
            flags["--warmup-updates"], flags["--seed"], flags["--batch-size"]) == (
        "2e-4", "4", "16", "1", "5", "6")
    assert (flags["--arch"], flags["--weight-decay"], flags["--dropout"],
            flags["--restore-file"], flags["--save-dir"]) == (
        "roberta_tiny", "0.1", "0.1", str(encoder), str(tmp_path / "kept"))
    assert "--no-save" not in flags and flags["--valid-subset"] == "valid"


#: Each family's tiny arch and the study whose protocol fine-tunes it.
STUDY_OF_ARCH = {"roberta_tiny": "3ml", "3ml_self_tiny": "3ml", "3ml_cross_tiny": "3ml",
                 "bert_orig_tiny": "swishrnn", "bert_rab_tiny": "swishrnn",
                 "swishrnn_bert_tiny": "swishrnn", "bidir_lm_tiny": "bidirectional"}


def test_each_family_fine_tunes_with_the_protocol_its_study_uses():
    families = {arch: td.family_of_arch(arch) for arch in STUDY_OF_ARCH}
    assert set(families.values()) == set(td.FAMILY_FINETUNE)
    for arch, study in STUDY_OF_ARCH.items():
        assert td.FAMILY_FINETUNE[families[arch]].protocol is studies.STUDIES[study].finetune
    # every model of the SwishRNN study (its ARCH, else the protocol's) is fine-tuned so
    swishrnn = studies.STUDIES["swishrnn"]
    for model in swishrnn.models:
        family = td.family_of_arch(model.env.get("ARCH", swishrnn.finetune.env["ARCH"]))
        assert td.FAMILY_FINETUNE[family].protocol is swishrnn.finetune, model.name
    assert {arch: td.FAMILY_FINETUNE[family].protocol.recipe
            for arch, family in families.items()} == {
        arch: f"recipes/{study}/finetune_glue.sh"
        for arch, study in STUDY_OF_ARCH.items()}
    assert td.family_of_arch("roberta_pooled") is None  # no study fine-tunes it
    # the encoders' heads read <s>, the left-to-right LM's its last token
    assert {family: td.recipe_pooling(family, "head") for family in td.FAMILY_FINETUNE} == {
        "roberta": "first", "3ml": "first", "bert_orig": "first", "bert_rab": "first",
        "swishrnn_bert": "first", "bidirectional_lm": "last"}
    assert {td.recipe_pooling(family, "mean") for family in td.FAMILY_FINETUNE} == {"mean"}


def built_loaded(arch, path, task_cfg=None, **overrides):
    """A :class:`td.LoadedModel` of ``arch`` built in this process (64 positions), its config
    the model's args as a checkpoint keeps them."""
    torch.manual_seed(0)
    model, task = build(arch, max_positions=64, **overrides)
    return td.LoadedModel(model.eval(), path, False, task.source_dictionary.pad(),
                          td.family_of_arch(arch),
                          {"model": dict(vars(model.args)), "task": dict(task_cfg or {})})


@pytest.mark.parametrize("arch, overrides, task_cfg, wanted", [
    # flags its arch does not set: three pre-LN layers, steps 1 and 2
    ("swishrnn_bert_tiny", dict(encoder_layers=3, encoder_normalize_before=True,
                                swishrnn_step_sizes="1,2"), {},
     {"--arch": "swishrnn_bert_tiny", "--max-positions": "64", "--encoder-layers": "3",
      "--encoder-normalize-before": True, "--swishrnn-step-sizes": "1,2",
      "--classification-pooling": "first", "--weight-decay": "0.0"}),
    ("bert_rab_tiny", dict(rab_num_buckets=16), {},
     {"--arch": "bert_rab_tiny", "--rab-num-buckets": "16", "--rab-max-distance": "128",
      "--classification-pooling": "first"}),
    ("bert_orig_tiny", {}, {}, {"--arch": "bert_orig_pooled_tiny",
                                "--classification-pooling": "first"}),
    # hyb_pre was pre-trained with a bidirectional prefix: R_BIDIR 1, as its study's arm
    ("bidir_lm_tiny", {}, {"variant": "hyb_pre"},
     {"--arch": "bidir_lm_tiny", "--max-target-positions": "64", "--r-bidir": "1",
      "--classification-pooling": "last", "--weight-decay": "0.1"}),
    ("bidir_lm_tiny", {}, {"variant": "msk_uni"}, {"--r-bidir": "0"}),
])
def test_the_family_protocol_rebuilds_the_checkpoint_through_its_study_s_recipe(
        arch, overrides, task_cfg, wanted, tmp_path):
    from fairseq.data import Dictionary
    from recipe_checks import dry_run

    from conftest import REPO_ROOT

    dictionary = Dictionary()
    data = write_data_bin(tmp_path / "RTE-bin", dictionary, {
        "train": ([""] * 20, None, [0, 1] * 10), "valid": ([""], None, [0])})
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"")
    loaded = built_loaded(arch, checkpoint, task_cfg, **overrides)
    schedule = dataclasses.replace(finetuning.DIAGNOSIS_PROTOCOL, lrs=("2e-4",), epochs=3,
                                   batch=5)
    protocol = td.family_protocol(loaded, schedule)
    assert protocol.recipe == studies.STUDIES[STUDY_OF_ARCH[arch]].finetune.recipe
    assert (protocol.lrs, protocol.epochs, protocol.batch, protocol.warmup_share) == (
        ("2e-4",), 3, 5, 0.06)
    run = finetuning.checkpoint_run(protocol, data, "RTE", 4,
                                    {"POOLING": td.recipe_pooling(loaded.family, "head")})
    env, args = finetuning.recipe_inputs(protocol, run, None, checkpoint,
                                         save_dir=tmp_path / "kept")
    _, flags = dry_run(REPO_ROOT / protocol.recipe, *args, **{
        k: v for k, v in env.items() if k not in ("PATH", "HOME")})
    # 20 rows in batches of 5: 4 updates an epoch, 12 in all
    assert (flags["--restore-file"], flags["--lr"], flags["--max-update"], flags["--seed"],
            flags["--save-dir"]) == (str(checkpoint), "2e-4", "12", "4", str(tmp_path / "kept"))
    assert "--no-save" not in flags
    assert {flag: flags.get(flag) for flag in wanted} == wanted


def test_a_checkpoint_the_fine_tune_cannot_rebuild_is_refused_in_one_line(tmp_path):
    with pytest.raises(td.DiagnosisError, match=r"pooled\.pt is a PooledRobertaModel: the fixed "
                       r"fine-tune takes checkpoints of roberta, 3ml, .*; pass --no-finetune"):
        td.family_protocol(built_loaded("roberta_pooled", "pooled.pt", encoder_layers=2,
                                        encoder_embed_dim=64, encoder_ffn_embed_dim=128,
                                        encoder_attention_heads=2), finetuning.DIAGNOSIS_PROTOCOL)
    with pytest.raises(td.DiagnosisError, match="layernorm_embedding is False where its arch "
                       "bert_orig_tiny sets True, which --layernorm-embedding cannot set back"):
        td.family_protocol(built_loaded("bert_orig_tiny", "orig.pt", layernorm_embedding=False),
                           finetuning.DIAGNOSIS_PROTOCOL)
    for task_cfg in ({}, {"variant": "hyb_pre", "n_bidir": "n"}):
        with pytest.raises(td.DiagnosisError, match="lm.pt was not pre-trained with one of "
                           "--variant nxt_uni, .* and its own n_bidir"):
            td.family_protocol(built_loaded("bidir_lm_tiny", "lm.pt", task_cfg),
                               finetuning.DIAGNOSIS_PROTOCOL)


def pretrain(args, tiny_data_bin, save_dir):
    """A checkpoint of a few ``fairseq-train`` updates on ``tiny_data_bin`` (the dictionary of
    ``task_bin``), 32 positions."""
    from conftest import USER_DIR, fairseq_cli, run_cli

    run_cli([fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR, *args,
             "--tokens-per-sample", "32", "--optimizer", "adam", "--lr", "1e-3",
             "--max-update", "4", "--cpu", "--num-workers", "0", "--no-progress-bar",
             "--no-epoch-checkpoints", "--save-dir", save_dir], env={"OMP_NUM_THREADS": "1"})
    return save_dir / "checkpoint_last.pt"


@pytest.mark.slow
@pytest.mark.parametrize("pretraining, study, recipe_env, model_flags", [
    (["--task", "masked_lm", "--criterion", "masked_lm", "--arch", "swishrnn_bert_tiny",
      "--batch-size", "4", "--encoder-layers", "3", "--encoder-normalize-before",
      "--swishrnn-step-sizes", "1,2"], "swishrnn",
     {"ARCH": "swishrnn_bert_tiny", "MAX_POSITIONS": "32"},
     ("--encoder-layers", "3", "--encoder-normalize-before", "--swishrnn-step-sizes", "1,2")),
    (["--task", "bidirectional_lm", "--criterion", "bidirectional_lm", "--variant", "hyb_pre",
      "--arch", "bidir_lm_tiny", "--max-tokens", "256"], "bidirectional",
     {"ARCH": "bidir_lm_tiny", "MAX_TARGET_POSITIONS": "32", "R_BIDIR": "1"}, ()),
], ids=["swishrnn_bert", "bidirectional_lm"])
def test_the_diagnosis_fine_tunes_a_family_as_its_study_s_recipe_does(
        pretraining, study, recipe_env, model_flags, tiny_data_bin, task_bin, tmp_path, capsys,
        one_thread):
    data, _, _ = task_bin
    checkpoint = pretrain(pretraining, tiny_data_bin, tmp_path / "pretrained")
    out = tmp_path / "report.json"
    assert td.main([str(checkpoint), str(data), "--seeds", "1", "--pooling", "head",
                    *TINY_FINETUNE, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    recipe = studies.STUDIES[study].finetune.recipe
    assert report["settings"]["finetune"]["recipe"] == recipe
    assert f"fixed fine-tune ({recipe}, 3 epochs of batch 8, lr 1e-3" in capsys.readouterr().out
    # the study's protocol by hand, with the checkpoint's arch, positions, flags and attention
    protocol = studies.STUDIES[study].finetune
    protocol = dataclasses.replace(
        protocol, arms=(), env={**protocol.env, **recipe_env}, extra_args=model_flags,
        model_env_keys=(), model_args=False, lrs=("1e-3",), epochs=3, batch=8)
    head = "last" if study == "bidirectional" else "first"
    result = finetuning.fine_tune_checkpoint(
        protocol, checkpoint, data, "FortuneTopic", 1, tmp_path / "exports", tmp_path / "run",
        env={"POOLING": head}, score=("train",))
    entry = report["finetune"]["head"]
    assert entry["dev"]["per_seed"]["pretrained"] == [result["accuracy"]]
    assert entry["train"]["per_seed"]["pretrained"] == [result["train_accuracy"]]
    assert whole_rows(entry["dev"]["per_seed"]["random"][0], 16)
    assert whole_rows(entry["train"]["per_seed"]["random"][0], 24)
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"Loaded checkpoint {checkpoint}" in log
    command = flag_values(shlex.split(next(line for line in log.splitlines()
                                           if line.startswith("+ "))[2:]))
    wanted = {"--arch": recipe_env["ARCH"], "--classification-pooling": head,
              **flag_values(list(model_flags))}
    if "R_BIDIR" in recipe_env:
        wanted["--r-bidir"] = recipe_env["R_BIDIR"]
    assert {flag: command.get(flag) for flag in wanted} == wanted


# ----------------------------------------------------------------------------------------------
# The command line's refusals

def test_the_command_line_refuses_a_data_dir_that_is_not_a_sentence_prediction_bin(tmp_path,
                                                                                   capsys):
    data = tmp_path / "pretraining-bin"
    data.mkdir()
    (data / "dict.txt").write_text("the 3\n")
    with pytest.raises(SystemExit) as exit_:
        td.main([str(tmp_path / "model.pt"), str(data), "--no-finetune"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{data} is not a sentence_prediction data-bin (no input0/ and label/)" in err
    assert "scripts/prepare_downstream.sh" in err


@pytest.mark.parametrize("flag, value", [("--epochs", "0"), ("--batch", "0"), ("--lr", "0")])
def test_the_command_line_refuses_settings_that_are_not_positive(flag, value, tmp_path, capsys):
    data = tmp_path / "bin"
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    with pytest.raises(SystemExit) as exit_:
        td.main([str(tmp_path / "model.pt"), str(data), flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "must be positive" in err and f"{flag} {value}" in err


def test_the_command_line_refuses_an_existing_out_without_force(tmp_path, capsys):
    data = tmp_path / "bin"
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    out = tmp_path / "report.json"
    out.write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        td.main([str(tmp_path / "model.pt"), str(data), "--out", str(out)])
    assert exit_.value.code == 2
    assert f"--out {out} exists; choose another path or pass --force" in capsys.readouterr().err
    assert out.read_text() == "{}"


def test_the_command_line_refuses_max_rows_with_the_fine_tune(tmp_path, capsys):
    data = tmp_path / "FortuneTopic-bin"
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    with pytest.raises(SystemExit) as exit_:
        td.main([str(tmp_path / "model.pt"), str(data), "--max-rows", "50"])
    assert exit_.value.code == 2
    assert "--max-rows 50 reads part of each split" in capsys.readouterr().err


@pytest.mark.parametrize("name, task", [("bin", None), ("FortuneTopic-bin", "fortunes")])
def test_the_command_line_refuses_a_fine_tune_without_a_recipe_task(name, task, tmp_path,
                                                                     capsys):
    data = tmp_path / name
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    with pytest.raises(SystemExit) as exit_:
        td.main([str(tmp_path / "model.pt"), str(data)] + (["--task", task] if task else []))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"the fine-tune's TASK {task or 'bin'!r}" in err and "FortuneTopic" in err
    assert td.finetune_task(data, "rte") == "RTE"
    assert td.finetune_task(tmp_path / "GlossPair-bin") == "GlossPair"
