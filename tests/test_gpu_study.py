"""The GPU study (``3ml-gpu``; docs/studies.md, "3ML on the GPU"): its shape,
device and precision, its equal-updates budget, its fine-tuning arms and claims
(tests/test_gpu_suite_study.py: the GPU suite's stage that runs it)."""
from dataclasses import replace as dataclass_replace

import pytest
import torch

from fairseq_ext_lab import budget, recipe_runs, studies
from fairseq_ext_lab.studies import cli


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


def test_the_planned_power_quoted_for_the_gpu_study_comes_from_the_committed_cpu_study():
    """docs/studies.md plans the GPU study's fine-tuning comparison from the CPU 3ML study's
    spread: its "3ML-self-40% fine-tunes better than RoBERTa-15%" per-seed differences give an
    MDE of 19.9 points at 3 seeds, against the paper's 0.7 (Table 3, first block); the demo's
    three seeds on the English corpus give 8.0."""
    import json

    from conftest import REPO_ROOT
    from fairseq_ext_lab.studies import power

    report = json.loads((REPO_ROOT / "docs/studies/3ml/study.json").read_text())
    (claim,) = [c for c in report["finetune"]["claims"]
                if c["claim"].startswith("3ML-self-40% fine-tunes better than RoBERTa-15%")]
    differences = list(claim["per_seed"].values())
    assert power.planned_mde(differences, 3) == pytest.approx(19.9, abs=0.05)
    gpu_claim = studies.STUDIES["3ml-gpu"].finetune_claims[-1]
    assert gpu_claim.paper_effect == pytest.approx(0.7)
    docs = " ".join((REPO_ROOT / "docs/studies.md").read_text().split())  # lines re-wrapped
    assert "planned MDE of 19.9 points at 3 seeds" in docs
    # and the English corpus's spread, from the demo's three pre-training seeds
    spread = json.loads((REPO_ROOT / "docs/demo/seed_spread.json").read_text())
    english = spread["figures"]["finetune/FortuneTopic/3ml-self-40%/vs_roberta-15%"]["values"]
    shown = ", ".join(f"{value:+.1f}" for value in english)
    assert f"minus RoBERTa-15%: {shown} points) give {power.planned_mde(english, 3):.1f} " \
           "points at 3 seeds" in docs


@pytest.mark.parametrize("day, step_seconds, study_seconds, seconds, baseline_seconds, ratio", [
    ("2026-11-28", "142.6", "777.6", 158.0, 206.0, "0.767"),  # the Python docs' data-bin
    ("2026-12-07", "118.6", "1675.6", 215.0, 265.0, "0.811"),  # the English corpus's share
])
def test_the_rehearsal_figures_in_the_docs_are_the_committed_summaries(
        day, step_seconds, study_seconds, seconds, baseline_seconds, ratio):
    """docs/benchmarks.md quotes the CPU rehearsals of the step and study stages from
    docs/gpu_rehearsal/DAY/: the stages' seconds and the trial's time ratio (3ML-self's
    seconds over RoBERTa's at one seed)."""
    import json

    from conftest import REPO_ROOT

    folder = REPO_ROOT / "docs/gpu_rehearsal" / day
    rows = {name: (folder / name / "stages.tsv").read_text().splitlines()[1].split("\t")
            for name in ("step", "study")}
    assert rows == {"step": ["step", step_seconds, "ok"], "study": ["study", study_seconds, "ok"]}
    (claim,) = json.loads((folder / "study" / "study.json").read_text())["claims"]
    assert (claim["seconds"], claim["baseline_seconds"]) == ({"1": seconds},
                                                             {"1": baseline_seconds})
    assert claim["ratio"] == pytest.approx(seconds / baseline_seconds)
    assert f"{claim['ratio']:.3f}" == ratio
    # its report, rendered again from the summary, is the one the run printed: trained on the
    # CPU (the summary records its device; the study's own is cuda)
    report = json.loads((folder / "study" / "study.json").read_text())
    printed = (folder / "study" / "study-3ml-gpu.txt").read_text()
    study = studies.STUDIES["3ml-gpu"]
    assert study.device == "cuda" and report["device"] == "cpu"
    text = studies.format_report(dataclass_replace(study, seeds=(1,)), report)
    assert text in printed and "1 seeds, equal training tokens, trained on cpu;" in text
    assert studies.format_finetune(report["finetune"], 1) in printed
    benchmarks = " ".join((REPO_ROOT / "docs/benchmarks.md").read_text().split())
    for figure in (f"passed in {step_seconds} s", f"stage ok in {study_seconds} s",
                   f"{ratio} at one seed"):
        assert figure in benchmarks, figure
