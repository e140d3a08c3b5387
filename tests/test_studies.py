"""The study runner (fairseq_ext_lab.studies): its statistics against hand computations,
its grid and FLOP budgets, the 3ML shape search, and a tiny study end to end with a resume."""
import json
import math
import re
import sys
from dataclasses import replace as dataclass_replace

import pytest

from conftest import REPO_ROOT, run_cli
from fairseq_ext.reporting.uncertainty import Estimate, mean_over_seeds, paired_over_seeds
from fairseq_ext_lab import budget, studies
from fairseq_ext_lab.reporting import figures
from fairseq_ext_lab.studies import Claim, Study, StudyModel
from fairseq_ext_lab.studies.cli import LIVE_WALL

#: The embedded corpus's vocabulary as the FLOP formulas count it: 7,997 pieces in dict.txt,
#: 4 specials and <mask>.
EMBEDDED_VOCAB = 8002


def test_mean_over_seeds_is_the_mean_and_the_sample_sd_over_root_s():
    # [1, 2, 4]: mean 7/3; deviations -4/3, -1/3, 5/3; sum of squares 42/9; sd^2 = 42/18 = 7/3;
    # SE = sqrt(7/3) / sqrt(3) = sqrt(7) / 3
    estimate = mean_over_seeds([1.0, 2.0, 4.0])
    assert estimate.value == pytest.approx(7 / 3)
    assert estimate.standard_error == pytest.approx(math.sqrt(7) / 3)
    one = mean_over_seeds([5.0])
    assert one.value == 5.0 and math.isnan(one.standard_error)
    assert math.isnan(mean_over_seeds([]).value)


def test_paired_over_seeds_takes_the_spread_of_the_per_seed_differences():
    # a - b per seed: 0.5, 0.25, 0.75: mean 0.5, sd 0.25, SE 0.25 / sqrt(3). Unpaired, the
    # seed-to-seed spread of a and b (both near 10 and 5) would swamp it.
    a, b = [10.5, 8.25, 12.75], [10.0, 8.0, 12.0]
    estimate = paired_over_seeds(a, b)
    assert estimate.value == pytest.approx(0.5)
    assert estimate.standard_error == pytest.approx(0.25 / math.sqrt(3))
    assert estimate.degrees_of_freedom == 2
    # 0.5 / 0.144 = 3.46 SE: beyond the 2-SE rule, within the t interval of 3 seeds (4.303 SE)
    assert not estimate.resolved()
    assert estimate.interval() == pytest.approx((0.5 - 4.302653 * 0.25 / math.sqrt(3),
                                                 0.5 + 4.302653 * 0.25 / math.sqrt(3)))
    assert dataclass_replace(estimate, degrees_of_freedom=None).resolved()  # the 2-SE rule
    assert mean_over_seeds(a).standard_error > 5 * estimate.standard_error  # unpaired: 1.30
    with pytest.raises(ValueError, match="same seeds"):
        paired_over_seeds([1.0, 2.0], [1.0])


@pytest.mark.parametrize("difference, kind, expected", [
    # 4 seeds, 3 degrees of freedom: the 95% interval is ± 3.182 SE
    (Estimate(-0.33, 0.1, 3), "better", "holds"),       # a lower (better) by 3.3 SE
    (Estimate(0.33, 0.1, 3), "better", "fails"),        # a worse by 3.3 SE
    (Estimate(-0.3, 0.1, 3), "better", "unresolved"),   # 3 SE: resolved by 2 SE, not by t
    (Estimate(-0.3, 0.1), "better", "holds"),           # a many-row error: the 2-SE rule
    (Estimate(-0.2, 0.1), "better", "unresolved"),      # exactly 2 SE is not beyond it
    # on par within ± 0.1: [0.05 - 0.0318, 0.05 + 0.0318] lies inside
    (Estimate(0.05, 0.01, 3), "on_par", "holds"),
    # resolved from 0 but small: still on par (a small difference is not a fail)
    (Estimate(-0.06, 0.005, 3), "on_par", "holds"),
    (Estimate(-0.5, 0.1, 3), "on_par", "fails"),         # wholly beyond -0.1: [-0.82, -0.18]
    (Estimate(0.05, 0.1, 3), "on_par", "unresolved"),    # [-0.27, 0.37]: cannot tell
    (Estimate(-0.5, math.nan, 3), "better", "unresolved"),
    # every seed gave the same difference: an SE of 0 is no evidence of precision
    (Estimate(-0.5, 0.0, 2), "better", "unresolved"),
    (Estimate(0.5, 0.0, 2), "better", "unresolved"),
    (Estimate(0.02, 0.0, 2), "on_par", "unresolved"),
    (Estimate(-0.5, 0.0), "better", "unresolved"),
])
def test_verdict(difference, kind, expected):
    assert studies.verdict(difference, kind, margin=0.1) == expected


def test_zero_standard_error_resolves_nothing():
    assert not Estimate(-0.5, 0.0, 2).resolved() and not Estimate(1.0, 0.0).resolved()
    assert Estimate(-0.5, 0.1, 2).resolved()  # 5 SE > t(0.975, 2) = 4.30


def test_minimum_detectable_effect_by_hand():
    from fairseq_ext_lab.studies import power

    # (t(0.975, df) + t(0.80, df)) SE from the printed t tables: df 2: 4.303 + 1.061;
    # df 7: 2.365 + 0.896; many rows: 1.960... but our many-row interval is 2 SE: 2 + 0.842
    assert power.minimum_detectable_effect(1.0, 2) == pytest.approx(4.303 + 1.061, abs=2e-3)
    assert power.minimum_detectable_effect(0.5, 7) == pytest.approx(0.5 * (2.365 + 0.896),
                                                                    abs=2e-3)
    assert power.minimum_detectable_effect(1.0, None) == pytest.approx(2.0 + 0.8416, abs=1e-3)
    assert math.isnan(power.minimum_detectable_effect(0.0, 2))
    assert math.isnan(power.minimum_detectable_effect(math.nan, 2))
    # planned from a reference run's per-seed differences: sd 1 (values 1, 2, 3), 8 seeds
    assert power.planned_mde([1.0, 2.0, 3.0], 8) == pytest.approx(
        (2.365 + 0.896) / math.sqrt(8), abs=2e-3)
    # 7 seeds: (2.447 + 0.906) / sqrt(7) = 1.267 > 1.2 >= 1.153 at 8
    assert power.seeds_needed([1.0, 2.0, 3.0], 1.2) == 8
    assert power.seeds_needed([1.0, 2.0, 3.0], 0.01) is None


def test_a_claim_without_a_stored_mde_renders_it_from_its_stored_se():
    """A summary without the ``mde`` field (bidirectional-flops, the archived runs) prints the
    formula on its stored SE and dof: SE 0.5 at 2 dof gives (4.303 + 1.061) x 0.5 = 2.68, with
    no paper effect beside it; a row without an SE prints none."""
    from fairseq_ext_lab.studies import render

    legacy = {"claim": "a beats b", "measured": "a - b: +1.00 ± 0.50 ppl", "verdict": "unresolved",
              "difference": 1.0, "difference_se": 0.5, "dof": 2, "paper_effect": None}
    assert render.claim_mde(legacy) == pytest.approx(2.682, abs=2e-3)
    assert render.power_text(legacy) == "; MDE 2.68"
    assert render.power_text({"claim": "untested", "difference_se": None}) == ""
    stored = dict(legacy, mde=9.0, paper_effect=3.0)  # a stored MDE wins over the formula
    assert render.power_text(stored) == "; MDE 9 vs the paper's 3"


