"""Run summaries' figures and their comparison (fairseq_ext_lab.reporting.figures): hand-made
summaries that pass, fail and miss a figure, the differences in standard errors by hand, paths
made relative, and the demo's figures read from its summary."""
import json
import math
import sys

import pytest

from conftest import REPO_ROOT, run_cli
from fairseq_ext.reporting.uncertainty import Estimate
from fairseq_ext_lab import demo
from fairseq_ext_lab.reporting import figures


def summary(**named):
    return {figures.FIGURES: named, figures.PROVENANCE: {"commit": "abc", "cpu": "cpu A"}}


REFERENCE = summary(
    loss=figures.figure(Estimate(9.20, 0.03), "bits"),
    gap=figures.figure(Estimate(-0.15, 0.01), "bits"),
    updates=figures.exact(713, "updates"))


def test_a_run_within_the_tolerance_passes_and_the_differences_are_in_ses():
    fresh = summary(loss=figures.figure(Estimate(9.28, 0.04), "bits"),  # +0.08 / 0.05 = 1.6
                    gap=figures.figure(Estimate(-0.13, 0.01), "bits"),  # +0.02 / 0.01414 = 1.41
                    updates=figures.exact(713, "updates"))
    rows = {row.name: row for row in figures.compare(REFERENCE, fresh)}
    assert rows["loss"].standard_errors == pytest.approx(0.08 / 0.05)
    assert rows["gap"].standard_errors == pytest.approx(0.02 / math.sqrt(2 * 0.01 ** 2))
    assert rows["updates"].standard_errors == 0.0
    assert not any(row.failed for row in rows.values())
    text = figures.format_comparison(list(rows.values()), REFERENCE, fresh)
    assert text.splitlines()[-1] == "PASS: all 3 figures within 3 SE of the reference"


def test_a_figure_beyond_the_tolerance_a_missing_one_and_another_count_fail():
    fresh = summary(loss=figures.figure(Estimate(9.454, 0.045), "bits"),  # +0.254 / 0.0541
                    updates=figures.exact(714, "updates"),
                    new=figures.figure(Estimate(1.0, 0.1), "bits"))
    rows = {row.name: row for row in figures.compare(REFERENCE, fresh)}
    assert rows["loss"].status == "differs"
    assert rows["loss"].standard_errors == pytest.approx(0.254 / math.hypot(0.03, 0.045))
    assert rows["gap"].status == "missing" and rows["updates"].status == "differs"
    assert rows["new"].status == "new" and not rows["new"].failed  # listed, not failed
    # a looser tolerance lets the loss pass (4.7 SE), never the missing figure
    loose = {row.name: row for row in figures.compare(REFERENCE, fresh, tolerance=5.0)}
    assert loose["loss"].status == "ok" and loose["gap"].failed
    text = figures.format_comparison(list(rows.values()), REFERENCE, fresh)
    assert text.splitlines()[-1].startswith("FAIL: 3 of 3 figures")


def test_another_corpus_build_is_named_beside_the_comparison(tmp_path):
    from fairseq_ext.corpus.step_state import corpus_identity

    (tmp_path / "manifest.json").write_text(json.dumps(
        {"settings": {"input_fingerprint": "mtimes"},
         "summary": {"data_sha256": "f2", "tokens": {"train": 100, "valid": 7}}}))
    assert corpus_identity(tmp_path) == {"data_sha256": "f2", "train_tokens": 100,
                                         "valid_tokens": 7}
    assert corpus_identity(tmp_path / "missing") == {}
    reference = json.loads(json.dumps(REFERENCE))
    reference[figures.PROVENANCE]["corpus"] = {"data_sha256": "f1", "train_tokens": 100,
                                               "valid_tokens": 8}
    fresh = json.loads(json.dumps(REFERENCE))
    fresh[figures.PROVENANCE]["corpus"] = corpus_identity(tmp_path)
    rows = figures.compare(reference, fresh)
    text = figures.format_comparison(rows, reference, fresh)
    assert ("note: another corpus build (data_sha256 f1 -> f2, valid_tokens 8 -> 7)"
            in text)
    assert "another corpus" not in figures.format_comparison(rows, reference, reference)


def test_the_command_compares_two_files_and_exits_1_on_a_failure(tmp_path):
    reference, same, changed = (tmp_path / name for name in ("r.json", "s.json", "c.json"))
    reference.write_text(json.dumps(REFERENCE))
    same.write_text(json.dumps(REFERENCE))
    planted = json.loads(json.dumps(REFERENCE))
    planted[figures.FIGURES]["loss"]["value"] += 0.5
    changed.write_text(json.dumps(planted))
    command = [sys.executable, "-m", "fairseq_ext_lab.reporting.figures"]
    assert "PASS" in run_cli([*command, reference, same]).stdout
    proc = run_cli([*command, reference, changed], check=False)
    assert proc.returncode == 1 and "loss (differs)" in proc.stdout
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"masked_lm": []}))
    proc = run_cli([*command, old, same], check=False)
    assert proc.returncode != 0 and "has no 'figures' section" in proc.stderr


