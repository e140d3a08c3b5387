"""3ML models: Table 3 sizes, the batched forward against a per-row reference, edge cases,
config errors, and the per-category criterion."""
import argparse

import pytest
import torch
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.models import ARCH_CONFIG_REGISTRY
from masked_batches import fairseq_masked_batch

import fairseq_ext  # noqa: F401  (registers the archs)
from fairseq_ext.criterions.masked_lm_categories import MaskedLmCategoriesLoss
from fairseq_ext.criterions.predicted_positions import at_predicted
from fairseq_ext.data.masking_capacity import MaskingCapacity
from fairseq_ext.models.masked_lm_run import MASKED_LM_RUN, MaskedLmRun
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch


def build(arch, task, **overrides):
    return build_arch(arch, task, 64, **overrides)


@pytest.mark.slow
@pytest.mark.parametrize("arch, millions", [
    ("3ml_self_base", 129), ("3ml_cross_base", 130), ("3ml_self_large", 362), ("3ml_cross_large", 364),
])
def test_parameter_counts_match_table_3(arch, millions):
    """Table 3: RoBERTa's 50,265-symbol BPE dictionary and 512 positions."""
    model = build_arch(arch, MaskedLmTaskStub(50265), 512)
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=1.0)


@pytest.mark.parametrize("arch, normalize_before, decoder", [
    ("3ml_self_base", False, (2, 384, 1536, 6)), ("3ml_cross_base", True, (2, 384, 1536, 6)),
    ("3ml_self_large", True, (2, 512, 2048, 8)), ("3ml_cross_large", True, (2, 512, 2048, 8)),
])
def test_table_4_defaults(arch, normalize_before, decoder):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    assert args.encoder_normalize_before is normalize_before
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_ffn_embed_dim,
            args.decoder_attention_heads) == decoder


def test_overrides_win_over_arch_defaults():
    args = argparse.Namespace(decoder_layers=4, decoder_embed_dim=256, normalization="pre-ln")
    ARCH_CONFIG_REGISTRY["3ml_self_base"](args)
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_ffn_embed_dim) == (4, 256, 1024)
    assert args.encoder_normalize_before is True and args.layernorm_embedding is False


def corrupt(tokens, lengths, mask_idx, pad, generator, mask_prob=0.4):
    """Right-padded batch with BERT-style 80/10/10 corruption; returns (src, target)."""
    src = tokens.clone()
    target = torch.full_like(tokens, pad)
    for b, length in enumerate(lengths):
        src[b, length:] = pad
        chosen = torch.rand(length, generator=generator) < mask_prob
        target[b, :length][chosen] = tokens[b, :length][chosen]
        kind = torch.rand(length, generator=generator)
        src[b, :length][chosen & (kind < 0.8)] = mask_idx
        random_ids = torch.randint(4, mask_idx, (length,), generator=generator)
        replace = chosen & (kind >= 0.8) & (kind < 0.9)
        src[b, :length][replace] = random_ids[replace]
    return src, target


