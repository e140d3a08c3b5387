"""Generalized bidirectionality (Artetxe et al., 2022): the attention mask against a plain-Python
reading of §2 / footnote 4, the ``bidirectional_lm`` model (which outputs depend on which
inputs, the causal default, parameter counts vs Table 2, classification heads), the
``bidirectional_lm`` criterion against a hand computation, and its FLOPs against
FlopCounterMode and Table 2's cost column. Batches are built by hand here (Figure 3's
reordering: masked tokens move to the end of their document with their positions)."""
import argparse
import math
import random

import pytest
import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase

import fairseq_ext  # noqa: F401  (registers archs and criteria)
import fairseq_ext.models.bidirectional_lm as bidirectional_lm
from fairseq_ext import flops
from fairseq_ext.criterions.bidirectional_lm import BidirectionalLmLoss
from fairseq_ext.flops.measure import flop_counter
from fairseq_ext.flops.training_metrics import TRAIN_FLOPS_KEY
from fairseq_ext.models.validation import check_run_config
from fairseq_ext.modules.bidirectional_attention_mask import (
    additive_attention_mask,
    causal_layout,
    index_in_document,
    may_attend,
)
from fairseq_ext.modules.sdpa_attention import MaskedSelfAttention
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch

VOCAB = 40
GPT2_DICTIONARY = 50265  # fairseq's GPT-2 BPE dict.txt (50,260) + 4 specials + <mask>


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def tiny_model(arch="bidir_lm_tiny", task=None, seed=0, **overrides):
    torch.manual_seed(seed)
    task = task or MaskedLmTaskStub(VOCAB)
    overrides = {"dropout": 0.0, "attention_dropout": 0.0, **overrides}
    model = build_arch(arch, task, 64, **overrides)
    return model.eval(), task


# --- batches by hand (Figure 3) ---------------------------------------------------------------

def reorder_document(tokens, masked, n_bidir, n_predict, mask_idx, pad):
    """Figure 3: the ``masked`` original indices become ``<mask>`` and move, with their
    positions, to the end; the last ``n_predict`` slots are predicted (the masked token for a
    ``<mask>``, the original next token otherwise, the first token again after the last).
    Returns ``(inputs, positions, targets)`` and ``n_bidir``."""
    kept = [p for p in range(len(tokens)) if p not in masked]
    order = kept + sorted(masked)
    inputs = [tokens[p] for p in kept] + [mask_idx] * len(masked)
    targets = [tokens[p] if p in masked else tokens[(p + 1) % len(tokens)] for p in order]
    first_predicted = len(tokens) - n_predict
    targets = [t if s >= first_predicted else pad for s, t in enumerate(targets)]
    return inputs, order, targets, n_bidir


def pack(rows, length, pad):
    """Rows of reordered documents -> the task's batch (right-padded to ``length``)."""
    fields = {name: torch.full((len(rows), length), value, dtype=torch.long) for name, value in
              (("src_tokens", pad), ("src_positions", 0), ("doc_ids", -1), ("bidir_lens", 0),
               ("target", pad))}
    for b, documents in enumerate(rows):
        column = 0
        for d, (inputs, positions, targets, n_bidir) in enumerate(documents):
            span = slice(column, column + len(inputs))
            fields["src_tokens"][b, span] = torch.tensor(inputs)
            fields["src_positions"][b, span] = torch.tensor(positions)
            fields["doc_ids"][b, span] = d
            fields["bidir_lens"][b, span] = n_bidir
            fields["target"][b, span] = torch.tensor(targets)
            column += len(inputs)
        assert column <= length
    lengths = fields["src_tokens"].ne(pad).sum(dim=1)
    net_input = {k: fields[k] for k in ("src_tokens", "src_positions", "doc_ids", "bidir_lens")}
    net_input["src_lengths"] = lengths
    target = fields["target"]
    return {"id": torch.arange(len(rows)), "nsentences": len(rows),
            "ntokens": int(target.ne(pad).sum()), "net_input": net_input, "target": target}


