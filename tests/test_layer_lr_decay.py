"""Layer-wise learning-rate decay (``--layer-lr-decay``): each parameter's depth and scale by
hand, ``fused_adamw``'s groups and rates against a hand computation of Adam's first step, the
one-line error, and the fine-tuning recipe through fairseq-train."""
import argparse

import pytest
import torch
from bert_models import build

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.modules.layer_lr_decay import layer_lr_scales, parameter_depths
from fairseq_ext.optim.fused_adamw import FairseqFusedAdamW, FusedAdamWConfig

NAMES = [
    "encoder.sentence_encoder.embed_tokens.weight",
    "encoder.sentence_encoder.embed_positions.weight",
    "encoder.sentence_encoder.layernorm_embedding.weight",
    "encoder.sentence_encoder.layers.0.fc1.weight",
    "encoder.sentence_encoder.layers.1.self_attn.k_proj.bias",
    "encoder.sentence_encoder.layers.2.final_layer_norm.bias",
    "encoder.sentence_encoder.layer_norm.weight",
    "encoder.lm_head.dense.weight",
    "classification_heads.sentence_classification_head.out_proj.weight",
]


def test_depths_and_scales_by_hand():
    depths, layers = parameter_depths(NAMES)
    assert layers == 3
    assert [depths[n] for n in NAMES] == [0, 0, 0, 1, 2, 3, 4, 4, 4]
    scales = layer_lr_scales(NAMES, 0.5)  # 0.5^(L + 1 - d), L = 3
    assert [scales[n] for n in NAMES] == [1 / 16, 1 / 16, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 1, 1]


@pytest.mark.parametrize("arch", ["roberta_pooled_prenorm", "bert_rab_tiny", "swishrnn_bert_tiny",
                                  "bert_orig_pooled_tiny"])
def test_models_tag_every_encoder_parameter(arch):
    sizes = ({"encoder_layers": 2, "encoder_embed_dim": 32, "encoder_ffn_embed_dim": 64,
              "encoder_attention_heads": 2} if arch.startswith("roberta") else {})
    model, _ = build(arch, layer_lr_decay=0.8, **sizes)
    layers = model.args.encoder_layers
    scales = {name: p.optim_overrides["optimizer"]["lr_scale"]
              for name, p in model.named_parameters()}
    token_table = "encoder.sentence_encoder.embed_tokens.weight"
    assert scales[token_table] == pytest.approx(0.8 ** (layers + 1))
    last = f"encoder.sentence_encoder.layers.{layers - 1}."
    top = [s for n, s in scales.items() if n.startswith(last)]
    assert top and top == pytest.approx([0.8] * len(top))
    model.register_classification_head("head", num_classes=2)  # registered later: full rate
    assert not any(hasattr(p, "optim_overrides")
                   for p in model.classification_heads["head"].parameters())
    untagged, _ = build(arch, **sizes)
    assert not any(hasattr(p, "optim_overrides") for p in untagged.parameters())


@pytest.mark.parametrize("decay", [0.0, 1.5, -0.2])
def test_a_decay_outside_0_1_is_a_config_error(decay):
    from fairseq.models import ARCH_CONFIG_REGISTRY

    with pytest.raises(ConfigError, match=r"--layer-lr-decay must be in \(0, 1\]"):
        ARCH_CONFIG_REGISTRY["roberta_pooled"](argparse.Namespace(layer_lr_decay=decay))


def tagged_parameters():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(4)]
    for parameter, scale in zip(params, (0.25, 0.5, 1.0, 0.25)):
        parameter.optim_overrides = {"optimizer": {"lr_scale": scale}}
    return params


def test_fused_adamw_steps_each_group_at_its_scaled_rate():
    """Adam's first step moves a parameter by lr x g / (|g| + eps) (bias-corrected moments):
    -lr x scale x sign(g) per element, with no weight decay."""
    params = tagged_parameters()
    cfg = FusedAdamWConfig(adam_betas="(0.9, 0.98)", adam_eps=1e-8, weight_decay=0.0, lr=[1e-2])
    optimizer = FairseqFusedAdamW(cfg, params)
    assert [g["lr_scale"] for g in optimizer.param_groups] == [0.25, 0.5, 1.0]
    assert [len(g["params"]) for g in optimizer.param_groups] == [2, 1, 1]
    optimizer.set_lr(2e-2)  # as fairseq's schedulers do
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([5e-3, 1e-2, 2e-2])
    assert optimizer.get_lr() == pytest.approx(2e-2)  # the schedule's rate, logged as lr
    before = [p.detach().clone() for p in params]
    grads = [torch.randn(3) for _ in params]
    for parameter, grad in zip(params, grads):
        parameter.grad = grad.clone()
    optimizer.step()
    for parameter, start, grad, scale in zip(params, before, grads, (0.25, 0.5, 1.0, 0.25)):
        torch.testing.assert_close(parameter.detach(), start - 2e-2 * scale * grad.sign(),
                                   rtol=0, atol=1e-6)


def test_fused_adamw_scales_weight_decay_and_keeps_untagged_parameters_as_given():
    params = tagged_parameters()
    params[1].optim_overrides = {"optimizer": {"lr_scale": 0.5, "weight_decay_scale": 0.0}}
    cfg = FusedAdamWConfig(weight_decay=0.1, lr=[1e-3])
    optimizer = FairseqFusedAdamW(cfg, params)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0, 0.1]
    plain = [torch.nn.Parameter(torch.zeros(2)) for _ in range(2)]
    optimizer = FairseqFusedAdamW(cfg, plain)
    assert len(optimizer.param_groups) == 1 and "lr_scale" not in optimizer.param_groups[0]


def test_lr_scales_survive_the_optimizer_state_dict():
    params = tagged_parameters()
    cfg = FusedAdamWConfig(lr=[1e-3])
    optimizer = FairseqFusedAdamW(cfg, params)
    optimizer.set_lr(4e-3)
    state = optimizer.state_dict()
    resumed = FairseqFusedAdamW(cfg, tagged_parameters())
    resumed.load_state_dict(state)
    assert [g["lr"] for g in resumed.param_groups] == pytest.approx([1e-3, 2e-3, 4e-3])
    resumed.set_lr(1e-3)
    assert [g["lr"] for g in resumed.param_groups] == pytest.approx([2.5e-4, 5e-4, 1e-3])
