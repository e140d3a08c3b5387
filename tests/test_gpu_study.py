"""The GPU study (``3ml-gpu``, issues 47 and 59; docs/studies.md, "3ML on the GPU"): its shape,
device and precision, its equal-updates budget, its fine-tuning arms and claims
(tests/test_gpu_suite_study.py: the GPU suite's stage that runs it)."""
from dataclasses import replace as dataclass_replace

import pytest
import torch

from fairseq_ext.experiments import budget, recipe_runs, studies
from fairseq_ext.experiments.studies import cli


def test_the_gpu_study_trains_on_the_gpu_in_fp16_at_its_shape(tiny_data_bin):
    """3ml-gpu: its recipes' commands under the GPU's environment train off the CPU in fairseq
    fp16 at 6 x 512 with 512-token blocks of 32; 3ML-self-40%'s analytic speedup there is 1.25."""
    from fairseq_ext import flops

    study = studies.STUDIES["3ml-gpu"]
    assert study.device == "cuda" and study.seeds == (1, 2, 3) and not study.lr_grid
    assert studies.run_environment("cuda") == studies.GPU_RUN_ENV
    assert studies.run_environment("cpu") == recipe_runs.ONE_THREAD
    for model in study.models:
        gpu_run = dataclass_replace(model, env={**model.env, **studies.run_environment("cuda")})
        command = budget.planned_command(gpu_run.run(2), tiny_data_bin)
        assert "--fp16" in command and "--cpu" not in command
        assert "--cpu" in budget.planned_command(model.run(2), tiny_data_bin)  # the recipes' own
        for flag, value in (("--encoder-layers", "6"), ("--encoder-embed-dim", "512"),
                            ("--encoder-attention-heads", "8"), ("--tokens-per-sample", "512"),
                            ("--batch-size", "32"), ("--lr", "5e-4"), ("--dropout", "0.1"),
                            ("--seed", "2")):
            assert budget.command_option(command, flag) == value, flag
    self_model = study.model("3ml-self-40%")
    assert budget.command_option(budget.planned_command(self_model.run(), tiny_data_bin),
                               "--decoder-embed-dim") == "256"
    shape = dict(encoder_layers=6, encoder_embed_dim=512, encoder_ffn_embed_dim=2048)
    roberta = flops.training_flops_per_sequence(
        flops.spec_for_arch("roberta_mini_prenorm", **shape), 512, 0.15, 8000)
    three_ml = flops.training_flops_per_sequence(
        flops.spec_for_arch("3ml_self_mini", decoder_layers=2, decoder_embed_dim=256,
                            decoder_ffn_embed_dim=1024, **shape), 512, 0.4, 8000)
    assert roberta / three_ml == pytest.approx(1.25, abs=0.005)


def test_a_gpu_study_is_refused_where_torch_sees_no_gpu(tiny_data_bin, monkeypatch):

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="torch sees no CUDA device here.*--device cpu"):
        studies.main(["3ml-gpu", "--data", str(tiny_data_bin)])
    seen = {}

    def fake_run(study, data, runs_dir, *args, **kwargs):
        seen.update(device=study.device, runs_dir=runs_dir)

    monkeypatch.setattr(cli, "run", fake_run)
    studies.main(["3ml-gpu", "--data", str(tiny_data_bin), "--device", "cpu"])  # moved: it runs
    assert seen["device"] == "cpu"
    assert seen["runs_dir"].parts[-2:] == ("studies", "3ml-gpu")


def test_the_gpu_study_trains_both_models_for_the_same_updates(tiny_data_bin):
    """3ml-gpu follows Table 3's first block: the same updates of the same batches for
    RoBERTa-15% and 3ML-self-40% (3ML then spends 1/1.25 of the FLOPs at its shape), so its
    wall-clock claim reads the measured speedup."""
    study = studies.STUDIES["3ml-gpu"]
    assert study.budget == studies.EQUAL_TOKENS
    plan = studies.plan_study(study, tiny_data_bin)
    assert {(p.model.name, p.updates) for p in plan} == {("roberta-15%", 600),
                                                         ("3ml-self-40%", 600)}
    assert [claim.kind for claim in study.claims] == [studies.SHORTER_TRAINING]
    assert {arm.name: (arm.model, arm.random_init) for arm in study.finetune.arms} == {
        "roberta-15%": ("roberta-15%", False), "3ml-self-40%": ("3ml-self-40%", False),
        "random init": ("roberta-15%", True)}
    kinds = {claim.text.partition(" (")[0]: claim.kind for claim in study.finetune_claims}
    assert kinds["3ML-self-40% fine-tunes on par with RoBERTa-15%"] == "on_par"
    assert kinds["3ML-self-40% fine-tunes better than RoBERTa-15%"] == "better"
    better = study.finetune_claims[-1]
    assert better.paper_effect == pytest.approx(85.0 - 84.3)  # Table 3, first block
    assert "on the GPU (fp32)" in better.differs and "on the CPU" not in better.differs
