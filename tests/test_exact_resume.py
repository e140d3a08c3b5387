"""Exact resume for every model family: N updates straight equal N/2 updates, a stop,
and N/2 more, bit for bit on the CPU, FLOP counter included.

Per family, four ``fairseq-train`` runs of a tiny model, each a real process (``conftest.fresh_cli``,
never a fork of the suite's server: a resume that only worked because some state survived in a
server would pass there and fail for a user):

* ``straight``: 6 updates with ``--save-interval-updates 1`` (a checkpoint after every update);
* ``stopped``: ``--max-update 3``; then ``resumed``: the same command with ``--max-update 6`` in
  the same ``--save-dir``, which continues from the ``checkpoint_last.pt`` the stop wrote;
* ``restored``: ``--restore-file`` of the straight run's ``checkpoint_1_3.pt`` (written by
  ``--save-interval-updates`` in a run that went on) into a new ``--save-dir``, to 6.

The json log rounds losses to 3 decimals, so bit-for-bit is checked on the checkpoints that
every run writes after every update (:mod:`checkpoint_state`): the model's weights, Adam's
moments and step, the lr scheduler, the data iterator's position, and the value of every logged
training metric at that update (fairseq keeps each meter's last value, unrounded, in
``extra_state["metrics"]``: the loss of that update, its per-category losses, ``pflops``,
``gnorm``, ...) with the running ``total_pflops`` total. Updates 4-6 of the resumed and
restored runs must equal the straight run's, and the stopped run's update 3 the straight run's
``checkpoint_1_3.pt``.
"""
import pytest
import torch
from checkpoint_state import assert_identical, training_state

from conftest import USER_DIR, json_log_records

pytestmark = pytest.mark.slow

HALF, UPDATES = 3, 6

#: One tiny model of each family, with its recipe's task and criterion. bidirectional_lm runs
#: HybPre: the variant with the most per-document state (masking, a bidirectional prefix and
#: next-token targets).
FAMILIES = {
    "roberta": ["--task", "masked_lm", "--criterion", "masked_lm_flops",
                "--arch", "roberta_tiny", "--batch-size", "4"],
    "3ml_self": ["--task", "masked_lm", "--criterion", "masked_lm_flops", "--mask-prob", "0.4",
                 "--arch", "3ml_self_tiny", "--batch-size", "4"],
    "3ml_cross": ["--task", "masked_lm", "--criterion", "masked_lm_flops", "--mask-prob", "0.4",
                  "--arch", "3ml_cross_tiny", "--batch-size", "4"],
    "bert_rab": ["--task", "masked_lm", "--criterion", "masked_lm_flops",
                 "--arch", "bert_rab_tiny", "--batch-size", "4"],
    "swishrnn_bert": ["--task", "masked_lm", "--criterion", "masked_lm_flops",
                      "--arch", "swishrnn_bert_tiny", "--batch-size", "4"],
    "bidirectional_lm": ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm",
                         "--variant", "hyb_pre", "--arch", "bidir_lm_tiny",
                         "--max-tokens", "128"],
}

#: What every run shares: dropout on (reseeded per update by fairseq), a warmup and a decay
#: (the scheduler's state matters), clipping, validation at every save (2 batches).
COMMON = ["--user-dir", USER_DIR, "--tokens-per-sample", "32", "--optimizer", "adam",
          "--adam-betas", "(0.9,0.98)", "--weight-decay", "0.01", "--clip-norm", "1.0",
          "--lr", "1e-3", "--lr-scheduler", "polynomial_decay", "--warmup-updates", "2",
          "--total-num-update", str(UPDATES), "--dropout", "0.1", "--seed", "7", "--cpu",
          "--num-workers", "0", "--log-format", "json", "--log-interval", "1",
          "--no-progress-bar", "--max-valid-steps", "2", "--save-interval-updates", "1",
          "--no-epoch-checkpoints"]


def inner_records(output):
    return [r for r in json_log_records(output) if "total_pflops" in r]


@pytest.mark.parametrize("family", FAMILIES)
def test_resume_is_exact(family, fresh_cli, tiny_data_bin, tmp_path):
    def train(name, save_dir, max_update, *extra):
        output = fresh_cli.run("fairseq-train", [tiny_data_bin, *FAMILIES[family], *COMMON,
                                              "--save-dir", save_dir, "--max-update", max_update,
                                              *extra], tmp_path / f"{name}.log")
        return inner_records(output)

    straight = train("straight", tmp_path / "straight", UPDATES)
    stopped = train("stopped", tmp_path / "stopped", HALF)
    resumed = train("resumed", tmp_path / "stopped", UPDATES)
    restored = train("restored", tmp_path / "restored", UPDATES, "--restore-file",
                     tmp_path / "straight" / f"checkpoint_1_{HALF}.pt")

    # Each run logged the updates it made, and the resumed ones started where the others stopped.
    assert [int(r["num_updates"]) for r in straight] == list(range(1, UPDATES + 1))
    assert [int(r["num_updates"]) for r in stopped] == list(range(1, HALF + 1))
    for run in (resumed, restored):
        assert [int(r["num_updates"]) for r in run] == list(range(HALF + 1, UPDATES + 1))
    for key in ("loss", "pflops", "total_pflops"):
        assert [r[key] for r in resumed] == [r[key] for r in straight[HALF:]], key
        assert [r[key] for r in restored] == [r[key] for r in straight[HALF:]], key
        assert [r[key] for r in stopped] == [r[key] for r in straight[:HALF]], key
    assert float(straight[-1]["total_pflops"]) > float(straight[HALF - 1]["total_pflops"]) > 0

    # Bit for bit, after every update.
    for update in range(1, UPDATES + 1):
        expected = training_state(tmp_path / "straight" / f"checkpoint_1_{update}.pt")
        assert expected["num_updates"] == update
        runs = ["stopped"] if update <= HALF else ["stopped", "restored"]  # stopped: + resumed
        for run in runs:
            got = training_state(tmp_path / run / f"checkpoint_1_{update}.pt")
            assert_identical(got, expected, f"{family}, {run}, update {update}")
        if update > 1:  # the losses do change: the comparison is not of a constant
            before = training_state(tmp_path / "straight" / f"checkpoint_1_{update - 1}.pt")
            assert not torch.equal(before["meters"]["loss"]["val"], expected["meters"]["loss"]["val"])
            assert before["meters"]["total_pflops"]["sum"] < expected["meters"]["total_pflops"]["sum"]
