"""Checkpoints that survive a kill at any moment.

How fairseq writes a checkpoint (``fairseq/checkpoint_utils.py``, with our patch's items 5 and 6,
README "Install"): ``save_checkpoint`` makes the list of names due at this point
(``checkpoint<E>.pt``, ``checkpoint_<E>_<U>.pt``, ``checkpoint_best.pt``, ``checkpoint_last.pt``,
in that order), has the trainer write the first with ``torch_persistent_save`` and then copies it
to the others with ``copy_checkpoint``.

* Every file appears atomically. ``torch_persistent_save`` writes ``NAME.tmp``, syncs it and
  renames it over ``NAME`` (fairseq's own scheme; the sync is ours). fairseq 0.12 then *copied*
  the first file in place (``shutil.copyfile``: truncate, write), so a kill during the copy left
  ``checkpoint_last.pt`` truncated and the next ``fairseq-train`` stopped on it. The patched
  ``copy_checkpoint`` copies into ``NAME.tmp``, syncs, and renames. A writer killed part-way
  leaves the previous ``NAME`` untouched and a partial ``NAME.tmp`` that nothing reads; the next
  ``fairseq-train`` in that directory removes it.
* A truncated checkpoint (a ``torch.save`` zip archive without the index written last: from an
  older fairseq, an interrupted ``cp``, a full disk) stops ``fairseq-train`` and
  ``fairseq-validate`` with one line naming the file and the newest complete checkpoint beside
  it (``TruncatedCheckpointError``), for ``fairseq-train`` with the ``--restore-file`` to resume
  from it; fairseq-ext's own loader says the same words.

Tests:

* :func:`test_kills_during_checkpoint_writes_leave_complete_checkpoints_and_resume_exactly`:
  22 kills of a real ``fairseq-train`` (no hook in it), each while it writes a checkpoint file:
  a seeded RNG draws the save, the file (the first one, or a copy) and a byte offset; the test
  polls the file's ``.tmp`` and SIGKILLs the process once it holds that many bytes. After each
  kill every ``*.pt`` in the save directory must load and equal, bit for bit, the checkpoint of
  the same update of a run that was never killed (:mod:`checkpoint_state`, the exact-resume
  standard); the same command then resumes, and the last one finishes the run. It prints where
  the kills landed.
* Deterministic kills part-way through ``torch_persistent_save`` and through the copy to
  ``checkpoint_last.pt``: the writer subprocess runs fairseq's own function on a file object (or
  copy loop) that, after N bytes, flushes, prints ``WROTE`` and sleeps; the test then SIGKILLs it.
* The files are synced before the rename and the directory after it (a kill does not need it,
  a crash of the machine does): recorded in-process.
* Truncated checkpoints: the one-line errors of ``fairseq-train`` and ``fairseq-validate``, the
  advice followed (``--restore-file`` of the named checkpoint resumes exactly), and our loader.
"""
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkpoint_state import assert_identical, training_state

from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli

TINY = ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm", "--variant", "hyb_pre",
        "--arch", "bidir_lm_tiny", "--tokens-per-sample", "64", "--max-tokens", "512",
        "--optimizer", "adam", "--lr", "1e-3", "--log-interval", "1", "--log-format", "json",
        "--no-progress-bar", "--cpu", "--num-workers", "0", "--seed", "3"]

#: Bytes the killed writers get out before they stall.
PARTIAL_BYTES = 256 * 1024

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: fairseq's atomic save, on a file object that stalls after N bytes.
STALLING_SAVE = textwrap.dedent("""
    import sys, time
    import torch
    import fairseq_ext  # noqa: F401  (the allow-list, to read the previous checkpoint)
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    state = checkpoint_utils.load_checkpoint_to_cpu(src)
    state["optimizer_history"][-1]["num_updates"] = 999
    state["extra_state"]["padding"] = torch.zeros(limit)  # float32: 4x the limit in bytes

    class Stalling:
        def __init__(self, f):
            self.f, self.written = f, 0
        def write(self, data):
            n = self.f.write(data)
            self.written += len(data)
            if self.written >= limit:
                self.f.flush()
                print("WROTE", flush=True)
                time.sleep(600)
            return n
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.f.__exit__(*exc)
        def __getattr__(self, name):
            return getattr(self.f, name)

    real_open = PathManager.open
    PathManager.open = staticmethod(
        lambda path, mode="r", *a, **k: Stalling(real_open(path, mode, *a, **k))
        if "w" in mode else real_open(path, mode, *a, **k))
    checkpoint_utils.torch_persistent_save(state, dst)
    print("FINISHED", flush=True)
""")

