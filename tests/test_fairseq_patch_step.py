"""fairseq patch item 7, the training step's host work, held against stock behaviour:

* ``--optimizer adam``'s foreach update gives the loop's weights bit for bit, and the loop still
  runs where the foreach path does not apply;
* the gradient norm from one ``torch._foreach_norm`` equals the per-tensor norms;
* RoBERTa's encoder reads its padding flag from the device once, not once per layer;
* ``--reduce-stats-at-log-interval`` logs every value fairseq-train logs without it (mid-epoch,
  epoch summary, a checkpoint written between two log intervals), and reads nothing back in the
  updates between;
* ``Module.train()`` is skipped only when every module already trains;
* the gradient's normaliser takes a tensor sample size without reading it.
"""
import collections
import json

import pytest
import torch
from fairseq import utils
from fairseq.optim.adam import Adam

from conftest import fairseq_cli, run_cli
from fairseq_ext_lab.benchmarks.device_reads import DeviceReadCounter


def adam_pair(groups, **kwargs):
    torch.manual_seed(0)
    shapes = [(5, 3), (7,), (4, 4, 2), (1,)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    loop = [torch.nn.Parameter(p.detach().clone()) for p in ours]

    def grouped(params):
        return [{"params": params[i::groups]} for i in range(groups)]

    settings = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01, **kwargs)
    foreach, reference = Adam(grouped(ours), **settings), Adam(grouped(loop), **settings)
    reference._foreach_step = lambda group: False  # the loop, as stock fairseq runs it
    return ours, loop, foreach, reference


@pytest.mark.parametrize("groups", [1, 2])
def test_foreach_adam_equals_the_loop_bit_for_bit(groups):
    ours, loop, foreach, reference = adam_pair(groups)
    calls = []
    original = foreach._foreach_step
    foreach._foreach_step = lambda group: calls.append(original(group)) or calls[-1]
    for step in range(6):
        grads = [torch.randn_like(p) for p in ours]
        for p, q, g in zip(ours, loop, grads):
            p.grad, q.grad = g.clone(), g.clone()
        if step == 3:  # a parameter without a gradient this step
            ours[1].grad = loop[1].grad = None
        foreach.step()
        reference.step()
        for p, q in zip(ours, loop):
            assert torch.equal(p, q)
    # the first step initialises the state in the loop; a step where one parameter had no
    # gradient leaves the group's steps unequal, and the loop runs from then on
    assert calls[:groups] == [False] * groups and True in calls


def test_foreach_adam_leaves_amsgrad_and_half_precision_to_the_loop():
    ours, _, foreach, _ = adam_pair(1, amsgrad=True)
    for p in ours:
        p.grad = torch.randn_like(p)
    foreach.step()
    foreach.step()
    assert foreach._foreach_step(foreach.param_groups[0]) is False
    half = [torch.nn.Parameter(torch.randn(3).half())]
    optimizer = Adam(half, lr=1e-3)
    half[0].grad = torch.randn(3).half()
    optimizer.step()
    assert optimizer._foreach_step(optimizer.param_groups[0]) is False


def test_gradient_norm_from_one_foreach_call_equals_per_tensor_norms():
    torch.manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(s)) for s in [(30, 4), (7,), (2, 3, 5)]]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    expected = torch.norm(torch.stack([torch.norm(p.grad, p=2, dtype=torch.float32)
                                       for p in params]))
    grads = [p.grad.clone() for p in params]
    norm = utils.clip_grad_norm_(params, max_norm=1.0)
    torch.testing.assert_close(norm, expected, rtol=1e-6, atol=0)
    for p, g in zip(params, grads):  # clipped by the same coefficient
        torch.testing.assert_close(p.grad, g * (1.0 / (expected + 1e-6)))


def test_robertas_encoder_reads_its_padding_once():
    from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch

    task = MaskedLmTaskStub(40)
    model = build_arch("roberta_tiny", task, 16, encoder_layers=4).eval()
    src = torch.randint(4, 30, (2, 16))
    src[1, 12:] = task.source_dictionary.pad()
    with DeviceReadCounter() as counter:
        padded = model(src, features_only=True)[0]
    assert counter.counts.reads == {"fairseq's model": 1}  # was 1 + one per layer
    # a row with padding gives its tokens what it gives them alone
    alone = model(src[1:, :12], features_only=True)[0]
    torch.testing.assert_close(padded[1:, :12], alone, rtol=1e-5, atol=1e-5)


def test_train_mode_is_set_only_when_some_module_is_not_training():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
    model.eval()
    utils.set_train_mode(model)
    assert all(m.training for m in model.modules())
    calls = []
    original = torch.nn.Module.train
    try:
        torch.nn.Module.train = lambda self, mode=True: calls.append(self) or original(self, mode)
        utils.set_train_mode(model)  # all train already: no walk that sets
        assert calls == []
        model[1].eval()
        utils.set_train_mode(model)
        assert calls and model[1].training
    finally:
        torch.nn.Module.train = original


