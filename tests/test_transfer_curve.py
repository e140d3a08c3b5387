"""The transfer curve: every checkpoint against the random init of its own
architecture, paired on the fine-tuning seed; checked on a stage whose results are given."""
import json
import math
from pathlib import Path

import pytest

from fairseq_ext_lab import finetuning, transfer_curve

CURVES = Path(__file__).resolve().parent.parent / "docs/transfer/english"


def test_each_point_is_paired_with_the_random_init_of_its_architecture(monkeypatch, tmp_path):
    facts = {"a1": (250, "roberta_prenorm", "RobertaModel"),
             "a2": (500, "roberta_prenorm", "RobertaModel"),
             "b1": (1000, "roberta", "RobertaModel")}
    flags = {"a1": ["--arch", "roberta_prenorm"], "a2": ["--arch", "roberta_prenorm"],
             "b1": ["--arch", "roberta", "--encoder-normalize-before"]}
    monkeypatch.setattr(transfer_curve, "checkpoint_facts", lambda path: facts[path.name])
    monkeypatch.setattr(finetuning, "prepare_checkpoint",
                        lambda path, out, export: (path, flags[path.name]))
    scores = {"small@250": [30.0, 32.0, 31.0], "small@500": [33.0, 33.0, 36.0],
              "big@1000": [40.0, 41.0, 42.0],
              "random init 1": [31.0, 31.0, 31.0], "random init 2": [45.0, 44.0, 46.0]}
    seen = {}

    def run_stage(protocol, models, seeds, checkpoints, suite, runs_dir, printer, only):
        seen["arms"] = [(arm.name, arm.model, arm.random_init) for arm in protocol.arms]
        seen["epochs"], seen["lrs"] = protocol.epochs, protocol.lrs
        return {"accuracy": {name: {"T": {1: values}} for name, values in scores.items()},
                "baselines": {"T": {"majority": {"accuracy": 0.2, "se": 0.01}}},
                "wall_seconds": 1.0}

    monkeypatch.setattr(finetuning, "run_stage", run_stage)
    result = transfer_curve.curve([("small", Path("a1")), ("small", Path("a2")),
                                   ("big", Path("b1"))], tmp_path, tmp_path, task="T",
                                  printer=lambda line: None)
    # one control per architecture, drawn from its first point's checkpoint
    assert seen["arms"][-2:] == [("random init 1", "small@250", True),
                                 ("random init 2", "big@1000", True)]
    assert seen["epochs"] == finetuning.CHOSEN_EPOCHS
    assert seen["lrs"] == (transfer_curve.CHOSEN_LR,)
    points = {p["name"]: p for p in result["points"]}
    # small@500 - random init 1 per seed: +2, +2, +5 -> mean 3, sd sqrt(3), SE 1
    assert points["small@500"]["random_arm"] == "random init 1"
    assert points["small@500"]["vs_random"] == pytest.approx(3.0)
    assert points["small@500"]["vs_random_se"] == pytest.approx(1.0)
    assert points["small@500"]["beyond_2se"]
    # big@1000 - random init 2: -5, -3, -4 -> -4 ± 1 / sqrt(3)
    assert points["big@1000"]["vs_random"] == pytest.approx(-4.0)
    assert points["big@1000"]["vs_random_se"] == pytest.approx(1 / math.sqrt(3))
    assert not points["small@250"]["beyond_2se"]  # 0 ± 0.58 (-1, +1, 0)
    text = transfer_curve.format_curve(result)
    assert "+3.00 ± 1.00 *" in text and "-4.00 ± 0.58 *" in text and "majority" in text


