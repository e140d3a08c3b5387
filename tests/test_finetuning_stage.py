"""The studies' fine-tuning stage (fairseq_ext_lab/finetuning.py): its seed statistics
against hand computations, the recipe inputs of each family, the recipes' downstream tasks, and
the study entries' fine-tuning protocols."""
import dataclasses
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from recipe_checks import dry_run

from conftest import REPO_ROOT
from fairseq_ext_lab import finetuning, studies
from fairseq_ext_lab.finetuning import FinetuneArm, FinetuneRun, SuiteTask

# ----------------------------------------------------------------------------------------------
# Seed statistics, by hand

#: Two tasks, two pre-training seeds, three fine-tuning seeds each.
ARM_A = {"T1": {1: [80.0, 82.0, 84.0], 2: [70.0, 74.0, 72.0]},
         "T2": {1: [60.0, 60.0, 63.0], 2: [50.0, 56.0, 53.0]}}
ARM_B = {"T1": {1: [78.0, 80.0, 79.0], 2: [71.0, 69.0, 70.0]},
         "T2": {1: [58.0, 61.0, 61.0], 2: [52.0, 50.0, 51.0]}}


def chosen(arms, tasks=("T1", "T2"), seeds=(1, 2), lr="1e-3"):
    """The stage's ``lr`` record: every (arm, task, pre-training seed) chose ``lr``."""
    return {arm: {task: {seed: {"lr": lr, "selection": {lr: 50.0}, "dev": {lr: 50.0}}
                         for seed in seeds} for task in tasks} for arm in arms}


def test_a_seed_figure_is_the_mean_over_its_fine_tuning_seeds():
    assert finetuning.seed_means(ARM_A["T1"]) == {1: 82.0, 2: 72.0}
    # within seed 1: sd(80, 82, 84) = 2, SE 2/sqrt(3); seed 2: sd(70, 74, 72) = 2, the same
    assert finetuning.within_seed_standard_error(ARM_A["T1"]) == pytest.approx(2 / math.sqrt(3))


def test_a_task_figure_is_the_mean_over_pre_training_seeds_with_their_standard_error():
    estimate = finetuning.arm_task_estimate(ARM_A["T1"])
    # per-seed means 82 and 72: mean 77, sd 7.0711, SE sd / sqrt(2) = 5, one degree of freedom
    assert estimate.value == pytest.approx(77.0)
    assert estimate.standard_error == pytest.approx(5.0)
    assert estimate.degrees_of_freedom == 1


def test_the_average_is_taken_per_pre_training_seed_before_the_statistics():
    # seed 1: (82 + 61) / 2 = 71.5; seed 2: (72 + 53) / 2 = 62.5
    assert finetuning.average_per_seed(ARM_A) == {1: 71.5, 2: 62.5}
    estimate = finetuning.arm_average_estimate(ARM_A)
    assert estimate.value == pytest.approx(67.0)
    assert estimate.standard_error == pytest.approx(4.5)  # |71.5 - 62.5| / 2


def test_claims_pair_the_two_arms_on_the_pre_training_seed():
    # B's averages: seed 1 (79 + 60) / 2 = 69.5, seed 2 (70 + 51) / 2 = 60.5
    # a - b per seed: 2.0 and 2.0: mean 2, SE 0 (the seed-to-seed swing cancels when paired)
    difference = finetuning.paired_average_difference(ARM_A, ARM_B)
    assert difference.value == pytest.approx(2.0)
    assert difference.standard_error == pytest.approx(0.0)
    one_task = finetuning.paired_average_difference(ARM_A, ARM_B, task="T2")
    # T2: 61 - 60 = 1 and 53 - 51 = 2: mean 1.5, SE 0.5
    assert one_task.value == pytest.approx(1.5)
    assert one_task.standard_error == pytest.approx(0.5)


def test_the_report_turns_the_stage_into_rows_baselines_and_verdicts():
    study = dataclasses.replace(
        studies.STUDIES["3ml"], seeds=(1, 2),
        finetune=dataclasses.replace(studies.THREE_ML_FINETUNE, arms=(
            FinetuneArm("3ml-self-40%", "3ml-self-40%"), FinetuneArm("roberta-15%", "roberta-15%"))),
        finetune_claims=tuple(c for c in studies.THREE_ML_FINETUNE_CLAIMS if not c.per_task)[:1])
    raw = {"tasks": ["T1", "T2"],
           "accuracy": {"3ml-self-40%": ARM_A, "roberta-15%": ARM_B},
           "lr": chosen(("3ml-self-40%", "roberta-15%")),
           "baselines": {"T1": {"majority": {"accuracy": 0.5, "se": 0.02},
                                "bow_logreg": {"accuracy": 0.7, "se": 0.02}},
                         "T2": {"majority": {"accuracy": 0.3, "se": 0.02},
                                "bow_logreg": {"accuracy": 0.6, "se": 0.02}}},
           "suite": {}, "wall_seconds": 60.0, "run_seconds": 100.0}
    report = studies.finetune_report(study, raw)
    self_row = report["arms"][0]
    assert self_row["average"] == pytest.approx(67.0)
    assert self_row["average_se"] == pytest.approx(4.5)
    majority = report["baselines"][0]
    assert majority["T1"] == pytest.approx(50.0) and majority["average"] == pytest.approx(40.0)
    assert majority["average_se"] == pytest.approx(math.sqrt(2 * 2.0 ** 2) / 2)
    (claim,) = report["claims"]
    assert claim["difference"] == pytest.approx(2.0)
    # SE 0 over seeds (+2, +2): no evidence of precision, so unresolved, and no
    # minimum detectable effect either
    assert claim["difference_se"] == 0.0 and claim["verdict"] == "unresolved"
    assert math.isnan(claim["mde"])
    assert report["arms"][0]["lr"] == {"T1": {"1": "1e-3", "2": "1e-3"},
                                       "T2": {"1": "1e-3", "2": "1e-3"}}
    text = studies.format_finetune(report, 2)
    assert "67.00 ± 4.50" in text and "bag of words" in text
    assert "| 3ML-self-40% fine-tunes better than RoBERTa-15%" in studies.markdown_claims(
        {"claims": [], "finetune": report})


