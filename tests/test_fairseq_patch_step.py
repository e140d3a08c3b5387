"""fairseq patch item 7 (issue 43), the training step's host work, held against stock behaviour:

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
import json

import pytest
import torch
from fairseq import utils
from fairseq.optim.adam import Adam

from conftest import fairseq_cli, run_cli
from fairseq_ext.benchmarks.device_reads import DeviceReadCounter


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
    from fairseq_ext.benchmarks.device_reads import count_step, sized_as_on_cuda
    from fairseq_ext.benchmarks.train_step import FAMILIES, TrainerStep

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