@pytest.mark.parametrize("verdict, mde, effect, expected", [
    ("unresolved", 3.0, 1.7, "underpowered"),   # could not have seen the paper's 1.7
    ("unresolved", 1.0, 1.7, "unresolved"),     # could have, and did not
    ("unresolved", 3.0, -1.7, "underpowered"),  # the effect's size, not its sign
    ("holds", 3.0, 1.7, "holds"),               # a resolved claim keeps its verdict
    ("fails", 3.0, 1.7, "fails"),
    ("unresolved", 3.0, None, "unresolved"),    # no comparable paper effect
    ("unresolved", math.nan, 1.7, "unresolved"),
])
def test_underpowered_replaces_unresolved_only(verdict, mde, effect, expected):
    from fairseq_ext_lab.studies import power

    assert power.with_power(verdict, mde, effect) == expected


def test_an_interval_below_the_paper_s_effect_excludes_it():
    from fairseq_ext_lab.studies import power

    # oriented (negative = a better): -0.77 ± 0.39 over 8 seeds, t(0.975, 7) = 2.365: the
    # interval's low end is -0.77 - 0.922 = -1.69, so a's advantage is at most 1.69 < 7.7
    assert power.excludes_paper_effect(Estimate(-0.77, 0.39, 7), 7.7)
    assert not power.excludes_paper_effect(Estimate(-0.77, 0.39, 7), 1.5)  # 1.69 > 1.5
    assert not power.excludes_paper_effect(Estimate(-0.77, 0.0, 7), 7.7)  # no error, no claim
    fields = power.power_fields(Estimate(-1.76, 0.60, 7), 4.8)  # 1.76 + 1.42 = 3.18 < 4.8
    assert fields["excludes_paper_effect"] and fields["detects_paper_effect"]


def test_t_critical_against_the_t_table():
    from fairseq_ext.reporting.uncertainty import t_critical

    # two-sided 95%: the printed t table
    for dof, value in ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (30, 2.042)):
        assert t_critical(dof) == pytest.approx(value, abs=1e-3)
    assert t_critical(None) == 2.0 and math.isnan(t_critical(0))
    assert mean_over_seeds([1.0, 2.0, 4.0, 3.0, 5.0]).degrees_of_freedom == 4


def test_every_registered_study_is_well_formed():
    assert set(studies.STUDIES) == {"3ml", "3ml-gpu", "swishrnn", "bidirectional",
                                     "bidirectional-flops", "bidirectional-documents",
                                     "bidirectional-finetune"}
    docs = (REPO_ROOT / "docs" / "studies.md").read_text()
    for study in studies.STUDIES.values():
        assert len(study.seeds) >= 3 and 0 < study.minutes <= 180
        # every study's time budget is in the docs; one over the README's 90 min says so
        assert f"| `{study.name}` | {study.minutes} min |" in docs
        if study.minutes > 90:
            assert f"`{study.name}` is over 90 min" in docs
        studies.check_study(study)  # claims name the study's models, kinds known
        assert study.claims
        if study.device == "cpu":
            assert study.lr_grid == studies.LR_GRID
    # the GPU study takes, for every model, the rate the 2026-11-27 CPU 3ML study chose for all
    # of its models on held-out data, as its notes say (that committed report, archived)
    chosen = json.loads((REPO_ROOT / "docs/studies/2026-11-27/3ml/study.json").read_text()
                        )["lr_selection"]
    assert {entry["lr"] for entry in chosen.values()} == {"5e-4"}
    assert {model.env["PEAK_LR"] for model in studies.STUDIES["3ml-gpu"].models} == {"5e-4"}


def test_every_claim_names_its_source_and_metric_or_is_marked_ours():
    """A claim cites a table, figure or section of its paper, the paper's metric and figures,
    and says whether we measure a proxy; anything else is marked as our own question."""
    papers = {"3ml": "3ML", "swishrnn": "SwishRNN", "bidirectional": "Bidirectionality"}
    for study in studies.STUDIES.values():
        paper = papers[study.name.partition("-")[0]]
        for claim in study.claims:
            if claim.ours:
                assert claim.source == studies.OUR_QUESTION
                continue
            assert claim.source.startswith(f"{paper}, ")
            assert any(word in claim.source for word in ("Table", "Figure", "Section"))
            assert claim.paper_metric and claim.paper_figure
            # a paper that reports GLUE is only ever reached through a proxy here
            assert claim.proxy == ("GLUE" in claim.paper_metric)
    three_ml = studies.STUDIES["3ml"]
    assert "roberta-40%" in {model.name for model in three_ml.models}  # the mask-more control
    table1 = [c for c in three_ml.claims if c.source == "3ML, Table 1" and c.kind == "better"]
    assert table1 and table1[0].a == "roberta-40%"  # the plain MLM has the lower [MASK] loss
    rab = next(c for c in studies.STUDIES["swishrnn"].claims if c.a == "bert-rab")
    assert rab.ours  # not the paper's claim: its Table 1 has BERT-rab worse
    suffix = next(c for c in studies.STUDIES["bidirectional"].claims
                  if c.metric.startswith("suffix") and c.a == "nxt_uni")
    assert (suffix.metric, suffix.metric_b) == ("suffix:0", "suffix:1")  # Table 4 reads r = 0
    with pytest.raises(SystemExit, match="give its paper_metric and paper_figure"):
        studies.check_study(Study("s", "t", studies.MASKED_LM, (StudyModel("a", "r"),
                                                                StudyModel("b", "r")), (1,), 1,
                                  (Claim("x", "better", "a", "b", source="P, Table 9"),)))


#: The papers' text, beside the checkout (../shared/papers); a clone elsewhere has none.
PAPERS = REPO_ROOT.parent / "shared" / "papers"
THREE_ML_PAPER = PAPERS / "3ml-mask-more-and-mask-later.txt"
#: How each block of 3ML's Table 3 opens in the paper's text: the first trains every model for
#: the same updates, the second has 3ML at RoBERTa's compute (§6.1, §6.2).
TABLE3_BLOCKS = {"first": "Efficient pre-training recipe", "second": "Longer pre-training recipe"}
TABLE3_CITED = re.compile(r"Table 3 \((first|second) block\)")
#: A model of Table 3 and its GLUE average as a claim quotes them ("3MLself-40%-153K 85.3"), a
#: speedup ("at speedup 1.34"), and the paper's words in single quotes ("'losing 0.2%'").
MODEL_FIGURE = re.compile(r"(?<![\w-])(24hBERT-\d+%|3ML(?:self|cross)-\d+%(?:-\d+K)?|RoBERTa|"
                          r"ELECTRA|BERT) (\d+\.\d+)")
SPEEDUP = re.compile(r"speedup (\d+\.\d+)")
QUOTED = re.compile(r"(?<![\w])'([^']+)'")
EQUAL_COMPUTE = re.compile(r"equal (?:[\w-]+ )*FLOPs|equal compute|same computation", re.I)


def three_ml_table3_claims():
    """(study, claim, block) of every claim of the catalog that cites a block of 3ML's Table 3."""
    for study in studies.STUDIES.values():
        for claim in (*study.claims, *study.finetune_claims):
            cited = TABLE3_CITED.search(claim.source)
            if claim.source.startswith("3ML, ") and cited:
                yield study, claim, cited.group(1)


