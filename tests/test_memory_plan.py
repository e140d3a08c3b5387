"""The memory plan the pre-training recipes print: parameters against built models
of every family, bytes against a hand computation, sharding and precision, activation
recomputation (--checkpoint-activations), the recipes."""
import logging

import pytest
import torch
import torch.nn.functional as F
from recipe_checks import dry_run

import fairseq_ext  # noqa: F401  (registers our archs)
from conftest import REPO_ROOT, run_cli
from fairseq_ext.flops import memory_plan
from fairseq_ext.flops.families import flops_family, spec_for_arch
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch, masked_lm_task

#: One tiny arch per family (bert_orig is fairseq's roberta).
TINY_ARCHS = ("roberta_tiny", "bert_rab_tiny", "swishrnn_bert_tiny", "3ml_self_tiny",
              "3ml_cross_tiny", "bidir_lm_tiny")


def dictionary(tmp_path, entries):
    """A data-bin folder whose dict.txt has ``entries`` symbols (+ 4 specials + <mask>)."""
    (tmp_path / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(entries)))
    return str(tmp_path)


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_parameters_match_a_built_model(arch):
    vocab_size, positions = 153, 32
    torch.manual_seed(0)
    model = build_arch(arch, masked_lm_task(vocab_size, 0.15, 0.8), seq_len=positions)
    built = sum(p.numel() for p in model.parameters())
    assert model.state_dict()[next(k for k in model.state_dict()
                                   if k.endswith("embed_tokens.weight"))].shape[0] == vocab_size
    spec = spec_for_arch(arch, max_positions=positions, tokens_per_sample=positions)
    counted = flops_family(spec.family).parameters(spec, vocab_size, positions)
    # all but the relative-bias tables (32 buckets x heads per layer) and pre-LN final norms
    assert counted == pytest.approx(built, rel=2e-3)
    if arch in ("roberta_tiny", "3ml_self_tiny", "bidir_lm_tiny"):
        assert counted == built


@pytest.mark.parametrize("arch, positions, published", [
    ("roberta_base", 512, 124.7e6), ("swishrnn_bert_base", 512, 124.8e6),
    ("3ml_self_base", 512, 128.4e6), ("3ml_cross_large", 512, 364.1e6),
    ("bidir_lm_125m", 1024, 124.4e6), ("bidir_lm_6_7b", 1024, 6.654e9)])
def test_parameters_of_the_paper_sizes(arch, positions, published):
    """README's counts (Tables 2-3 of the papers), 50,265 symbols."""
    spec = spec_for_arch(arch)
    assert flops_family(spec.family).parameters(spec, 50265, positions) == pytest.approx(
        published, rel=5e-4)


def test_roberta_tiny_by_hand(tmp_path):
    data = dictionary(tmp_path, 148)  # + 5 = 153 rows, as tiny_data_bin's
    plan = memory_plan.plan(["fairseq-train", data, "--arch", "roberta_tiny",
                             "--tokens-per-sample", "32", "--batch-size", "4"])
    V, P, D, F, L = 153, 32, 64, 256, 2
    block = (4 * D * D + 4 * D) + (2 * D * F + F + D) + 4 * D
    params = V * D + (P + 2) * D + 2 * D + L * block + (D * D + D + 2 * D + V)
    assert params == plan.parameters == 116505  # what fairseq-train logs for this model
    assert (plan.weights, plan.gradients, plan.master_weights, plan.optimizer_state) == (
        4 * params, 4 * params, 0, 8 * params)
    # Korthikanti et al.: s b h (34 + 5 a s / h) bytes per layer at 16-bit; fp32 doubles it
    s, b, h, a = 32, 4, D, 2
    per_layer = (s * b * h * 34 + 5 * a * s * s * b) * 2
    logits = 2 * 4 * (0.15 * s * b) * V  # fp32 logits + log-softmax of the masked tokens
    assert plan.activations == pytest.approx(L * per_layer + logits)
    assert plan.total == pytest.approx(16 * params + L * per_layer + logits)


