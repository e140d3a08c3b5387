"""The demo driver: its arithmetic, and a real end-to-end run at a few updates."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO_ROOT, run_cli, search_path
from fairseq_ext_lab import demo, recipe_runs, recipe_training


def test_seconds_per_update_weights_intervals_and_skips_the_first():
    records = [{"num_updates": "25", "ups": "2.0"},   # start-up interval: left out
               {"num_updates": "50", "ups": "4.0"},   # 25 updates at 0.25 s
               {"num_updates": "60", "ups": "5.0"}]   # 10 updates at 0.2 s
    assert recipe_training.seconds_per_update(records) == pytest.approx((25 * 0.25 + 10 * 0.2) / 35)
    assert recipe_training.seconds_per_update(records[:1]) == pytest.approx(0.5)


def test_an_interval_logged_at_zero_ups_says_nothing_and_no_speedup_divides_by_zero():
    """fairseq rounds ups to 2 decimals, so a one-update run can log ups 0: that interval is
    left out, and a run with no usable interval gets no measured speedup ('-'), not a crash."""
    records = [{"num_updates": "1", "ups": "0"}]
    assert math.isnan(recipe_training.seconds_per_update(records))
    assert recipe_training.seconds_per_update([{"num_updates": "10", "ups": "2.0"},
                                               {"num_updates": "20", "ups": "0"},
                                               {"num_updates": "30", "ups": "4.0"}]) == pytest.approx(0.25)
    rows = [{"name": "base", "sec_per_update": 0.5}, {"name": "one", "sec_per_update": math.nan}]
    demo.add_speedups(rows)
    assert rows[0]["speedup"] == 1.0 and math.isnan(rows[1]["speedup"])


def test_progress_total_comes_from_the_printed_command():
    progress = recipe_training.Progress("x")
    progress.set_total_from_command("+ fairseq-train data --max-update 300 --lr 1")
    assert progress.total == 300


def test_demo_end_to_end_on_a_tiny_data_bin(tiny_data_bin, tmp_path):
    runs_dir = tmp_path / "runs"
    # a reference with one figure the run matches (its updates) and one it cannot (a loss of
    # 0 bits): --compare prints both and the demo exits 1, its summary written all the same
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"figures": {
        "3ml/roberta-15%/updates": {"value": 4, "se": 0.0, "dof": None, "unit": "updates"},
        "3ml/roberta-15%/mask_loss": {"value": 0.0, "se": 0.01, "dof": None, "unit": "bits"}}}))
    # --seed reaches every recipe; a SEED of the caller's environment does not
    proc = run_cli([sys.executable, REPO_ROOT / "scripts/demo.py", "--data", tiny_data_bin,
                    "--updates", "4", "--runs-dir", runs_dir, "--compare", reference,
                    "--seed", "2"], env={"SEED": "7"}, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "FAIL: 1 of 2 figures" in proc.stdout
    assert "3ml/roberta-15%/mask_loss (differs)" in proc.stdout
    summary = json.loads((runs_dir / "summary.json").read_text())
    assert str(runs_dir) not in json.dumps(summary)  # paths relative to the runs directory
    assert summary["provenance"]["threads"] == 1 and summary["figures"]
    assert summary["provenance"]["seed"] == 2
    rows = summary["masked_lm"]
    assert [row["name"] for row in rows] == [run.name for run in demo.DEMO_RUNS]
    assert set(summary["unigram"]) == set(demo.MASKED_LM_GROUPS)
    for group in demo.MASKED_LM_GROUPS:
        group_rows = [row for row in rows if row["group"] == group]
        baseline = group_rows[0]
        # equal training FLOPs within the group: the baseline's 4 updates, and for each other
        # run the updates its analytic FLOPs per update allow within that budget
        budget = 4 * baseline["analytic_pflops_per_update"]
        assert baseline["updates"] == 4
        assert f"== {group}, equal training FLOPs: {baseline['name']} 4 updates" in proc.stdout
        for row in group_rows:
            assert row["updates"] == math.floor(budget / row["analytic_pflops_per_update"])
            assert row["updates"] * row["analytic_pflops_per_update"] <= budget * (1 + 1e-9)
            assert row["analytic_speedup"] == pytest.approx(
                baseline["analytic_pflops_per_update"] / row["analytic_pflops_per_update"])
        unigram = summary["unigram"][group]
        for row in group_rows:  # the same positions: the unigram row is every run's reference
            assert row["mask_loss"] - unigram["mask_loss"] == pytest.approx(
                -row["below_unigram"], abs=1e-9)
            assert row["mask_loss_se"] > 0 and row["below_unigram_se"] > 0
            if row is not baseline:
                assert row["vs_baseline"] == pytest.approx(
                    row["mask_loss"] - baseline["mask_loss"], abs=1e-9)
                assert row["vs_baseline_resolved"] == (
                    abs(row["vs_baseline"]) > 2 * row["vs_baseline_se"])
        assert baseline["speedup"] == 1.0 and baseline["analytic_speedup"] == 1.0
        assert baseline["pflops_to_baseline_loss"] == pytest.approx(baseline["curve"][-1]["pflops"])
    for row in rows:
        assert math.isfinite(row["sec_per_update"]) and row["sec_per_update"] > 0
        # equal FLOPs as the criterion counted them on the real batches (one line per sample:
        # shorter than the analytic figure's full 64-token blocks, the same batches for all)
        baseline = next(other for other in rows if other["group"] == row["group"])
        # (a run's updates are rounded down to a whole number: at 4 baseline updates that alone
        # moves its FLOPs by up to one update's worth)
        planned = (row["updates"] * row["analytic_pflops_per_update"]
                   / (baseline["updates"] * baseline["analytic_pflops_per_update"]))
        assert row["train_pflops"] == pytest.approx(baseline["train_pflops"] * planned, rel=0.25)
        assert f"| {row['name']}" in proc.stdout
        run_dir = runs_dir / row["name"].replace("%", "pct")
        assert (run_dir / "checkpoints" / "checkpoint_last.pt").exists()
        assert (run_dir / "train.log").read_text().startswith("+ ")
        assert " --seed 2 " in (run_dir / "train.log").read_text().splitlines()[0]
        # the curve: every interval checkpoint kept and scored, the last one included
        interval = max(1, row["updates"] // recipe_runs.CURVE_POINTS)
        assert [point["updates"] for point in row["curve"]] == sorted(
            set(range(interval, row["updates"] + 1, interval)) | {row["updates"]})
    assert "| unigram (train counts)" in proc.stdout and "below unigram" in proc.stdout
    assert "analytic speedup" in proc.stdout and "training PFLOPs to reach" in proc.stdout
    assert (runs_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "DEBUG:matplotlib" not in proc.stdout + proc.stderr  # fairseq sets the root to DEBUG
    # 4 updates learn nothing: every run is named in a warning under the tables
    assert all(any(row["name"] in warning and "below the unigram" in warning
                   for warning in summary["warnings"]) for row in rows)
    stages = proc.stdout[proc.stdout.index("time per stage:"):]
    assert all(f"{row['name']}: train" in stages and f"{row['name']}: score" in stages
               for row in rows) and "total" in stages
    check_bidirectional_rows(summary, runs_dir, proc.stdout, updates=4)


def check_bidirectional_rows(summary, runs_dir, stdout, updates):
    """The generalized-bidirectionality rows: one per variant family, equal tokens, each scored
    by exactly the evaluation modes its variant was trained for (Tables 3-5 columns), and the
    commonest-piece infilling baseline on each infilling run's own positions."""
    rows = summary["bidirectional"]
    assert [row["name"] for row in rows] == [run.name for run in demo.BIDIRECTIONAL_RUNS]
    r_values = [float(r) for r in recipe_runs.BIDIRECTIONAL_R_VALUES.split(",")]
    served = {"nxt_uni": {"full_ppl", "suffix_ppl"}, "msk_bi": {"infill_acc"},
              "hyb_pre": {"full_ppl", "suffix_ppl", "infill_acc"}}
    # equal analytic FLOPs: NxtUni (every token predicted) takes the updates, the others as
    # many as its budget buys at their variant's share of predicted tokens
    budget = updates * rows[0]["analytic_pflops_per_update"]
    assert rows[0]["name"] == "nxt_uni" and rows[0]["updates"] == updates
    for row in rows:
        assert row["updates"] == math.floor(budget / row["analytic_pflops_per_update"])
        assert row["variant"] == row["name"]
        scored = {key for key in ("full_ppl", "suffix_ppl", "infill_acc") if key in row}
        assert scored == served[row["name"]]
        for key in scored - {"full_ppl"}:
            assert sorted(float(r) for r in row[key]) == r_values
            assert all(math.isfinite(value) for value in row[key].values())
        if "infill_acc" in row:
            assert all(0.0 <= value <= 100.0 for value in row["infill_acc"].values())
        for key in scored:  # each figure with its standard error
            errors = row[f"{key}_se"]
            for value in (errors.values() if isinstance(errors, dict) else [errors]):
                assert math.isfinite(value) and value >= 0
        if "infill_acc" in row:
            assert row["infill_positions"] > 0
        run_dir = runs_dir / row["name"]
        assert (run_dir / "checkpoints" / "checkpoint_last.pt").exists()
        assert all(path is not None and (run_dir / Path(path).name).is_file()
                   for path in row["scores"].values())
        assert f"| {row['name']}" in stdout
    assert "infill acc R=1" in stdout and "suffix ppl R=0" in stdout
    assert " ± " in stdout and "Differences to each column's best, paired" in stdout
    baseline = summary["bidirectional_baseline"]
    assert set(baseline["rows"]) == {row["name"] for row in rows if "infill_acc" in row}
    for name, per_r in baseline["rows"].items():
        row = next(row for row in rows if row["name"] == name)
        for r, figures in per_r.items():
            accuracy = row["infill_acc"][r] if r in row["infill_acc"] else row["infill_acc"][float(r)]
            assert figures["difference"] == pytest.approx(accuracy - figures["baseline"], abs=0.01)
    assert "infilling baseline: always guess" in stdout
    # the paired differences of the second table: every pair in every column both serve
    pairs = {(d["column"], d["a"], d["b"]) for d in summary["bidirectional_differences"]}
    assert ("infill acc R=1", "msk_bi", "hyb_pre") in pairs
    assert ("full ppl", "nxt_uni", "hyb_pre") in pairs
    stages = stdout[stdout.index("time per stage:"):]
    runs = len(demo.DEMO_RUNS) + len(demo.BIDIRECTIONAL_RUNS)
    assert f"training and scoring: {runs} runs, {recipe_runs.WORKERS} at a time" in stages
    assert all(f"  {row['name']}: train" in stages and f"  {row['name']}: evaluate" in stages
               for row in rows)