#: fairseq's copy of the first checkpoint to checkpoint_last.pt (save_checkpoint's
#: copy_checkpoint), stalling after N bytes.
STALLING_COPY = textwrap.dedent("""
    import shutil, sys, time
    from fairseq import checkpoint_utils

    src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def stalling_copyfileobj(fsrc, fdst, length=0):
        fdst.write(fsrc.read(limit))
        fdst.flush()
        print("WROTE", flush=True)
        time.sleep(600)

    shutil._USE_CP_SENDFILE = False  # the same copy, through copyfileobj
    shutil.copyfileobj = stalling_copyfileobj
    checkpoint_utils.copy_checkpoint(src, dst)
    print("FINISHED", flush=True)
""")


def kill_part_way(script, *args):
    """Run ``script`` with ``args``; SIGKILL it once it prints WROTE."""
    proc = subprocess.Popen([sys.executable, "-c", script, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        if line != "WROTE":
            proc.wait(timeout=60)
            raise AssertionError(f"writer did not stall ({line!r}): {proc.stderr.read()[-3000:]}")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def num_updates(path):
    from fairseq import checkpoint_utils

    import fairseq_ext  # noqa: F401

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))["optimizer_history"][-1][
        "num_updates"]


@pytest.fixture(scope="module")
def trained(fresh_cli, tiny_data_bin, tmp_path_factory):
    """3 updates of fairseq-train, checkpoints in ``save``: (data, save dir)."""
    save = tmp_path_factory.mktemp("faults") / "save"
    fresh_cli.run("fairseq-train", [tiny_data_bin, "--user-dir", USER_DIR, *TINY, "--max-update",
                                 "3", "--no-epoch-checkpoints", "--save-dir", save],
               save.parent / "train.log")
    assert num_updates(save / "checkpoint_last.pt") == 3
    return tiny_data_bin, save


def test_killed_atomic_write_leaves_previous_checkpoint(trained, fresh_cli, tmp_path):
    data, save_dir = trained
    save = tmp_path / "save"
    save.mkdir()
    last = save / "checkpoint_last.pt"
    last.write_bytes((save_dir / "checkpoint_last.pt").read_bytes())
    before = last.read_bytes()

    kill_part_way(STALLING_SAVE, last, last, PARTIAL_BYTES)

    # The partial write is in NAME.tmp; checkpoint_last.pt is the previous file, byte for byte.
    partial = save / "checkpoint_last.pt.tmp"
    assert partial.exists() and partial.stat().st_size >= PARTIAL_BYTES
    assert last.read_bytes() == before
    assert num_updates(last) == 3
    # Nothing fairseq looks for matches the partial file.
    from fairseq import checkpoint_utils
    assert checkpoint_utils.checkpoint_paths(str(save), pattern=r"checkpoint(\d+)\.pt") == []
    assert checkpoint_utils.checkpoint_paths(str(save), pattern=r"checkpoint_\d+_(\d+)\.pt") == []

    # fairseq-train resumes from the save dir at update 3, and removes the partial file.
    output = fresh_cli.run("fairseq-train", [data, "--user-dir", USER_DIR, *TINY, "--max-update",
                                          "4", "--no-epoch-checkpoints", "--save-dir", save],
                        tmp_path / "resumed.log")
    assert f"Loaded checkpoint {last}" in output and "@ 3 updates" in output, output[-3000:]
    assert f"removing {partial}, left by an interrupted checkpoint write" in output
    train_updates = [int(r["num_updates"]) for r in json_log_records(output)
                     if "loss" in r and "valid_loss" not in r]
    assert train_updates and train_updates[0] == 4, output[-3000:]
    assert num_updates(last) == 4
    assert sorted(p.name for p in save.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]


def test_kill_during_the_copy_to_checkpoint_last_leaves_it_whole(trained, tmp_path):
    """fairseq 0.12 copied the first file of a save to checkpoint_last.pt in place, so a kill
    during the copy truncated it (and lost the previous one). Now the copy goes to
    checkpoint_last.pt.tmp and is renamed over checkpoint_last.pt once whole."""
    _, save_dir = trained
    save = tmp_path / "save"
    save.mkdir()
    source = save / "checkpoint_1_3.pt"  # what save_checkpoint writes first, atomically
    last = save / "checkpoint_last.pt"
    source.write_bytes((save_dir / "checkpoint_last.pt").read_bytes())
    previous = b"the previous checkpoint_last.pt"
    last.write_bytes(previous)

    kill_part_way(STALLING_COPY, source, last, PARTIAL_BYTES)

    assert last.read_bytes() == previous
    assert (save / "checkpoint_last.pt.tmp").stat().st_size == PARTIAL_BYTES
    assert source.stat().st_size > PARTIAL_BYTES and num_updates(source) == 3