def test_pretraining_helps_is_read_on_the_average_and_each_task_and_opens_the_report():
    random = studies.THREE_ML_RANDOM_INIT
    study = dataclasses.replace(
        studies.STUDIES["3ml"], seeds=(1, 2),
        finetune=dataclasses.replace(studies.THREE_ML_FINETUNE, arms=(
            FinetuneArm("roberta-15%", "roberta-15%"),
            FinetuneArm(random, "roberta-15%", random_init=True))),
        finetune_claims=studies.pretraining_helps_claims([("roberta-15%", random)]))
    # the random-init arm: ARM_A raised by 10 points on seed 1, 10.5 on seed 2
    shifted = {task: {seed: [v + (10.0 if seed == 1 else 10.5) for v in values]
                      for seed, values in per_seed.items()} for task, per_seed in ARM_A.items()}
    raw = {"tasks": ["T1", "T2"], "accuracy": {"roberta-15%": ARM_B, random: shifted},
           "lr": chosen(("roberta-15%", random)),
           "baselines": {"T1": {}, "T2": {}}, "suite": {}, "wall_seconds": 1.0,
           "run_seconds": 1.0}
    report = studies.finetune_report(study, raw)
    average, t1, t2 = report["claims"]
    assert (average["task"], t1["task"], t2["task"]) == (None, "T1", "T2")
    # pre-trained (ARM_B) minus random: average -12 and -12.5 (mean -12.25, SE 0.25: its 95%
    # interval, ± 12.706 SE, lies below 0); T2: 60 - 71 = -11, 51 - 63.5 = -12.5 (SE 0.75)
    assert average["difference"] == pytest.approx(-12.25) and average["verdict"] == "fails"
    assert average["difference_se"] == pytest.approx(0.25)
    assert t2["difference"] == pytest.approx(-11.75) and t2["difference_se"] == pytest.approx(0.75)
    assert t2["claim"].endswith("(on T2)") and "on T2" in t2["measured"]
    text = studies.format_finetune(report, 2)
    assert "pre-training helps" in text and "fails for roberta-15%" in text
    assert "read their differences in that light" in text
    assert studies.pretraining_verdict([{**average, "verdict": "holds"}]).endswith(
        "holds for roberta-15%.")
    assert text.index("pre-training helps (suite average") < text.index("fine-tuning claim")


def test_on_par_claims_read_the_margin_and_better_claims_the_side():
    # worse by 3 points on seed 1 and 3.2 on seed 2: mean -3.1, SE 0.1, interval ± 1.27
    worse = {task: {seed: [v - (3.0 if seed == 1 else 3.2) for v in values]
                    for seed, values in per_seed.items()} for task, per_seed in ARM_B.items()}
    difference = finetuning.paired_average_difference(worse, ARM_B)
    assert difference.value == pytest.approx(-3.1)
    assert difference.standard_error == pytest.approx(0.1)
    flipped = dataclasses.replace(difference, value=-difference.value)
    assert studies.verdict(flipped, "better") == "fails"
    # within 0.05 and 0.07 of each other: interval [0.06 - 0.127, 0.06 + 0.127] inside ± 1
    close_arm = {task: {seed: [v + (0.05 if seed == 1 else 0.07) for v in values]
                        for seed, values in per_seed.items()} for task, per_seed in ARM_B.items()}
    close = finetuning.paired_average_difference(close_arm, ARM_B)
    assert studies.verdict(close, "on_par", 1.0) == "holds"
    # the identical arm: SE 0 is no evidence, even of being on par
    same = finetuning.paired_average_difference(ARM_B, ARM_B)
    assert studies.verdict(same, "on_par", 1.0) == "unresolved"


# ----------------------------------------------------------------------------------------------
# Plans and recipe inputs

TASK = SuiteTask("GlossTopic", Path("suite/GlossTopic-bin"), train_examples=1000,
                 selection_examples=500, baselines={})


def test_the_schedule_is_epochs_of_batches_with_a_warmup_share():
    protocol = studies.THREE_ML_FINETUNE
    assert finetuning.schedule(protocol, 1000) == (2 * 63, 8)  # ceil(1000 / 16) = 63; 6% of 126
    assert finetuning.schedule(protocol, 900) == (2 * 57, 7)


def test_every_run_trains_on_train_and_validates_on_dev_and_the_selection_split():
    arm = FinetuneArm("msk_bi r=0", "msk_bi", {"R_BIDIR": "0"})
    run = FinetuneRun(arm, 2, TASK, "1e-3", 3)
    model = studies.STUDIES["bidirectional"].model("msk_bi")
    env, args = finetuning.recipe_inputs(studies.BIDIRECTIONAL_FINETUNE, run, model,
                                         Path("ckpt.pt"))
    assert env["DATA"] == str(TASK.data) and env["SEED"] == "3" and env["LR"] == "1e-3"
    assert env["VALID_SUBSET"] == "valid,valid1"  # dev, and the 500 selection rows
    assert env["R_BIDIR"] == "0" and env["CKPT"] == "ckpt.pt"
    assert env["TOTAL_UPDATES"] == str(2 * 63)  # the training split's 1,000 examples
    assert "--no-save" in args
    # only the last epoch validates: its record is the one read (final_accuracy)
    epochs = studies.BIDIRECTIONAL_FINETUNE.epochs
    assert args[args.index("--validate-interval") + 1] == str(epochs) and epochs == 2
    assert run.directory(Path("R")) == Path("R/finetune/msk_bi_r0/seed2/GlossTopic/lr1e-3/ft3")
    alone = FinetuneRun(arm, 2, TASK, "1e-3", 3, select=False)  # one rate: dev only
    assert finetuning.recipe_inputs(studies.BIDIRECTIONAL_FINETUNE, alone, model,
                                    Path("ckpt.pt"))[0]["VALID_SUBSET"] == "valid"