def random_rows(rng, task, n_rows, length, max_docs=3, max_doc_length=7):
    """Random rows of 1-``max_docs`` documents with random masks, bidirectional prefixes
    (0 and n included) and prediction suffixes, padding after."""
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    first_word = task.source_dictionary.nspecial
    rows = []
    for row in range(n_rows):
        documents, used = [], 0
        # the first row always packs max_docs short documents
        n_docs = max_docs if row == 0 else rng.randint(1, max_docs)
        longest = min(max_doc_length, (length - 1) // max_docs) if row == 0 else max_doc_length
        for _ in range(n_docs):
            n = rng.randint(1, longest)
            if used + n > length - 1:  # keep at least one padding column in most rows
                break
            tokens = [rng.randrange(first_word, mask_idx) for _ in range(n)]
            masked = set(rng.sample(range(n), rng.randint(0, n // 2)))
            n_bidir = rng.choice([0, n, rng.randint(0, n)])
            n_predict = rng.randint(len(masked), n)
            documents.append(reorder_document(tokens, masked, n_bidir, n_predict, mask_idx, pad))
            used += n
        rows.append(documents)
    return rows


# --- 1. the mask against the rule -------------------------------------------------------------

def reference_mask(doc_ids, bidir_lens, cross_document):
    """§2 and footnote 4 read literally, one (query, key) pair at a time."""
    batch, length = doc_ids.shape
    allowed = torch.zeros(batch, 1, length, length, dtype=torch.bool)
    for b in range(batch):
        docs = doc_ids[b].tolist()
        index = [sum(1 for k in range(c) if docs[k] == docs[c]) for c in range(length)]
        for i in range(length):
            for j in range(length):
                if docs[i] < 0:
                    allowed[b, 0, i, j] = i == j  # padding: itself only (no empty row)
                elif docs[j] < 0:
                    allowed[b, 0, i, j] = False
                elif docs[j] == docs[i]:
                    # "j <= max(i, n_bidir)" with 1-based indices
                    allowed[b, 0, i, j] = index[j] + 1 <= max(index[i] + 1,
                                                              int(bidir_lens[b, i]))
                else:
                    allowed[b, 0, i, j] = cross_document and docs[j] < docs[i]
    return allowed


@pytest.mark.parametrize("cross_document", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_mask_matches_the_rule_on_random_layouts(cross_document, seed):
    rng = random.Random(seed)
    task = MaskedLmTaskStub(VOCAB)
    sample = pack(random_rows(rng, task, 5, 16), 16, task.source_dictionary.pad())
    doc_ids, bidir_lens = sample["net_input"]["doc_ids"], sample["net_input"]["bidir_lens"]
    assert int(doc_ids.max()) >= 1 and bool(doc_ids.eq(-1).any())  # several docs, padding
    expected = reference_mask(doc_ids, bidir_lens, cross_document)
    allowed = may_attend(doc_ids, bidir_lens, cross_document)
    assert allowed.shape == (5, 1, 16, 16) and allowed.dtype == torch.bool
    assert torch.equal(allowed, expected)


def test_mask_by_hand():
    # one row: a document of 4 tokens with n_bidir 2, then one of 2 with n_bidir 0, then padding
    doc_ids = torch.tensor([[0, 0, 0, 0, 1, 1, -1]])
    bidir_lens = torch.tensor([[2, 2, 2, 2, 0, 0, 0]])
    rows = [
        [1, 1, 0, 0, 0, 0, 0],  # index 0 sees the prefix (0, 1)
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0],  # second document: all of the first, then causal
        [1, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 1],  # padding: itself only
    ]
    expected = torch.tensor(rows, dtype=torch.bool).view(1, 1, 7, 7)
    assert torch.equal(may_attend(doc_ids, bidir_lens), expected)
    expected[0, 0, 4:6, :4] = False
    assert torch.equal(may_attend(doc_ids, bidir_lens, cross_document=False), expected)
    assert index_in_document(doc_ids).tolist() == [[0, 1, 2, 3, 0, 1, 0]]


def test_additive_mask_gives_no_nan():
    doc_ids = torch.tensor([[0, 0, -1, -1], [-1, -1, -1, -1]])
    allowed = may_attend(doc_ids, torch.zeros_like(doc_ids))
    bias = additive_attention_mask(allowed, torch.float32)
    assert bias.dtype == torch.float32 and bool((bias == 0).eq(allowed).all())
    assert bool(torch.softmax(bias, dim=-1).isfinite().all())


def test_causal_layout_left_and_right_padding():
    pad = 1
    tokens = torch.tensor([[5, 6, 7, pad], [pad, pad, 8, 9]])
    positions, doc_ids, bidir_lens = causal_layout(tokens, pad)
    assert positions.tolist() == [[0, 1, 2, 0], [0, 0, 0, 1]]
    assert doc_ids.tolist() == [[0, 0, 0, -1], [-1, -1, 0, 0]]
    assert index_in_document(doc_ids).tolist() == positions.tolist()
    assert not bool(bidir_lens.any())


# --- 2. which outputs depend on which inputs --------------------------------------------------

def dependency_by_perturbation(model, sample, vocab_low, vocab_high):
    """``changed[b, i, j]``: output ``i`` of row ``b`` changes when the token at ``j`` is
    replaced (real tokens ``j`` only; padding columns stay padding)."""
    net_input = sample["net_input"]
    tokens = net_input["src_tokens"]
    pad = model.decoder.padding_idx
    with torch.no_grad():
        base = model(**net_input, features_only=True)[0]
        batch, length = tokens.shape
        changed = torch.zeros(batch, length, length, dtype=torch.bool)
        for j in range(length):
            perturbed = tokens.clone()
            real = tokens[:, j].ne(pad)
            perturbed[real, j] = vocab_low + (tokens[real, j] - vocab_low + 7) % (vocab_high - vocab_low)
            out = model(**{**net_input, "src_tokens": perturbed}, features_only=True)[0]
            changed[:, :, j] = (out - base).abs().amax(dim=-1) > 1e-5
            changed[~real, :, j] = False
    return changed


@pytest.mark.parametrize("cross_document", [True, False])
def test_outputs_depend_exactly_on_the_allowed_inputs(cross_document):
    task = MaskedLmTaskStub(VOCAB)
    model, _ = tiny_model(task=task, no_cross_document_attention=not cross_document)
    assert model.decoder.cross_document is cross_document
    rng = random.Random(11)
    sample = pack(random_rows(rng, task, 4, 18, max_docs=3, max_doc_length=8), 18,
                  task.source_dictionary.pad())
    net_input = sample["net_input"]
    assert bool(net_input["src_tokens"].eq(task.mask_idx).any())
    changed = dependency_by_perturbation(model, sample, task.source_dictionary.nspecial,
                                         task.mask_idx)
    # The rule is transitive, so after any number of layers output i depends on input j
    # exactly where the mask allows i to attend to j.
    expected = reference_mask(net_input["doc_ids"], net_input["bidir_lens"], cross_document)[:, 0]
    real = net_input["src_tokens"].ne(task.source_dictionary.pad())
    expected &= real.unsqueeze(1) & real.unsqueeze(2)
    assert torch.equal(changed, expected)


def test_position_of_a_token_reaches_exactly_the_allowed_outputs():
    task = MaskedLmTaskStub(VOCAB)
    model, _ = tiny_model(task=task)
    sample = pack(random_rows(random.Random(3), task, 3, 14), 14, task.source_dictionary.pad())
    net_input = sample["net_input"]
    allowed = may_attend(net_input["doc_ids"], net_input["bidir_lens"])[:, 0]
    with torch.no_grad():
        base = model(**net_input, features_only=True)[0]
        real_columns = net_input["src_tokens"].ne(model.decoder.padding_idx).sum(dim=1)
        for b, j in [(b, j) for b in range(3) for j in {0, int(real_columns[b]) - 1}]:
            positions = net_input["src_positions"].clone()
            positions[b, j] += 20
            out = model(**{**net_input, "src_positions": positions}, features_only=True)[0]
            changed = (out[b] - base[b]).abs().amax(dim=-1) > 1e-5
            assert torch.equal(changed, allowed[b, :, j])


def bidirectional_lm_task(**settings):
    """The ``bidirectional_lm`` task over a dictionary of ``VOCAB`` symbols, ``<mask>`` included
    (no data read)."""
    from fairseq.data import Dictionary

    from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask

    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary) - 1):
        dictionary.add_symbol(f"w{i}")
    return BidirectionalLMTask(BidirectionalLMConfig(data="unused", seed=1, **settings), dictionary)


def test_no_cross_document_attention_comes_from_the_models_args():
    model, _ = tiny_model(no_cross_document_attention=True)
    assert model.decoder.cross_document is False
    assert model.args.no_cross_document_attention is True  # kept in the checkpoint's args
    assert tiny_model()[0].decoder.cross_document is True  # footnote 4: the default
    task = MaskedLmTaskStub(VOCAB)
    task.cfg = argparse.Namespace(no_cross_document_attention=True)
    assert tiny_model(task=task)[0].decoder.cross_document is True  # a task's config is not read


@pytest.mark.parametrize("no_cross", [False, True])
def test_the_task_hands_the_model_its_flags_through_the_args(no_cross):
    """``--task bidirectional_lm`` puts ``--no-cross-document-attention`` and ``r_bidir = 0``
    into the model's args in ``build_model``, over what fairseq-train's one parser (or a
    checkpoint's saved args) put there: the task's evaluation ``--r-bidir``, a list, which stays
    the task's."""
    task = bidirectional_lm_task(no_cross_document_attention=no_cross, eval_mode="suffix_ppl",
                                 r_bidir="0,0.5,1")
    args = argparse.Namespace(arch="bidir_lm_tiny", r_bidir="0,0.5,1", dropout=0.0)
    model = task.build_model(args)
    assert model.args is args
    assert args.no_cross_document_attention is no_cross and args.r_bidir == 0.0
    assert model.decoder.cross_document is not no_cross and model.decoder.r_bidir == 0.0
    assert task.cfg.r_bidir == "0,0.5,1"
    # the same args without the task: the model reads its --r-bidir, a list it refuses
    with pytest.raises(ValueError, match="--r-bidir '0,0.5,1': the model takes one ratio"):
        build_arch("bidir_lm_tiny", MaskedLmTaskStub(VOCAB), 64, r_bidir="0,0.5,1")


def test_mask_is_built_once_per_batch(monkeypatch):
    model, task = tiny_model(arch="bidir_lm_small")
    calls = []
    original = bidirectional_lm.additive_attention_mask
    monkeypatch.setattr(bidirectional_lm, "additive_attention_mask",
                        lambda *a: calls.append(1) or original(*a))
    sample = pack(random_rows(random.Random(0), task, 2, 12), 12, task.source_dictionary.pad())
    model(**sample["net_input"])
    assert len(model.decoder.layers) == 4 and len(calls) == 1


# --- 3. without the layout: a causal LM -------------------------------------------------------

def test_default_is_a_causal_lm():
    model, task = tiny_model()
    pad = task.source_dictionary.pad()
    tokens = torch.randint(4, VOCAB - 1, (3, 9), generator=torch.Generator().manual_seed(0))
    tokens[1, 6:] = pad
    tokens[2, 3:] = pad
    real = tokens.ne(pad)
    with torch.no_grad():
        default = model(tokens)[0]
        positions = (real.long().cumsum(1) - 1).clamp(min=0).masked_fill(~real, 0)
        explicit = model(tokens, src_positions=positions, doc_ids=real.long() - 1,
                         bidir_lens=torch.zeros_like(tokens))[0]
        # fairseq's own decoder path: make_positions, its (T, T) future mask, fairseq attention
        features = TransformerDecoderBase.extract_features_scriptable(model.decoder, tokens, None)[0]
        fairseq_logits = model.decoder.output_layer(features)
        # and prefix-only: a causal LM's output at i ignores everything after i
        prefix = model(tokens[:, :4])[0]
    assert default.shape == (3, 9, VOCAB)
    assert torch.allclose(default, explicit)
    assert torch.allclose(default[real], fairseq_logits[real], atol=1e-5)
    assert torch.allclose(default[:, :4][real[:, :4]], prefix[real[:, :4]], atol=1e-5)


def test_incremental_decoding_matches_the_full_forward():
    model, _ = tiny_model()
    tokens = torch.randint(4, VOCAB - 1, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)[0]
        state = {}
        steps = [model.decoder(tokens[:, :t + 1], incremental_state=state)[0][:, -1]
                 for t in range(tokens.size(1))]
    assert torch.allclose(torch.stack(steps, dim=1), full, atol=1e-5)


def test_masked_tokens_give_the_logits_of_those_positions():
    model, task = tiny_model()
    sample = pack(random_rows(random.Random(5), task, 3, 12), 12, task.source_dictionary.pad())
    predicted = sample["target"].ne(task.source_dictionary.pad())
    with torch.no_grad():
        full = model(**sample["net_input"])[0]
        selected = model(**sample["net_input"], masked_tokens=predicted)[0]
    assert torch.allclose(selected, full[predicted], atol=1e-6)


def test_sdpa_attention_equals_fairseq_attention():
    torch.manual_seed(0)
    attention = MaskedSelfAttention(16, 4).eval()
    x = torch.randn(5, 2, 16)
    future = torch.triu(torch.full((5, 5), float("-inf")), 1)
    with torch.no_grad():
        fairseq_out = attention(x, x, x, attn_mask=future)[0]  # fairseq's own path (T, T)
        sdpa_out = attention(x, x, x, attn_mask=future.expand(2, 1, 5, 5), need_weights=False)[0]
        explicit, weights = attention(x, x, x, attn_mask=future.expand(2, 1, 5, 5),
                                      need_weights=True)
    assert torch.allclose(sdpa_out, fairseq_out, atol=1e-6)
    assert torch.allclose(explicit, fairseq_out, atol=1e-6)
    assert weights.shape == (2, 5, 5) and float(weights[0, 0, 1:].abs().sum()) == 0.0


# --- 4. sizes: Table 2 ------------------------------------------------------------------------

#: Table 2: size -> (layers, dim, heads, parameters, training ZFLOPs)
TABLE_2 = {
    "125m": (12, 768, 12, 125e6, 0.11),
    "355m": (24, 1024, 16, 355e6, 0.31),
    "1_3b": (24, 2048, 32, 1.3e9, 1.11),
    "2_7b": (32, 2560, 32, 2.7e9, 2.23),
    "6_7b": (32, 4096, 32, 6.7e9, 5.49),
}


def hand_count(layers, dim, vocab=GPT2_DICTIONARY, positions=1024, padding_idx=1):
    """Per layer: Q, K, V, output (4 d^2 + 4 d), FFN d -> 4d -> d (8 d^2 + 5 d), two
    LayerNorms (4 d); a final LayerNorm; the token embedding (tied output projection); learned
    positions with fairseq's padding_idx + 1 offset."""
    per_layer = 4 * dim * dim + 4 * dim + 8 * dim * dim + 5 * dim + 4 * dim
    return (layers * per_layer + 2 * dim + vocab * dim
            + (positions + padding_idx + 1) * dim)


@pytest.mark.parametrize("size", sorted(TABLE_2))
def test_parameter_counts_match_table_2(size):
    layers, dim, heads, table_params, _ = TABLE_2[size]
    task = MaskedLmTaskStub(GPT2_DICTIONARY)
    with torch.device("meta"):  # no memory, no initialisation: 6.7B parameters in ms
        model = build_arch(f"bidir_lm_{size}", task, 1024)
    args = model.args
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads,
            args.decoder_ffn_embed_dim) == (layers, dim, heads, 4 * dim)
    count = sum(p.numel() for p in model.parameters())
    assert count == hand_count(layers, dim)
    assert count == pytest.approx(table_params, rel=0.02)  # 2.649B is GPT-3's "2.7B" too


@pytest.mark.parametrize("size", sorted(TABLE_2))
def test_table_2_cost_from_our_forward_count(size):
    """Table 2's "cost" (100B tokens in sequences of 1024, every token predicted) is Narayanan
    et al.'s (2021) 96 B s l h^2 (1 + s / 6h + V / 16 l h): 4 x our forward count of the blocks
    (forward, backward, and the forward recomputed under activation checkpointing) + 3 x our
    count of the output projection. (We log 3 x forward.) 2.7B: 2.225 for Table 2's 2.23."""
    *_, zflops = TABLE_2[size]
    spec = flops.spec_for_arch(f"bidir_lm_{size}")
    blocks = flops.exact_forward_flops(spec, 1024, 0, 0, GPT2_DICTIONARY)
    head = flops.exact_forward_flops(spec, 1024, 0, 1024, GPT2_DICTIONARY) - blocks
    assert head == 2 * 1024 * spec.encoder.dim * GPT2_DICTIONARY
    sequences = 100e9 / 1024
    assert (4 * blocks + 3 * head) * sequences / 1e21 == pytest.approx(zflops, abs=0.006)


def test_small_sizes():
    for size, (layers, dim, heads) in {"small": (4, 256, 4), "mini": (2, 128, 2),
                                       "tiny": (2, 64, 2)}.items():
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[f"bidir_lm_{size}"](args)
        assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads,
                args.decoder_ffn_embed_dim) == (layers, dim, heads, 4 * dim)
        assert args.decoder_normalize_before and args.decoder_learned_pos
        assert args.share_decoder_input_output_embed and args.activation_fn == "gelu"