def six_point_seven_b(*flags, world_size=1):
    return memory_plan.plan(["fairseq-train", "--arch", "bidir_lm_6_7b", "--task",
                             "bidirectional_lm", "--tokens-per-sample", "1024", "--max-tokens",
                             "2048", *flags], world_size)


def test_6_7b_needs_107_gb_of_model_states_without_sharding():
    params = 6654251008
    fp32 = six_point_seven_b()
    assert fp32.parameters == params and fp32.sequences == 2
    assert fp32.model_states == 16 * params  # 106.5 GB: weights, gradients, Adam's moments
    assert round(fp32.model_states / 1e9, 1) == 106.5
    fp16 = six_point_seven_b("--fp16")  # 2 + 2 + fp32 master 4 + Adam 8
    assert (fp16.weights, fp16.master_weights, fp16.model_states) == (
        2 * params, 4 * params, 16 * params)
    logits = 2 * 4 * 2048 * 50265  # fp32 logits and log-softmax of every token of the batch
    assert fp16.activations - logits == pytest.approx((fp32.activations - logits) / 2)
    assert six_point_seven_b("--memory-efficient-fp16").model_states == 12 * params
    sharded = six_point_seven_b("--fp16", "--zero-sharding", "os", world_size=8)
    # fp16 weights and gradients, the whole fp32 master copy (OSS shards the optimizer fairseq
    # built around it), DDP's bucket copy of the fp16 gradients, 1/8 of Adam's moments
    assert sharded.master_weights == 4 * params and sharded.ddp_buckets == 2 * params
    assert sharded.model_states == pytest.approx((2 + 2 + 4 + 2) * params + 8 * params / 8)
    assert six_point_seven_b("--fp16", "--zero-sharding", "os", "--gradient-as-bucket-view",
                             world_size=8).ddp_buckets == 0
    assert six_point_seven_b("--fp16", "--ddp-backend", "legacy_ddp",
                             world_size=8).ddp_buckets == 0
    assert six_point_seven_b("--fp16").ddp_buckets == 0  # one GPU: no DDP
    fsdp = six_point_seven_b("--fp16", "--ddp-backend", "fully_sharded", world_size=8)
    assert fsdp.model_states == pytest.approx(16 * params / 8)
    assert fsdp.activations == fp16.activations  # activations are per micro-batch


def test_checkpoint_activations_by_hand(tmp_path):
    """Full recomputation (Korthikanti et al. 2022, Sec. 4): each layer keeps its input, s b h
    elements (2 s b h L bytes at 16-bit), plus one layer's activations while it is recomputed;
    the logits, outside the layers, stay. Model states do not change."""
    L, s, b, h, a, V = 32, 1024, 2, 4096, 32, 50265
    layer = s * b * h * (34 + 5 * a * s / h)  # 16-bit, no recomputation: 1.24 GB
    logits = 2 * 4 * s * b * V
    kept = six_point_seven_b("--fp16")
    recomputed = six_point_seven_b("--fp16", "--checkpoint-activations")
    assert kept.activations == pytest.approx(L * layer + logits)  # 20.7 GB
    assert recomputed.activations == pytest.approx(2 * s * b * h * L + layer + logits)  # 2.0 GB
    assert recomputed.model_states == kept.model_states
    assert kept.lines()[6].endswith("(Korthikanti et al. 2022, no recomputation)")
    assert recomputed.lines()[6].endswith(
        "(Korthikanti et al. 2022, full recomputation: every layer's input + one layer)")
    # two stacks (3ML-self, fp32): the encoder (2 x 64, 2 heads) on the 32 - 0.8 x 0.15 x 32 kept
    # tokens, the decoder (2 x 32, 1 head) on all 32; the larger block is the one recomputed
    argv = ["fairseq-train", dictionary(tmp_path, 148), "--arch", "3ml_self_tiny",
            "--tokens-per-sample", "32", "--batch-size", "4"]
    b, V, enc_s, dec_s = 4, 153, 32 - 0.8 * 0.15 * 32, 32
    enc_layer = enc_s * b * 64 * (34 + 5 * 2 * enc_s / 64) * 2  # fp32: twice the 16-bit bytes
    dec_layer = dec_s * b * 32 * (34 + 5 * 1 * dec_s / 32) * 2
    logits = 2 * 4 * (0.15 * 32 * b) * V
    assert enc_layer > dec_layer
    assert memory_plan.plan(argv).activations == pytest.approx(
        2 * enc_layer + 2 * dec_layer + logits)
    assert memory_plan.plan([*argv, "--checkpoint-activations"]).activations == pytest.approx(
        2 * enc_s * b * 64 * 4 + 2 * dec_s * b * 32 * 4 + enc_layer + logits)