def test_each_pre_training_seed_chooses_its_rate_on_the_selection_split_only():
    scores = {"1e-3": {"selection": [40.0, 44.0], "dev": [90.0, 90.0]},
              "3e-3": {"selection": [45.0, 41.0], "dev": [10.0, 12.0]},
              "6e-3": {"selection": [43.0, 43.0], "dev": [50.0, 50.0]}}
    # selection means 42, 43, 43: 3e-3 and 6e-3 tie, the first in the grid wins; dev (which
    # would choose 1e-3) is not looked at
    entry = finetuning.choose_lr(("1e-3", "3e-3", "6e-3"), scores)
    assert entry["lr"] == "3e-3"
    assert entry["selection"] == {"1e-3": 42.0, "3e-3": 43.0, "6e-3": 43.0}
    assert entry["dev"] == {"1e-3": 90.0, "3e-3": 11.0, "6e-3": 50.0}
    one = finetuning.choose_lr(("1e-3",), {"1e-3": {"selection": [], "dev": [30.0]}})
    assert one["lr"] == "1e-3" and one["selection"] == {}
    assert finetuning.chosen_lrs({1: {"lr": "1e-3"}, 2: {"lr": "3e-3"}}) == {"1": "1e-3",
                                                                           "2": "3e-3"}
    assert finetuning.chosen_lrs({"lr": "1e-3", "scores": {}}) == {"all": "1e-3"}  # before 58


def test_an_exported_encoder_s_arch_and_shape_reach_the_recipe():
    model = studies.STUDIES["3ml"].model("3ml-self-40%")
    run = FinetuneRun(FinetuneArm("3ml-self-40%", "3ml-self-40%", {"POOLING": "first"}), 1,
                      TASK, "3e-4", 1)
    export_args = ["--arch", "roberta_prenorm", "--encoder-layers", "6", "--encoder-embed-dim",
                   "192", "--max-positions", "64"]
    env, args = finetuning.recipe_inputs(studies.THREE_ML_FINETUNE, run, model,
                                         Path("enc.pt"), export_args)
    assert env["ARCH"] == "roberta_prenorm" and env["MAX_POSITIONS"] == "64"
    assert args[:4] == ["--encoder-layers", "6", "--encoder-embed-dim", "192"]
    assert "--max-positions" not in args and "--arch" not in args


def test_a_mean_pooling_arm_lets_the_recipe_read_its_arch():
    """POOLING=mean needs roberta_pooled's flags, which the recipe derives from the checkpoint
    (export_encoder.py --print-finetune-args --pooling mean): no ARCH, no shape flags."""
    model = studies.STUDIES["3ml"].model("3ml-self-40%")
    run = FinetuneRun(FinetuneArm("m", "3ml-self-40%", {"POOLING": "mean"}), 1, TASK, "3e-4", 1)
    export_args = ["--arch", "roberta_prenorm", "--encoder-layers", "6", "--max-positions", "64"]
    env, args = finetuning.recipe_inputs(studies.THREE_ML_FINETUNE, run, model,
                                         Path("enc.pt"), export_args)
    assert env["POOLING"] == "mean" and "ARCH" not in env and "MAX_POSITIONS" not in env
    assert "--encoder-layers" not in args
    # no POOLING: the recipe's default for a suite task (mean), so again the recipe reads it
    run = FinetuneRun(FinetuneArm("d", "3ml-self-40%"), 1, TASK, "3e-4", 1)
    env, args = finetuning.recipe_inputs(studies.THREE_ML_FINETUNE, run, model,
                                         Path("enc.pt"), export_args)
    assert "POOLING" not in env and "ARCH" not in env and "--encoder-layers" not in args
    # the studies' 3ML stage fine-tunes every arm, random init included, with the chosen head
    assert {arm.env.get("POOLING") for arm in studies.THREE_ML_FINETUNE.arms} == {
        finetuning.CHOSEN_POOLING}


def test_swishrnn_runs_repeat_the_model_flags_of_pre_training():
    model = studies.STUDIES["swishrnn"].model("swishrnn-bert-k1")
    run = FinetuneRun(FinetuneArm(model.name, model.name), 1, TASK, "3e-4", 1)
    env, args = finetuning.recipe_inputs(studies.SWISHRNN_FINETUNE, run, model, Path("c.pt"))
    assert env["ARCH"] == "swishrnn_bert_mini"
    assert args[args.index("--swishrnn-step-sizes") + 1] == "1"
    assert "--encoder-normalize-before" in args and "--encoder-layers" in args
    rab = studies.STUDIES["swishrnn"].model("bert-rab")
    env, _ = finetuning.recipe_inputs(studies.SWISHRNN_FINETUNE,
                                      FinetuneRun(FinetuneArm("bert-rab", "bert-rab"), 1, TASK,
                                                  "3e-4", 1), rab, Path("c.pt"))
    assert env["ARCH"] == "bert_rab_mini"


def test_final_accuracy_reads_the_last_validation_not_the_best():
    lines = ['2026 | INFO | valid | {"epoch": 1, "valid_loss": "0.9", "valid_accuracy": "70.5"}',
             '2026 | INFO | valid | {"epoch": 2, "valid_loss": "0.8", "valid_accuracy": "68.25", '
             '"valid_best_accuracy": "70.5"}',
             '2026 | INFO | train | {"epoch": 2, "train_accuracy": "90"}']
    assert finetuning.final_accuracy(lines) == 68.25
    assert finetuning.final_accuracy(lines[2:]) is None


def test_a_finished_run_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"accuracy": 70.0, "settings": {"lr": "1e-3"}}))
    assert finetuning.load_run(path, {"lr": "1e-3"})["accuracy"] == 70.0
    with pytest.raises(SystemExit, match="other settings"):
        finetuning.load_run(path, {"lr": "3e-3"})
    assert finetuning.load_run(tmp_path / "missing.json", {}) is None