def test_levers_reach_every_arm_and_are_judged_on_the_selection_split(monkeypatch, tmp_path):
    """--pooling/--epochs/--lr reach the pre-trained and the random-init arm alike; each task
    has its selection and dev figures, each paired with the random init."""
    monkeypatch.setattr(transfer_curve, "checkpoint_facts",
                        lambda path: (1000, "roberta_prenorm", "RobertaModel"))
    monkeypatch.setattr(finetuning, "prepare_checkpoint",
                        lambda path, out, export: (path, ["--arch", "roberta_prenorm"]))
    seen = {}
    dev = {"p@1000": [50.0, 52.0, 51.0], "random init 1": [49.0, 49.0, 49.0]}
    selection = {"p@1000": [60.0, 61.0, 65.0], "random init 1": [55.0, 55.0, 56.0]}

    def run_stage(protocol, models, seeds, checkpoints, suite, runs_dir, printer, only):
        seen.update(arms=protocol.arms, epochs=protocol.epochs, lrs=protocol.lrs, only=only,
                    select=protocol.score_selection, warmup=protocol.warmup_share)
        return {"accuracy": {arm: {t: {1: v} for t in only} for arm, v in dev.items()},
                "selection_accuracy": {arm: {t: {1: v} for t in only}
                                       for arm, v in selection.items()},
                "baselines": {t: {"bow_logreg": {"accuracy": 0.6, "se": 0.01}} for t in only},
                "wall_seconds": 1.0}

    monkeypatch.setattr(finetuning, "run_stage", run_stage)
    settings = transfer_curve.CurveSettings(pooling="mean", epochs=10, lrs=("3e-4",),
                                            warmup_share=0.1)
    result = transfer_curve.curve([("p", Path("c"))], tmp_path, tmp_path, seeds=(1, 2, 3),
                                  printer=lambda line: None, settings=settings,
                                  tasks=["A", "B"])
    assert all(arm.env == {"POOLING": "mean"} for arm in seen["arms"])
    assert [arm.random_init for arm in seen["arms"]] == [False, True]
    assert (seen["epochs"], seen["lrs"], seen["only"], seen["select"], seen["warmup"]) == (
        10, ("3e-4",), ["A", "B"], True, 0.1)
    point = result["points"][0]
    # selection: +5, +6, +9 -> 6.67 ± 1.20; dev: +1, +3, +2 -> 2 ± 0.58
    for task in ("A", "B"):
        figures = point["tasks"][task]
        assert figures["selection_vs_random"] == pytest.approx(20 / 3)
        assert figures["selection_vs_random_se"] == pytest.approx(math.sqrt(13 / 3 / 3))
        assert figures["vs_random"] == pytest.approx(2.0) and figures["selection_beyond_2se"]
    text = transfer_curve.format_curve(result)
    assert text.count("pooling mean, lr 3e-4, 10 epochs, warm-up 10%") == 2
    assert "+6.67 ± 1.20 *" in text and "+2.00 ± 0.58 *" in text and "bow_logreg" in text


def test_a_layer_lr_decay_reaches_every_arm_and_only_curves_that_set_it_record_it():
    settings = transfer_curve.CurveSettings(pooling="mean", layer_lr_decay=0.8)
    assert settings.recipe_env() == {"POOLING": "mean", "LAYER_LR_DECAY": "0.8"}
    assert settings.as_dict()["layer_lr_decay"] == 0.8
    assert "layer-wise lr decay 0.8" in settings.describe()
    plain = transfer_curve.CurveSettings(pooling="first")
    assert plain.recipe_env() == {} and "layer_lr_decay" not in plain.as_dict()
    # a committed curve's settings (made before the decay existed) read back as they were
    committed = json.loads((CURVES / "curve-mean-ep10-lr3e-3-shape-12kflops-base.json")
                           .read_text())["settings"]
    read_back = transfer_curve.CurveSettings(**{**committed, "lrs": tuple(committed["lrs"])})
    assert json.loads(json.dumps(read_back.as_dict())) == committed