# --- --reduce-stats-at-log-interval end to end ----------------------------------------------

#: clock readings, which differ between any two runs
TIMING_KEYS = {"wps", "ups", "wall", "train_wall", "gb_free"}


def train_log(data_bin, save_dir, *extra):
    proc = run_cli([
        fairseq_cli("fairseq-train"), data_bin, "--user-dir", "fairseq_ext",
        "--task", "masked_lm", "--arch", "roberta_tiny", "--criterion", "masked_lm_flops",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "4", "--tokens-per-sample", "32",
        "--sample-break-mode", "none", "--max-update", "12", "--log-format", "json",
        "--log-interval", "5", "--save-interval-updates", "7", "--disable-validation",
        "--save-dir", save_dir, "--cpu", "--seed", "3", "--num-workers", "0", *extra,
    ])
    records = []
    for line in (proc.stdout + proc.stderr).splitlines():
        brace = line.find("{")
        if brace >= 0 and '"epoch"' in line:
            record = json.loads(line[brace:])
            records.append({k: v for k, v in record.items()
                            if k.removeprefix("train_") not in TIMING_KEYS})
    return records


@pytest.mark.slow
def test_reduced_at_the_log_interval_fairseq_train_logs_the_same(tiny_data_bin, tmp_path):
    stock = train_log(tiny_data_bin, tmp_path / "stock")
    deferred = train_log(tiny_data_bin, tmp_path / "deferred", "--reduce-stats-at-log-interval")
    # mid-epoch records at updates 5 and 10 (10 after a checkpoint at 7), and the epoch's
    assert len(stock) >= 3 and [r.get("num_updates") for r in stock] == [
        r.get("num_updates") for r in deferred]
    assert stock == deferred
    assert any("total_pflops" in r for r in stock)  # our criterion's running total too
    # the checkpoint written at update 7 holds every update's meters
    from fairseq_ext.training.checkpoint_loading import load_checkpoint_to_cpu

    def running_totals(save_dir):
        state = load_checkpoint_to_cpu(str(save_dir / "checkpoint_1_7.pt"))
        default = state["extra_state"]["metrics"]["default"]  # [(priority, key, class, state)]
        return {key: meter for _, key, _, meter in default if key.startswith("_train_")}

    stock_totals = running_totals(tmp_path / "stock")
    assert stock_totals and stock_totals == running_totals(tmp_path / "deferred")


def test_between_log_intervals_the_trainer_reads_only_its_nan_check(tiny_data_bin):
    from fairseq_ext.training.trainer_harness import TrainerStep
    from fairseq_ext_lab.benchmarks.device_reads import count_step, sized_as_on_cuda
    from fairseq_ext_lab.benchmarks.trainer_step_timing import FAMILIES

    width = {"layers": 2, "dim": 16, "ffn": 64, "heads": 1}
    reads = {}
    for flag in ([], ["--reduce-stats-at-log-interval"]):
        argv = FAMILIES["3ml-self"].argv(str(tiny_data_bin), width, 32, 2, "adam", flag)
        step = TrainerStep(argv, batches=4)  # --log-interval 100: these updates log nothing
        step.update()
        with sized_as_on_cuda(step.trainer.model):
            counts = count_step(step.update, 2)
        reads[bool(flag)] = counts
    # stock: the logging reduction of every update (meters, the grad norm's finiteness) and
    # the gradient's normaliser; with the flag, only the check that raises on NaN gradients
    assert reads[False].reads_from("fairseq's trainer") >= 2 * 8
    assert reads[True].reads == {"fairseq's trainer": 2}, reads[True].read_sites
    assert all("trainer.py" in site for _, site in reads[True].read_sites)


def test_masked_lm_pads_to_the_required_multiple_and_to_1_outside_fairseqs_config():
    from fairseq.data import Dictionary
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    dictionary = Dictionary()
    # built directly, as fairseq's own tests/tasks/test_masked_lm.py does: the field is an
    # unresolved reference to dataset.required_seq_len_multiple
    task = MaskedLMTask(MaskedLMConfig(data="", tokens_per_sample=8), dictionary)
    assert task._seq_len_multiple() == 1
    task.cfg.required_seq_len_multiple = 8
    assert task._seq_len_multiple() == 8