def per_row_reference(model, src, predict):
    """3ML computed one unpadded row at a time, with no packing or scatter bookkeeping."""
    pad, mask_idx = model.encoder.sentence_encoder.padding_idx, model.mask_idx
    dec = model.mask_decoder
    rows = []
    for b in range(src.size(0)):
        length = int(src[b].ne(pad).sum())
        tokens = src[b, :length]
        is_mask, keep = tokens.eq(mask_idx), tokens.ne(mask_idx)
        positions = torch.arange(length) + pad + 1
        enc = model.encoder.sentence_encoder.forward_positioned(
            tokens[keep][None], positions[keep][None], torch.zeros(1, int(keep.sum()), dtype=torch.bool))
        memory = dec.project(enc)[:, 0]  # (kept, C_d)
        if model.variant == "self":
            x = torch.zeros(length, memory.size(-1))
            x[keep] = memory
            x[is_mask] = dec.mask_embedding
            x = x + dec.embed_positions.weight[positions]
            x = dec.layernorm_embedding(x) if dec.layernorm_embedding is not None else x
            x = x[:, None]
            for layer in dec.layers:
                x = layer(x, encoder_padding_mask=None)
            x = (dec.layer_norm(x) if dec.layer_norm is not None else x)[:, 0]
            features = x[predict[b, :length]]
        else:
            q = dec.mask_embedding + dec.embed_positions.weight[positions[is_mask]]
            q = dec.layernorm_embedding(q) if dec.layernorm_embedding is not None else q
            q = q[:, None]
            keys = memory
            if dec.memory_positions == "decoder":  # --cross-memory-positions decoder
                keys = memory + dec.embed_positions.weight[positions[keep]]
            for layer in dec.layers:
                q, _, _ = layer(q, encoder_out=keys[:, None], encoder_padding_mask=None)
            q = (dec.layer_norm(q) if dec.layer_norm is not None else q)[:, 0]
            features = torch.zeros(length, memory.size(-1))
            features[is_mask] = q
            features[keep] = memory
            features = features[predict[b, :length]]
        rows.append(dec.lm_head(features))
    return torch.cat(rows)