def seeded(seed, loss, gap, cpu="cpu A", updates=713):
    run = summary(loss=figures.figure(Estimate(loss, 0.03), "bits"),
                  gap=figures.figure(Estimate(gap, 0.01), "bits"),
                  updates=figures.exact(updates, "updates"))
    run[figures.PROVENANCE].update(seed=seed, cpu=cpu)
    return run


def test_the_seed_spread_is_each_figure_s_sd_over_seeds_and_skips_counts():
    runs = [seeded(1, 9.20, -0.15), seeded(2, 9.30, -0.05), seeded(3, 9.40, -0.10)]
    spread = figures.seed_spread(runs, ["s1", "s2", "s3"])
    assert spread[figures.FIGURES]["loss"]["sd"] == pytest.approx(0.1)  # by hand: n - 1
    assert spread[figures.FIGURES]["gap"]["sd"] == pytest.approx(0.05)
    assert "updates" not in spread[figures.FIGURES]
    assert [entry["seed"] for entry in spread["sources"]] == [1, 2, 3]
    with pytest.raises(SystemExit, match="seeds .* repeat"):
        figures.seed_spread([runs[0], seeded(1, 9.3, -0.1)], ["a", "b"])
    with pytest.raises(SystemExit, match="two or more"):
        figures.seed_spread(runs[:1], ["a"])


def test_another_training_path_adds_the_seed_spread_and_the_same_path_does_not():
    """On another CPU the loss 0.2 bits off passes with the spread (0.2 / sqrt(0.03^2 + 0.03^2
    + 2 x 0.1^2) = 1.32 SE) and fails without it (4.7 SE); on the same CPU and seed the spread
    is not used; a count must match whatever the path."""
    spread = {figures.FIGURES: {"loss": {"sd": 0.1}, "gap": {"sd": 0.05}}}
    reference = seeded(1, 9.20, -0.15)
    elsewhere = seeded(1, 9.40, -0.15, cpu="cpu B")
    rows = {row.name: row for row in figures.compare(reference, elsewhere, spread=spread)}
    assert rows["loss"].standard_errors == pytest.approx(0.2 / math.sqrt(0.0018 + 0.02))
    assert rows["loss"].status == "ok" and rows["loss"].seed_sd == 0.1
    assert figures.training_path_changes(reference, elsewhere) == ["cpu"]
    text = figures.format_comparison(list(rows.values()), reference, elsewhere)
    assert "different training paths (cpu differ): 2 figures add sqrt(2)" in text
    assert {row.name: row for row in figures.compare(reference, elsewhere)}["loss"].failed
    here = seeded(1, 9.40, -0.15)
    rows = {row.name: row for row in figures.compare(reference, here, spread=spread)}
    assert rows["loss"].failed and rows["loss"].seed_sd is None
    moved = seeded(1, 9.20, -0.15, cpu="cpu B", updates=714)
    assert {row.name: row for row in figures.compare(reference, moved, spread=spread)}[
        "updates"].failed
    # a summary written before seeds were recorded trained seed 1
    del reference[figures.PROVENANCE]["seed"]
    assert figures.training_path_changes(reference, seeded(1, 9.2, -0.15)) == []
    assert figures.training_path_changes(reference, seeded(2, 9.2, -0.15)) == ["seed"]


def test_the_command_writes_a_seed_spread_and_reads_it_beside_the_reference(tmp_path):
    command = [sys.executable, "-m", "fairseq_ext_lab.reporting.figures"]
    paths = []
    for seed, loss in ((1, 9.20), (2, 9.30), (3, 9.40)):
        paths.append(tmp_path / f"seed{seed}.json")
        paths[-1].write_text(json.dumps(seeded(seed, loss, -0.1)))
    reference = tmp_path / "ref" / "summary.json"
    reference.parent.mkdir()
    reference.write_text(json.dumps(seeded(1, 9.20, -0.1)))
    out = reference.parent / figures.SPREAD_NAME
    assert "2 figures' SD over 3 seeds" in run_cli(
        [*command, "--seed-spread", *paths, "--out", out]).stdout
    assert run_cli([*command, "--seed-spread", *paths, "--out", out], check=False).returncode != 0
    fresh = tmp_path / "fresh.json"
    fresh.write_text(json.dumps(seeded(1, 9.40, -0.1, cpu="cpu B")))
    proc = run_cli([*command, reference, fresh])
    assert "PASS" in proc.stdout and f"(seed spread: {out})" in proc.stdout
    out.unlink()
    assert run_cli([*command, reference, fresh], check=False).returncode == 1


def test_paths_under_the_runs_directory_become_relative(tmp_path):
    runs = tmp_path / "runs"
    value = {"a": str(runs / "x" / "scores.jsonl"), "b": [str(tmp_path / "data-bin")],
             "c": 3, "d": str(runs) + "-other/y"}
    assert figures.relative_paths(value, runs) == {
        "a": "x/scores.jsonl", "b": [str(tmp_path / "data-bin")], "c": 3,
        "d": str(runs) + "-other/y"}