def table3_blocks(text: str) -> dict:
    """3ML's Table 3 as the paper's text has it: per block ("first", "second"), each model (its
    marks stripped) -> (speedup, GLUE average), both as printed."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("Model | #Params | Speedup |"))
    blocks, block = {}, None
    for line in lines[start + 1:]:
        if "|" not in line:  # the table ends
            break
        cells = [cell.strip() for cell in line.split("|")]
        opening = [name for name, words in TABLE3_BLOCKS.items() if cells[0].startswith(words)]
        if opening:
            block = blocks.setdefault(opening[0], {})
        elif block is not None:
            block[cells[0].rstrip("∗⋄")] = (cells[2], cells[11])
    return blocks


def test_3ml_claims_at_equal_flops_cite_table_3s_equal_compute_block():
    """Table 3's first block trains every model for the same updates (§6.1: "the same number of
    updates and an identical learning rate"); only the second has 3ML at RoBERTa's compute. A
    claim stated at equal FLOPs or compute cites the second; every claim that cites Table 3
    names its block."""
    cited = list(three_ml_table3_claims())
    for study in studies.STUDIES.values():
        for claim in (*study.claims, *study.finetune_claims):
            if claim.source.startswith("3ML, ") and "Table 3" in claim.source:
                assert TABLE3_CITED.search(claim.source), f"{claim.text}: which block?"
    for study, claim, block in cited:
        if EQUAL_COMPUTE.search(f"{claim.text} {claim.paper_figure}"):
            assert block == "second", (
                f"{study.name}: {claim.text!r} compares at equal compute but cites Table 3's "
                f"{block} block (equal updates)")
    assert {block for _, _, block in cited} == {"first", "second"}


def test_3ml_claims_quote_the_table_3_block_they_cite():
    """Every figure a claim quotes from a block of Table 3 is that block's, read from the
    paper's text: each model's GLUE average, each speedup (of a model the claim names), and
    every quoted phrase is the paper's; no bare number is left unnamed."""
    if not THREE_ML_PAPER.is_file():
        pytest.skip(f"{THREE_ML_PAPER} is absent: the papers sit beside the checkout "
                    "(../shared/papers), not in a clone elsewhere")
    text = THREE_ML_PAPER.read_text()
    blocks = table3_blocks(text)
    assert blocks["first"]["3MLself-40%"] == ("1.34", "85.0")  # the parse itself
    assert blocks["second"]["3MLself-40%-153K"] == ("1.00", "85.3")
    assert blocks["second"]["RoBERTa"] == ("1.00", "84.9")
    for study, claim, block in three_ml_table3_claims():
        rows, where = blocks[block], f"{study.name}: {claim.text!r} ({claim.source})"
        quoted = MODEL_FIGURE.findall(claim.paper_figure)
        assert quoted, f"{where}: its paper_figure names no model of Table 3"
        for model, figure in quoted:
            assert model in rows, f"{where}: {model} is not in Table 3's {block} block"
            assert rows[model][1] == figure, (
                f"{where}: {model} {figure}, but Table 3's {block} block has {rows[model][1]}")
        for speedup in SPEEDUP.findall(claim.paper_figure):
            assert speedup in {rows[model][0] for model, _ in quoted}, (
                f"{where}: speedup {speedup} is no named model's in the {block} block")
        for phrase in QUOTED.findall(claim.paper_figure):
            assert phrase in text, f"{where}: the paper does not say {phrase!r}"
        rest = QUOTED.sub("", SPEEDUP.sub("", MODEL_FIGURE.sub("", claim.paper_figure)))
        assert not re.search(r"\d+\.\d", rest), f"{where}: a figure without its model: {rest!r}"


def test_a_claim_its_proxy_cannot_test_is_never_held_or_failed():
    """3ML's "reaches RoBERTa-40%'s quality with fewer FLOPs" rows: Table 1 has the plain MLM's
    [MASK] perplexity the lower, so the [MASK]-loss proxy cannot test a GLUE claim. Their
    verdict is NOT_TESTABLE with the reason, in study.json, the text report and the markdown;
    their figures are shown all the same."""
    three_ml = studies.STUDIES["3ml"]
    untestable = [c for c in three_ml.claims if c.untestable_by_proxy]
    assert {(c.a, c.b, c.kind) for c in untestable} == {
        ("3ml-self-40%", "roberta-40%", "fewer_flops"),
        ("3ml-cross-40%", "roberta-40%", "fewer_flops")}
    assert all(c.proxy and "Table 1" in c.untestable_by_proxy for c in untestable)
    assert not any(c.untestable_by_proxy for s in studies.STUDIES.values() for c in s.claims
                   if c not in untestable)
    claim = untestable[1]
    assert studies.claim_verdict(claim, "fails") == {
        "verdict": studies.NOT_TESTABLE, "untestable_by_proxy": claim.untestable_by_proxy}
    assert studies.claim_verdict(three_ml.claims[0], "fails") == {"verdict": "fails"}
    row = {**studies.claim_fields(claim), "measured": "not reached within the budget in 3 of 3 "
           "seeds", **studies.claim_verdict(claim, "fails"), "ci_low": math.nan}
    markdown = studies.markdown_claims({"claims": [row]}).splitlines()[2]
    assert f"| not reached within the budget in 3 of 3 seeds | {studies.NOT_TESTABLE}: " \
           f"{claim.untestable_by_proxy} |" in markdown
    assert "fails" not in markdown and "holds" not in markdown
    # the committed report carries them so (docs/studies.md quotes its rows), and its text
    # report says why beside the table
    report = json.loads((REPO_ROOT / "docs/studies/3ml/study.json").read_text())
    assert [c["verdict"] for c in report["claims"] if c["claim"] in {u.text for u in untestable}
            ] == [studies.NOT_TESTABLE] * 2
    text = studies.format_report(three_ml, report)
    assert text.count(f" {studies.NOT_TESTABLE} |") == 2
    assert f"  {claim.text}: {claim.untestable_by_proxy}" in text
    with pytest.raises(SystemExit, match="untestable_by_proxy needs proxy=True"):
        studies.check_study(dataclass_replace(three_ml, claims=(
            dataclass_replace(claim, proxy=False),)))


def test_the_3ml_claims_quote_the_committed_studys_updates():
    """The updates the 3ML claims' differences quote (THREE_ML_UPDATES, 748 on the GPU) are the
    equal-FLOP budget's, as the committed report has them."""
    from fairseq_ext_lab.studies.catalog import three_ml

    report = json.loads((REPO_ROOT / "docs/studies/3ml/study.json").read_text())
    assert {row["name"]: row["updates"] for row in report["models"] if "updates" in row} \
        == three_ml.THREE_ML_UPDATES


def test_the_swishrnn_study_runs_every_step_size():
    """Layer i takes step_sizes[i % 3]: the study's depth runs k = 1, 2 and 4."""
    model = studies.STUDIES["swishrnn"].model("swishrnn-bert")
    layers = int(model.args[model.args.index("--encoder-layers") + 1])
    sizes = model.args[model.args.index("--swishrnn-step-sizes") + 1].split(",")
    assert {sizes[i % len(sizes)] for i in range(layers)} == {"1", "2", "4"}


def test_a_malformed_study_is_refused_with_what_to_change():
    model = StudyModel("a", "recipes/roberta/demo.sh")
    with pytest.raises(SystemExit, match="claim 'x' names models outside"):
        studies.check_study(Study("s", "t", studies.MASKED_LM, (model,), (1, 2), 10,
                                  (Claim("x", "better", "a", "b"),)))
    with pytest.raises(SystemExit, match="seeds must be distinct"):
        studies.check_study(Study("s", "t", studies.MASKED_LM, (model,), (1, 1), 10, ()))
    with pytest.raises(SystemExit, match="fewer_flops needs"):
        studies.check_study(Study("s", "t", studies.BIDIRECTIONAL, (model, model.__class__(
            "b", "r")), (1,), 10, (Claim("y", "fewer_flops", "a", "b"),)))


