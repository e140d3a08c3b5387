"""The device-read counter (fairseq_ext_lab.benchmarks.device_reads) and what it finds in our code.

Each kind of device-to-host read is counted once and a ``nonzero_static`` not at all; a read is
attributed by the code that makes it (whose model, criterion or trainer), a backward read by
the forward code of its op; a planted ``.item()`` in a 3ML decoder is caught and named; and
with static sizes, 3ML and our criteria make no read in the forward and backward pass at all,
where fairseq's RoBERTa with fairseq's criterion makes several.
"""
import pytest
import torch
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from masked_batches import as_sample, fairseq_masked_batch

import fairseq_ext  # noqa: F401  (registers the archs and criteria)
from fairseq_ext.criterions.masked_lm_flops import MaskedLmFlopsLoss
from fairseq_ext.data.masking_capacity import MaskingCapacity
from fairseq_ext.models import three_ml
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch
from fairseq_ext_lab.benchmarks.device_reads import (
    DeviceReadCounter,
    attribute,
    call_site,
    classify,
    count_step,
    sized_as_on_cuda,
)


def test_each_kind_of_read_is_counted_once():
    x = torch.arange(12.0).view(3, 4)
    mask = x > 4
    with DeviceReadCounter() as counter:
        x[0, 0].item()            # _local_scalar_dense
        bool(mask.any())          # _local_scalar_dense
        x.tolist()                # no aten op on the CPU: counted as a method
        x[mask]                   # boolean index
        x[mask] = 0.0             # boolean index_put
        mask.nonzero()
        torch.masked_select(x, mask)
        torch.nonzero_static(mask.flatten(), size=3)  # sized: no read
        x[torch.tensor([0, 2])]   # integer index: no read
        x.cpu()                   # a D2H copy on a GPU
        x.to("cpu")
        x.to(x.device)            # same device: not a read
        counts = torch.tensor([1, 2])
        torch.repeat_interleave(counts)  # output size = counts' sum: read
        torch.repeat_interleave(counts, output_size=3)  # given: no read
    sites = counter.counts.read_sites
    what = sorted(key[1].split(" at ")[0] for key in sites for _ in range(sites[key]))
    assert what == sorted(["aten::_local_scalar_dense"] * 2 + [
        "Tensor.tolist", "aten::index", "aten::index_put_", "aten::nonzero",
        "aten::masked_select", "Tensor.cpu", "Tensor.to", "aten::repeat_interleave"])
    assert counter.counts.ops > 10


def test_reads_are_attributed_by_whose_code_makes_them():
    ours_model = ("/x/fairseq_ext/models/three_ml.py", 10)
    ours_module = ("/x/fairseq_ext/modules/token_selection.py", 5)
    ours_criterion = ("/x/fairseq_ext/criterions/masked_lm_categories.py", 3)
    head = ("/site/fairseq/models/roberta/model.py", 488)
    trainer = ("/site/fairseq/trainer.py", 900)
    helper = ("/site/fairseq/utils.py", 314)
    torch_frame = ("/site/torch/nn/modules/module.py", 1)
    # fairseq's head called by our model: ours
    assert attribute([torch_frame, head, ours_model, ours_criterion, trainer]) == "our model"
    # fairseq's head in fairseq's model called by our criterion: fairseq's
    assert attribute([head, head, ours_criterion, trainer]) == "fairseq's model"
    assert attribute([ours_module, ours_model, ours_criterion]) == "our model"
    # a neutral helper (fairseq.utils.item) is skipped: its caller decides
    assert attribute([helper, ours_criterion, trainer]) == "our criterion"
    assert attribute([helper, trainer]) == "fairseq's trainer"
    assert attribute([torch_frame]) == "other"
    assert call_site([torch_frame, helper, ours_criterion]) == "fairseq/utils.py:314"


def test_a_backward_read_is_attributed_to_its_forward_code():
    x = torch.randn(4, 3, requires_grad=True)
    mask = torch.tensor([True, False, True, True])

    def step():
        x[mask].sum().backward()

    counts = count_step(step)
    backward = [key for key in counts.read_sites if "(backward)" in key[1]]
    assert len(backward) == 1 and "aten::index_put" in backward[0][1]
    # made by this test's own code: neither fairseq's nor ours
    assert backward[0][0] == "other"
    assert counts.total_reads == 2  # the forward's index, the backward's index_put


