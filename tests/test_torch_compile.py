"""``fairseq-train --torch-compile`` (fairseq patch item 7c): the same losses as eager, for
fairseq's own RoBERTa and for 3ML (whose static sizes apply under torch.compile); no recompile
after warm-up over batches of several lengths bucketed by --required-seq-len-multiple; and a
clear error where torch cannot compile.

The updates run fairseq's own ``Trainer.train_step`` in this process
(:class:`fairseq_ext.training.trainer_harness.TrainerStep`, built from fairseq-train's flags), on
the shared tiny data-bin. Dropout is 0: a compiled graph draws its dropout masks from another
random stream than eager (the same distribution), so only dropout-free losses can match.
"""
import argparse

import pytest
import torch

from fairseq_ext.training.trainer_harness import TrainerStep
from fairseq_ext_lab.benchmarks.trainer_step_timing import FAMILIES

pytestmark = pytest.mark.slow

WIDTH = {"layers": 2, "dim": 16, "ffn": 64, "heads": 1}


def trainer_step(data_bin, family, *extra, seq_len=32, batches=20, shuffle=False):
    argv = FAMILIES[family].argv(str(data_bin), WIDTH, seq_len, 2, "adam", list(extra))
    return TrainerStep(argv, batches=batches, shuffle=shuffle)


def losses(step, updates):
    out = []
    for _ in range(updates):
        _, log = step.step()
        out.append(float(log["loss"]))
    return out


def losses_and_compiles(step, updates):
    """Per-update losses, and the (update, batch shape) of each update at which
    torch.compile compiled a frame."""
    from torch._dynamo.utils import counters

    out, compiled_at = [], []
    for index in range(updates):
        before = counters["frames"]["ok"]
        sample, log = step.step()
        out.append(float(log["loss"]))
        if counters["frames"]["ok"] != before:
            compiled_at.append((index, tuple(sample["net_input"]["src_tokens"].shape)))
    return out, compiled_at


def assert_same_training(eager_step, compiled_step, eager, compiled, initial):
    """Losses and weights after the same updates, rounding apart (float32 kernels fused
    differently; for 3ML, static sizes against exact ones)."""
    model = compiled_step.trainer.model
    assert model._compiled_call_impl is not None  # compiled in place: names unchanged
    assert not any("_orig_mod" in name for name, _ in model.named_parameters())
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=2e-4,
                               atol=2e-4)
    eager_params = dict(eager_step.trainer.model.named_parameters())
    for name, param in model.named_parameters():  # the compiled backward's gradients too
        torch.testing.assert_close(param, eager_params[name], rtol=1e-4, atol=1e-5, msg=name)
    moved = max(float((p - initial[n]).abs().max()) for n, p in eager_params.items())
    assert moved > 1e-4  # the updates moved the weights: the comparison is not vacuous


def test_compiled_roberta_has_eagers_losses(tiny_data_bin, one_thread):
    eager_step = trainer_step(tiny_data_bin, "roberta")
    initial = {n: p.detach().clone() for n, p in eager_step.trainer.model.named_parameters()}
    eager = losses(eager_step, 20)
    compiled_step = trainer_step(tiny_data_bin, "roberta", "--torch-compile")
    assert_same_training(eager_step, compiled_step, eager, losses(compiled_step, 20), initial)


@pytest.mark.heavy
def test_compiled_3ml_has_eagers_losses_and_compiles_each_bucket_once(tiny_data_bin,
                                                                       one_thread):
    """3ML-self over batches of several lengths (complete documents, bucketed to multiples
    of 8 by the patch's masked_lm padding): under torch.compile its kept tokens, [MASK]
    queries and predictions are sized statically, so each batch shape compiles once, at its
    first batch, and never again; the losses and weights are eager's (exact sizes)."""
    flags = ("--sample-break-mode", "complete", "--required-seq-len-multiple", "8")
    # two lengths (8 and 16) over 24 batches: each compile of a shape is the test's cost
    eager_step = trainer_step(tiny_data_bin, "3ml-self", *flags, seq_len=16, batches=24,
                              shuffle=True)
    shapes = [tuple(s["net_input"]["src_tokens"].shape) for s in eager_step.samples]
    assert len(set(shapes)) >= 2, shapes  # the test needs batches of several lengths
    assert all(t % 8 == 0 for _, t in shapes)
    initial = {n: p.detach().clone() for n, p in eager_step.trainer.model.named_parameters()}
    eager = losses(eager_step, 24)
    compiled_step = trainer_step(tiny_data_bin, "3ml-self", "--torch-compile", *flags,
                                 seq_len=16, batches=24, shuffle=True)
    assert [tuple(s["net_input"]["src_tokens"].shape) for s in compiled_step.samples] == shapes
    compiled, compiled_at = losses_and_compiles(compiled_step, 24)
    assert_same_training(eager_step, compiled_step, eager, compiled, initial)
    # compiles happen at the first batch of a shape only: never again after warm-up
    first_seen = {}
    for index, shape in enumerate(shapes):
        first_seen.setdefault(shape, index)
    assert compiled_at and all(index == first_seen[shape] for index, shape in compiled_at)
    assert compiled_step.trainer.model.static_sizes == "auto"  # static under compile


def compile_config(**common):
    base = dict(torch_compile=True, torch_compile_mode=None, tpu=False)
    base.update(common)
    return argparse.Namespace(
        common=argparse.Namespace(**base),
        distributed_training=argparse.Namespace(ddp_backend="legacy_ddp",
                                                pipeline_model_parallel=False))


def test_where_torch_cannot_compile_the_reason_is_named(monkeypatch):
    from fairseq import trainer

    cpu = torch.device("cpu")
    assert trainer.torch_compile_unsupported(compile_config(), cpu) is None
    assert "TPU" in trainer.torch_compile_unsupported(compile_config(tpu=True), cpu)
    fsdp = compile_config()
    fsdp.distributed_training.ddp_backend = "fully_sharded"
    assert "fully_sharded" in trainer.torch_compile_unsupported(fsdp, cpu)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "C++ compiler" in trainer.torch_compile_unsupported(compile_config(), cpu)


def test_an_unknown_compile_mode_is_refused_when_the_flags_are_read(tiny_data_bin, capsys):
    from fairseq import options

    parser = options.get_training_parser()
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(parser, [str(tiny_data_bin), "--task", "masked_lm",
                                             "--arch", "roberta_base", "--torch-compile",
                                             "--torch-compile-mode", "fast"])
    assert "--torch-compile-mode: invalid choice: 'fast'" in capsys.readouterr().err