def test_files_are_synced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    """A kill needs only the rename; a crash of the machine also needs the data on the disk
    before the rename, and the rename itself (the directory) after it."""
    from fairseq import checkpoint_utils

    events = []
    real_fsync, real_rename, real_replace = os.fsync, os.rename, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def renamed(real, kind):
        return lambda src, dst: (events.append((kind, str(src), str(dst))), real(src, dst))[1]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", renamed(real_rename, "rename"))
    monkeypatch.setattr(os, "replace", renamed(real_replace, "rename"))
    first, last = str(tmp_path / "checkpoint_1_3.pt"), str(tmp_path / "checkpoint_last.pt")
    checkpoint_utils.torch_persistent_save({"model": {}, "n": 3}, first)
    assert checkpoint_utils.copy_checkpoint(first, last)
    monkeypatch.undo()

    directory = os.path.realpath(tmp_path)
    assert events == [("fsync", os.path.realpath(first + ".tmp")),
                      ("rename", first + ".tmp", first), ("fsync", directory),
                      ("fsync", os.path.realpath(last + ".tmp")),
                      ("rename", last + ".tmp", last), ("fsync", directory)]
    assert Path(last).read_bytes() == Path(first).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1_3.pt",
                                                          "checkpoint_last.pt"]


# --- kills at random moments of checkpoint writing -------------------------------------------

#: Updates of the run; a checkpoint after each (--save-interval-updates 1). All in the first
#: epoch (32 updates of the tiny data-bin at --batch-size 12): a run resumed from an epoch's
#: last checkpoint is not exact in fairseq 0.12 (README, "Training at scale", "Resume").
KILL_UPDATES = 24
#: Kills, each at a different save, drawn from the saves of updates 1..KILL_UPDATES-1.
KILLS = 22
KILL_SEED = 2023

#: A tiny RoBERTa with our FLOP-counting criterion (its running total is checkpointed state),
#: dropout, a warmup and a decay, and validation at every save (checkpoint_best.pt moves).
KILL_RUN = ["--user-dir", USER_DIR, "--task", "masked_lm", "--criterion", "masked_lm_flops",
            "--arch", "roberta_tiny", "--batch-size", "12", "--tokens-per-sample", "64",
            "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "polynomial_decay",
            "--warmup-updates", "4", "--total-num-update", str(KILL_UPDATES), "--dropout", "0.1",
            "--seed", "7", "--cpu", "--num-workers", "0", "--log-format", "json",
            "--log-interval", "1", "--no-progress-bar", "--max-valid-steps", "1",
            "--save-interval-updates", "1", "--max-update", str(KILL_UPDATES)]

SAVE_LINE = re.compile(r"Preparing to save checkpoint for epoch \d+ @ (\d+) updates$", re.M)
SAVED_LINE = re.compile(r"Saved checkpoint .* @ (\d+) updates, ", re.M)
LOADED_LINE = re.compile(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)")


def saved_state(path):
    """:func:`checkpoint_state.training_state` and the best validation loss so far, read with
    fairseq-ext's loader (a one-line CheckpointLoadError if the file is not whole)."""
    from fairseq_ext.training.checkpoint_loading import load_checkpoint_to_cpu

    checkpoint = load_checkpoint_to_cpu(path)
    return {**training_state(checkpoint), "best": checkpoint["extra_state"].get("best"),
            "val_loss": checkpoint["extra_state"]["val_loss"]}


@pytest.fixture(scope="module")
def never_killed(fresh_cli, tiny_data_bin, tmp_path_factory):
    """The run, never killed: (save dir, {update: name of its checkpoint, the first file of
    that save}, {update: saved_state})."""
    save = tmp_path_factory.mktemp("never_killed") / "save"
    output = fresh_cli.run("fairseq-train", [tiny_data_bin, *KILL_RUN, "--save-dir", save],
                        save.parent / "train.log")
    first_files = {int(update): name for update, name in re.findall(
        r"@ (\d+) updates$\n.*Saving checkpoint to \S+/(checkpoint\S*\.pt)$", output, re.M)}
    assert first_files == {u: f"checkpoint_1_{u}.pt" for u in range(1, KILL_UPDATES + 1)}
    states = {update: saved_state(save / name) for update, name in first_files.items()}
    assert all(states[update]["num_updates"] == update for update in states)
    return save, first_files, states