# --- 3ML and our criteria ------------------------------------------------------------------

def masked_batch(task, rows=3, length=24, seed=0):
    """A masked_lm sample corrupted as fairseq's MaskTokensDataset does."""
    src, target = fairseq_masked_batch(task, rows, length, seed)
    return as_sample(src, target, task.source_dictionary.pad())


def build(arch, task, static_sizes="always"):
    torch.manual_seed(0)
    model = build_arch(arch, task, 32, dropout=0.0, attention_dropout=0.0)
    model.static_sizes = static_sizes
    return model.train()


def forward_backward_counts(model, criterion, sample):
    def step():
        loss, _, _ = criterion(model, sample)
        loss.backward()
    return count_step(step)


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_3ml_with_static_sizes_makes_no_read_and_a_planted_item_is_caught(arch, monkeypatch):
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    model, sample = build(arch, task), masked_batch(task)
    counts = forward_backward_counts(model, criterion, sample)
    assert counts.reads_from("our") == 0, counts.read_sites
    assert counts.total_reads == 0, counts.read_sites

    decoder = type(model.mask_decoder)
    features = decoder.features

    def planted(self, *args, **kwargs):
        out = features(self, *args, **kwargs)
        out[0].sum().item()  # a read someone might add to debug
        return out

    monkeypatch.setattr(decoder, "features", planted)
    counts = forward_backward_counts(model, criterion, sample)
    assert counts.reads == {"our model": 1}
    ((source, what),) = counts.read_sites
    # named by the innermost frame of our package: the model code that called the decoder
    assert what.startswith("aten::_local_scalar_dense at fairseq_ext/models/three_ml.py:")


def test_3ml_exact_sizes_read_what_they_size():
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    model, sample = build("3ml_self_tiny", task, "never"), masked_batch(task)
    counts = forward_backward_counts(model, criterion, sample)
    # the packing (widest row and total: one read), the padding check, the head's mask
    # (forward and backward) and our criterion's one gather
    assert counts.reads_from("our model") == 4 and counts.reads_from("our criterion") == 1


def test_our_criterion_reads_less_than_fairseqs_with_fairseqs_roberta():
    task = MaskedLmTaskStub(60, mask_prob=0.15, leave_unmasked_prob=0.1, random_token_prob=0.1)
    sample = masked_batch(task)
    model = build("roberta_tiny", task, "never")
    ours = forward_backward_counts(model, MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task),
                                   sample)
    theirs = forward_backward_counts(model, MaskedLmLoss(MaskedLmConfig(tpu=False), task),
                                     sample)
    assert ours.reads_from("our criterion") == 1  # the one gather of targets and inputs
    assert theirs.reads_from("fairseq's criterion") == 2  # CPU's any(), the gather
    assert ours.reads_from("fairseq's model") == theirs.reads_from("fairseq's model") > 0


def test_three_ml_static_sizes_flag_reaches_the_model():
    task = MaskedLmTaskStub(60, mask_prob=0.5)
    model = build_arch("3ml_self_tiny", task, 32)
    assert model.static_sizes == "auto" and model.accepts_masking_capacity
    capacity = MaskingCapacity.from_task(task.cfg)
    src = torch.zeros(2, 8, dtype=torch.long)
    assert not model.uses_static_sizes(src, capacity)  # auto: exact on the CPU, eager
    assert not model.uses_static_sizes(src, None)
    model.static_sizes = "always"
    assert model.uses_static_sizes(src, capacity)
    assert three_ml.STATIC_SIZES == ("auto", "always", "never")


