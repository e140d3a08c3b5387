"""--optimizer fused_adamw follows fairseq's --optimizer adam update rule exactly."""
import pytest
import torch
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

from fairseq_ext.optim.fused_adamw import FairseqFusedAdamW, FusedAdamWConfig
from fairseq_ext.training.fused_kernels import describe_fused_kernels, nvidia_apex_available

HYPER = dict(adam_betas="(0.9, 0.98)", adam_eps=1e-6, weight_decay=0.01, lr=[1e-2])


def _run(optimizer_cls, cfg, steps=8):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    optimizer = optimizer_cls(cfg, params)
    grads = torch.Generator().manual_seed(1)
    for step in range(steps):
        optimizer.set_lr(1e-2 * (1 + step) / steps)  # fairseq's schedulers change lr every step
        for p in params:
            p.grad = torch.randn(p.shape, generator=grads)
        optimizer.step()
    return [p.detach().clone() for p in params], optimizer


def test_matches_fairseq_adam():
    reference, _ = _run(FairseqAdam, FairseqAdamConfig(tpu=False, **HYPER))
    fused, optimizer = _run(FairseqFusedAdamW, FusedAdamWConfig(**HYPER))
    for a, b in zip(reference, fused):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert optimizer.implementation == "torch.optim.AdamW(fused=True)"
    assert optimizer.optimizer.defaults["fused"] is True


def test_state_dict_round_trip():
    _, optimizer = _run(FairseqFusedAdamW, FusedAdamWConfig(**HYPER), steps=2)
    state = optimizer.state_dict()
    fresh = FairseqFusedAdamW(FusedAdamWConfig(**HYPER), [
        torch.nn.Parameter(torch.zeros(5, 3)), torch.nn.Parameter(torch.zeros(7))])
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.optimizer.state_dict()["state"][0]["exp_avg"],
                               state["state"][0]["exp_avg"])


@pytest.mark.parametrize("betas", ["(0.9, 1.5)", "(0.9,)", "0.9"])
def test_bad_betas_get_a_clear_error(betas):
    with pytest.raises(ValueError, match="--adam-betas"):
        FairseqFusedAdamW(FusedAdamWConfig(**{**HYPER, "adam_betas": betas}),
                          [torch.nn.Parameter(torch.zeros(2))])


def test_kernel_report_names_what_is_active():
    text = describe_fused_kernels()
    if nvidia_apex_available():
        assert "NVIDIA apex (" in text
    else:
        assert "apex not found" in text and "AdamW(fused=True)" in text