def test_a_folder_that_is_no_suite_is_told_with_the_command(tmp_path):
    with pytest.raises(SystemExit, match="scripts/prepare_downstream.sh"):
        finetuning.load_suite(tmp_path)


# ----------------------------------------------------------------------------------------------
# Study entries

def test_every_fine_tuning_claim_cites_its_table_and_names_arms_of_its_study():
    for name in ("3ml", "3ml-gpu", "swishrnn", "bidirectional"):
        study = studies.STUDIES[name]
        assert study.finetune is not None and study.finetune_claims
        arms = {arm.name for arm in study.finetune.arms}
        assert {arm.model for arm in study.finetune.arms} == {m.name for m in study.models}
        random_arms = {arm.name for arm in study.finetune.arms if arm.random_init}
        helps = [claim for claim in study.finetune_claims if claim.per_task]
        # "pre-training helps" opens the claims: every pre-trained arm of the study's models
        # against a random-init arm of its architecture (ours: the papers take it as given)
        assert study.finetune_claims[:len(helps)] == tuple(helps) and helps
        assert {claim.a for claim in helps} == {m.name for m in study.models}
        for claim in helps:
            assert claim.b in random_arms and claim.ours and claim.kind == "better"
        for claim in study.finetune_claims:
            assert {claim.a, claim.b} <= arms
            if not claim.per_task:
                assert "Table" in claim.source and claim.paper_figure
    bad = dataclasses.replace(studies.STUDIES["3ml"], finetune_claims=(
        studies.Claim("x", "better", "nobody", "roberta-15%", studies.FINETUNE_METRIC),))
    with pytest.raises(SystemExit, match="names arms outside"):
        studies.check_study(bad)
    assert studies.STUDIES["bidirectional-flops"].finetune is None


def test_bidirectional_arms_fine_tune_with_the_pre_training_attention_and_switched():
    arms = {arm.name: arm for arm in studies.BIDIRECTIONAL_FINETUNE.arms}
    assert arms["msk_bi"].env == {"R_BIDIR": "1"} and arms["nxt_uni"].env == {"R_BIDIR": "0"}
    assert arms["msk_bi r=0"].env == {"R_BIDIR": "0"} and arms["nxt_uni r=1"].model == "nxt_uni"


# ----------------------------------------------------------------------------------------------
# The recipes take the downstream tasks

@pytest.fixture
def downstream_bin(tmp_path):
    data = tmp_path / "FortuneTopic-bin"
    (data / "label").mkdir(parents=True)
    # as fairseq-preprocess writes it: padded to 8 entries with the 4 specials it adds on load
    (data / "label" / "dict.txt").write_text("work 300\npeople 300\nscience 300\nart 300\n"
                                             "madeupword0000 0\nmadeupword0001 0\n")
    return data


def test_the_3ml_recipe_reads_the_classes_of_a_downstream_task(downstream_bin, tmp_path):
    encoder = tmp_path / "enc.pt"
    encoder.write_bytes(b"")
    _, flags = dry_run(REPO_ROOT / "recipes/3ml/finetune_glue.sh", TASK="fortunetopic",
                       DATA=str(downstream_bin), PRETRAINED=str(encoder), ARCH="roberta_prenorm",
                       MAX_POSITIONS="64", TRAIN_EXAMPLES="100", POOLING="first")
    assert flags["--num-classes"] == "4"
    assert flags["--best-checkpoint-metric"] == "accuracy"


def test_the_3ml_recipe_defaults_a_suite_task_to_the_chosen_protocol(downstream_bin, tmp_path):
    """A suite task takes the head, lr and epochs the levers chose (finetuning.CHOSEN_*) at the
    demo's batch (DEMO_PROTOCOL.batch); a GLUE task keeps Table 5's defaults and the <s> head."""
    encoder = tmp_path / "enc.pt"
    encoder.write_bytes(b"")
    common = dict(PRETRAINED=str(encoder), MAX_POSITIONS="64", TRAIN_EXAMPLES="100")
    _, flags = dry_run(REPO_ROOT / "recipes/3ml/finetune_glue.sh", TASK="FortuneTopic",
                       DATA=str(downstream_bin), ARCH="roberta_pooled_prenorm", **common)
    batch = finetuning.DEMO_PROTOCOL.batch
    assert flags["--classification-pooling"] == finetuning.CHOSEN_POOLING
    assert flags["--lr"] == finetuning.CHOSEN_LR
    assert flags["--max-epoch"] == str(finetuning.CHOSEN_EPOCHS)
    assert flags["--batch-size"] == str(batch) and flags["--update-freq"] == "1"
    assert flags["--total-num-update"] == str(finetuning.CHOSEN_EPOCHS * math.ceil(100 / batch))
    _, flags = dry_run(REPO_ROOT / "recipes/3ml/finetune_glue.sh", TASK="RTE",
                       DATA=str(downstream_bin), ARCH="roberta_prenorm", **common)
    assert "--classification-pooling" not in flags
    assert (flags["--lr"], flags["--max-epoch"]) == ("5e-05", "3")
    assert flags["--total-num-update"] == str(3 * math.ceil(100 / 32))