def test_demo_never_reuses_a_run_directory(tiny_data_bin, tmp_path):
    runs_dir = tmp_path / "runs"
    (runs_dir / demo.DEMO_RUNS[0].name.replace("%", "pct")).mkdir(parents=True)
    proc = run_cli([sys.executable, REPO_ROOT / "scripts/demo.py", "--data", tiny_data_bin,
                    "--updates", "2", "--runs-dir", runs_dir], check=False)
    assert proc.returncode != 0 and "already exists" in proc.stderr


def scores_of(mask_loss, mask_tokens, unigram_loss):
    """SequenceScores of three sequences with the given [MASK] sums (corrupted = [MASK])."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import SequenceScores

    arrays = [np.asarray(values, dtype=np.float64) for values in (mask_loss, mask_tokens,
                                                                  unigram_loss)]
    return SequenceScores(ids=np.arange(len(arrays[0])), mask_loss=arrays[0],
                          mask_tokens=arrays[1], mask_unigram_loss=arrays[2],
                          corrupted_loss=arrays[0], corrupted_tokens=arrays[1],
                          corrupted_unigram_loss=arrays[2])


def test_flops_to_reach_interpolates_between_the_scored_checkpoints():
    from fairseq_ext_lab.reporting.curves import CurvePoint

    curve = [CurvePoint(updates=u, pflops=f, wall=w, valid_loss=loss, train_updates=u)
             for u, f, w, loss in ((10, 1.0, 30.0, 9.0), (20, 2.0, 50.0, 8.0),
                                   (30, 3.0, 90.0, 7.5))]
    assert recipe_training.cost_to_reach(curve, 8.5) == pytest.approx(1.5)  # halfway from 9 to 8
    assert recipe_training.cost_to_reach(curve, 7.75) == pytest.approx(2.5)
    assert recipe_training.cost_to_reach(curve, 9.5) == pytest.approx(1.0)  # already there at the first
    assert recipe_training.cost_to_reach(curve, 7.0) is None  # never within the budget
    # the same crossings on the wall-clock axis: halfway from 30 s to 50 s, from 50 s to 90 s
    assert recipe_training.cost_to_reach(curve, 8.5, axis="wall") == pytest.approx(40.0)
    assert recipe_training.cost_to_reach(curve, 7.75, axis="wall") == pytest.approx(70.0)
    assert recipe_training.cost_to_reach(curve, 7.0, axis="wall") is None


def test_group_rows_unigram_first_paired_differences_and_the_warning_path():
    """Losses in nats per sequence: three sequences, [MASK] tokens 2, 3, 1 (6 in all)."""
    ln2 = math.log(2)
    tokens = [2.0, 3.0, 1.0]
    unigram = [20.0, 30.0, 10.0]                       # 10 nats a token
    baseline = scores_of([12.0, 21.0, 5.0], tokens, unigram)   # 38 / 6 nats
    better = scores_of([10.0, 18.0, 5.0], tokens, unigram)     # 33 / 6
    flat = scores_of([19.5, 29.5, 10.0], tokens, unigram)      # 59 / 6: near the unigram
    curve = []
    runs = [{"name": name, "sec_per_update": seconds, "analytic_pflops_per_update": flops,
             "scores": {5: scores}, "curve": curve}
            for name, seconds, flops, scores in (("base", 0.2, 2.0, baseline),
                                                 ("better", 0.1, 1.0, better),
                                                 ("flat", 0.4, 4.0, flat))]
    rows = demo.masked_lm_rows(runs)
    assert [row["name"] for row in rows] == ["unigram (train counts)", "base", "better", "flat"]
    assert rows[0]["mask_loss"] == pytest.approx(10.0 / ln2)
    assert rows[1]["mask_loss"] == pytest.approx(38.0 / 6 / ln2)
    assert rows[1]["below_unigram"] == pytest.approx((60.0 - 38.0) / 6 / ln2)
    # paired over sequences: per-sequence residuals of better - base about the ratio
    assert rows[2]["vs_baseline"] == pytest.approx((33.0 - 38.0) / 6 / ln2)
    residuals = [(b - 33.0 / 6 * n) / 6 - (a - 38.0 / 6 * n) / 6
                 for a, b, n in zip([12.0, 21.0, 5.0], [10.0, 18.0, 5.0], tokens)]
    se = math.sqrt(3 / 2 * sum(r * r for r in residuals)) / ln2
    assert rows[2]["vs_baseline_se"] == pytest.approx(se)
    assert rows[2]["vs_baseline_resolved"] == (abs(rows[2]["vs_baseline"]) > 2 * se)
    assert rows[1]["speedup"] == 1.0 and rows[2]["speedup"] == pytest.approx(2.0)
    assert rows[3]["analytic_speedup"] == pytest.approx(0.5)
    assert "vs_baseline" not in rows[1]
    warnings = demo.masked_lm_warnings(rows)
    assert len(warnings) == 1 and warnings[0].startswith("warning: flat's [MASK] loss is +0.240")
    table = demo.format_group_table(rows)
    assert "| unigram (train counts)" in table.splitlines()[3]  # the first row
    assert "baseline" in table and "2.00x" in table


def test_infilling_baseline_always_guesses_the_commonest_piece_paired(tmp_path):
    from fairseq_ext.reporting.eval_scores import FORMAT, VERSION
    from fairseq_ext_lab.evaluation.bidirectional_report import constant_guess_baseline

    rows = [  # (position, target, model correct)
        (1, 7, 1), (2, 7, 0), (3, 9, 1), (4, 5, 0), (5, 7, 1), (6, 3, 0)]
    lines = [json.dumps({"format": FORMAT, "version": VERSION, "settings": {}})] + [
        json.dumps({"split": "valid", "document": 0, "position": p, "r": "r1", "tokens": 1,
                    "loss": 1.0, "correct": c, "target": t}) for p, t, c in rows]
    path = tmp_path / "msk_bi.infill.scores.jsonl"
    path.write_text("\n".join(lines) + "\n")
    baseline, difference, note = constant_guess_baseline({"scores": {"infill": str(path)}},
                                                         "r1", piece=7)
    assert note == "" and baseline.value == pytest.approx(50.0)  # 3 of 6 targets are 7
    # model 3/6 correct; paired differences c - g: 0, -1, 1, 0, 0, 0
    assert difference.value == pytest.approx(0.0)
    d = np.array([0, -1, 1, 0, 0, 0], dtype=float)
    assert difference.standard_error == pytest.approx(100 * d.std(ddof=1) / math.sqrt(6))
    warnings = demo.bidirectional_warnings({"piece": ".", "rows": {"msk_bi": {
        "1.0": {"baseline": 50.0, "baseline_se": 1.0, "difference": 0.0,
                "difference_se": difference.standard_error, "resolved": False}}}})
    assert len(warnings) == 1 and "not resolved above it" in warnings[0]
    old = tmp_path / "old.jsonl"  # a file written before targets were kept
    old.write_text("\n".join(line.replace(', "target": 7', "").replace(', "target": 9', "")
                             .replace(', "target": 5', "").replace(', "target": 3', "")
                             for line in lines) + "\n")
    assert constant_guess_baseline({"scores": {"infill": str(old)}}, "r1", 7)[0] is None


def test_the_demo_3ml_shape_saves_compute_and_its_models_share_an_encoder():
    """The 3ML group runs where 3ML-self-40% saves FLOPs (analytic speedup >= 1.2,
    App. D, at 64-token lines and the embedded corpus's 8,001-symbol dictionary), and RoBERTa-15%
    has the same encoder (one random-init control fine-tunes for both)."""
    from fairseq_ext import flops
    from fairseq_ext_lab import demo

    def shape(args):
        pairs = dict(zip(args[::2], args[1::2]))
        return {flag[2:].replace("-", "_"): int(value) for flag, value in pairs.items()}

    runs = {run.name: run for run in demo.DEMO_RUNS}
    encoder = shape(demo.DEMO_3ML_ENCODER)
    assert shape(runs["roberta-15%"].args) == encoder
    assert shape(runs["3ml-self-40%"].args) == {**encoder, **shape(demo.DEMO_3ML_DECODER)}
    roberta = flops.spec_for_arch("roberta_mini_prenorm", **{
        k: v for k, v in encoder.items() if k != "encoder_attention_heads"})
    three_ml = flops.spec_for_arch("3ml_self_mini", **{
        k: v for k, v in shape(runs["3ml-self-40%"].args).items()
        if not k.endswith("attention_heads")})
    speedup = (flops.training_flops_per_sequence(roberta, 64, 0.15, 8001)
               / flops.training_flops_per_sequence(three_ml, 64, 0.4, 8001))
    assert 1.2 <= speedup < 1.3
    # the mini shape it replaced did not save compute
    mini = (flops.training_flops_per_sequence(flops.spec_for_arch("roberta_mini_prenorm"), 64,
                                              0.15, 8001)
            / flops.training_flops_per_sequence(flops.spec_for_arch("3ml_self_mini"), 64, 0.4,
                                                8001))
    assert mini < 1.0
    assert runs["roberta-15%"].env["WARMUP_UPDATES"] == runs["3ml-self-40%"].env["WARMUP_UPDATES"]


def test_fill_mask_words_mark_the_held_word_beside_the_unigram():
    fill_mask = {"topk": 2, "unigram": [["the", 0.05], [".", 0.04]],
                 "sentences": [{"masked": "He opened the <mask>.", "answer": "door",
                                "guesses": {"roberta-15%": [["door", 0.2], ["room", 0.1]],
                                            "3ml-self-40%": [["the", 0.06], [",", 0.05]]}}]}
    text = demo.format_fill_mask(fill_mask)
    lines = text.splitlines()
    assert "top 2 guesses" in lines[0]
    assert lines[1].strip() == "He opened the <mask>.   (door)"
    assert lines[2].split() == ["roberta-15%", "[door]", "0.200", "room", "0.100"]
    assert lines[3].split() == ["3ml-self-40%", "the", "0.060", ",", "0.050"]
    assert lines[4].split()[-4:] == ["the", "0.050", ".", "0.040"]


def test_the_held_out_sentences_have_one_blank_each():
    assert all(masked.count("<mask>") == 1 and answer.isalpha()
               for masked, answer in demo.FILL_MASK_SENTENCES)
    assert set(demo.FILL_MASK_MODELS) <= {run.name for run in demo.DEMO_RUNS}


@pytest.mark.slow
def test_demo_shows_each_hub_models_fill_mask_words_on_a_sentencepiece_data_bin(spm_data_bin,
                                                                                 tmp_path):
    """On a sentencepiece data-bin the demo exports RoBERTa-15% and 3ML-self-40% as hub
    directories (3ML with its decoder) and prints their top guesses for every held-out
    sentence beside the unigram's; the guesses are those of the hub models it wrote."""
    from fairseq_ext_lab.evaluation import fill_mask

    runs_dir = tmp_path / "runs"
    # a real process, not the test's fork server: its logging is the one a user's run has
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts/demo.py"), "--data",
                           str(spm_data_bin), "--updates", "2", "--only", *demo.FILL_MASK_MODELS,
                           "--no-finetune", "--runs-dir", str(runs_dir)],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PATH=search_path()))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((runs_dir / "summary.json").read_text())
    words = summary["fill_mask"]
    assert [s["masked"] for s in words["sentences"]] == [m for m, _ in demo.FILL_MASK_SENTENCES]
    assert words["unigram"] == [list(pair) for pair in fill_mask.unigram_guesses(
        spm_data_bin, demo.FILL_MASK_TOPK)]
    assert "fill-mask: each masked LM's top 5 guesses" in proc.stdout
    assert "the unigram (training counts), for every sentence:" in proc.stdout
    # the hubs load quietly: fairseq's from_pretrained logs the whole config at INFO
    assert "INFO:fairseq.models.roberta.model" not in proc.stdout + proc.stderr
    full = fill_mask.load_hub(runs_dir / "fill_mask" / "3ml-self-40pct")
    assert type(full.model).__name__ == "ThreeMLSelfModel"  # the decoder kept
    for name in demo.FILL_MASK_MODELS:
        hub = fill_mask.load_hub(runs_dir / "fill_mask" / name.replace("%", "pct"))
        for sentence in words["sentences"]:
            expected = fill_mask.top_guesses(hub, sentence["masked"], demo.FILL_MASK_TOPK)
            assert [word for word, _ in sentence["guesses"][name]] == [w for w, _ in expected]
            assert [p for _, p in sentence["guesses"][name]] == pytest.approx(
                [p for _, p in expected])


