"""3ML's encoder on packed tokens: the layout moves against hand-made indices and their
gradients against autograd's, fairseq's own layer on the padded grid against the packed layer
(outputs and gradients, pre-LN and post-LN, an empty row), and the whole 3ML model on either
path; with static sizes, the bounded packing by hand (padding entries, what does
not fit), fairseq's layer against the lean grid layer the 3ML-self decoder runs, and the
model's static path against its exact one (logits and gradients)."""
import argparse

import pytest
import torch
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayer
from masked_batches import fairseq_masked_batch

import fairseq_ext  # noqa: F401  (registers the archs)
from fairseq_ext.data.masking_capacity import MaskingCapacity
from fairseq_ext.models.masked_lm_run import MASKED_LM_RUN
from fairseq_ext.modules.packed_encoder_layer import (
    attention_mask,
    grid_encoder_layer,
    packed_encoder_layer,
    packed_layer_unsupported,
)
from fairseq_ext.modules.token_selection import pack_selected, pack_tokens, pack_tokens_bounded
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch

SELECTED = torch.tensor([[True, False, True, True, False],
                         [False, False, False, False, False],
                         [False, True, False, False, True]])


def test_packed_tokens_indices_by_hand():
    packed = pack_tokens(SELECTED)
    # the 5 selected entries in row-major order: (0,0) (0,2) (0,3) (2,1) (2,4)
    assert packed.source_index.tolist() == [0, 2, 3, 11, 14]
    # the grid is 3 wide (row 0 keeps 3): (0,0) (0,1) (0,2) (2,0) (2,1)
    assert packed.width == 3 and packed.grid_index.tolist() == [0, 1, 2, 6, 7]
    assert packed.counts.tolist() == [3, 0, 2] and packed.tokens == 5
    index, valid = pack_selected(SELECTED)  # the padded layout 3ML used before
    assert torch.equal(packed.valid, valid)
    values = torch.arange(15).view(3, 5) * 10
    assert packed.gather(values).tolist() == [0, 20, 30, 110, 140]
    grid = packed.to_grid(packed.gather(values), fill=-1)
    assert grid.tolist() == [[0, 20, 30], [-1, -1, -1], [110, 140, -1]]
    assert torch.equal(grid[valid], values.gather(1, index)[valid])
    assert packed.from_grid(grid).tolist() == [0, 20, 30, 110, 140]
    back = packed.to_source(packed.gather(values), fill=-1)
    assert torch.equal(back, torch.where(SELECTED, values, torch.tensor(-1)))


def test_no_token_selected_still_has_one_grid_slot():
    packed = pack_tokens(torch.zeros(2, 4, dtype=torch.bool))
    assert packed.width == 1 and packed.tokens == 0
    assert packed.to_grid(torch.zeros(0, 3)).shape == (2, 1, 3)
    assert attention_mask(packed).flatten().tolist() == [True, True]  # slot 0 kept finite


def test_moves_have_the_gradients_of_autograd_references():
    packed = pack_tokens(SELECTED)
    values = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    source = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda v: packed.to_grid(v), (values,))
    torch.autograd.gradcheck(lambda v: packed.to_source(v), (values,))
    torch.autograd.gradcheck(lambda s: packed.gather(s), (source,))
    grid = torch.randn(3, 3, 4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda g: packed.from_grid(g), (grid,))
    # against a plain boolean-index reference
    weight = torch.randn(3, 5, 4, dtype=torch.float64)
    (packed.to_source(values) * weight).sum().backward()
    assert torch.equal(values.grad, weight[SELECTED])


def encoder_layer(normalize_before: bool, dim=32, heads=4):
    args = argparse.Namespace(
        encoder_embed_dim=dim, encoder_ffn_embed_dim=4 * dim, encoder_attention_heads=heads,
        encoder_normalize_before=normalize_before, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, activation_fn="gelu")
    torch.manual_seed(0)
    return TransformerEncoderLayer(args).double()


