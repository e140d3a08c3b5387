"""Watching a run: ``fairseq-train --tensorboard-logdir DIR`` writes event files (through
tensorboardX, pinned in requirements.txt) that carry the per-category losses and the FLOPs, with
the values of the json log.

fairseq writes one event directory per progress-bar tag: ``train_inner`` (every log interval),
``train`` (end of epoch) and ``valid``. The events are read back here by hand (TFRecord framing,
``tensorboardX``'s ``Event`` proto), so the test needs nothing beyond the pinned install.
"""
import math
import struct
from pathlib import Path

import pytest
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli

UPDATES = 3
COMMON = ["--tokens-per-sample", "64", "--optimizer", "adam", "--lr", "1e-3", "--log-interval",
          "1", "--log-format", "json", "--no-progress-bar", "--cpu", "--num-workers", "0",
          "--seed", "3", "--max-update", str(UPDATES), "--no-save"]

# criterion flags -> scalars that every tag must carry (FLOPs are training-only)
RUNS = {
    "bidirectional_lm": (
        ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm", "--variant", "hyb_pre",
         "--mask-prob", "0.3", "--arch", "bidir_lm_tiny", "--max-tokens", "512"],
        {"loss", "loss_mask", "loss_next"},
    ),
    "masked_lm_flops": (
        ["--task", "masked_lm", "--criterion", "masked_lm_flops", "--mask-prob", "0.4",
         "--arch", "3ml_self_tiny", "--batch-size", "8"],
        {"loss", "loss_mask", "loss_replaced", "loss_unchanged"},
    ),
}
FLOPS = {"pflops", "total_pflops"}


def read_scalars(event_dir: Path) -> dict:
    """{(tag, step): value} of every scalar in the event files under `event_dir`."""
    scalars = {}
    for path in sorted(event_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            header = data[pos:pos + 8]
            (length,) = struct.unpack("<Q", header)
            assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
            record = data[pos + 12:pos + 12 + length]
            end = pos + 12 + length
            assert struct.unpack("<I", data[end:end + 4])[0] == masked_crc32c(record)
            pos = end + 4
            event = Event.FromString(record)
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value":
                    scalars[value.tag, event.step] = value.simple_value
    return scalars


def assert_matches_json(scalars: dict, record: dict, step: int, prefix: str, required: set):
    """Every required scalar is in the events at `step`, and every scalar the events and the
    json record share has the json's value (to its `{:g}` rounding; events store float32)."""
    keys = {tag for tag, s in scalars if s == step}
    assert required <= keys, (prefix, step, sorted(required - keys))
    shared = {k for k in keys if prefix + k in record}
    assert required <= shared, (prefix, step, sorted(required - shared))
    for key in shared:
        logged = float(record[prefix + key])
        assert math.isclose(scalars[key, step], logged, rel_tol=1e-5), (
            prefix, key, step, scalars[key, step], logged)


@pytest.mark.parametrize("criterion", sorted(RUNS))
def test_tensorboard_logdir_carries_the_json_logs_scalars(criterion, tiny_data_bin, tmp_path):
    flags, losses = RUNS[criterion]
    logdir = tmp_path / "tb"
    proc = run_cli([fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR, *flags,
                    *COMMON, "--save-dir", tmp_path / "ckpt", "--tensorboard-logdir", logdir],
                   env={"OMP_NUM_THREADS": "1"})
    log = proc.stdout + proc.stderr
    assert "tensorboard not found" not in log

    inner = json_log_records(log)
    assert [int(r["num_updates"]) for r in inner] == list(range(1, UPDATES + 1))
    scalars = read_scalars(logdir / "train_inner")
    for record in inner:
        assert_matches_json(scalars, record, int(record["num_updates"]), "", losses | FLOPS)
    # the cumulative FLOPs grow with every update
    totals = [scalars["total_pflops", step] for step in range(1, UPDATES + 1)]
    assert all(0 < a < b for a, b in zip(totals, totals[1:])), totals

    for tag, required in (("train", losses | FLOPS), ("valid", losses)):
        (record,) = json_log_records(log, key=f"{tag}_num_updates")
        assert_matches_json(read_scalars(logdir / tag), record, UPDATES, f"{tag}_", required)