@pytest.mark.parametrize("arch, overrides", [
    ("3ml_self_tiny", {}), ("3ml_cross_tiny", {}),
    ("3ml_cross_tiny", {"cross_memory_positions": "decoder"}),
])
def test_batched_forward_equals_per_row_reference(arch, overrides):
    task = MaskedLmTaskStub(60)
    model = build(arch, task, **overrides).eval()
    d = task.source_dictionary
    g = torch.Generator().manual_seed(0)
    lengths = [30, 17, 25, 9]
    tokens = torch.randint(4, task.mask_idx, (4, 30), generator=g)
    src, target = corrupt(tokens, lengths, task.mask_idx, d.pad(), g)
    predict = target.ne(d.pad())
    with torch.no_grad():
        logits, extra = model(src, masked_tokens=predict)
        reference = per_row_reference(model, src, predict)
    assert logits.shape == (int(predict.sum()), len(d))
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)
    # the encoder really ran on the longest kept row, not the full length
    kept = (src.ne(d.pad()) & src.ne(task.mask_idx)).sum(1)
    run = extra[MASKED_LM_RUN]
    assert run.encoder_padded_length == int(kept.max()) < src.size(1)
    assert run.encoder_lengths.tolist() == kept.tolist()


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_every_sizing_returns_one_contract_and_the_same_predictions(arch):
    """Exact counts, static sizes with our criteria's capacity, and static sizes with the task's
    (fairseq's own criterion passes none) return one ``MaskedLmRun`` with the same fields and
    types, the same kept tokens, nothing dropped, and the same logits at the targets our
    criteria gather through it (``at_predicted``); the per-row reference agrees."""
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    pad = task.source_dictionary.pad()
    src, target = fairseq_masked_batch(task, 4, 24, seed=7, shorter_by=3)
    masked = target.ne(pad)
    model = build(arch, task, dropout=0.0, attention_dropout=0.0).eval()
    capacity = MaskingCapacity.from_task(task.cfg)
    outputs = []
    with torch.no_grad():
        reference = per_row_reference(model, src, masked)
        for static, passed in (("never", capacity), ("always", capacity), ("always", None)):
            model.static_sizes = static
            logits, extra = model(src, masked_tokens=masked, masking_capacity=passed)
            assert set(extra) == {"inner_states", MASKED_LM_RUN}
            run = extra[MASKED_LM_RUN]
            assert isinstance(run, MaskedLmRun)
            targets, = at_predicted(masked, extra, (target,))
            outputs.append((run, logits[targets.ne(pad)], targets[targets.ne(pad)]))
    (exact_run, exact, exact_targets), *static_outputs = outputs
    assert exact_run.prediction_index is None  # the rows are masked_tokens', row-major
    assert outputs[1][0].prediction_index is not None and outputs[2][0].prediction_index is None
    for run, logits, targets in outputs:
        assert isinstance(run.encoder_padded_length, int)
        for name in ("encoder_lengths", "kept_tokens_dropped", "predictions_dropped"):
            assert torch.is_tensor(getattr(run, name)), name
        assert run.kept_tokens_dropped.dim() == run.predictions_dropped.dim() == 0
        assert int(run.kept_tokens_dropped) == int(run.predictions_dropped) == 0
        assert torch.equal(run.encoder_lengths, exact_run.encoder_lengths)
        assert float(run.encoder_length) == pytest.approx(float(exact_run.encoder_length))
        assert torch.equal(targets, exact_targets) and targets.numel() == int(masked.sum())
        torch.testing.assert_close(logits, exact, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(exact, reference, rtol=1e-4, atol=1e-5)


def test_positioned_encoder_equals_fairseq_encoder_on_unmasked_input():
    task = MaskedLmTaskStub(60)
    model = build("3ml_self_tiny", task).eval()
    encoder = model.encoder.sentence_encoder
    src = torch.randint(4, task.mask_idx, (3, 12))
    src[1, 8:] = task.source_dictionary.pad()
    padding = src.eq(task.source_dictionary.pad())
    positions = torch.arange(12).expand(3, 12) + encoder.padding_idx + 1
    with torch.no_grad():
        ours = encoder.forward_positioned(src, positions.masked_fill(padding, encoder.padding_idx), padding)
        stock = encoder(src)["encoder_out"][0]
    torch.testing.assert_close(ours[~padding.T], stock[~padding.T], rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_fully_masked_and_unmasked_rows_train_without_nan(arch):
    task = MaskedLmTaskStub(60)
    model = build(arch, task).train()
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    tokens = torch.randint(4, mask_idx, (3, 10))
    src, target = tokens.clone(), torch.full_like(tokens, pad)
    src[0] = mask_idx                      # every token of row 0 masked
    target[0] = tokens[0]
    target[2, 3] = tokens[2, 3]            # row 1: nothing corrupted; row 2: one unchanged token
    criterion = MaskedLmCategoriesLoss(MaskedLmConfig(tpu=False), task)
    sample = {"net_input": {"src_tokens": src}, "target": target, "ntokens": 30, "nsentences": 3}
    loss, sample_size, log = criterion(model, sample)
    loss.backward()
    assert torch.isfinite(loss) and sample_size == 11
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # nothing corrupted anywhere: fairseq's fallback path (masked_tokens=None on CPU)
    sample["target"] = torch.full_like(tokens, pad)
    model.zero_grad()
    loss, sample_size, _ = criterion(model, sample)
    loss.backward()
    assert loss.item() == 0.0 and sample_size == 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny", "roberta_tiny"])
def test_category_criterion_matches_fairseq_masked_lm(arch):
    task = MaskedLmTaskStub(60)
    model = build(arch, task).eval()
    g = torch.Generator().manual_seed(1)
    d = task.source_dictionary
    src, target = corrupt(torch.randint(4, task.mask_idx, (4, 20), generator=g), [20, 15, 12, 20],
                          task.mask_idx, d.pad(), g, mask_prob=0.5)
    sample = {"net_input": {"src_tokens": src}, "target": target, "ntokens": 67, "nsentences": 4}
    ours, size, log = MaskedLmCategoriesLoss(MaskedLmConfig(tpu=False), task)(model, sample)
    stock, stock_size, _ = MaskedLmLoss(MaskedLmConfig(tpu=False), task)(model, sample)
    torch.testing.assert_close(ours, stock)
    assert size == stock_size
    assert sum(log[f"n_{c}"] for c in ("mask", "replaced", "unchanged")) == size
    torch.testing.assert_close(sum(log[f"loss_{c}"] for c in ("mask", "replaced", "unchanged")), ours)
    predicted = target.ne(d.pad())
    assert log["n_mask"] == (src.eq(task.mask_idx) & predicted).sum()
    assert log["n_unchanged"] == (src.eq(target) & predicted).sum()


@pytest.mark.parametrize("task_kwargs, overrides, message", [
    ({"mask_prob": 1.5}, {}, "--mask-prob"),
    ({"mask_prob": 0.0}, {}, "--mask-prob"),
    ({"leave_unmasked_prob": 0.6, "random_token_prob": 0.5}, {}, "--random-token-prob"),
    ({}, {"decoder_embed_dim": 30, "decoder_attention_heads": 4}, "--decoder-embed-dim"),
    ({"with_mask": False}, {}, "<mask>"),
])
def test_bad_config_gets_a_clear_error(task_kwargs, overrides, message):
    with pytest.raises(ValueError, match=message):
        build("3ml_self_tiny", MaskedLmTaskStub(60, **task_kwargs), **overrides)


def gpu_criterion_mask(target, pad):
    """The positions fairseq's ``masked_lm`` criterion (and ``masked_lm_categories``) asks for
    on a GPU: ``torch.where(any, masked, [True])``, all-True (padding included) for a batch
    without corrupted tokens."""
    masked_tokens = target.ne(pad)
    return torch.where(masked_tokens.any(), masked_tokens, masked_tokens.new([True]))


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
@pytest.mark.parametrize("corrupted_input", [False, True])
def test_all_true_mask_over_padding_gives_one_logit_row_per_asked_position(arch, corrupted_input):
    """On a GPU, a batch without corrupted tokens makes the criterion ask for every
    position, padding included; the logits cover exactly those positions in row-major order
    (as RoBERTa's), equal at real positions to asking for the real positions only, and zero at
    padding (whose targets are ignored)."""
    task = MaskedLmTaskStub(60)
    model = build(arch, task).eval()
    pad = task.source_dictionary.pad()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(4, task.mask_idx, (4, 15), generator=g)
    src, _ = corrupt(tokens, [15, 9, 12, 4], task.mask_idx, pad, g, mask_prob=0.5)
    if not corrupted_input:  # the real case: nothing corrupted, only padding differs
        src = torch.where(src.eq(pad), src, tokens)
    target = torch.full_like(src, pad)  # no corrupted token to predict
    masked_tokens = gpu_criterion_mask(target, pad)
    assert masked_tokens.shape == src.shape and bool(masked_tokens.all())
    real = src.ne(pad)
    with torch.no_grad():
        logits, _ = model(src, masked_tokens=masked_tokens)
        reference, _ = model(src, masked_tokens=real)
    assert logits.shape == (target[masked_tokens].numel(), len(task.source_dictionary))
    torch.testing.assert_close(logits[real.flatten()], reference, rtol=0, atol=0)
    assert bool(logits[~real.flatten()].eq(0).all())
    # and the loss fairseq's criterion computes from them is zero, not an error
    loss = torch.nn.functional.cross_entropy(logits, target[masked_tokens], reduction="sum",
                                             ignore_index=pad)
    assert loss.item() == 0.0


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_mask_covering_padding_and_corrupted_tokens_trains(arch):
    """A full-shape mask that asks for padding besides corrupted tokens: one row per asked
    position, the real rows those of the real-only call, and gradients flow without NaN."""
    task = MaskedLmTaskStub(60)
    model = build(arch, task).train()
    pad = task.source_dictionary.pad()
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(4, task.mask_idx, (3, 12), generator=g)
    src, target = corrupt(tokens, [12, 7, 10], task.mask_idx, pad, g, mask_prob=0.5)
    asked = target.ne(pad) | src.eq(pad)
    torch.manual_seed(0)
    logits, _ = model(src, masked_tokens=asked)
    assert logits.shape[0] == int(asked.sum())
    loss = torch.nn.functional.cross_entropy(logits, target[asked], reduction="sum", ignore_index=pad)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        full, _ = model(src, masked_tokens=asked)
        real_only, _ = model(src, masked_tokens=target.ne(pad))
    predicted = target.ne(pad)[asked]
    torch.testing.assert_close(full[predicted], real_only, rtol=0, atol=0)
    assert bool(full[~predicted].eq(0).all())