def test_the_bidirectional_and_swishrnn_recipes_need_updates_for_a_downstream_task(
        downstream_bin, tmp_path):
    checkpoint = tmp_path / "c.pt"
    checkpoint.write_bytes(b"")
    _, flags = dry_run(REPO_ROOT / "recipes/bidirectional/finetune_glue.sh", TASK="FortuneTopic",
                       DATA=str(downstream_bin), CKPT=str(checkpoint), R_BIDIR="1",
                       TOTAL_UPDATES="100")
    assert flags["--num-classes"] == "4" and flags["--warmup-updates"] == "6"
    _, flags = dry_run(REPO_ROOT / "recipes/swishrnn/finetune_glue.sh", TASK="FortuneTopic",
                       DATA=str(downstream_bin), PRETRAINED=str(checkpoint), TOTAL_UPDATES="50")
    assert flags["--num-classes"] == "4" and flags["--max-update"] == "50"

    def refusal(recipe: str, task: str):
        """(exit status, stderr) of a recipe's dry run that should refuse ``task``."""
        proc = subprocess.run(
            ["bash", str(REPO_ROOT / recipe)],
            env={"PATH": os.environ["PATH"], "DRY_RUN": "1", "TASK": task,
                 "DATA": str(downstream_bin), "PRETRAINED": str(checkpoint)},
            capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stderr

    status, stderr = refusal("recipes/swishrnn/finetune_glue.sh", "FortuneTopic")
    assert status == 2 and "set TOTAL_UPDATES" in stderr
    status, stderr = refusal("recipes/3ml/finetune_glue.sh", "NoSuchTask")
    assert status == 2 and "GlossPair" in stderr


def test_on_the_gpu_a_run_trains_off_the_cpu_and_is_kept_apart_from_cpu_runs(downstream_bin,
                                                                               tmp_path):
    """The GPU study fine-tunes on the GPU: the recipe gets CPU=0 (no --cpu, fp32: no --fp16),
    and a run's settings name the device, so a CPU run is never read back as a GPU one."""
    study = studies.STUDIES["3ml-gpu"]
    model = study.model("3ml-self-40%")
    encoder = tmp_path / "enc.pt"
    encoder.write_bytes(b"")
    task = SuiteTask("FortuneTopic", downstream_bin, 1000, 500, {})
    run = FinetuneRun(study.finetune.arm("3ml-self-40%"), 1, task, "1e-3", 1)
    export_args = ["--arch", "roberta_prenorm", "--max-positions", "512"]
    for device, on_cpu in (("cuda", False), ("cpu", True)):
        env, args = finetuning.recipe_inputs(study.finetune, run, model, encoder, export_args,
                                             device)
        assert env["CPU"] == {"cuda": "0", "cpu": "1"}[device]
        # the fixture has labels only, and an empty encoder: the mean head's arch is given
        env = {**{key: value for key, value in env.items() if key != "LOG_FILE"},
               "TRAIN_EXAMPLES": "1000", "ARCH": "roberta_pooled_prenorm",
               "MAX_POSITIONS": "512"}
        _, flags = dry_run(REPO_ROOT / study.finetune.recipe, *args, **env)
        assert ("--cpu" in flags) == on_cpu and "--fp16" not in flags
    settings = finetuning.run_settings(study.finetune, run, "fp", "cuda")
    assert settings["device"] == "cuda"
    assert settings == {**finetuning.run_settings(study.finetune, run, "fp"), "device": "cuda"}
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"accuracy": 50.0, "settings": finetuning.run_settings(
        study.finetune, run, "fp")}))
    with pytest.raises(SystemExit, match="other settings"):
        finetuning.load_run(path, settings)


def test_a_run_whose_checkpoint_is_gone_says_which_result_to_remove(tmp_path):
    """A GPU call brings back a finished pre-training run without its checkpoint: fine-tuning
    it later is refused with the result.json to remove, before any export or recipe runs."""
    checkpoint = tmp_path / "roberta-15pct" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    with pytest.raises(SystemExit, match=r"checkpoint_last.pt is missing.*remove that run's "
                                         r"result.json \(.*seed1/result.json\)"):
        finetuning.prepare_checkpoint(checkpoint, tmp_path / "export", export=True)
    assert not (tmp_path / "export").exists()
    study = studies.STUDIES["3ml-gpu"]
    run = FinetuneRun(study.finetune.arm("roberta-15%"), 1, TASK, "1e-3", 1)
    with pytest.raises(SystemExit, match="is missing"):
        finetuning.fine_tune(study.finetune, run, study.model("roberta-15%"), checkpoint, [],
                             tmp_path / "ft", {})
    assert not (tmp_path / "ft").exists()


# ----------------------------------------------------------------------------------------------
# End to end: a tiny pre-trained RoBERTa fine-tuned on a suite built from the shipped samples

@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """(suite dir, {(model, seed): checkpoint}, runs dir): a GlossPair suite of the samples (a
    pair task: both inputs reach the model), and
    roberta_tiny pre-trained for a few updates on text encoded with the suite's dictionary."""
    import sentencepiece
    from test_prepare_downstream import sample_args

    from conftest import TINY_SHELL_ENV, fairseq_cli, run_cli, write_documents
    from fairseq_ext.corpus import downstream
    from fairseq_ext.corpus.encoders import train_sentencepiece, write_sentencepiece_dictionary

    root = tmp_path_factory.mktemp("finetune_e2e")
    data = root / "data-bin"
    (data / "prep").mkdir(parents=True)
    for split, seed in (("train", 3), ("valid", 4), ("test", 5)):
        write_documents(data / "prep" / f"{split}.txt", 40 if split == "train" else 4, seed)
    samples = REPO_ROOT / "tests/data/downstream/wordnet"
    text = root / "spm.txt"
    text.write_text((data / "prep/train.txt").read_text() + "".join(
        path.read_text() for path in sorted(samples.iterdir())))
    train_sentencepiece(text, data / "spm.model", vocab_size=300, model_type="unigram",
                        character_coverage=1.0, input_sentence_size=100000, threads=1)
    write_sentencepiece_dictionary(data / "spm.model", data / "dict.txt")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(data / "spm.model"))
    for split in ("train", "valid"):
        lines = (data / "prep" / f"{split}.txt").read_text().splitlines()
        (root / f"{split}.spm").write_text("".join(
            " ".join(processor.encode(line, out_type=str)) + "\n" for line in lines))
    run_cli([fairseq_cli("fairseq-preprocess"), "--only-source", "--srcdict", data / "dict.txt",
             "--trainpref", root / "train.spm", "--validpref", root / "valid.spm",
             "--destdir", data, "--workers", "1"])
    suite = root / "suite"
    assert downstream.main(sample_args(suite, data, "GlossPair", "--train-size", "40",
                                       "--dev-size", "20", "--selection-size", "10")) == 0
    save = root / "pretrained"
    run_cli([REPO_ROOT / "recipes/roberta/demo.sh", "--log-format", "json", "--no-progress-bar"],
            env=dict(TINY_SHELL_ENV, DATA=str(data), SAVE_DIR=str(save), TOTAL_UPDATES="4"))
    return suite, {("roberta-15%", 1): save / "checkpoint_last.pt"}, root / "runs"