def test_a_lever_is_the_paired_difference_of_two_curves():
    def curve_of(point_seeds, random_seeds, selection_shift=0.0):
        task = {"per_seed": point_seeds,
                "selection_per_seed": [v + selection_shift for v in point_seeds]}
        return {"task": "A", "tasks": ["A"],
                "points": [{"name": "p@10", "tasks": {"A": task}}],
                "random_init": [{"name": "random init 1",
                                 "tasks": {"A": {"per_seed": random_seeds,
                                                 "selection_per_seed": random_seeds}}}]}

    changed = curve_of([50.0, 54.0, 55.0], [40.0, 41.0, 42.0], selection_shift=1.0)
    baseline = curve_of([49.0, 51.0, 50.0], [40.0, 41.0, 42.0])
    rows = {row["arm"]: row for row in transfer_curve.lever_difference(changed, baseline)}
    # dev: +1, +3, +5 -> 3 ± 2/sqrt(3); selection: each one more
    assert rows["p@10"]["difference"] == pytest.approx(3.0)
    assert rows["p@10"]["difference_se"] == pytest.approx(2 / math.sqrt(3))
    assert rows["p@10"]["selection_difference"] == pytest.approx(4.0)
    assert rows["p@10"]["beyond_2se"] and rows["p@10"]["selection_beyond_2se"]  # 3 > 2 x 1.15
    assert rows["random init 1"]["difference"] == 0.0 and not rows["random init 1"]["beyond_2se"]
    text = transfer_curve.format_lever(list(rows.values()), "a.json", "b.json")
    assert "+4.00 ± 1.15 *" in text and "a.json minus b.json" in text


def test_two_points_of_one_curve_are_paired_on_the_seed():
    task = lambda seeds: {"per_seed": seeds, "selection_per_seed": seeds}  # noqa: E731
    result = {"task": "A", "tasks": ["A"], "random_init": [],
              "points": [{"name": "prose@10", "tasks": {"A": task([52.0, 50.0, 57.0])}},
                         {"name": "broad@10", "tasks": {"A": task([50.0, 50.0, 51.0])}}]}
    [row] = transfer_curve.points_difference(result, "prose@10", "broad@10")
    # +2, 0, +6 -> 8/3 ± sd(2, 0, 6)/sqrt(3)
    assert row["selection_difference"] == pytest.approx(8 / 3)
    assert row["selection_difference_se"] == pytest.approx(math.sqrt(28 / 3 / 3))
    with pytest.raises(SystemExit, match="no point 'x@1'"):
        transfer_curve.points_difference(result, "x@1", "broad@10")


def test_pre_training_runs_pool_with_both_seeds_random():
    task = lambda seeds: {"per_seed": seeds, "selection_per_seed": seeds}  # noqa: E731

    def point(name, seeds, random_arm="random init 1"):
        return {"name": name, "random_arm": random_arm,
                "tasks": {"A": {**task(seeds),
                                "vs_random": sum(seeds) / 3 - 42.0,
                                "selection_vs_random": sum(seeds) / 3 - 42.0}}}

    result = {"task": "A", "tasks": ["A"],
              "random_init": [{"name": "random init 1", "tasks": {"A": task([40.0, 42.0, 44.0])}},
                              {"name": "random init 2", "tasks": {"A": task([1.0, 1.0, 1.0])}}],
              "points": [point("s1@10", [42.0, 45.0, 45.0]), point("s2@10", [44.0, 45.0, 49.0]),
                         point("x@10", [1.0, 1.0, 1.0], "random init 2")]}
    [row] = transfer_curve.pooled_points(result, ["s1@10", "s2@10"])
    # differences: s1 (+2, +3, +1) mean 2, s2 (+4, +3, +5) mean 4; grand mean 3.
    # run means 2, 4: var 2, /2 runs = 1; seed means 3, 3, 3: 0 -> SE 1
    assert row["difference"] == pytest.approx(3.0)
    assert row["difference_se"] == pytest.approx(1.0)
    assert row["beyond_2se"] and row["per_run"] == pytest.approx([2.0, 4.0])
    assert row["accuracy"] == pytest.approx(45.0)
    assert "+3.00 ± 1.00 *" in transfer_curve.format_pooled([row])
    with pytest.raises(SystemExit, match="different architectures"):
        transfer_curve.pooled_points(result, ["s1@10", "x@10"])
    with pytest.raises(SystemExit, match="no point 'random init 1'"):
        transfer_curve.pooled_points(result, ["s1@10", "random init 1"])