@pytest.mark.parametrize("normalize_before", [False, True])
def test_packed_layer_equals_fairseqs_layer_on_the_padded_grid(normalize_before):
    layer = encoder_layer(normalize_before).train()
    assert packed_layer_unsupported(layer) is None
    keep = torch.tensor([[True] * 7 + [False],
                         [True, False, True, False, False, True, False, False],
                         [False] * 8])  # a row whose every token is [MASK]
    packed = pack_tokens(keep)
    x = torch.randn(packed.tokens, 32, dtype=torch.float64)

    ours_in = x.clone().requires_grad_()
    ours = packed_encoder_layer(layer, ours_in, packed, attention_mask(packed))
    (ours * torch.arange(ours.numel()).view_as(ours).cos()).sum().backward()
    ours_grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad()

    stock_in = x.clone().requires_grad_()
    padding = ~packed.valid
    padding[2, 0] = False  # fairseq's layer also needs one attendable key in the empty row
    grid = packed.to_grid(stock_in).transpose(0, 1)  # (W, B, C)
    stock = packed.from_grid(layer(grid, encoder_padding_mask=padding).transpose(0, 1))
    (stock * torch.arange(stock.numel()).view_as(stock).cos()).sum().backward()

    torch.testing.assert_close(ours, stock, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours_in.grad, stock_in.grad, rtol=1e-10, atol=1e-10)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(ours_grads[name], p.grad, rtol=1e-10, atol=1e-10, msg=name)


def test_layers_the_packed_path_does_not_mirror_are_named():
    layer = encoder_layer(False)
    layer.self_attn = MultiheadAttention(32, 4, self_attention=True, add_bias_kv=True)
    assert "key/value biases" in packed_layer_unsupported(layer)
    layer = encoder_layer(False)
    layer.return_fc = True
    assert "return_fc" in packed_layer_unsupported(layer)
    assert "not a fairseq" in packed_layer_unsupported(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_model_on_packed_tokens_equals_model_on_padded_grid(arch):
    task = MaskedLmTaskStub(60)
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    models = []
    for padded in (False, True):
        torch.manual_seed(0)
        model = build_arch(arch, task, 16, dropout=0.0, attention_dropout=0.0).double().train()
        model.encoder.runs_packed = not padded
        models.append(model)
    assert models[0].encoder.runs_packed  # what build_model chose for fairseq's layers
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, mask_idx, (4, 16), generator=g)
    src[1, 11:] = pad
    corrupted = torch.rand(4, 16, generator=g) < 0.5
    corrupted[3] = True  # every token of row 3 is a [MASK]
    corrupted &= src.ne(pad)
    target = torch.where(corrupted, src, torch.tensor(pad))
    as_mask = corrupted & ((torch.rand(4, 16, generator=g) < 0.8) | torch.arange(4)[:, None].eq(3))
    src = torch.where(as_mask, torch.tensor(mask_idx), src)
    outputs = []
    for model in models:
        logits, extra = model(src, masked_tokens=target.ne(pad))
        logits.logsumexp(-1).sum().backward()
        outputs.append((logits, extra, {n: p.grad for n, p in model.named_parameters()}))
    (packed_logits, packed_extra, packed_grads), (padded_logits, padded_extra, padded_grads) = outputs
    torch.testing.assert_close(packed_logits, padded_logits, rtol=1e-9, atol=1e-9)
    for name, grad in packed_grads.items():
        if grad is not None:
            torch.testing.assert_close(grad, padded_grads[name], rtol=1e-8, atol=1e-9, msg=name)
    kept = (src.ne(pad) & src.ne(mask_idx)).sum(1)
    packed_run, padded_run = packed_extra[MASKED_LM_RUN], padded_extra[MASKED_LM_RUN]
    assert packed_run.encoder_lengths.tolist() == kept.tolist()
    assert packed_run.encoder_padded_length == padded_run.encoder_padded_length == int(kept.max())
    # what the FLOP criterion counts: the kept tokens per row packed, the padded grid otherwise
    assert packed_run.encoder_length == pytest.approx(float(kept.sum()) / 4)
    assert padded_run.encoder_length == int(kept.max())