@pytest.mark.slow
def test_the_stage_fine_tunes_a_checkpoint_end_to_end_and_reads_it_back(tiny_study, capsys):
    suite, checkpoints, runs_dir = tiny_study
    protocol = dataclasses.replace(
        studies.THREE_ML_FINETUNE, arms=(FinetuneArm("roberta-15%", "roberta-15%"),),
        lrs=("1e-4", "1e-3"), seeds=(1, 2), epochs=1)
    models = {"roberta-15%": studies.STUDIES["3ml"].model("roberta-15%")}
    raw = finetuning.run_stage(protocol, models, (1,), checkpoints, suite, runs_dir, workers=2)
    assert raw["tasks"] == ["GlossPair"] and raw["runs_now"] == 4  # 2 rates x 2 seeds
    selection = raw["lr"]["roberta-15%"]["GlossPair"][1]
    assert set(selection["selection"]) == {"1e-4", "1e-3"}
    assert selection["selection"][selection["lr"]] == max(selection["selection"].values())
    scores = raw["accuracy"]["roberta-15%"]["GlossPair"][1]
    assert scores == [json.loads((runs_dir / f"finetune/roberta-15pct/seed1/GlossPair/"
                                  f"lr{selection['lr']}/ft{ft}/result.json").read_text())
                      ["accuracy"] for ft in (1, 2)]  # the chosen rate's dev scores
    summary = json.loads((suite / "downstream.json").read_text())["tasks"]["GlossPair"]
    # each score is a whole number of the rows right, as fairseq counts them
    for ft in (1, 2):
        result = json.loads((runs_dir / f"finetune/roberta-15pct/seed1/GlossPair/lr1e-4/ft{ft}/"
                             "result.json").read_text())
        for score, rows in ((result["accuracy"], summary["sizes"]["dev"]),
                            (result["selection_accuracy"], summary["sizes"]["selection"])):
            assert 0 <= score <= 100 and abs(score / 100 * rows - round(score / 100 * rows)) < 0.02
    # the exported encoder took the pre-trained weights, the recipe the export's arch
    export = runs_dir / "finetune/exports/roberta-15pct/seed1"
    assert not (export / "encoder.pt").exists()  # RoBERTa's checkpoint is fine-tuned as it is
    assert "--arch roberta_tiny" in (export / "finetune_args.txt").read_text()
    log = (runs_dir / f"finetune/roberta-15pct/seed1/GlossPair/lr{selection['lr']}/ft2/"
           "train.log").read_text()
    assert "--seed 2" in log and f"--lr {selection['lr']}" in log and "--num-classes 2" in log
    assert "Loaded checkpoint" in log and "input1" in log  # restored; a sentence-pair task
    assert "valid1_accuracy" in log  # validated on the selection split too
    # a second call reads every run back: nothing is fine-tuned again, the figures repeat
    again = finetuning.run_stage(protocol, models, (1,), checkpoints, suite, runs_dir, workers=2)
    assert again["runs_now"] == 0 and again["accuracy"] == raw["accuracy"]
    assert again["wall_seconds"] == pytest.approx(raw["wall_seconds"])
    assert raw["wall_seconds"] > 0 and json.loads((runs_dir / "finetune/wall.json").read_text()) \
        == {"wall_seconds": again["wall_seconds"]}
    assert not (runs_dir / "finetune" / finetuning.LIVE_WALL).exists()  # booked, so removed


@pytest.mark.slow
def test_a_random_init_arm_fine_tunes_fresh_draws_of_the_same_architecture(tiny_study):
    """The control arm: one fresh draw per fine-tuning seed, the checkpoint's architecture and
    config, through the same recipe and flags; its settings name the draw."""
    import torch

    suite, checkpoints, runs_dir = tiny_study
    runs_dir = runs_dir.with_name("runs-random-init")
    control = finetuning.random_init_arm("roberta-15%")
    assert control.name == "roberta-15% (random init)" and control.random_init
    protocol = dataclasses.replace(
        studies.THREE_ML_FINETUNE, arms=(FinetuneArm("roberta-15%", "roberta-15%"), control),
        lrs=("1e-3",), seeds=(1, 2), epochs=1)
    models = {"roberta-15%": studies.STUDIES["3ml"].model("roberta-15%")}
    raw = finetuning.run_stage(protocol, models, (1,), checkpoints, suite, runs_dir, workers=2)
    assert raw["runs_now"] == 4 and set(raw["accuracy"]) == {"roberta-15%", control.name}
    draws = runs_dir / "finetune/exports/roberta-15pct/seed1/random-init"
    assert sorted(p.name for p in draws.iterdir()) == ["draw1001.pt", "draw1002.pt"]
    trained = torch.load(checkpoints[("roberta-15%", 1)], weights_only=False)["model"]
    first, second = (torch.load(draws / f"draw100{i}.pt", weights_only=False)["model"]
                     for i in (1, 2))
    key = "encoder.sentence_encoder.layers.0.fc1.weight"
    assert set(first) == set(trained) and first[key].shape == trained[key].shape
    assert not torch.equal(first[key], trained[key]) and not torch.equal(first[key], second[key])
    assert abs(float(first[key].std()) - 0.02) < 0.005  # init_bert_params: normal(0, 0.02)
    run = runs_dir / "finetune/roberta-15pct_(random_init)/seed1/GlossPair/lr1e-3/ft2"
    assert f"--restore-file {draws / 'draw1002.pt'}" in (run / "train.log").read_text()
    assert json.loads((run / "result.json").read_text())["settings"]["random_init_draw"] == 1002


# ----------------------------------------------------------------------------------------------
# The demo's table and the suite's fetch