def test_curves_of_one_control_merge_and_pool_across_them():
    """Runs fine-tuned in two curves pool as one only when both curves' random init gave the
    same accuracies (the same draws, suite and path); otherwise the merge is refused."""
    task = lambda seeds: {"per_seed": seeds, "selection_per_seed": seeds}  # noqa: E731
    control = {"name": "random init 1", "finetune_args": "--arch a",
               "tasks": {"A": task([40.0, 42.0, 44.0])}}

    def curve(name, seeds, random_seeds=(40.0, 42.0, 44.0)):
        vs = sum(seeds) / 3 - 42.0
        return {"task": "A", "tasks": ["A"], "seeds": [1, 2, 3], "settings": {"epochs": 10},
                "random_init": [{**control, "tasks": {"A": task(list(random_seeds))}}],
                "points": [{"name": name, "finetune_args": "--arch a", "random_arm": "random init 1",
                            "tasks": {"A": {**task(seeds), "vs_random": vs,
                                            "selection_vs_random": vs}}}]}

    merged = transfer_curve.merge_curves([curve("s1@10", [42.0, 45.0, 45.0]),
                                          curve("s3@10", [44.0, 45.0, 49.0])], ["a", "b"])
    [row] = transfer_curve.pooled_points(merged, ["s1@10", "s3@10"])
    assert row["difference"] == pytest.approx(3.0)  # as in the one-curve hand computation
    assert row["difference_se"] == pytest.approx(1.0)
    assert [entry["name"] for entry in merged["random_init"]] == ["random init 1"]
    # a control that gave other accuracies stays that curve's own: s3 is paired with it
    merged = transfer_curve.merge_curves([curve("s1@10", [42.0, 45.0, 45.0]),
                                          curve("s3@10", [44.0, 45.0, 49.0], (40.0, 42.0, 44.5))],
                                         ["a", "dir/b.json"])
    assert [entry["name"] for entry in merged["random_init"]] == ["random init 1",
                                                                  "random init 1 (b.json)"]
    [row] = transfer_curve.pooled_points(merged, ["s1@10", "s3@10"])
    # differences: s1 (+2, +3, +1) mean 2, s3 (+4, +3, +4.5) mean 23/6; grand mean 35/12.
    # run means 2, 23/6: var (11/6)^2 / 2, / 2 runs; seed means 3, 3, 2.75: var 1/48, / 3 seeds
    assert row["difference"] == pytest.approx(35 / 12)
    assert row["difference_se"] == pytest.approx(math.sqrt((11 / 6) ** 2 / 4 + 1 / 48 / 3))
    assert row["random_init"] == pytest.approx((42.0 + 126.5 / 3) / 2)  # the two controls
    assert "own curve's random init: random init 1, random init 1 (b.json)" in (
        transfer_curve.format_pooled([row]))
    with pytest.raises(SystemExit, match="in two curves"):
        transfer_curve.merge_curves([curve("s1@10", [1.0] * 3), curve("s1@10", [1.0] * 3)],
                                    ["a", "b"])
    other = {**curve("s3@10", [1.0] * 3), "settings": {"epochs": 20}}
    with pytest.raises(SystemExit, match="other settings"):
        transfer_curve.merge_curves([curve("s1@10", [1.0] * 3), other], ["a", "b"])


def test_points_of_two_curves_of_one_control_are_paired_on_the_seed(tmp_path, capsys):
    """``--points A.json B.json P Q``: a run of one curve minus a run of another (one setting
    of pre-training apart, fine-tuned at different times), paired on the fine-tuning seed."""
    import json

    task = lambda seeds: {"per_seed": seeds, "selection_per_seed": seeds}  # noqa: E731

    def curve(name, seeds):
        return {"task": "A", "tasks": ["A"], "seeds": [1, 2, 3], "settings": {"epochs": 10},
                "random_init": [{"name": "random init 1", "finetune_args": "--arch a",
                                 "tasks": {"A": task([40.0, 42.0, 44.0])}}],
                "points": [{"name": name, "finetune_args": "--arch a",
                            "random_arm": "random init 1", "tasks": {"A": task(seeds)}}]}

    paths = []
    for name, seeds in (("wu-s3@10", [52.0, 50.0, 57.0]), ("s3@10", [50.0, 50.0, 51.0])):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(curve(name, seeds)))
    assert transfer_curve.main(["--points", *map(str, paths), "wu-s3@10", "s3@10"]) == 0
    assert "+2.67 ± 1.76" in capsys.readouterr().out  # +2, 0, +6 as in the one-curve case
    with pytest.raises(SystemExit):
        transfer_curve.main(["--points", str(paths[0]), "wu-s3@10"])