def test_the_fine_tuning_mde_is_planned_from_the_reference_s_seed_spread(tmp_path):
    """Per-seed differences -1, 0, +1 (SD 1) over 3 seeds: SE 1 / sqrt(3), MDE (t_0.975,2 +
    t_0.80,2) x SE = (4.303 + 1.061) / 1.732 = 3.10 points; no reference, no line."""
    reference = tmp_path / "summary.json"
    reference.write_text(json.dumps({"finetune": {"rows": [
        {"name": "roberta-15%", "per_seed": [24.0, 26.0, 28.0], "vs_random": 0.0},
        {"name": "random init", "per_seed": [25.0, 26.0, 27.0], "random_init": True},
        {"name": "majority class (train)", "accuracy": 16.7}]}}))
    mde = demo.planned_finetune_mde(reference, 3)
    assert list(mde) == ["roberta-15%"]
    assert mde["roberta-15%"] == pytest.approx((4.3027 + 1.0607) / math.sqrt(3), abs=1e-3)
    assert demo.planned_finetune_mde(tmp_path / "none.json", 3) == {}
    assert "roberta-15% 3.1 points" in demo.format_planned_mde(mde, 3)


def test_the_fine_tuning_table_pools_over_pre_training_seeds_with_the_crossed_error():
    """Two pre-training seeds x 3 fine-tuning seeds of differences [[1, 2, 3], [3, 4, 5]]: the
    mean 3, the crossed SE sqrt(var(2, 4) / 2 + var(2, 3, 4) / 3) = sqrt(1 + 1/3) by hand."""
    def seed_summary(seed, arm):
        return {"provenance": {"seed": seed}, "finetune": {"rows": [
            {"name": "roberta-15%", "per_seed": arm, "vs_random": 0.0},
            {"name": "random init", "per_seed": [20.0, 20.0, 20.0], "random_init": True}]}}

    pooled = demo.pooled_finetune([seed_summary(1, [21.0, 22.0, 23.0]),
                                   seed_summary(2, [23.0, 24.0, 25.0])])
    assert [row["name"] for row in pooled] == ["roberta-15%"]
    assert pooled[0]["vs_random"] == pytest.approx(3.0)
    assert pooled[0]["vs_random_se"] == pytest.approx(math.sqrt(1 + 1 / 3))
    assert pooled[0]["per_run"] == [2.0, 4.0] and pooled[0]["beyond_2se"]
    with pytest.raises(SystemExit, match="each once"):
        demo.pooled_finetune([seed_summary(1, [21.0] * 3), seed_summary(1, [22.0] * 3)])