def test_output_projection_is_tied_and_blocks_are_pre_ln():
    model, _ = tiny_model()
    decoder = model.decoder
    assert decoder.output_projection.weight is decoder.embed_tokens.weight
    assert decoder.layer_norm is not None
    assert all(layer.normalize_before and layer.encoder_attn is None for layer in decoder.layers)


# --- 5. configuration errors -------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"decoder_embed_dim": 66}, "--decoder-embed-dim (66) must be divisible by "
                                "--decoder-attention-heads (4)"),
    ({"decoder_layers": 0}, "--decoder-layers must be at least 1"),
    ({"decoder_learned_pos": False}, "learned positional embeddings"),
])
def test_config_errors_name_the_flag(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_model(arch="bidir_lm_small", **overrides)


def test_partial_layout_is_refused():
    model, _ = tiny_model()
    tokens = torch.randint(4, VOCAB - 1, (1, 5))
    with pytest.raises(ValueError, match="without src_positions, bidir_lens"):
        model(tokens, doc_ids=torch.zeros_like(tokens))


def test_run_checks_accept_the_bidirectional_task_and_criterion():
    args = argparse.Namespace(task="bidirectional_lm", criterion="bidirectional_lm")
    check_run_config(args, "bidir_lm_tiny")
    ARCH_CONFIG_REGISTRY["bidir_lm_tiny"](args)
    assert args.decoder_layers == 2
    # fairseq-train's default criterion divides by every token: refused, naming ours
    args = argparse.Namespace(task="bidirectional_lm", criterion="cross_entropy")
    with pytest.raises(ValueError, match="Add --criterion bidirectional_lm"):
        ARCH_CONFIG_REGISTRY["bidir_lm_tiny"](args)
    # a plain LM task with cross_entropy is fine for this model
    ARCH_CONFIG_REGISTRY["bidir_lm_tiny"](argparse.Namespace(task="language_modeling",
                                                            criterion="cross_entropy"))


# --- 6. classification heads ------------------------------------------------------------------

def test_classification_head_reads_the_last_token():
    model, task = tiny_model()
    model.register_classification_head("sentence", num_classes=3)
    pad = task.source_dictionary.pad()
    tokens = torch.randint(4, VOCAB - 1, (2, 6), generator=torch.Generator().manual_seed(2))
    tokens[1, 4:] = pad
    with torch.no_grad():
        logits, _ = model(tokens, src_lengths=torch.tensor([6, 4]), features_only=True,
                          classification_head_name="sentence")
        features = model(tokens, features_only=True)[0]
        head = model.classification_heads["sentence"]
        last = torch.stack([features[0, 5], features[1, 3]])
        expected = head.out_proj(torch.tanh(head.dense(last)))
        at_first = model(tokens, classification_head_name="sentence",
                         classification_positions=torch.tensor([0, 0]))[0]
    assert logits.shape == (2, 3)
    assert torch.allclose(logits, expected, atol=1e-6)
    assert torch.allclose(at_first, head.out_proj(torch.tanh(head.dense(features[:, 0]))),
                          atol=1e-6)


def test_pretrained_state_loads_into_a_model_with_a_new_head():
    pretrained, _ = tiny_model(seed=0)
    model, _ = tiny_model(seed=1)
    model.register_classification_head("sentence", num_classes=2)
    fresh = {k: v.clone() for k, v in model.classification_heads.state_dict().items()}
    state = pretrained.state_dict()
    model.upgrade_state_dict_named(state, "")
    model.load_state_dict(state)  # strict: the head's keys were filled in
    assert torch.equal(model.decoder.embed_tokens.weight, pretrained.decoder.embed_tokens.weight)
    for key, value in model.classification_heads.state_dict().items():
        assert torch.equal(value, fresh[key])
    # a checkpoint's head the model does not have is dropped
    with_head = model.state_dict()
    plain, _ = tiny_model(seed=2)
    plain.upgrade_state_dict_named(with_head, "")
    assert not any(k.startswith("classification_heads.") for k in with_head)
    plain.load_state_dict(with_head)


# --- 7. the criterion -------------------------------------------------------------------------

def criterion_and_sample(seed=0, rows=4, length=16):
    model, task = tiny_model()
    criterion = BidirectionalLmLoss(MaskedLmConfig(tpu=False), task)
    sample = pack(random_rows(random.Random(seed), task, rows, length), length,
                  task.source_dictionary.pad())
    return model, task, criterion, sample


def test_criterion_loss_by_hand():
    model, task, criterion, sample = criterion_and_sample()
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    with torch.no_grad():
        loss, sample_size, log = criterion(model, sample)
        logits = model(**sample["net_input"])[0]  # every position, (B, T, V)
    target, inputs = sample["target"], sample["net_input"]["src_tokens"]
    hand = {"mask": 0.0, "next": 0.0}
    counts = {"mask": 0, "next": 0}
    for b in range(target.size(0)):
        for t in range(target.size(1)):
            if target[b, t] == pad:
                continue
            log_probs = torch.log_softmax(logits[b, t].double(), dim=-1)
            kind = "mask" if inputs[b, t] == mask_idx else "next"
            hand[kind] += float(-log_probs[target[b, t]])
            counts[kind] += 1
    assert counts["mask"] > 0 and counts["next"] > 0
    assert int(sample_size) == counts["mask"] + counts["next"] == int(target.ne(pad).sum())
    assert float(loss) == pytest.approx(hand["mask"] + hand["next"], rel=1e-5)
    for kind in ("mask", "next"):
        assert float(log[f"loss_{kind}"]) == pytest.approx(hand[kind], rel=1e-5)
        assert int(log[f"n_{kind}"]) == counts[kind]
    assert TRAIN_FLOPS_KEY not in log  # evaluation batches count no training FLOPs
    with metrics.aggregate() as aggregated:
        BidirectionalLmLoss.reduce_metrics([log])
    values = aggregated.get_smoothed_values()
    total = hand["mask"] + hand["next"]
    assert values["loss"] == pytest.approx(total / int(sample_size) / math.log(2), abs=1e-3)
    assert values["ppl"] == pytest.approx(2 ** values["loss"], rel=1e-2)
    for kind in ("mask", "next"):
        assert values[f"loss_{kind}"] == pytest.approx(
            hand[kind] / counts[kind] / math.log(2), abs=1e-3)
        assert values[f"ppl_{kind}"] == pytest.approx(2 ** values[f"loss_{kind}"], rel=1e-2)


def test_criterion_without_predicted_tokens_still_reaches_every_parameter():
    model, task, criterion, sample = criterion_and_sample()
    sample["target"].fill_(task.source_dictionary.pad())
    loss, sample_size, log = criterion(model.train(), sample)
    loss.backward()
    assert float(loss.detach()) == 0.0 and int(sample_size) == 0
    assert all(p.grad is not None for p in model.parameters())


def test_training_flops_agree_with_flop_counter():
    """The FLOPs the criterion logs for a training batch (blocks on the padded length, head on
    the predicted rows) equal what FlopCounterMode counts in its forward and backward."""
    model, task, criterion, sample = criterion_and_sample(seed=3, rows=3, length=24)
    model.train()
    with flop_counter() as counter:  # FlopCounterMode, SDPA on its math backend
        loss, sample_size, log = criterion(model, sample)
        loss.backward()
    predicted = int(sample_size)
    spec = flops.spec_from_args(model.args)
    forward = flops.decoder_lm_forward_flops(24, spec.encoder.dim, spec.encoder.ffn_dim,
                                             spec.encoder.layers, VOCAB, predicted / 3)
    assert log[TRAIN_FLOPS_KEY] == pytest.approx(3 * 3 * forward)
    assert counter.get_total_flops() == pytest.approx(log[TRAIN_FLOPS_KEY], rel=1e-9)
    with metrics.aggregate() as aggregated:
        BidirectionalLmLoss.reduce_metrics([log])
    assert aggregated.get_smoothed_values()["pflops"] == pytest.approx(log[TRAIN_FLOPS_KEY] / 1e15)


def test_calculator_measure_agrees_with_flop_counter(capsys):
    code = flops.main(["--arch", "bidir_lm_tiny", "--tokens-per-sample", "32", "--vocab-size",
                       "1000", "--measure"])
    out = capsys.readouterr().out
    assert code == 0
    assert "A: bidir_lm_tiny (bidirectional_lm)" in out
    ratios = [float(r) for r in
              __import__("re").findall(r"measure \w \(\S+\): .* ratio (\S+)", out)]
    assert len(ratios) == 2 and all(r == pytest.approx(1.0, abs=1e-3) for r in ratios)


def test_flops_family_by_hand():
    # 2 blocks of D=2, F=3 on L=4 (attention 256 + FFN 96 each, test_flops.py) and the tied
    # projection on 3 predicted tokens, V=10: no dense layer in the head
    spec = flops.ModelSpec("bidirectional_lm", flops.Stack(2, 2, 3))
    assert flops.exact_forward_flops(spec, 4, 1, 2, 10) == 2 * (256 + 96) + 2 * 3 * 2 * 10
    assert flops.spec_for_arch("bidir_lm_355m") == flops.ModelSpec(
        "bidirectional_lm", flops.Stack(24, 1024, 4096))


def test_gradient_flows_only_through_the_predicted_logits():
    model, task, criterion, sample = criterion_and_sample(seed=7)
    model.train()
    loss, _, _ = criterion(model, sample)
    loss.backward()
    assert model.decoder.embed_tokens.weight.grad is not None
    assert bool(torch.isfinite(model.decoder.embed_tokens.weight.grad).all())
    # the loss is the sum of the per-token cross-entropies of the predicted positions
    with torch.no_grad():
        predicted = sample["target"].ne(task.source_dictionary.pad())
        logits = model(**sample["net_input"], masked_tokens=predicted)[0]
        expected = F.cross_entropy(logits, sample["target"][predicted], reduction="sum")
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)


def test_hydra_model_node_gets_the_tasks_flags():
    """Under fairseq-hydra-train the model node holds only model fields: the task puts its flag
    into it (struct mode on), the positions come from the task's --tokens-per-sample."""
    from omegaconf import OmegaConf

    root = OmegaConf.create({
        "task": {"_name": "bidirectional_lm", "no_cross_document_attention": True,
                 "tokens_per_sample": 48},
        "criterion": {"_name": "bidirectional_lm"},
        "model": {"_name": "bidir_lm_tiny", "dropout": 0.0},
    })
    OmegaConf.set_struct(root, True)
    task = bidirectional_lm_task(no_cross_document_attention=True, tokens_per_sample=48)
    model = task.build_model(root.model)
    assert model.decoder.cross_document is False
    assert root.model.no_cross_document_attention is True and root.model.r_bidir == 0.0
    assert model.decoder.max_positions() == 48
    assert model.args.decoder_embed_dim == 64