def test_the_demo_table_pairs_each_model_with_random_init_and_3ml_with_roberta():
    random = finetuning.DEMO_RANDOM_INIT
    raw = {"accuracy": {"roberta-15%": {"FortuneTopic": {1: [24.0, 26.0, 25.0]}},
                        "3ml-self-40%": {"FortuneTopic": {1: [27.0, 27.0, 30.0]}},
                        random: {"FortuneTopic": {1: [30.0, 33.0, 30.0]}}},
           "lr": chosen(("roberta-15%", "3ml-self-40%", random), ("FortuneTopic",), (1,)),
           "baselines": {"FortuneTopic": {"majority": {"accuracy": 1 / 6, "se": 0.0167},
                                          "bow_logreg": {"accuracy": 0.45, "se": 0.022}}}}
    rows, text = finetuning.demo_table(raw)
    assert [row["name"] for row in rows[:3]] == ["roberta-15%", "3ml-self-40%", random]
    assert rows[0]["accuracy"] == pytest.approx(25.0)
    assert rows[0]["accuracy_se"] == pytest.approx(1 / math.sqrt(3))  # sd 1 over 3 seeds
    # RoBERTa - random per seed: -6, -7, -5 -> mean -6, sd 1, SE 1 / sqrt(3): beyond 2 SE and
    # beyond the t interval (4.30 SE for 2 degrees of freedom: 2.48)
    assert rows[0]["vs_random"] == pytest.approx(-6.0)
    assert rows[0]["vs_random_se"] == pytest.approx(1 / math.sqrt(3))
    assert rows[0]["vs_random_beyond_2se"] and rows[0]["vs_random_resolved"]
    # 3ML - RoBERTa per seed: +3, +1, +5 -> mean 3, sd 2, SE 2 / sqrt(3) = 1.15: beyond 2 SE,
    # not beyond 4.30 SE
    assert rows[1]["vs_first"] == pytest.approx(3.0)
    assert rows[1]["vs_first_se"] == pytest.approx(2 / math.sqrt(3))
    assert rows[1]["vs_first_beyond_2se"] and not rows[1]["vs_first_resolved"]
    # 3ML - random: -3, -6, 0 -> mean -3, sd 3, SE 1.73: not beyond 2 SE
    assert rows[1]["vs_random"] == pytest.approx(-3.0)
    assert not rows[1]["vs_random_beyond_2se"]
    assert "vs_random" not in rows[2] and rows[2]["random_init"]
    assert rows[3]["name"].startswith("majority") and rows[3]["accuracy"] == pytest.approx(100 / 6)
    assert "+3.00 ± 1.15 *" in text and "-6.00 ± 0.58 **" in text and "45.00 ± 2.20" in text
    assert "pre-training HURTS roberta-15%" in text
    assert "not told apart from random init: 3ml-self-40%" in text


def test_the_demo_protocol_controls_its_models_with_one_random_init_arm():
    arms = finetuning.DEMO_PROTOCOL.arms
    assert [arm.random_init for arm in arms] == [False, False, True]
    assert arms[2].model == arms[0].model  # the shared encoder architecture's fresh draws
    assert finetuning.random_init_draw(1, 2) == 1002 and finetuning.random_init_draw(2, 1) == 2001


def test_the_demo_skips_fine_tuning_on_a_data_bin_without_a_sentencepiece_model(tmp_path):
    from fairseq_ext_lab import demo

    assert "no spm.model" in demo.finetune_skip_reason(tmp_path)
    (tmp_path / "spm.model").write_bytes(b"x")
    (tmp_path / "prep").mkdir()
    (tmp_path / "prep" / "train.txt").write_text("x\n")
    assert demo.finetune_skip_reason(tmp_path) is None
    assert finetuning.suite_dir_for(Path("data-bin/python-docs-spm8000")) == Path(
        "data-bin/python-docs-spm8000-downstream")


def test_fetch_downloads_a_missing_source_and_leaves_a_present_one(tmp_path, monkeypatch):
    import argparse

    from fairseq_ext.corpus import downstream, python_docs

    calls = []

    def fake_ensure(package, subdir, cache_dir, log, **_):
        calls.append((package, subdir, cache_dir))
        return cache_dir / package / subdir, True

    monkeypatch.setattr(python_docs, "ensure_package", fake_ensure)
    present = tmp_path / "fortunes"
    present.mkdir()
    (present / "work").write_text("a\n%\n")
    args = argparse.Namespace(fortunes_dir=present, wordnet_dir=tmp_path / "none", fetch=True,
                              cache_dir=tmp_path / "cache")
    assert downstream.fetched_if_missing(args, "fortunes_dir") == present and not calls
    assert downstream.fetched_if_missing(args, "wordnet_dir") == (
        tmp_path / "cache/wordnet-base/usr/share/wordnet")
    assert calls == [("wordnet-base", "usr/share/wordnet", tmp_path / "cache")]
    args.fetch = False
    assert downstream.fetched_if_missing(args, "wordnet_dir") == tmp_path / "none"


def test_the_suite_fingerprint_ignores_the_order_tasks_were_built_in():
    tasks = {name: {"name": name, "sizes": {"train": 10, "dev": 5, "selection": 4}}
             for name in ("FortuneTopic", "DebSection", "GlossTopic")}
    settings = {"seed": 1, "train_size": 10, "dev_size": 5}
    one = {"settings": settings, "tasks": tasks}
    other = {"settings": settings, "tasks": dict(reversed(list(tasks.items())))}
    assert finetuning.suite_fingerprint(one) == finetuning.suite_fingerprint(other)
    smaller = {"settings": settings, "tasks": {**tasks, "GlossTopic": {
        "name": "GlossTopic", "sizes": {"train": 10, "dev": 5, "selection": 3}}}}
    assert finetuning.suite_fingerprint(smaller) != finetuning.suite_fingerprint(one)