class CheckedFolder:
    """Checks that every ``*.pt`` of a save directory loads and equals, bit for bit, the
    never-killed run's checkpoint of the same update; a file already checked and unchanged
    (same inode, size and mtime) is not read again."""

    def __init__(self, reference_states):
        self.reference, self.checked = reference_states, {}

    def check(self, save):
        """{name: update} of the ``*.pt`` files in ``save``, each checked."""
        updates = {}
        for path in sorted(save.glob("*.pt")):
            stat = path.stat()
            key = (path.name, stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if key not in self.checked:
                state = saved_state(path)
                update = state["num_updates"]
                assert update in self.reference, f"{path}: update {update}"
                assert_identical(state, self.reference[update], f"{path} (update {update})")
                self.checked[key] = update
            updates[path.name] = self.checked[key]
        return updates


def size_of(path):
    """The size of ``path``; -1 if there is no such file (a ``.tmp`` renamed away)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


def kill_inside_a_write(pid, log, target, threshold, update, timeout=180):
    """Once the run at ``pid`` starts the save of ``update`` (its log says so), SIGKILL it as
    soon as the ``target`` (a ``.tmp`` file) holds ``threshold`` bytes, or, if the save ends
    first, then. The run removes old ``.tmp`` files before it saves anything, so a target that
    exists is this save's write."""
    deadline = time.monotonic() + timeout
    while not log.exists():  # the run's log (opened as it starts)
        assert time.monotonic() < deadline, f"{log} never appeared"
        time.sleep(0.002)
    with open(log) as stream:
        text = ""
        while str(update) not in SAVE_LINE.findall(text):  # coarse: until the save starts
            assert time.monotonic() < deadline, f"update {update} never saved:\n{text[-3000:]}"
            time.sleep(0.002)
            text += stream.read()
        polls = 0
        while size_of(target) < threshold:
            polls += 1  # fine: ~0.1 ms a poll
            if polls % 25 == 0:
                text += stream.read()
                if str(update) in SAVED_LINE.findall(text):
                    break
            assert time.monotonic() < deadline, f"update {update}: no kill:\n{text[-3000:]}"
            time.sleep(0.0001)
    os.kill(pid, signal.SIGKILL)


def landed_in(save):
    """Where the kill of a run in ``save`` landed: the ``.tmp`` it left, if any (one write at a
    time, and each run starts by removing old ones), and whether it was whole yet."""
    from fairseq.checkpoint_utils import is_truncated_checkpoint

    partial = sorted(save.glob("*.tmp"))
    assert len(partial) <= 1, partial
    if not partial:
        return "between writes"
    name = partial[0].name[:-len(".tmp")]
    kind = f"copy to {name}" if name in ("checkpoint_best.pt", "checkpoint_last.pt") else \
        "first file"
    return f"{kind}, {'part-written' if is_truncated_checkpoint(partial[0]) else 'not renamed'}"


@pytest.mark.slow
def test_kills_during_checkpoint_writes_leave_complete_checkpoints_and_resume_exactly(
        fresh_cli, never_killed, tiny_data_bin, tmp_path):
    reference_dir, first_files, reference_states = never_killed
    folder = CheckedFolder(reference_states)
    save = tmp_path / "save"

    # The plan: which save, which of its files (checkpoint_best.pt only where that save wrote
    # one: where its validation loss was the best so far), how far into the file.
    rng = random.Random(KILL_SEED)
    plan = []
    for update in sorted(rng.sample(range(1, KILL_UPDATES), KILLS)):
        state = reference_states[update]
        files = [first_files[update], "checkpoint_last.pt"]
        files += ["checkpoint_best.pt"] if state["val_loss"] == state["best"] else []
        plan.append((update, rng.choice(files), rng.random()))
    landings, last_update = [], 0
    for i, (update, target, fraction) in enumerate(plan):
        log = tmp_path / f"killed_{i}.log"
        left_over = sorted(save.glob("*.tmp")) if save.exists() else []
        size = (reference_dir / first_files[update]).stat().st_size
        pid = fresh_cli.start("fairseq-train", [tiny_data_bin, *KILL_RUN, "--save-dir", save], log)
        try:
            kill_inside_a_write(pid, log, save / f"{target}.tmp", max(1, int(fraction * size)),
                                update)
        finally:
            status = fresh_cli.wait()
        output = log.read_text()
        assert status == -signal.SIGKILL, f"run {i} ended with {status}:\n{output[-3000:]}"
        # It resumed from the checkpoint_last.pt the kill before left, and removed its .tmp.
        assert [int(u) for u in LOADED_LINE.findall(output)] == (
            [last_update] if last_update else []), output[-3000:]
        for partial in left_over:
            assert f"removing {partial}, left by an interrupted checkpoint write" in output
        landings.append(landed_in(save))
        # Only complete checkpoints, each equal to the never-killed run's of its update.
        updates = folder.check(save)
        last_update = updates.get("checkpoint_last.pt", 0)
        assert last_update >= update - 1, (update, updates)  # the save before is whole

    # The same command again finishes the run: the files are the never-killed run's, every one
    # equal to it, and nothing partial is left.
    output = fresh_cli.run("fairseq-train", [tiny_data_bin, *KILL_RUN, "--save-dir", save],
                        tmp_path / "finished.log")
    assert [int(u) for u in LOADED_LINE.findall(output)] == [last_update]
    updates = folder.check(save)
    assert updates["checkpoint_last.pt"] == KILL_UPDATES
    assert sorted(updates) == sorted(p.name for p in reference_dir.glob("*.pt"))
    assert not list(save.glob("*.tmp"))

    summary = {where: landings.count(where) for where in sorted(set(landings))}
    inside = len(landings) - landings.count("between writes")
    print(f"\n{len(landings)} kills, {inside} inside a checkpoint write: {summary}; all "
          f"{len(landings) + 1} runs resumed to the never-killed run's checkpoints")
    # The kills did land inside writes, of the first file and of both copies.
    assert inside >= KILLS // 2, summary
    for kind in ("first file", "copy to checkpoint_best.pt", "copy to checkpoint_last.pt"):
        assert any(where.startswith(kind) for where in landings), summary


# --- truncated checkpoints --------------------------------------------------------------------

def truncated_message(path, complete=None, flag=None):
    """fairseq's (and fairseq-ext's) one line for the truncated checkpoint ``path``."""
    message = (f"checkpoint {path} is truncated ({path.stat().st_size} bytes: its write or "
               f"copy was cut short); ")
    if complete is None:
        return message + f"{path.parent} holds no complete checkpoint"
    message += f"the newest complete checkpoint in {path.parent} is {complete.name}"
    return message + (f": to continue from it, use {flag} {complete}" if flag else "")


@pytest.mark.slow
def test_truncated_checkpoint_last_is_one_line_naming_the_checkpoint_to_use(
        fresh_cli, never_killed, tiny_data_bin, tmp_path):
    """A save directory of an older run (fairseq 0.12's in-place copy killed): complete
    checkpoints of updates 3 and 4, a truncated checkpoint_1_5.pt (an interrupted cp, say), and
    checkpoint_last.pt truncated. fairseq-train and fairseq-validate stop with one line, not a
    traceback; following it resumes exactly."""
    reference_dir, _, reference_states = never_killed
    save = tmp_path / "save"
    save.mkdir()
    for name in ("checkpoint_1_3.pt", "checkpoint_1_4.pt"):
        (save / name).write_bytes((reference_dir / name).read_bytes())
    fifth = (reference_dir / "checkpoint_1_5.pt").read_bytes()
    (save / "checkpoint_1_5.pt").write_bytes(fifth[:len(fifth) // 2])
    last = save / "checkpoint_last.pt"
    last.write_bytes(fifth[:PARTIAL_BYTES])
    complete = save / "checkpoint_1_4.pt"

    commands = [  # side by side, as the user runs them
        [fairseq_cli("fairseq-train"), tiny_data_bin, *KILL_RUN, "--save-dir", save],
        [fairseq_cli("fairseq-validate"), tiny_data_bin, "--user-dir", USER_DIR, "--path", last,
         "--task", "masked_lm", "--cpu", "--num-workers", "0", "--batch-size", "8"],
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        train, validate = pool.map(lambda args: run_cli(args, env=ONE_THREAD, check=False),
                                   commands)
    for proc, expected in (
            (train, "fairseq-train: error: " + truncated_message(last, complete, "--restore-file")),
            (validate, "fairseq-validate: error: " + truncated_message(last, complete))):
        output = proc.stdout + proc.stderr
        assert proc.returncode == 1, output[-3000:]
        assert proc.stderr.strip().splitlines()[-1] == expected, output[-3000:]
        assert "Traceback" not in output, output[-3000:]

    # As it says: --restore-file checkpoint_1_4.pt continues the run exactly.
    output = fresh_cli.run("fairseq-train", [tiny_data_bin, *KILL_RUN, "--save-dir", save,
                                          "--restore-file", complete, "--max-update", "6"],
                        tmp_path / "restored.log")
    assert [int(u) for u in LOADED_LINE.findall(output)] == [4]
    # checkpoint_best.pt is written at the saves whose validation loss is the best so far.
    best = [u for u in (5, 6) if reference_states[u]["val_loss"] == reference_states[u]["best"]]
    assert CheckedFolder(reference_states).check(save) == {
        "checkpoint_1_3.pt": 3, "checkpoint_1_4.pt": 4, "checkpoint_1_5.pt": 5,
        "checkpoint_1_6.pt": 6, "checkpoint_last.pt": 6,
        **({"checkpoint_best.pt": best[-1]} if best else {})}


@pytest.fixture
def complete_checkpoint(tmp_path):
    """A small complete torch.save file (its contents do not matter to what is tested)."""
    import torch

    path = tmp_path / "complete.pt"
    torch.save({"model": {"w": torch.arange(100000.0)}}, path)
    return path.read_bytes()


@pytest.mark.parametrize("keep", [0, 3, 100, PARTIAL_BYTES])
def test_truncated_checkpoint_names_the_file(complete_checkpoint, tmp_path, keep):
    """fairseq-ext's loader: fairseq's line, word for word (0 and 3 bytes: shorter than a zip
    signature; torch calls the 3-byte file a bad pickle)."""
    from fairseq_ext.training.checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu

    save = tmp_path / "save"
    save.mkdir()
    truncated = save / "checkpoint_last.pt"
    truncated.write_bytes(complete_checkpoint[:keep])
    with pytest.raises(CheckpointLoadError) as error:
        load_checkpoint_to_cpu(truncated)
    assert str(error.value) == truncated_message(truncated)


def test_the_newest_complete_checkpoint_is_named_in_training_order(complete_checkpoint,
                                                                   tmp_path):
    """Of the complete checkpoints beside a truncated one, the latest in training is named:
    by epoch, then updates (not by name: checkpoint_1_10 after checkpoint_1_9), and an epoch's
    end (checkpoint1.pt) after its updates; checkpoint_last/best only when no numbered one is
    whole; the same suffix (a shard's) as the truncated file."""
    from fairseq import checkpoint_utils

    def newest(name):
        with pytest.raises(checkpoint_utils.TruncatedCheckpointError) as error:
            checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / name))
        assert str(error.value).startswith(f"checkpoint {tmp_path / name} is truncated (")
        return error.value.complete_checkpoint and Path(error.value.complete_checkpoint).name

    def write(name, whole=True):
        data = complete_checkpoint if whole else complete_checkpoint[:PARTIAL_BYTES]
        (tmp_path / name).write_bytes(data)

    write("checkpoint_last.pt", whole=False)
    assert newest("checkpoint_last.pt") is None
    write("checkpoint_best.pt")
    assert newest("checkpoint_last.pt") == "checkpoint_best.pt"
    for name in ("checkpoint_1_9.pt", "checkpoint_1_10.pt", "checkpoint_1_13-shard0.pt"):
        write(name)
    write("checkpoint_2_11.pt", whole=False)
    assert newest("checkpoint_last.pt") == "checkpoint_1_10.pt"
    write("checkpoint1.pt")
    assert newest("checkpoint_last.pt") == "checkpoint1.pt"
    assert newest("checkpoint_2_11.pt") == "checkpoint1.pt"
    write("checkpoint_last-shard0.pt", whole=False)
    assert newest("checkpoint_last-shard0.pt") == "checkpoint_1_13-shard0.pt"
    # A file that is not a zip archive at all is not called truncated: torch's error stands.
    (tmp_path / "not_a_checkpoint.pt").write_text("version https://git-lfs.github.com/spec/v1")
    with pytest.raises(Exception) as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "not_a_checkpoint.pt"))
    assert not isinstance(error.value, checkpoint_utils.TruncatedCheckpointError)