def test_set_num_updates_reaches_every_module_that_defines_it_in_one_walk():
    """Patch item 7h: BaseFairseqModel / FairseqEncoder.set_num_updates walk the modules once,
    skipping those whose method only passes the count on; every other module that defines it
    gets the count (a nested encoder's child included), each once."""
    from fairseq.models import BaseFairseqModel, FairseqEncoder
    from fairseq.models.fairseq_model import passes_num_updates_on_only

    calls = []

    class Scheduled(torch.nn.Module):
        def set_num_updates(self, num_updates):
            calls.append((id(self), num_updates))

    class Encoder(FairseqEncoder):
        def __init__(self):
            super().__init__(None)
            self.inner = torch.nn.Sequential(Scheduled(), torch.nn.Linear(2, 2), Scheduled())

    class Model(BaseFairseqModel):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
            self.head = Scheduled()

    model = Model()
    scheduled = [m for m in model.modules() if isinstance(m, Scheduled)]
    model.set_num_updates(7)
    assert sorted(calls) == sorted((id(m), 7) for m in scheduled)  # each exactly once
    calls.clear()
    model.encoder.set_num_updates(3)  # an encoder on its own passes it on too
    assert sorted(calls) == sorted((id(m), 3) for m in scheduled[:2])
    assert passes_num_updates_on_only(model.encoder) is True
    assert passes_num_updates_on_only(model.head) is False
    assert passes_num_updates_on_only(torch.nn.Linear(1, 1)) is None


def test_torch_compile_buckets_lengths_it_chooses_and_respects_a_users_multiple():
    """Patch item 7c: --torch-compile sets --required-seq-len-multiple (left at 1) to the
    smallest multiple of 8 that divides --tokens-per-sample into at most 8 lengths."""
    from types import SimpleNamespace

    from fairseq.trainer import torch_compile_seq_len_multiple
    from omegaconf import OmegaConf

    def chosen(tokens, multiple=1):
        cfg = OmegaConf.create({"task": {"tokens_per_sample": tokens,
                                         "required_seq_len_multiple": multiple},
                                "dataset": {"required_seq_len_multiple": multiple}})
        result = torch_compile_seq_len_multiple(cfg)
        assert cfg.task.required_seq_len_multiple == cfg.dataset.required_seq_len_multiple
        return result

    assert [chosen(t) for t in (32, 64, 128, 512, 1024)] == [8, 8, 16, 64, 128]
    assert chosen(100) == 16  # no multiple of 8 divides 100: ceil(100 / 8) rounded up to 8
    assert chosen(512, multiple=32) == 32  # the user's choice stands
    no_length = SimpleNamespace(task=SimpleNamespace(),
                                dataset=SimpleNamespace(required_seq_len_multiple=1))
    assert torch_compile_seq_len_multiple(no_length) is None


def test_a_model_that_keeps_recompiling_for_one_shape_is_named_then_run_eagerly(caplog):
    """Patch item 7c: the trainer logs each compile with its batch shape; a model that reads
    a size from its data (a new graph per value) is warned about from its third compile of
    one shape and runs eagerly from TORCH_COMPILE_RECOMPILE_LIMIT on; a static one is not."""
    import logging
    from types import SimpleNamespace

    from fairseq import trainer as trainer_module
    from torch._dynamo.utils import counters

    class ReadsItsData(torch.nn.Module):
        def forward(self, src_tokens):
            width = int(src_tokens.sum())  # a value from the data becomes a size
            return torch.ones(width).sum() + src_tokens.float().mean()

    def watched(model, batches):
        fake = SimpleNamespace(cfg=SimpleNamespace(common=SimpleNamespace(torch_compile=True)),
                               _model=model, _compiled_shapes=collections.Counter())
        fake._compiled_graphs = lambda: trainer_module.Trainer._compiled_graphs(fake)
        for tokens in batches:
            before = fake._compiled_graphs()
            model(tokens)
            trainer_module.Trainer._watch_compiles(fake, "train",
                                                   [{"net_input": {"src_tokens": tokens}}],
                                                   before)
        return fake

    torch._dynamo.reset()
    counters.clear()
    model = ReadsItsData()
    model.compile(dynamic=False)
    batches = [torch.full((2, 3), value) for value in range(1, 7)]  # one shape, six values
    with caplog.at_level(logging.INFO, logger="fairseq.trainer"):
        fake = watched(model, batches)
    text = caplog.text
    assert "graph(s) for train batches of shape (2, 3) (1 train shape(s) so far)" in text
    assert "compiled for train batches of shape (2, 3) 3 times" in text
    assert "runs eagerly from now on" in text
    assert model._compiled_call_impl is None  # eager after the limit
    assert fake._compiled_shapes[("train", ((("src_tokens", (2, 3)),),))] == \
        trainer_module.TORCH_COMPILE_RECOMPILE_LIMIT
    caplog.clear()
    torch._dynamo.reset()

    class Static(torch.nn.Module):
        def forward(self, src_tokens):
            return src_tokens.float().sum()

    static = Static()
    static.compile(dynamic=False)
    with caplog.at_level(logging.INFO, logger="fairseq.trainer"):
        watched(static, [torch.full((2, 3), v) for v in range(4)]
                + [torch.full((4, 3), v) for v in range(3)])
    assert caplog.text.count("graph(s) for train batches") == 2  # one per shape
    assert "compiled for" not in caplog.text and static._compiled_call_impl is not None