def test_the_model_sizes_as_on_cuda_within_its_context_and_restores_it():
    """3ML's ``with model.sized_as_on_cuda():`` makes ``auto`` static and restores it, on an
    exception too; device_reads.sized_as_on_cuda enters it for every such submodule (a wrapper
    around the model included) and sets no attribute itself; ``never`` stays ``never``."""
    task = MaskedLmTaskStub(60, mask_prob=0.5)
    model = build_arch("3ml_self_tiny", task, 32)
    capacity = MaskingCapacity.from_task(task.cfg)
    src = torch.zeros(2, 8, dtype=torch.long)
    with model.sized_as_on_cuda():
        assert model.static_sizes == "always" and model.uses_static_sizes(src, capacity)
    assert model.static_sizes == "auto"
    with pytest.raises(RuntimeError), model.sized_as_on_cuda():
        raise RuntimeError
    assert model.static_sizes == "auto"
    wrapper = torch.nn.Sequential(model)
    with sized_as_on_cuda(wrapper):
        assert model.static_sizes == "always"
    assert model.static_sizes == "auto"
    model.static_sizes = "never"
    with sized_as_on_cuda(model):
        assert model.static_sizes == "never"


@pytest.mark.parametrize("arch", ["3ml_self_tiny", "3ml_cross_tiny"])
def test_criterion_logs_the_same_with_static_and_exact_sizes(arch):
    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    sample = masked_batch(task, rows=4, length=28, seed=5)
    logs = {}
    for static in ("never", "always"):
        model = build(arch, task, static).double()
        loss, sample_size, log = criterion(model, sample)
        logs[static] = (loss, sample_size, log)
    (exact_loss, exact_size, exact), (static_loss, static_size, static) = logs.values()
    # the criterion's loss is float32 (logits.float(), as fairseq's), summed over more rows
    # on the static path; 3ML-cross's decoder also takes its softmax in float32 (fairseq's)
    tolerance = 1e-6 if arch.startswith("3ml_self") else 1e-5
    torch.testing.assert_close(static_loss, exact_loss, rtol=tolerance, atol=tolerance)
    assert int(static_size) == int(exact_size)
    assert set(static) == set(exact) | {"kept_dropped", "predicted_dropped"}
    assert int(static["kept_dropped"]) == int(static["predicted_dropped"]) == 0
    for key, value in exact.items():
        if key.startswith("loss"):
            torch.testing.assert_close(static[key], value, rtol=tolerance, atol=tolerance)
        else:  # counts and the FLOPs (counted on the kept tokens, as the exact path)
            assert float(static[key]) == pytest.approx(float(value), rel=1e-12), key


def test_tokens_beyond_the_static_sizes_are_counted_and_logged(monkeypatch):
    from fairseq import metrics

    task = MaskedLmTaskStub(60, mask_prob=0.5, leave_unmasked_prob=0.1, random_token_prob=0.1)
    criterion = MaskedLmFlopsLoss(MaskedLmConfig(tpu=False), task)
    sample = masked_batch(task, rows=3, length=24, seed=2)
    src, pad = sample["net_input"]["src_tokens"], task.source_dictionary.pad()
    kept = int((src.ne(pad) & src.ne(task.mask_idx)).sum())
    asked = int(sample["target"].ne(pad).sum())
    # a capacity far below the batch's counts (the bounds are never this tight)
    monkeypatch.setattr(MaskingCapacity, "kept_total", lambda self, rows, length: kept - 5)
    monkeypatch.setattr(MaskingCapacity, "predicted_total", lambda self, rows, length: asked - 2)
    _, _, log = criterion(build("3ml_self_tiny", task), sample)
    assert int(log["kept_dropped"]) == 5 and int(log["predicted_dropped"]) == 2
    with metrics.aggregate(new_root=True) as agg:
        type(criterion).reduce_metrics([log])
        assert agg["kept_dropped"].sum == 5 and agg["predicted_dropped"].sum == 2


def test_the_trainer_step_harness_is_no_source_of_reads():
    """TrainerStep (fairseq_ext/training/trainer_harness.py) drives the update from outside, as the
    benchmark module that held it did: its frames name no part, while the rest of training/ is
    our trainer."""
    import fairseq_ext.training.fused_kernels as plumbing
    import fairseq_ext.training.trainer_harness as harness

    assert classify(harness.__file__) is None
    assert classify(plumbing.__file__) == ("ours", "trainer")