def test_checkpoint_activations_recomputes_every_layer_with_the_same_gradients():
    """What the recomputation term stands for: with --checkpoint-activations the backward pass
    runs every layer's forward once more, and the loss and gradients are those without."""
    vocab, layers = 40, 2
    tokens = torch.randint(4, vocab - 1, (2, 16), generator=torch.Generator().manual_seed(0))
    runs = []
    for checkpoint in (False, True):
        torch.manual_seed(0)
        model = build_arch("bidir_lm_tiny", MaskedLmTaskStub(vocab), 16, dropout=0.0,
                           attention_dropout=0.0, checkpoint_activations=checkpoint)
        calls = []
        for layer in model.decoder.layers:
            layer.fc1.register_forward_hook(lambda *_: calls.append(1))
        logits, _ = model(tokens)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        in_forward = len(calls)
        loss.backward()
        runs.append((loss.detach(), in_forward, len(calls) - in_forward,
                     {name: p.grad for name, p in model.named_parameters()}))
    (loss, forward, backward, grads), (ckpt_loss, ckpt_forward, ckpt_backward, ckpt_grads) = runs
    assert (forward, backward) == (layers, 0)
    assert (ckpt_forward, ckpt_backward) == (layers, layers)
    assert torch.equal(ckpt_loss, loss)
    assert ckpt_grads.keys() == grads.keys()
    for name, grad in grads.items():
        assert torch.equal(ckpt_grads[name], grad), name  # the same ops again: bit for bit


def test_the_large_bidirectional_recipes_recompute_activations_to_fit_80_gb():
    """recipes/bidirectional/pretrain.sh at 6.7B on 8 GPUs (ZeRO-1, 8 x 1024 tokens per GPU,
    GPT-2's 50,265 symbols): in fp32, 249 GB per GPU without recomputation and 99 GB with the
    --checkpoint-activations it passes by default (26.6 GB of them DDP's bucket copy of the
    gradients), so it defaults to memory-efficient fp16 with fairseq's adam: 54.5 GB
    (docs/scaling.md)."""
    argv, flags = dry_run(REPO_ROOT / "recipes/bidirectional/pretrain.sh", SIZE="6_7b",
                          NUM_GPUS="8")
    assert flags["--checkpoint-activations"] is True and flags["--memory-efficient-fp16"] is True
    assert flags["--optimizer"] == "adam"
    planned = memory_plan.plan(argv, world_size=8)
    assert (planned.sequences, planned.sharding) == (8, "optimizer state over 8")
    assert round(planned.total / 1e9, 2) == 54.50 < 80
    fp32_argv, _ = dry_run(REPO_ROOT / "recipes/bidirectional/pretrain.sh", SIZE="6_7b",
                           NUM_GPUS="8", PRECISION="", OPTIMIZER="fused_adamw")
    recomputed = memory_plan.plan(fp32_argv, world_size=8)
    kept = memory_plan.plan([a for a in fp32_argv if a != "--checkpoint-activations"],
                            world_size=8)
    assert round(kept.activations / 1e9, 2) == 162.21 and round(kept.total / 1e9, 2) == 248.71
    assert round(recomputed.activations / 1e9, 2) == 12.56
    assert round(recomputed.total / 1e9, 2) == 99.06 > 80
    assert round(recomputed.ddp_buckets / 1e9, 2) == 26.62


