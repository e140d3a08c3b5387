"""fairseq_ext.reporting.uncertainty: the standard errors of the bidirectional evaluation,
against hand computations and, for the delta method, against a bootstrap over
documents on synthetic scores (a seeded resampling, written here without the package)."""
import json
import math

import numpy as np
import pytest

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    accuracy,
    binomial_standard_error,
    paired_accuracy_difference,
    paired_perplexity_difference,
    perplexity,
    ratio_standard_error_from_sums,
)


def synthetic_documents(seed=0, documents=400):
    """Per-document token counts and the summed losses (nats) of two correlated models: B is A
    plus a small per-token shift and a little noise of its own."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(20, 200, size=documents).astype(float)
    difficulty = rng.normal(3.0, 0.4, size=documents)  # documents differ: the clustering
    loss_a = tokens * difficulty + rng.normal(0, 2.0, size=documents) * np.sqrt(tokens)
    loss_b = loss_a + tokens * 0.02 + rng.normal(0, 0.5, size=documents) * np.sqrt(tokens)
    return tokens, loss_a, loss_b


def bootstrap_standard_error(statistic, *columns, rounds=3000, seed=1):
    """Standard deviation of ``statistic`` over resamples of the documents (rows)."""
    rng = np.random.default_rng(seed)
    size = len(columns[0])
    values = [statistic(*(column[picked] for column in columns))
              for picked in (rng.integers(0, size, size) for _ in range(rounds))]
    return float(np.std(values, ddof=1))


def test_binomial_and_accuracy_by_hand():
    assert binomial_standard_error(30, 100) == pytest.approx(math.sqrt(0.3 * 0.7 / 100))
    estimate = accuracy([1, 0, 0, 1, 0])
    assert estimate.value == pytest.approx(40.0)
    assert estimate.standard_error == pytest.approx(100 * math.sqrt(0.4 * 0.6 / 5))
    assert math.isnan(binomial_standard_error(0, 0))


def test_paired_accuracy_difference_by_hand():
    # d = [1, 0, 0, 1, 0]: mean 0.4, sample sd sqrt(0.3), standard error sqrt(0.3 / 5)
    estimate = paired_accuracy_difference([1, 0, 1, 1, 0], [0, 0, 1, 0, 0])
    assert estimate.value == pytest.approx(40.0)
    assert estimate.standard_error == pytest.approx(100 * math.sqrt(0.3 / 5))
    # agreement everywhere: no difference and no uncertainty about it
    same = paired_accuracy_difference([1, 0, 1], [1, 0, 1])
    assert (same.value, same.standard_error) == (0.0, 0.0) and not same.resolved()


def test_ratio_error_from_sums_is_the_linearised_mean():
    tokens, losses, _ = synthetic_documents(documents=50)
    ratio = losses.sum() / tokens.sum()
    linearised = (losses - ratio * tokens) / tokens.mean()
    expected = linearised.std(ddof=1) / math.sqrt(len(tokens))
    got = ratio_standard_error_from_sums(len(tokens), losses.sum(), tokens.sum(),
                                         (losses ** 2).sum(), (tokens ** 2).sum(),
                                         (losses * tokens).sum())
    assert got == pytest.approx(expected, rel=1e-9)
    assert math.isnan(ratio_standard_error_from_sums(1, 5.0, 2.0, 25.0, 4.0, 10.0))


def test_perplexity_error_agrees_with_a_bootstrap_over_documents():
    tokens, losses, _ = synthetic_documents()
    estimate = perplexity(losses, tokens)
    assert estimate.value == pytest.approx(math.exp(losses.sum() / tokens.sum()))
    bootstrap = bootstrap_standard_error(lambda nats, n: math.exp(nats.sum() / n.sum()), losses, tokens)
    assert estimate.standard_error == pytest.approx(bootstrap, rel=0.1)


def test_paired_perplexity_difference_agrees_with_a_bootstrap_and_beats_unpaired():
    tokens, loss_a, loss_b = synthetic_documents()
    estimate = paired_perplexity_difference(loss_a, loss_b, tokens)
    ppl_a, ppl_b = perplexity(loss_a, tokens), perplexity(loss_b, tokens)
    assert estimate.value == pytest.approx(ppl_a.value - ppl_b.value)
    bootstrap = bootstrap_standard_error(
        lambda a, b, n: math.exp(a.sum() / n.sum()) - math.exp(b.sum() / n.sum()),
        loss_a, loss_b, tokens)
    assert estimate.standard_error == pytest.approx(bootstrap, rel=0.1)
    # paired, far below the error of either model: the documents' difficulty cancels
    unpaired = math.hypot(ppl_a.standard_error, ppl_b.standard_error)
    assert estimate.standard_error < 0.25 * unpaired
    assert estimate.resolved() and not Estimate(estimate.value, unpaired).resolved()


def test_resolved_is_a_json_boolean():
    # 9 of 10 rows right against none: +0.9 with a nonzero SE, far beyond 2 SE
    estimate = paired_accuracy_difference(np.r_[np.ones(9), 0.0], np.zeros(10))
    assert estimate.standard_error > 0 and json.dumps(estimate.resolved()) == "true"
    # every row the same difference: SE 0 resolves nothing, still a JSON boolean
    assert json.dumps(paired_accuracy_difference(np.ones(10), np.zeros(10)).resolved()) == "false"


# --- the report's pairing (fairseq_ext_lab.evaluation.bidirectional_report) ------------------------

def write_scores(path, mode, rows, **settings):
    """A --eval-scores-out file of ``rows`` ``(document, position, label, tokens, loss, correct)``."""
    from fairseq_ext.reporting.eval_scores import FORMAT, VERSION

    header = {"format": FORMAT, "version": VERSION,
              "settings": {"eval_mode": mode, "eval_seed": "1", **settings}}
    lines = [json.dumps(header)] + [json.dumps(
        {"split": "valid", "document": d, "position": p, "r": r, "tokens": n, "loss": loss,
         "correct": c}) for d, p, r, n, loss, c in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_report_pairs_rows_and_marks_resolved_differences(tmp_path):
    from fairseq_ext_lab.evaluation import bidirectional_report as report

    # infilling, 400 positions: A right on 120, B on the same 120 and 20 more
    correct_a = [1] * 120 + [0] * 280
    correct_b = [1] * 140 + [0] * 260
    infill = [(index // 4, index % 4, "r1") for index in range(400)]
    rows = []
    for name, correct, ppl in (("a", correct_a, 30.0), ("b", correct_b, 31.0)):
        path = write_scores(tmp_path / f"{name}.jsonl", "infill",
                            [(d, p, r, 1, 3.0, c) for (d, p, r), c in zip(infill, correct)])
        rows.append({"checkpoint": f"{name}.pt", "variant": "hyb_pre",
                     "infill_acc": {1.0: 100 * np.mean(correct)},
                     "infill_acc_se": {1.0: accuracy(correct).standard_error},
                     "full_ppl": ppl, "full_ppl_se": 1.0, "scores": {"infill": path}})
    estimate, note = report.paired_difference(rows[0], rows[1], ("infill", "r1"))
    assert note == "" and estimate.value == pytest.approx(-5.0)
    # d is -1 on 20 positions, 0 elsewhere: sd sqrt(20 * 0.95**2 + 380 * 0.05**2) / sqrt(399)
    d = np.array([0] * 120 + [-1] * 20 + [0] * 260)
    assert estimate.standard_error == pytest.approx(100 * d.std(ddof=1) / math.sqrt(400))
    text = report.format_report(rows, "1", names=["a", "b"])
    assert "30.00 ± 1.00" in text and "35.00 ± 2.38" in text
    assert "-5.00 ± 1.09 *" in text  # a against the best (b), resolved
    # full ppl: no scores file for that mode, so no paired difference, and a note says why
    assert "n/a" in text and "note: b, full ppl: no scored rows" in text  # a is the best
    differences = report.all_differences(rows, "1", ["a", "b"])
    (infill_row,) = [x for x in differences if x["column"] == "infill acc R=1"]
    assert infill_row["resolved"] is True and infill_row["a"] == "a"


def test_report_refuses_to_pair_rows_scored_with_other_settings(tmp_path):
    from fairseq_ext_lab.evaluation import bidirectional_report as report

    rows = []
    for name, positions in (("a", "1"), ("b", "2")):
        path = write_scores(tmp_path / f"{name}.jsonl", "infill", [(0, 3, "r1", 1, 2.0, 1)],
                            infill_positions=positions)
        rows.append({"infill_acc": {1.0: 100.0}, "scores": {"infill": path}})
    estimate, note = report.paired_difference(rows[0], rows[1], ("infill", "r1"))
    assert estimate is None and note == "scored with other settings: infill_positions 1 vs 2"