def test_docs_quote_the_committed_english_curves():
    """docs/transfer.md's English tables are the committed curves, rendered."""
    import json

    root = Path(__file__).resolve().parent.parent
    text = (root / "docs/transfer.md").read_text()
    curves = {path.name: json.loads(path.read_text())
              for path in (root / "docs/transfer/english").glob("curve-*.json")}
    assert {"curve-mean-ep10.json", "curve-first-ep10.json"} <= set(curves)
    for name, result in curves.items():
        if name != "curve-mean-ep10.json":  # its points are all in the -data curve
            assert transfer_curve.format_curve(result) in text, name
    for name, result in curves.items():
        if name.endswith("-seeds.json"):  # pre-training seeds: their pooled table too
            runs = [point["name"] for point in result["points"]
                    if point["updates"] == max(p["updates"] for p in result["points"])]
            assert transfer_curve.format_pooled(
                transfer_curve.pooled_points(result, runs)) in text, name
    from fairseq_ext_lab.transfer_diagnosis import format_report

    for path in (root / "docs/transfer/english").glob("probe-*.json"):
        assert format_report(json.loads(path.read_text())) in text, path.name
    assert transfer_curve.format_lever(
        transfer_curve.lever_difference(curves["curve-mean-ep10-lr3e-3-seeds.json"],
                                        curves["curve-mean-ep10-lr1e-3-seeds.json"]),
        "curve-mean-ep10-lr3e-3-seeds.json", "curve-mean-ep10-lr1e-3-seeds.json") in text
    assert transfer_curve.format_lever(
        transfer_curve.lever_difference(curves["curve-mean-ep10.json"],
                                        curves["curve-first-ep10.json"]),
        "curve-mean-ep10.json", "curve-first-ep10.json") in text


SHAPE_CURVES = ("curve-mean-ep10-lr3e-3-shape-12kflops.json",
                "curve-mean-ep10-lr3e-3-shape-12kflops-base.json")
#: The pre-training levers of docs/transfer.md compared as ``--points``: (curves, changed point,
#: the point it is paired with).
POINT_LEVERS = [
    (SHAPE_CURVES, "deep4x128-s1@6929", "base2x128-s1@12000"),
    (SHAPE_CURVES, "wide2x256-s1@3571", "base2x128-s1@12000"),
    (("curve-mean-ep10-lr3e-3-pretrain-lr-12k.json",), "lr1e-3-s1@12000", "base2x128-s1@12000"),
    (("curve-mean-ep10-lr3e-3-pretrain-lr-12k.json",), "lr4e-3-s1@12000", "base2x128-s1@12000"),
    (("curve-mean-ep10-lr3e-3-pretrain-batch128.json",), "batch128-s1@6000",
     "base2x128-s1@12000"),
    (("curve-mean-ep10-lr3e-3-pretrain-batch32.json",), "batch32-s1@24000",
     "base2x128-s1@12000"),
]
#: The fine-tuning levers compared as ``--lever CHANGED BASELINE`` (the same checkpoint and
#: random init, fine-tuned two ways).
PROTOCOL_LEVERS = [
    ("curve-mean-ep10-lr3e-3-llrd0.8-12k.json", "curve-mean-ep10-lr3e-3-shape-12kflops-base.json"),
    ("curve-mean-ep10-lr3e-3-ftwarmup0.2-12k.json",
     "curve-mean-ep10-lr3e-3-shape-12kflops-base.json"),
    ("curve-mean-ep20-lr3e-3-12k.json", "curve-mean-ep10-lr3e-3-shape-12kflops-base.json"),
]