def test_study_cli_refuses_a_wrong_downstream_before_any_training(tmp_path, capsys):
    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    with pytest.raises(SystemExit) as exit_info:
        studies.main(["bidirectional-flops", "--data", str(data), "--downstream", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "has no fine-tuning protocol" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="scripts/prepare_downstream.sh"):
        studies.main(["3ml", "--data", str(data), "--downstream", str(tmp_path / "none"),
                      "--runs-dir", str(tmp_path / "runs")])
    assert not (tmp_path / "runs").exists()  # nothing planned, nothing trained


def test_study_cli_fine_tunes_the_tasks_asked_and_refuses_others(tmp_path, capsys,
                                                                  monkeypatch):
    """--finetune-tasks (a trial): the study's fine-tuning stage gets those tasks as ``only``; a
    task the suite lacks, or the flag without --downstream, is refused before any training."""
    from fairseq_ext_lab.studies import cli

    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    suite = tmp_path / "suite"
    for name in ("GlossTopic", "FortuneTopic"):
        (suite / f"{name}-bin" / "input0").mkdir(parents=True)
        for split in ("train", "valid1"):
            (suite / f"{name}-bin" / "input0" / f"{split}.idx").write_bytes(b"")
    (suite / "downstream.json").write_text(json.dumps({"settings": {}, "tasks": [
        {"name": name, "sizes": {"train": 8, "dev": 4, "selection": 4}}
        for name in ("GlossTopic", "FortuneTopic")]}))
    seen = {}
    monkeypatch.setattr(cli, "run", lambda *args, **kwargs: seen.update(kwargs))
    studies.main(["3ml", "--data", str(data), "--downstream", str(suite),
                  "--finetune-tasks", "GlossTopic"])
    assert seen["finetune_tasks"] == ["GlossTopic"]
    for argv, message in (
            (["--downstream", str(suite), "--finetune-tasks", "GlossPair"],
             "--finetune-tasks GlossPair: not in"),
            (["--finetune-tasks", "GlossTopic"], "--finetune-tasks needs --downstream")):
        with pytest.raises(SystemExit) as exit_info:
            studies.main(["3ml", "--data", str(data), *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_random_init_draw_is_written_once_when_threads_ask_for_it_together(monkeypatch,
                                                                            tmp_path):
    """The lr grid's selection runs share one draw and run two at a time: one writes it, the
    others wait and read it (a second writer would find the file and fail)."""
    import threading
    import time

    calls = []

    def write(source, out, draw):
        calls.append(draw)
        time.sleep(0.2)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"draw")

    monkeypatch.setattr(finetuning, "_write_random_init", write)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        finetuning.random_init_checkpoint(tmp_path / "ckpt.pt", tmp_path, 1101)))
        for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [1101] and set(results) == {tmp_path / "random-init" / "draw1101.pt"}


def test_the_stage_chooses_each_pre_training_seed_s_rate_on_its_own_selection_scores(
        monkeypatch, tmp_path):
    """run_stage with the recipe replaced: seed 1's selection split prefers 1e-3, seed 2's
    3e-3, while dev would prefer the other; each seed's dev figure is its own choice's."""
    suite = tmp_path / "suite"
    for split in ("train", "valid1"):
        (suite / "T-bin" / "input0").mkdir(parents=True, exist_ok=True)
        (suite / "T-bin" / "input0" / f"{split}.idx").write_bytes(b"")
    (suite / "downstream.json").write_text(json.dumps({"settings": {}, "tasks": {"T": {
        "name": "T", "sizes": {"train": 32, "dev": 10, "selection": 8}, "baselines": {}}}}))
    selection = {(1, "1e-3"): 60.0, (1, "3e-3"): 50.0, (2, "1e-3"): 40.0, (2, "3e-3"): 70.0}
    dev = {(1, "1e-3"): 10.0, (1, "3e-3"): 90.0, (2, "1e-3"): 95.0, (2, "3e-3"): 20.0}
    calls = []

    def fake_fine_tune(protocol, run, model, checkpoint, export_args, run_dir, settings,
                       device):
        assert device == "cpu" and "device" not in settings  # a CPU run's settings as before
        calls.append((run.seed, run.lr, run.select))
        result = {"accuracy": dev[(run.seed, run.lr)],
                  "selection_accuracy": selection[(run.seed, run.lr)], "seconds": 1.0,
                  "settings": settings}
        finetuning.write_result(run_dir, result)
        return result

    monkeypatch.setattr(finetuning, "fine_tune", fake_fine_tune)
    protocol = dataclasses.replace(studies.BIDIRECTIONAL_FINETUNE,
                                   arms=(FinetuneArm("msk_bi", "msk_bi", {"R_BIDIR": "1"}),),
                                   lrs=("1e-3", "3e-3"), seeds=(1,))
    models = {"msk_bi": studies.STUDIES["bidirectional"].model("msk_bi")}
    checkpoints = {("msk_bi", 1): tmp_path / "c1.pt", ("msk_bi", 2): tmp_path / "c2.pt"}
    raw = finetuning.run_stage(protocol, models, (1, 2), checkpoints, suite, tmp_path / "runs",
                               workers=2, printer=lambda line: None)
    assert sorted(calls) == [(1, "1e-3", True), (1, "3e-3", True), (2, "1e-3", True),
                             (2, "3e-3", True)]  # every rate of every seed, scored on valid1
    chosen = raw["lr"]["msk_bi"]["T"]
    assert (chosen[1]["lr"], chosen[2]["lr"]) == ("1e-3", "3e-3")
    assert raw["accuracy"]["msk_bi"]["T"] == {1: [10.0], 2: [20.0]}  # dev at the chosen rates
    assert chosen[1]["dev"] == {"1e-3": 10.0, "3e-3": 90.0}  # kept, never used to choose


def test_study_cli_refuses_a_negative_time_budget(tmp_path, capsys):
    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "dict.txt").write_text("a 1\n")
    with pytest.raises(SystemExit) as exit_info:
        studies.main(["bidirectional", "--data", str(data), "--minutes", "-1",
                      "--runs-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    assert "--minutes -1: give a number of minutes, or 0 for none" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