# --- static sizes: nothing read from the device -----------------------------------------------

def test_bounded_packing_by_hand():
    packed = pack_tokens_bounded(SELECTED, width=3, capacity=7)
    # the 5 selected entries first, row-major; then 2 padding entries at distinct unselected
    # positions (the first unselected ones, in order)
    assert packed.source_index.tolist() == [0, 2, 3, 11, 14, 1, 4]
    assert packed.grid_index.tolist()[:5] == [0, 1, 2, 6, 7]
    assert set(packed.grid_index.tolist()[5:]) <= {3, 4, 5, 8} and len(
        set(packed.grid_index.tolist())) == 7  # padding slots, distinct
    assert packed.token_valid.tolist() == [True] * 5 + [False] * 2
    assert packed.counts.tolist() == [3, 0, 2] and packed.width == 3 and int(packed.dropped) == 0
    values = torch.arange(15).view(3, 5) * 10
    # the padding entries read unselected tokens; placed back, they leave `fill`
    back = packed.to_source(packed.gather(values), fill=-1)
    assert torch.equal(back, torch.where(SELECTED, values, torch.tensor(-1)))
    grid = packed.to_grid(packed.gather(values), fill=-1)
    assert grid.tolist() == [[0, 20, 30], [-1, -1, -1], [110, 140, -1]]
    assert packed.from_grid(grid).tolist()[:5] == [0, 20, 30, 110, 140]


def test_bounded_packing_leaves_out_and_counts_what_does_not_fit():
    # rows of 3, 0 and 2 selected; room for 2 a row and 3 in all: row 0 keeps its first 2,
    # row 2 its first 1 (the batch is full), and 2 are dropped
    packed = pack_tokens_bounded(SELECTED, width=2, capacity=3)
    assert packed.source_index.tolist() == [0, 2, 11]
    assert packed.counts.tolist() == [2, 0, 1] and int(packed.dropped) == 2
    assert packed.token_valid.tolist() == [True, True, True]


def test_bounded_moves_have_autograd_gradients():
    packed = pack_tokens_bounded(SELECTED, width=3, capacity=8)
    values = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda v: packed.to_grid(v), (values,))
    torch.autograd.gradcheck(lambda v: packed.to_source(v), (values,))
    # padding entries get no gradient through to_source: their places are not theirs
    (packed.to_source(values) * torch.randn(3, 5, 4, dtype=torch.float64)).sum().backward()
    assert torch.count_nonzero(values.grad[5:]) == 0