def test_the_3ml_study_uses_the_smallest_shape_with_an_analytic_speedup_of_1_2():
    shape = studies.smallest_3ml_shape(EMBEDDED_VOCAB)
    args = dict(zip(studies.THREE_ML_ENCODER[::2], studies.THREE_ML_ENCODER[1::2]))
    args.update(zip(studies.THREE_ML_DECODER[::2], studies.THREE_ML_DECODER[1::2]))
    assert shape["speedup"] >= 1.2
    assert (shape["encoder_layers"], shape["encoder_embed_dim"], shape["decoder_layers"],
            shape["decoder_embed_dim"]) == (
        int(args["--encoder-layers"]), int(args["--encoder-embed-dim"]),
        int(args["--decoder-layers"]), int(args["--decoder-embed-dim"]))
    assert int(args["--encoder-ffn-embed-dim"]) == 4 * shape["encoder_embed_dim"]
    # the demo's mini shape is far from it (the 8,000-piece head on 40% of the tokens)
    assert studies.smallest_3ml_shape(EMBEDDED_VOCAB, min_speedup=100.0) is None


@pytest.mark.parametrize("name", ["3ml", "swishrnn", "bidirectional-flops"])
def test_each_study_plans_every_model_and_seed_at_the_baselines_flops(name, tiny_data_bin):
    study = studies.STUDIES[name]
    plan = studies.plan_study(study, tiny_data_bin, baseline_updates=50)
    assert [(p.model.name, p.seed) for p in plan] == [
        (m.name, s) for m in study.models for s in study.seeds]
    per_update = {}
    for model in study.models:
        command = budget.planned_command(model.run(), tiny_data_bin)
        per_update[model.name] = budget.analytic_pflops_per_update(command)
        # the study's shape and the seed reach the fairseq command
        assert all(arg in command for arg in model.args)
        assert budget.command_option(budget.planned_command(model.run(7), tiny_data_bin),
                                     "--seed") == "7"
    flops = 50 * per_update[study.models[0].name]
    for planned in plan:
        cost = per_update[planned.model.name]
        assert planned.updates * cost <= flops * (1 + 1e-9) < (planned.updates + 1) * cost
    if name == "3ml":  # the chosen shape makes 3ML-self's updates cheaper than RoBERTa's
        counts = {p.model.name: p.updates for p in plan}  # (by 1.2x at 8,000 pieces; the
        assert counts["3ml-self-40%"] > counts["roberta-15%"]  # tiny vocabulary gives more)


@pytest.mark.parametrize("name", ["bidirectional", "bidirectional-documents"])
def test_an_equal_tokens_study_gives_every_model_the_baselines_updates(name, tiny_data_bin):
    """The paper's design: the same updates of the same 2,048-token batches for every variant,
    whatever share of them it predicts; the document format reaches the recipe."""
    study = studies.STUDIES[name]
    plan = studies.plan_study(study, tiny_data_bin, baseline_updates=50)
    assert {p.updates for p in plan} == {50} and len(plan) == 6 * len(study.seeds)
    expected = "lines" if name == "bidirectional" else "blank_line_separated"
    for model in study.models:
        command = budget.planned_command(model.run(), tiny_data_bin)
        assert budget.command_option(command, "--document-format") == expected


TIME_STUDY = Study(
    "time", "hand", studies.MASKED_LM, (StudyModel("roberta-15%", "r"), StudyModel("3ml", "r")),
    (1, 2, 3), 40, (Claim("3ML pre-trains sooner", studies.SHORTER_TRAINING, "3ml",
                          "roberta-15%"),), budget=studies.EQUAL_TOKENS)


def test_the_whole_runs_wall_clock_ratio_by_hand(tmp_path):
    """shorter_training reads each run's last logged wall: 3ML's 32, 36, 32 s against
    RoBERTa's 40, 44, 38 s (REACH_CURVES), paired on the seed."""
    report = studies.masked_lm_report(TIME_STUDY, hand_results(tmp_path, REACH_CURVES,
                                                              REACH_FINALS))
    (claim,) = report["claims"]
    ratios = [32 / 40, 36 / 44, 32 / 38]
    assert list(claim["per_seed"].values()) == pytest.approx(ratios)
    assert claim["seconds"] == {"1": 32, "2": 36, "3": 32}
    assert claim["baseline_seconds"] == {"1": 40, "2": 44, "3": 38}
    expected = mean_over_seeds(ratios)  # 0.8201 ± 0.0122 (sd 0.0211 / sqrt 3)
    assert (claim["ratio"], claim["ratio_se"]) == pytest.approx(
        (expected.value, expected.standard_error))
    assert expected.standard_error == pytest.approx(0.01219, abs=1e-4)
    # 0.820 + 4.303 x 0.0122 = 0.873 < 1: holds
    assert claim["verdict"] == "holds" and claim["ci_high"] == pytest.approx(0.873, abs=1e-3)
    assert claim["measured"] == ("time ratio of the whole runs 0.820 ± 0.012 (3ml 33.3 ± 1.3 s, "
                                 "roberta-15% 40.7 ± 1.8 s)")
    figures_ = studies.study_figures(TIME_STUDY, report)
    assert figures_["claim 1/ratio"]["unit"] == "time ratio"
    # slower in every seed: fails; a baseline that logged 0 s: unresolved, no ratio
    slower = {key: [(f, 2 * w if key.startswith("3ml") else w, loss) for f, w, loss in points]
              for key, points in REACH_CURVES.items()}
    (claim,) = studies.masked_lm_report(TIME_STUDY, hand_results(
        tmp_path / "slower", slower, REACH_FINALS))["claims"]
    assert claim["verdict"] == "fails" and claim["ratio"] == pytest.approx(
        mean_over_seeds([64 / 40, 72 / 44, 64 / 38]).value)
    zero = dict(REACH_CURVES, **{"roberta-15%/seed2": [(1, 0, 9.0), (4, 0, 8.1)]})
    (claim,) = studies.masked_lm_report(TIME_STUDY, hand_results(
        tmp_path / "zero", zero, REACH_FINALS))["claims"]
    assert claim["verdict"] == "unresolved" and math.isnan(claim["ratio"])
    assert "logged no seconds" in claim["measured"]


TINY_STUDY = Study(
    name="tiny", title="a tiny study", kind=studies.MASKED_LM,
    models=(StudyModel("roberta-15%", "recipes/roberta/demo.sh",
                       {"MASK_PROB": "0.15", "ARCH": "roberta_tiny"}),
            StudyModel("3ml-self-40%", "recipes/3ml/demo.sh",
                       {"MASK_PROB": "0.4", "ARCH": "3ml_self_tiny"})),
    seeds=(1, 2), baseline_updates=2, lr_grid=("1e-3", "2e-3"),
    claims=(Claim("3ML-self-40% reaches RoBERTa-15%'s loss with fewer FLOPs", "fewer_flops",
                  "3ml-self-40%", "roberta-15%"),
            Claim("3ML-self-40% has the lower loss", "better", "3ml-self-40%", "roberta-15%")))