def test_cli(capsys):
    """The plan, and a clear error; the caller's logging is left as it was (main() silences
    INFO while it plans: left so, a test run after it in the same process lost fairseq's INFO
    records, which tests/test_prepare_glue.py reads)."""
    logging_disabled_before = logging.root.manager.disable
    assert memory_plan.main(["--world-size", "8", "--", "fairseq-train", "--arch",
                             "bidir_lm_6_7b", "--task", "bidirectional_lm",
                             "--tokens-per-sample", "1024", "--max-tokens", "2048", "--fp16",
                             "--zero-sharding", "os"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("memory plan per GPU (bidir_lm_6_7b, 6,654.3M parameters, micro-batch "
                      "2 x 1024 tokens, 8 GPU(s), sharding: optimizer state over 8):")
    assert out[1].split() == ["weights", "13.31", "GB"]
    assert out[4].split() == ["optimizer", "state", "6.65", "GB"]
    assert memory_plan.main(["--", "fairseq-train", "--arch", "roberta_tiny"]) == 2
    assert capsys.readouterr().err.strip() == (
        "memory plan: error: give --batch-size or --max-tokens: the micro-batch sets the "
        "activations")
    assert logging.root.manager.disable == logging_disabled_before


@pytest.mark.slow
@pytest.mark.parametrize("recipe, arch", [("recipes/roberta/pretrain.sh", "roberta_base"),
                                          ("recipes/bidirectional/pretrain.sh", "bidir_lm_125m")])
def test_recipes_print_the_plan_before_training(recipe, arch, tmp_path):
    """With a stand-in fairseq-train: the plan, on NUM_GPUS, then the command."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "fairseq-train").write_text("#!/bin/sh\necho TRAINING\n")
    (fake_bin / "fairseq-train").chmod(0o755)
    env = {"DATA": dictionary(tmp_path, 148), "SAVE_DIR": str(tmp_path / "ckpt"),
           "FAIRSEQ_BIN": str(fake_bin), "NUM_GPUS": "4", "ZERO_SHARDING": "os"}
    lines = run_cli([REPO_ROOT / recipe], env=env).stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("memory plan per GPU"))
    assert lines[first].startswith(f"memory plan per GPU ({arch}, ")
    assert "4 GPU(s), sharding: optimizer state over 4" in lines[first]
    assert lines[first + 7].split()[0] == "total"
    assert lines[first + 8].startswith("+ ") and lines[first + 9] == "TRAINING"
    dry = run_cli([REPO_ROOT / recipe], env=dict(env, DRY_RUN="1")).stdout
    assert "memory plan" not in dry


def test_every_pretraining_recipe_goes_through_the_plan():
    """The plan is printed by the two functions of recipes/lib/common.sh that run fairseq-train
    for pre-training; every pretrain*.sh ends in one of them (or in a recipe that does)."""
    common = (REPO_ROOT / "recipes/lib/common.sh").read_text()
    for function in ("run_mlm_pretraining", "run_bidirectional_pretraining"):
        body = common.split(f"\n{function}() {{", 1)[1].split("\n}", 1)[0]
        assert body.index('print_memory_plan "${cmd[@]}" "$@"') < body.index("run_printed")
    recipes = sorted(REPO_ROOT.glob("recipes/*/pretrain*.sh"))
    assert len(recipes) >= 5
    for recipe in recipes:
        text = recipe.read_text()
        assert ("run_mlm_pretraining" in text or "run_bidirectional_pretraining" in text
                or "pretrain_efficient.sh" in text), recipe
