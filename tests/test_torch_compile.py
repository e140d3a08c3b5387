"""``fairseq-train --torch-compile`` (fairseq patch item 7c): the same losses as eager, for
fairseq's own RoBERTa and for 3ML (whose static sizes apply under torch.compile); no recompile
after warm-up over batches of several lengths bucketed by --required-seq-len-multiple; and a
clear error where torch cannot compile.

The updates run fairseq's own ``Trainer.train_step`` in this process
(:class:`fairseq_ext.benchmarks.train_step.TrainerStep`, built from fairseq-train's flags), on
the shared tiny data-bin. Dropout is 0: a compiled graph draws its dropout masks from another
random stream than eager (the same distribution), so only dropout-free losses can match.
"""
import argparse

import pytest
import torch

from fairseq_ext.benchmarks.train_step import FAMILIES, TrainerStep

pytestmark = pytest.mark.slow

WIDTH = {"layers": 2, "dim": 16, "ffn": 64, "heads": 1}


def trainer_step(data_bin, family, *extra, seq_len=32, batches=20, shuffle=False):
    argv = FAMILIES[family].argv(str(data_bin), WIDTH, seq_len, 2, "adam", list(extra))
    return TrainerStep(argv, batches=batches, shuffle=shuffle)


def losses(step, updates):
    out = []
    for _ in range(updates):
        sample = step.samples[step._step % len(step.samples)]
        step._step += 1
        log = step.trainer.train_step([sample])
        out.append(float(log["loss"]))
    return out


@pytest.mark.parametrize("family", ["roberta", "3ml-self"])
def test_compiled_training_has_eagers_losses(tiny_data_bin, family, one_thread):
    eager_step = trainer_step(tiny_data_bin, family)
    initial = {n: p.detach().clone() for n, p in eager_step.trainer.model.named_parameters()}
    eager = losses(eager_step, 20)
    compiled_step = trainer_step(tiny_data_bin, family, "--torch-compile")
    compiled = losses(compiled_step, 20)
    # the model really is compiled (in place: parameter names unchanged)
    model = compiled_step.trainer.model
    assert model._compiled_call_impl is not None
    assert not any("_orig_mod" in name for name, _ in model.named_parameters())
    # float32 kernels fused differently (and, for 3ML, static sizes against exact ones):
    # rounding apart, the same 20 updates
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=2e-4,
                               atol=2e-4)
    # and the same weights after them: the compiled backward's gradients are eager's
    eager_params = dict(eager_step.trainer.model.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, eager_params[name], rtol=1e-4, atol=1e-5, msg=name)
    moved = max(float((p - initial[n]).abs().max()) for n, p in eager_params.items())
    assert moved > 1e-4  # the updates moved the weights: the comparison is not vacuous


def test_no_recompile_after_warm_up_over_bucketed_lengths(tiny_data_bin, one_thread):
    from torch._dynamo.utils import counters

    step = trainer_step(tiny_data_bin, "3ml-self", "--torch-compile", "--sample-break-mode",
                        "complete", "--required-seq-len-multiple", "8", seq_len=24, batches=24,
                        shuffle=True)
    shapes = [tuple(s["net_input"]["src_tokens"].shape) for s in step.samples]
    assert len(set(shapes)) >= 2, shapes  # the test needs batches of several lengths
    assert all(t % 8 == 0 for _, t in shapes)  # bucketed by the patch's masked_lm padding
    seen, compiled_at = set(), []
    for shape in shapes:
        before = counters["frames"]["ok"]
        step.update()
        if counters["frames"]["ok"] != before:
            compiled_at.append(shape)
        seen.add(shape)
    # each distinct shape compiles at most once, at its first batch; nothing after
    assert len(compiled_at) == len(set(compiled_at)) <= len(set(shapes))
    first_seen = {}
    for index, shape in enumerate(shapes):
        first_seen.setdefault(shape, index)
    for shape in compiled_at:
        assert shapes.index(shape) == first_seen[shape]
    # 3ML ran with static sizes: its kept-token count is bucketed, not read
    model = step.trainer.model
    assert model.static_sizes == "auto"


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