@pytest.mark.parametrize("names,changed,baseline", POINT_LEVERS)
def test_docs_quote_each_pre_training_lever_from_its_committed_curves(names, changed, baseline):
    """A pre-training lever's paired table in docs/transfer.md (a run minus the recipe's run at
    the same budget) is that of its committed curves, merged as ``--points`` merges them."""
    curves = [json.loads((CURVES / name).read_text()) for name in names]
    merged = transfer_curve.merge_curves(curves, list(names))
    rows = transfer_curve.points_difference(merged, changed, baseline)
    assert [row["task"] for row in rows] == ["FortuneTopic", "GlossTopic", "DebSection"]
    text = (CURVES.parent.parent / "transfer.md").read_text()
    assert transfer_curve.format_lever(rows, changed, baseline) in text


@pytest.mark.parametrize("changed,baseline", PROTOCOL_LEVERS)
def test_docs_quote_each_fine_tuning_lever_from_its_committed_curves(changed, baseline):
    """A fine-tuning lever's paired table (the same checkpoint and random init fine-tuned with
    the lever and without) is ``--lever`` on its two committed curves."""
    rows = transfer_curve.lever_difference(json.loads((CURVES / changed).read_text()),
                                           json.loads((CURVES / baseline).read_text()))
    assert {row["arm"] for row in rows} == {"base2x128-s1@12000", "random init 1"}
    text = (CURVES.parent.parent / "transfer.md").read_text()
    assert transfer_curve.format_lever(rows, changed, baseline) in text


def test_the_demos_longest_committed_run_is_the_pooled_curves_and_docs_quote_it():
    """The line ``make demo`` prints under its fine-tuning table is the pooled row of the
    committed curves (all four pre-training seeds of recipes/roberta/english.sh), and
    docs/transfer.md quotes that pooled table."""
    import json

    from fairseq_ext_lab import demo

    root = Path(__file__).resolve().parent.parent
    curves = [json.loads((root / path).read_text()) for path in demo.LONGEST_RUN_CURVES]
    merged = transfer_curve.merge_curves(curves, demo.LONGEST_RUN_CURVES)
    rows = transfer_curve.pooled_points(merged, demo.LONGEST_RUN_POINTS)
    row, text = demo.committed_run("FortuneTopic")
    expected = next(r for r in rows if r["task"] == "FortuneTopic")
    assert row["selection_difference"] == expected["selection_difference"]
    assert row["runs"] == len(demo.LONGEST_RUN_POINTS) == 4
    assert (f"{expected['selection_difference']:+.2f} ± {expected['selection_difference_se']:.2f}"
            in text.splitlines()[1])
    assert transfer_curve.format_pooled(rows) in (root / "docs/transfer.md").read_text()


def test_the_demo_prints_each_pre_trained_arm_s_committed_run_from_its_curves():
    """Beside RoBERTa-15% and 3ML-self-40% the demo prints their committed paying runs: the
    pooled rows of their curves (quoted in docs/transfer.md), the demo's task and every task."""
    import json

    from fairseq_ext_lab import demo, finetuning

    root = Path(__file__).resolve().parent.parent
    assert [run.model for run in demo.COMMITTED_RUNS] == list(demo.FINETUNE_MODELS[:2])
    for run in demo.COMMITTED_RUNS:
        curves = [json.loads((root / path).read_text()) for path in run.curves]
        rows = transfer_curve.pooled_points(transfer_curve.merge_curves(curves, list(run.curves)),
                                            run.points)
        row, text = demo.committed_run("GlossTopic", run)
        expected = next(r for r in rows if r["task"] == "GlossTopic")
        assert row["selection_difference"] == expected["selection_difference"]
        assert row["runs"] == len(run.points) and text.startswith(run.model)
        assert f"{expected['selection_difference']:+.2f} ± " in text.splitlines()[1]
        assert all(f"{r['task']} {r['selection_difference']:+.2f}" in text.splitlines()[3]
                   for r in rows)
        assert transfer_curve.format_pooled(rows) in (root / "docs/transfer.md").read_text()
        assert finetuning.DEMO_TASK in {r["task"] for r in rows}