def test_the_demo_figures_from_its_summary():
    """Every published figure of the demo's tables, by name, timings left out."""
    summary = {
        "unigram": {"3ml": {"mask_loss": 9.636, "mask_loss_se": 0.041}},
        "masked_lm": [
            {"group": "3ml", "name": "roberta-15%", "updates": 1000, "mask_loss": 9.19,
             "mask_loss_se": 0.048, "below_unigram": 0.445, "below_unigram_se": 0.015,
             "sec_per_update": 0.07},
            {"group": "3ml", "name": "3ml-self-40%", "updates": 713, "mask_loss": 9.40,
             "mask_loss_se": 0.045, "below_unigram": 0.23, "below_unigram_se": 0.013,
             "vs_baseline": 0.21, "vs_baseline_se": 0.011, "sec_per_update": 0.11}],
        "bidirectional": [{"name": "msk_bi", "updates": 642, "infill_acc": {"0.0": 8.5,
                                                                            "1.0": 9.0},
                           "infill_acc_se": {"0.0": 0.26, "1.0": None}}],
        "bidirectional_baseline": {"rows": {"msk_bi": {"1.0": {
            "difference": 4.0, "difference_se": 0.3}, "0.0": {"note": "n/a"}}}}}
    out = demo.demo_figures(summary)
    assert out["3ml/unigram/mask_loss"] == {"value": 9.636, "se": 0.041, "dof": None,
                                            "unit": "bits"}
    assert out["3ml/3ml-self-40%/vs_baseline"]["value"] == 0.21
    assert out["3ml/roberta-15%/updates"] == {"value": 1000.0, "se": 0.0, "dof": None,
                                              "unit": "updates"}
    assert "3ml/roberta-15%/vs_baseline" not in out  # the baseline has none
    assert out["bidirectional/msk_bi/infill_acc@R=1"]["se"] is None  # unknown: only equality
    assert out["bidirectional/msk_bi/infill_minus_commonest@R=1"]["value"] == 4.0
    assert not any("sec" in name or "speedup" in name for name in out)


def test_the_committed_demo_reference_agrees_with_the_pages():
    """docs/demo/summary.json is the reference a fresh make demo is compared with; every
    [MASK] loss the pages quote from the demo is that reference's."""
    reference = json.loads((REPO_ROOT / "docs" / "demo" / "summary.json").read_text())
    assert reference[figures.PROVENANCE]["commit"] and not reference[figures.PROVENANCE]["dirty"]
    text = json.dumps(reference)
    assert str(REPO_ROOT) not in text and "/tmp/" not in text  # no machine paths
    page = (REPO_ROOT / "docs" / "demo.md").read_text()
    for name, figure in reference[figures.FIGURES].items():
        if name.endswith("/mask_loss"):
            assert f"{figure['value']:.3f} ± {figure['se']:.3f}" in page, name


@pytest.mark.parametrize("name", sorted(path.parent.name for path in
                                        (REPO_ROOT / "docs" / "studies").glob("*/study.json")))
def test_the_committed_study_references_agree_with_the_pages(name):
    """Each study's committed summary (docs/studies/<study>/study.json) is what a re-run is
    compared with; docs/studies.md quotes its claim rows as the summary renders them, and the
    summary holds no machine paths and the page names the commit it ran at."""
    from fairseq_ext_lab import studies

    assert name in studies.STUDIES, f"docs/studies/{name}: not a registered study"
    reference = json.loads((REPO_ROOT / "docs" / "studies" / name / "study.json").read_text())
    text = json.dumps(reference)
    assert str(REPO_ROOT) not in text and "/tmp/" not in text and "/work/" not in text
    page = (REPO_ROOT / "docs" / "studies.md").read_text()
    assert reference[figures.PROVENANCE]["commit"][:7] in page
    rows = studies.markdown_claims(reference).splitlines()[2:]
    study = studies.STUDIES[name]
    # the fine-tuning claims are quoted too once the summary has the fine-tuning stage; the
    # "pre-training helps" claims once per task and on the average, and a summary
    # made before them (docs/studies.md says which) has the other claims only
    finetune_claims = 0
    if reference.get("finetune"):
        stored = reference["finetune"]["claims"]
        tasks = len(reference["finetune"]["tasks"])
        if any(claim.get("per_task") for claim in stored):
            finetune_claims = sum(1 + tasks if claim.per_task else 1
                                  for claim in study.finetune_claims)
        else:
            finetune_claims = sum(1 for claim in study.finetune_claims if not claim.per_task)
            assert "before the random-init control" in page
    assert len(rows) == len(study.claims) + finetune_claims
    for row in rows:
        assert row in page, f"docs/studies.md does not quote {name}'s claim row: {row[:80]}"