@pytest.mark.unserved  # the resume reads what real processes left
def test_a_tiny_study_end_to_end_then_resumed_after_a_kill(tiny_data_bin, tmp_path):
    """Two tiny models, two seeds, 4 updates: trained, scored, reported; then one run is made
    half-written (its result.json gone, as if killed during evaluation) and the study run again:
    the finished runs are read back untouched, the half-written one is redone."""
    runs_dir = tmp_path / "runs"
    lines = []
    studies.run(TINY_STUDY, tiny_data_bin, runs_dir, printer=lines.append)
    text = "\n".join(lines)
    report = json.loads((runs_dir / studies.STUDY_JSON).read_text())
    assert (runs_dir / studies.STUDY_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {row["name"]: row for row in report["models"]}
    assert set(rows) == {"unigram (train counts)", "roberta-15%", "3ml-self-40%"}
    for name in ("roberta-15%", "3ml-self-40%"):
        losses = [rows[name]["per_seed"][s]["mask_loss"] for s in ("1", "2")]
        expected = mean_over_seeds(losses)
        assert rows[name]["mask_loss"] == pytest.approx(expected.value)
        assert rows[name]["mask_loss_se"] == pytest.approx(expected.standard_error)
        for seed in (1, 2):
            result = json.loads((runs_dir / name.replace("%", "pct") / f"seed{seed}"
                                 / studies.RESULT).read_text())
            assert result["seed"] == seed and result["updates"] == result["planned_updates"]
            assert len(result["curve"]) >= 2  # the scored checkpoints: the curve of the plot
            walls = [point["wall"] for point in result["curve"]]  # fairseq's, whole seconds
            assert walls == sorted(walls) and all(w == int(w) >= 0 for w in walls)
        assert rows[name]["train_seconds"] == pytest.approx(mean_over_seeds(
            [json.loads((runs_dir / name.replace("%", "pct") / f"seed{seed}" / studies.RESULT)
                        .read_text())["curve"][-1]["wall"] for seed in (1, 2)]).value)
    per_seed_vs = [rows["3ml-self-40%"]["per_seed"][s]["vs_baseline"] for s in ("1", "2")]
    for s, value in zip(("1", "2"), per_seed_vs):  # paired over the same positions: loss - loss
        assert value == pytest.approx(rows["3ml-self-40%"]["per_seed"][s]["mask_loss"]
                                      - rows["roberta-15%"]["per_seed"][s]["mask_loss"], abs=1e-9)
    better = report["claims"][1]
    assert better["difference"] == pytest.approx(sum(per_seed_vs) / 2)
    # the verdict by hand: 2 seeds, so SE = |d1 - d2| / 2 and the 95% t interval spans
    # t(0.975, 1) = 12.706 SE either side; holds below 0, fails above, else unresolved
    d1, d2 = per_seed_vs
    hand_se = abs(d1 - d2) / 2
    assert better["difference_se"] == pytest.approx(hand_se)
    low, high = (d1 + d2) / 2 - 12.7062 * hand_se, (d1 + d2) / 2 + 12.7062 * hand_se
    assert better["ci_low"] == pytest.approx(low, rel=1e-4)
    assert better["ci_high"] == pytest.approx(high, rel=1e-4)
    hand = "holds" if high < 0 else "fails" if low > 0 else "unresolved"
    assert hand_se > 0 and better["verdict"] == hand
    # its MDE by hand: (t(0.975, 1) + t(0.8, 1)) SE = (12.706 + 1.376) SE
    assert better["mde"] == pytest.approx((12.7062 + 1.3764) * hand_se, rel=1e-3)
    assert "| unigram (train counts)" in text and "3ML-self-40% has the lower loss" in text
    assert "a tiny study: 2 seeds" in text and "trained on cpu" in text

    first_wall = report["wall_seconds"]
    assert first_wall > 0
    assert not (runs_dir / LIVE_WALL).exists()  # booked in study.json, the live ledger removed
    kept = runs_dir / "roberta-15pct" / "seed1"
    redone = runs_dir / "3ml-self-40pct" / "seed2"
    kept_log = (kept / "train.log").stat().st_mtime_ns
    (redone / studies.RESULT).unlink()
    (redone / "stale-marker").write_text("from the killed run")
    lines = []
    studies.run(TINY_STUDY, tiny_data_bin, runs_dir, printer=lines.append)
    assert (kept / "train.log").stat().st_mtime_ns == kept_log
    assert (redone / studies.RESULT).is_file() and not (redone / "stale-marker").exists()
    resumed = json.loads((runs_dir / studies.STUDY_JSON).read_text())
    assert resumed["models"][1]["name"] == "roberta-15%"
    assert resumed["wall_seconds"] > first_wall  # the resume's time is added to the study's
    # another budget in the same runs directory is refused, never mixed in or overwritten
    with pytest.raises(SystemExit, match="choose another --runs-dir"):
        studies.run(TINY_STUDY, tiny_data_bin, runs_dir, updates=5, printer=lines.append)

    # the learning rates: each model's best of the grid on the held-out lines of train, and
    # the study's runs trained at it
    selection = resumed["lr_selection"]
    for name in ("roberta-15%", "3ml-self-40%"):
        scores = selection[name]["scores"]
        assert set(scores) == {"1e-3", "2e-3"}
        assert selection[name]["lr"] == min(scores, key=scores.get)
        for lr in ("1e-3", "2e-3"):  # scored on the held-out split, its curve's last point
            run = json.loads((runs_dir / studies.SELECTION_DIR / name.replace("%", "pct")
                              / f"lr{lr}" / f"seed{studies.SELECTION_SEED}"
                              / studies.RESULT).read_text())
            assert run["peak_lr"] == lr and scores[lr] == pytest.approx(
                run["curve"][-1]["valid_loss"])
        for seed in (1, 2):
            result = json.loads((runs_dir / name.replace("%", "pct") / f"seed{seed}"
                                 / studies.RESULT).read_text())
            assert result["peak_lr"] == selection[name]["lr"]
    heldout = json.loads((runs_dir / studies.SELECTION_DIR / "heldout-data-bin"
                          / "heldout.json").read_text())
    assert heldout["heldout_lines"] > 0 and heldout["share"] == studies.HELDOUT_SHARE

    # the study.json holds no machine paths: the runs directory moves and resumes
    text = (runs_dir / studies.STUDY_JSON).read_text()
    assert str(tmp_path) not in text and str(REPO_ROOT) not in text
    moved = tmp_path / "elsewhere" / "runs"
    moved.parent.mkdir()
    runs_dir.rename(moved)
    lines = []
    studies.run(TINY_STUDY, tiny_data_bin, moved, printer=lines.append)
    again = json.loads((moved / studies.STUDY_JSON).read_text())
    # every run read back, none trained: the same wall time, but for the refused invocation's
    # milliseconds (an invocation that fails still spent its time: its live ledger counts it)
    assert again["wall_seconds"] == pytest.approx(resumed["wall_seconds"], abs=0.5)
    assert again["figures"] == resumed["figures"]
    # --report-only re-renders the report from the finished runs: the same bytes, nothing trained
    written = (moved / studies.STUDY_JSON).read_bytes()
    (moved / studies.STUDY_JSON).write_text(json.dumps({"wall_seconds": again["wall_seconds"],
                                                        "provenance": again["provenance"]}))
    logs = {path: path.stat().st_mtime_ns for path in moved.rglob("train.log")}
    lines = []
    studies.run(TINY_STUDY, tiny_data_bin, moved, printer=lines.append, report_only=True)
    assert (moved / studies.STUDY_JSON).read_bytes() == written
    assert {path: path.stat().st_mtime_ns for path in moved.rglob("train.log")} == logs
    (moved / "3ml-self-40pct" / "seed2" / studies.RESULT).rename(tmp_path / "result.json")
    with pytest.raises(SystemExit, match=r"--report-only: 1 planned run\(s\) .* not finished "
                                         r".*3ml-self-40%/seed2; run the study without"):
        studies.run(TINY_STUDY, tiny_data_bin, moved, printer=lines.append, report_only=True)
    (tmp_path / "result.json").rename(moved / "3ml-self-40pct" / "seed2" / studies.RESULT)
    # and the comparison of the two reports passes; a planted change fails it
    assert figures.compare_files(moved / studies.STUDY_JSON, moved / studies.STUDY_JSON,
                                 printer=lines.append) == 0
    planted = json.loads((moved / studies.STUDY_JSON).read_text())
    figure = planted["figures"]["3ml-self-40%/mask_loss"]
    figure["value"] += 10 * max(figure["se"] or 0.0, 0.01)
    (tmp_path / "planted.json").write_text(json.dumps(planted))
    lines = []
    assert figures.compare_files(moved / studies.STUDY_JSON, tmp_path / "planted.json",
                                 printer=lines.append) == 1
    assert "FAIL: 1 of" in lines[-1] and "3ml-self-40%/mask_loss (differs)" in lines[-1]


def test_the_command_line_refuses_a_missing_data_bin(tmp_path):
    proc = run_cli([sys.executable, REPO_ROOT / "scripts/study.py", "3ml", "--data",
                    tmp_path / "nothing"], check=False)
    assert proc.returncode != 0 and "has no dict.txt" in proc.stderr


def test_each_study_has_its_recipe():
    """recipes/studies/<name>.sh runs scripts/study.py <name> with DATA, passing options on."""
    recipes = sorted((REPO_ROOT / "recipes" / "studies").glob("*.sh"))
    assert sorted(recipe.stem for recipe in recipes) == sorted(studies.STUDIES)
    for recipe in recipes:
        text = recipe.read_text()
        assert "set -euo pipefail" in text
        assert f'scripts/study.py" {recipe.stem} --data "${{DATA}}" "$@"' in text
    proc = run_cli(["bash", recipes[0], "--help"])
    assert "usage: scripts/study.py" in proc.stdout and "--runs-dir" in proc.stdout


def write_scores(path, mode, rows):
    """A --eval-scores-out file (fairseq_ext.reporting.eval_scores) with ``rows``."""
    from fairseq_ext.reporting.eval_scores import FORMAT, VERSION

    header = {"format": FORMAT, "version": VERSION, "settings": {"eval_mode": mode}}
    path.write_text("\n".join(json.dumps(line) for line in [header, *rows]) + "\n")
    return path.name


def test_bidirectional_claims_are_paired_within_seed_then_over_seeds(tiny_data_bin, tmp_path):
    """Two models, two seeds, hand-made scored rows: full ppl and infilling accuracy per seed,
    their differences on the same rows, and the mean ± SE over seeds, by hand."""
    study = Study("b", "hand", studies.BIDIRECTIONAL,
                  (StudyModel("a", "r"), StudyModel("b", "r")), (1, 2), 10,
                  (Claim("a has the better ppl", "better", "a", "b", "full"),
                   Claim("a infills better at R=1 than b at R=0", "better", "a", "b",
                         "infill:1", "infill:0")))
    # per (model, seed): losses of documents 0, 1 (2 tokens each) and infill correctness at
    # positions (0, 1), (1, 3) for R=0 ("r0") and R=1 ("r1")
    losses = {("a", 1): (2.0, 4.0), ("b", 1): (3.0, 5.0), ("a", 2): (2.0, 2.0), ("b", 2): (4.0, 4.0)}
    correct = {("a", 1): {"r0": (0, 0), "r1": (1, 1)}, ("b", 1): {"r0": (1, 0), "r1": (0, 0)},
               ("a", 2): {"r0": (0, 0), "r1": (1, 0)}, ("b", 2): {"r0": (0, 0), "r1": (1, 1)}}
    results = {}
    for (model, seed), pair in losses.items():
        run_dir = tmp_path / model / f"seed{seed}"
        run_dir.mkdir(parents=True)
        full = [{"split": "valid", "document": d, "position": None, "r": "full", "tokens": 2,
                 "loss": loss, "correct": None, "target": None} for d, loss in enumerate(pair)]
        infill = [{"split": "valid", "document": d, "position": p, "r": r, "tokens": 1,
                   "loss": 1.0, "correct": c, "target": 5}
                  for r, values in correct[(model, seed)].items()
                  for (d, p), c in zip(((0, 1), (1, 3)), values)]
        results[f"{model}/seed{seed}"] = {
            "run_dir": str(run_dir), "updates": 10, "analytic_pflops_per_update": 1.0,
            "scores": {"full_doc_ppl": write_scores(run_dir / "full.jsonl", "full_doc_ppl", full),
                       "infill": write_scores(run_dir / "infill.jsonl", "infill", infill)}}
    report = studies.bidirectional_report(study, results, tiny_data_bin)
    ppl, infill = report["claims"]
    # seed 1: exp(6/4) - exp(8/4); seed 2: exp(4/4) - exp(8/4)
    differences = [math.exp(1.5) - math.exp(2.0), math.exp(1.0) - math.exp(2.0)]
    assert ppl["per_seed"] == pytest.approx(dict(zip(("1", "2"), differences)))
    assert ppl["difference"] == pytest.approx(sum(differences) / 2)
    # two values: SE over seeds = |d1 - d2| / 2
    assert ppl["difference_se"] == pytest.approx(abs(differences[0] - differences[1]) / 2)
    # a at R=1 minus b at R=0, on the same (document, position): seed 1: 100 - 50; seed 2: 50 - 0
    assert infill["per_seed"] == pytest.approx({"1": 50.0, "2": 50.0})
    assert infill["difference"] == pytest.approx(50.0) and infill["difference_se"] == 0.0
    # a spread of 0 over seeds is no evidence of precision: unresolved, no MDE
    assert infill["verdict"] == "unresolved" and math.isnan(infill["mde"])
    rows = {row["name"]: row for row in report["models"]}
    assert rows["a"]["full"] == pytest.approx((math.exp(1.5) + math.exp(1.0)) / 2)
    assert rows["a"]["infill:1"] == pytest.approx(75.0)
    assert report["baseline"]["full"] > 1.0  # the unigram's ppl on the data-bin's valid split
    assert rows["a"]["analytic_pflops"] == 10.0
    # whole documents have no analytic FLOP figure (budget.bidirectional_predicted_per_sequence): the
    # report still forms, the column shows "-"
    for result in results.values():
        result["analytic_pflops_per_update"] = None
    report = studies.bidirectional_report(study, results, tiny_data_bin)
    assert report["models"][0]["analytic_pflops"] is None
    assert report["claims"][0]["per_seed"] == pytest.approx(dict(zip(("1", "2"), differences)))
    table = studies.format_report(study, report)
    row_a = next(line for line in table.splitlines() if line.startswith("| a "))
    assert [cell.strip() for cell in row_a.split("|")[1:4]] == ["a", "10", "-"]


@pytest.mark.unserved  # two forks of one server share its hash seed; two processes do not
def test_a_fixed_seed_repeats_its_figures_exactly_on_one_machine(tiny_data_bin, tmp_path):
    """Two runs of the same model and seed, one torch thread each: the same losses at every
    logged update and the same [MASK] scores, to the bit (what lets a summary be compared with a
    re-run on the same machine at zero tolerance)."""
    study = dataclass_replace(TINY_STUDY, lr_grid=())
    planned = studies.PlannedRun(study.models[1], 3, 4)  # 3ML-self, seed 3, 4 updates
    results = [studies.train_and_evaluate(study, planned, tiny_data_bin, tmp_path / name)
               for name in ("first", "second")]
    # every figure of the curve; its wall time (whole seconds) is the machine's, not a figure
    assert [{k: v for k, v in point.items() if k != "wall"} for point in results[0]["curve"]] \
        == [{k: v for k, v in point.items() if k != "wall"} for point in results[1]["curve"]]
    scores = [json.loads((tmp_path / name / "scores.json").read_text())["scores"]
              for name in ("first", "second")]
    assert scores[0] == scores[1] and set(scores[0]) == {"checkpoints/checkpoint_last.pt",
                                                         *(k for k in scores[0] if "_" in k)}
    # and another seed is another run
    other = studies.train_and_evaluate(study, studies.PlannedRun(study.models[1], 4, 4),
                                       tiny_data_bin, tmp_path / "other")
    assert other["curve"] != results[0]["curve"]


def test_the_paper_vs_ours_rows_name_source_metric_proxy_and_interval():
    cited = studies.STUDIES["3ml"].claims[0]  # mask more: a GLUE claim read through a proxy
    estimate = Estimate(-0.2, 0.03, 2)
    row = {**studies.claim_fields(cited), "measured": "roberta-40% - roberta-15%: -0.200 bits",
           "verdict": studies.verdict(estimate), **studies.interval_fields(estimate)}
    ours = {**studies.claim_fields(Claim("x", "better", "a", "b")), "measured": "m",
            "verdict": "unresolved", "ci_low": None}
    lines = studies.markdown_claims({"claims": [row, ours]}).splitlines()
    # -0.2 ± 4.303 x 0.03: [-0.329, -0.0709]
    assert lines[2].startswith(f"| {cited.text} | 3ML, Table 3 (first block) and Figure 3, GLUE "
                               "dev average: 24hBERT-40% 85.0 against 24hBERT-15% 84.3")
    assert "(**proxy**: we measure valid [MASK] loss)" in lines[2]
    assert "[-0.329, -0.0709] | **holds** |" in lines[2]
    assert lines[3] == "| x | *our question* | m | unresolved | - |"


def test_the_held_out_lines_start_at_a_document_boundary(tiny_data_bin, tmp_path):
    """The cut moves forward to the first empty line (a lone </s>) and keeps it with the
    training part; without one near, it stays where the share puts it. The written data-bin
    holds the same lines, split there."""
    from fairseq.data import indexed_dataset

    from fairseq_ext.corpus.heldout import heldout_data_bin, split_point

    lengths = [5, 7, 1, 6, 3, 1, 4, 9, 2, 8]
    assert split_point(lengths, 0.5) == 6  # round(10 x 0.5) = 5 is a boundary: start after it
    assert split_point(lengths, 0.2) == 8  # 8: no empty line from there within the window...
    assert split_point([4] * 10, 0.3) == 7  # ...and none at all: the share's own cut
    out = heldout_data_bin(tiny_data_bin, tmp_path / "heldout", 0.25)
    source = indexed_dataset.make_dataset(str(tiny_data_bin / "train"), impl="mmap")
    train, valid = (indexed_dataset.make_dataset(str(out / name), impl="mmap")
                    for name in ("train", "valid"))
    assert len(train) + len(valid) == len(source) and len(valid) > 0
    assert [source[i].tolist() for i in range(len(source))] == (
        [train[i].tolist() for i in range(len(train))]
        + [valid[i].tolist() for i in range(len(valid))])
    assert heldout_data_bin(tiny_data_bin, tmp_path / "heldout", 0.25) == out  # reused
    with pytest.raises(SystemExit, match="holds another held-out split"):
        heldout_data_bin(tiny_data_bin, tmp_path / "heldout", 0.1)


def hand_scores(run_dir, final_bits):
    """A finished masked-LM run's scores.json: its last checkpoint's [MASK] loss ``final_bits``
    over two sequences of one [MASK] each."""
    from fairseq_ext_lab.evaluation.masked_lm_scores import SequenceScores

    nats = final_bits * math.log(2)
    arrays = dict(ids=[0, 1], mask_loss=[nats - 0.1, nats + 0.1], mask_tokens=[1.0, 1.0],
                  mask_unigram_loss=[7.0, 7.0], corrupted_loss=[nats, nats],
                  corrupted_tokens=[1.0, 1.0], corrupted_unigram_loss=[7.0, 7.0])
    import numpy as np

    record = SequenceScores(**{k: np.asarray(v) for k, v in arrays.items()}).to_json()
    run_dir.mkdir(parents=True)
    (run_dir / "scores.json").write_text(json.dumps({"scores": {
        "checkpoints/checkpoint_last.pt": record}}))


def hand_results(tmp_path, curves, finals):
    """``{key: result}`` of hand-made runs: each ``curves[key]`` a list of (PFLOPs, wall
    seconds, [MASK] loss) points, ``finals[key]`` its last checkpoint's loss in bits."""
    results = {}
    for key, points in curves.items():
        run_dir = tmp_path / key.replace("%", "pct")
        hand_scores(run_dir, finals[key])
        results[key] = {
            "run_dir": str(run_dir), "scores_file": "scores.json", "updates": 40,
            "checkpoint_files": {"40": "checkpoints/checkpoint_last.pt"}, "train_pflops": 4.0,
            "sec_per_update": 1.0, "analytic_pflops_per_update": 0.1,
            "curve": [{"updates": 10 * (i + 1), "pflops": f, "wall": w, "valid_loss": loss}
                      for i, (f, w, loss) in enumerate(points)]}
    return results


REACH_STUDY = Study(
    "reach", "hand", studies.MASKED_LM, (StudyModel("roberta-15%", "r"), StudyModel("3ml", "r")),
    (1, 2, 3), 40,
    (Claim("3ML reaches it sooner", "less_time", "3ml", "roberta-15%"),
     Claim("3ML reaches it with fewer FLOPs", "fewer_flops", "3ml", "roberta-15%")))
#: RoBERTa's final losses and curves (budget 4 PFLOPs; 40, 44 and 38 s), and 3ML's curves that
#: cross them halfway between two checkpoints: at 20, 22.5 and 28 s; 3, 3 and 4.2 PFLOPs.
REACH_FINALS = {"roberta-15%/seed1": 8.0, "roberta-15%/seed2": 8.1, "roberta-15%/seed3": 7.9,
                "3ml/seed1": 7.6, "3ml/seed2": 7.7, "3ml/seed3": 7.8}
REACH_CURVES = {
    "roberta-15%/seed1": [(1, 10, 9.0), (2, 20, 8.6), (3, 30, 8.2), (4, 40, 8.0)],
    "roberta-15%/seed2": [(1, 11, 9.0), (2, 22, 8.6), (3, 33, 8.3), (4, 44, 8.1)],
    "roberta-15%/seed3": [(1, 9, 9.0), (2, 19, 8.6), (3, 28, 8.1), (4, 38, 7.9)],
    "3ml/seed1": [(1.2, 8, 9.0), (2.4, 16, 8.2), (3.6, 24, 7.8), (4.8, 32, 7.6)],
    "3ml/seed2": [(1.2, 9, 9.0), (2.4, 18, 8.3), (3.6, 27, 7.9), (4.8, 36, 7.7)],
    "3ml/seed3": [(1.2, 8, 9.0), (2.4, 16, 8.3), (3.6, 24, 8.0), (4.8, 32, 7.8)],
}


def test_time_and_flops_to_reach_the_baselines_final_loss_by_hand(tmp_path):
    results = hand_results(tmp_path, REACH_CURVES, REACH_FINALS)
    report = studies.masked_lm_report(REACH_STUDY, results)
    by_name = {claim["claim"]: claim for claim in report["claims"]}
    less_time, fewer_flops = by_name["3ML reaches it sooner"], by_name[
        "3ML reaches it with fewer FLOPs"]
    times = [20 / 40, 22.5 / 44, 28 / 38]
    assert list(less_time["per_seed"].values()) == pytest.approx(times)
    assert less_time["seconds_to_reach"] == pytest.approx({"1": 20, "2": 22.5, "3": 28})
    assert less_time["baseline_seconds"] == pytest.approx({"1": 40, "2": 44, "3": 38})
    expected = mean_over_seeds(times)
    assert (less_time["ratio"], less_time["ratio_se"]) == pytest.approx(
        (expected.value, expected.standard_error))
    # 0.583 ± 0.077: the interval's top, 0.583 + 4.303 x 0.077 = 0.914, lies below 1
    assert less_time["verdict"] == "holds" and less_time["ci_high"] < 1
    assert less_time["ratio_unit"] == "time ratio"
    assert "time ratio to reach it 0.583 ± 0.077 (3ml 23.5 ± 2.4 s, roberta-15%'s whole run " \
           "40.7 ± 1.8 s)" == less_time["measured"]
    flop_ratios = [3.0 / 4, 3.0 / 4, 4.2 / 4]
    assert list(fewer_flops["per_seed"].values()) == pytest.approx(flop_ratios)
    assert fewer_flops["ratio"] == pytest.approx(0.85)
    assert fewer_flops["verdict"] == "unresolved"  # 0.85 ± 0.10: the interval reaches past 1
    rows = {row["name"]: row for row in report["models"]}
    assert rows["roberta-15%"]["train_seconds"] == pytest.approx((40 + 44 + 38) / 3)
    figures_ = studies.study_figures(REACH_STUDY, report)
    assert figures_["claim 1/ratio"]["unit"] == "time ratio"
    assert figures_["claim 2/ratio"]["unit"] == "FLOP ratio"

    # a seed that never gets there: unresolved; none that does: fails
    slow = dict(REACH_CURVES, **{"3ml/seed3": [(1.2, 8, 9.0), (4.8, 32, 8.5)]})
    claims = studies.masked_lm_report(REACH_STUDY, hand_results(tmp_path / "slow", slow,
                                                                REACH_FINALS))["claims"]
    assert claims[0]["verdict"] == "unresolved"
    assert claims[0]["measured"] == "not reached within the budget in 1 of 3 seeds"
    never = dict(REACH_CURVES, **{f"3ml/seed{s}": [(1.2, 8, 9.5)] for s in (1, 2, 3)})
    claims = studies.masked_lm_report(REACH_STUDY, hand_results(tmp_path / "never", never,
                                                                REACH_FINALS))["claims"]
    assert claims[0]["verdict"] == claims[1]["verdict"] == "fails"
    # a baseline that logged 0 s (fairseq's whole seconds, a tiny run): nothing to divide by
    instant = dict(REACH_CURVES, **{"roberta-15%/seed2": [(4, 0, 8.1)]})
    claims = studies.masked_lm_report(REACH_STUDY, hand_results(tmp_path / "instant", instant,
                                                                REACH_FINALS))["claims"]
    assert claims[0]["verdict"] == "unresolved" and "logged no seconds" in claims[0]["measured"]
    # a run recorded before the curves kept their wall times is refused, saying what to do
    old = hand_results(tmp_path / "old", REACH_CURVES, REACH_FINALS)
    for point in old["3ml/seed1"]["curve"]:
        del point["wall"]
    with pytest.raises(SystemExit, match="has no 'wall' in its curve.*remove that result.json"):
        studies.masked_lm_report(REACH_STUDY, old)


def test_the_design_table_plans_each_claim_s_power_from_a_reference_run():
    from fairseq_ext_lab.studies import power
    from fairseq_ext_lab.studies.spec import Claim

    claims = (Claim("A beats B", "better", "a", "b", paper_effect=1.2),
              Claim("A beats C", "better", "a", "c", paper_effect=0.1),
              Claim("unmeasured", "better", "a", "d", paper_effect=1.0),
              Claim("no effect given", "better", "a", "e"))
    reference = {"claims": [{"claim": "A beats B", "per_seed": {"1": 1.0, "2": 2.0, "3": 3.0},
                             "unit": "points"},
                            {"claim": "no effect given", "per_seed": {"1": 1.0, "2": 2.0}}],
                 "finetune": {"claims": [{"claim": "A beats C",
                                          "per_seed": {"1": 1.0, "2": 2.0, "3": 3.0}}]}}
    rows = {row["claim"]: row for row in power.design_rows(claims, reference, 8)}
    # sd 1 over 3 seeds: at 3 seeds (4.303 + 1.061) / sqrt(3); planned at 8 (2.365 + 0.896) / sqrt(8)
    assert rows["A beats B"]["reference_mde"] == pytest.approx(5.364 / math.sqrt(3), abs=2e-3)
    assert rows["A beats B"]["planned_mde"] == pytest.approx(3.261 / math.sqrt(8), abs=2e-3)
    assert rows["A beats B"]["detects_paper_effect"] and rows["A beats B"]["seeds_needed"] == 8
    assert not rows["A beats C"]["detects_paper_effect"]  # read from the fine-tuning claims
    assert rows["A beats C"]["seeds_needed"] is None  # 0.1 needs more than 64 seeds
    assert not rows["unmeasured"]["measured"]
    assert "detects_paper_effect" not in rows["no effect given"]
    text = power.design_text("s", list(rows.values()), "ref.json")
    assert "underpowered: no number of seeds up to 64 would do" in text
    assert "not in the reference" in text and "our question: no paper effect" in text


@pytest.mark.slow
def test_a_study_past_its_minutes_starts_no_run_and_says_how_to_finish(tiny_data_bin, tmp_path):
    """Study.minutes counts every invocation on the runs directory: with 2 min spent and a
    1-min budget, nothing is trained and the message names --minutes."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    (runs_dir / studies.STUDY_JSON).write_text(json.dumps({"wall_seconds": 120.0}))
    lines = []
    study = dataclass_replace(TINY_STUDY, minutes=1)
    with pytest.raises(SystemExit, match=r"over its time budget of 1 min .*--minutes M"):
        studies.run(study, tiny_data_bin, runs_dir, printer=lines.append)
    assert any("time budget: 1 min" in line and "2.0 min spent" in line for line in lines)
    assert not (runs_dir / "lr-selection" / "roberta-15pct").exists()  # no run started
    assert not (runs_dir / "roberta-15pct").exists()

    # an invocation killed before it booked its time left it live: 40 s of pre-training, 50 s
    # of fine-tuning, on top of 0 booked: 1.5 min, past a 1-min budget
    (runs_dir / studies.STUDY_JSON).write_text(json.dumps({"wall_seconds": 0.0}))
    (runs_dir / LIVE_WALL).write_text(json.dumps({"wall_seconds": 40.0}))
    (runs_dir / "finetune").mkdir()
    (runs_dir / "finetune" / "wall.live.json").write_text(json.dumps({"wall_seconds": 50.0}))
    lines = []
    with pytest.raises(SystemExit, match=r"over its time budget of 1 min"):
        studies.run(study, tiny_data_bin, runs_dir, printer=lines.append)
    assert any("1.5 min spent" in line for line in lines)