@pytest.mark.parametrize("normalize_before", [False, True])
def test_grid_layer_equals_fairseqs_layer(normalize_before):
    layer = encoder_layer(normalize_before).train()
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[1, 4:] = True
    x = torch.randn(3, 6, 32, dtype=torch.float64)
    ours_in, stock_in = x.clone().requires_grad_(), x.clone().requires_grad_()
    weight = torch.arange(3 * 6 * 32).view(3, 6, 32).cos().double()

    ours = grid_encoder_layer(layer, ours_in, ~padding[:, None, None, :])
    (ours * weight).sum().backward()
    ours_grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad()
    stock = layer(stock_in.transpose(0, 1), encoder_padding_mask=padding).transpose(0, 1)
    (stock * weight).sum().backward()
    torch.testing.assert_close(ours, stock, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours_in.grad, stock_in.grad, rtol=1e-10, atol=1e-10)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(ours_grads[name], p.grad, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_static_sizes_give_the_exact_paths_logits_and_gradients(arch):
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    pad = task.source_dictionary.pad()
    capacity = MaskingCapacity.from_task(task.cfg)
    src, target = fairseq_masked_batch(task, 4, 24, seed=3, shorter_by=3)
    masked = target.ne(pad)
    torch.manual_seed(0)
    model = build_arch(arch, task, 24, dropout=0.0, attention_dropout=0.0).double().train()
    runs = []
    for static in ("never", "always"):
        model.static_sizes = static
        model.zero_grad()
        logits, extra = model(src, masked_tokens=masked, masking_capacity=capacity)
        index = extra[MASKED_LM_RUN].prediction_index
        targets = target[masked] if index is None else target.flatten()[index]
        torch.nn.functional.cross_entropy(logits, targets, ignore_index=pad,
                                          reduction="sum").backward()
        runs.append((logits, extra, targets,
                     {n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None}))
    (exact, exact_extra, exact_targets, exact_grads), (static, extra, static_targets,
                                                       static_grads) = runs
    assert exact_extra[MASKED_LM_RUN].prediction_index is None
    run = extra[MASKED_LM_RUN]
    n = exact.size(0)
    assert static.size(0) == capacity.predicted_total(4, 24) > n
    # the asked positions first, row-major; the rest have padding targets
    assert torch.equal(run.prediction_index[:n], masked.flatten().nonzero().squeeze(1))
    assert torch.equal(static_targets[:n], exact_targets)
    assert (static_targets[n:] == pad).all()
    # fairseq's decoder layer (3ML-cross) takes its softmax in float32 whatever the dtype,
    # over the static number of [MASK] slots here and the widest row's count there
    tolerance = 1e-9 if arch.startswith("3ml_self") else 1e-5
    torch.testing.assert_close(static[:n], exact, rtol=tolerance, atol=tolerance)
    assert int(run.kept_tokens_dropped) == int(run.predictions_dropped) == 0
    kept = (src.ne(pad) & src.ne(task.mask_idx)).sum()
    assert float(run.encoder_length) == pytest.approx(float(kept) / 4)
    assert exact_grads.keys() == static_grads.keys()
    for name, grad in exact_grads.items():
        torch.testing.assert_close(static_grads[name], grad, rtol=tolerance * 10,
                                   atol=tolerance * 10, msg=name)


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_static_sizes_without_a_capacity_give_fairseqs_criterion_its_rows(arch):
    """fairseq's own masked_lm criterion passes no masking capacity and indexes the targets
    with ``masked_tokens`` itself: with static sizes the model sizes its encoder and
    decoder from the task's masking (set when it is built) and returns the logits of exactly
    the asked positions, row-major, padding included where asked (fairseq's all-True mask for
    a batch with nothing masked); they and the gradients equal the exact path's."""
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    pad = task.source_dictionary.pad()
    src, target = fairseq_masked_batch(task, 4, 24, seed=5, shorter_by=3)
    torch.manual_seed(0)
    model = build_arch(arch, task, 24, dropout=0.0, attention_dropout=0.0).double().train()
    assert model.task_masking_capacity == MaskingCapacity.from_task(task.cfg)
    everything = torch.ones_like(src, dtype=torch.bool)  # asks padding positions too
    tolerance = 1e-9 if arch.startswith("3ml_self") else 1e-5
    for masked in (target.ne(pad), everything):
        runs = []
        for static in ("never", "always"):
            model.static_sizes = static
            model.zero_grad()
            logits, extra = model(src, masked_tokens=masked)
            assert extra[MASKED_LM_RUN].prediction_index is None
            assert logits.shape == (int(masked.sum()), 60)
            loss = torch.nn.functional.cross_entropy(logits, target[masked], ignore_index=pad,
                                                     reduction="sum")
            loss.backward()
            runs.append((logits, loss, {n: p.grad.clone() for n, p in model.named_parameters()
                                        if p.grad is not None}))
        (exact, exact_loss, exact_grads), (static_logits, static_loss, static_grads) = runs
        real_rows = src.ne(pad)[masked]  # the exact path gives zero logits at padding
        torch.testing.assert_close(static_logits[real_rows], exact[real_rows], rtol=tolerance,
                                   atol=tolerance)
        assert torch.isfinite(static_logits).all()
        torch.testing.assert_close(static_loss, exact_loss, rtol=tolerance, atol=tolerance)
        assert exact_grads.keys() == static_grads.keys()
        for name, grad in exact_grads.items():
            torch.testing.assert_close(static_grads[name], grad, rtol=tolerance * 10,
                                       atol=tolerance * 10, msg=name)
