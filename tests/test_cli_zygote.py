"""The suite's fork server of fairseq's CLIs (``tests/cli_zygote.py``): a run it serves is the run
a fresh process makes (same log, same exit status, signals and kills reach it), and what it
cannot serve exactly (no plugin in a fresh process, another copy of the plugin) it declines, so
the real console script runs."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from cli_zygote import SOCKET_ENV, decline_reason, loads_this_plugin, python_environment

from conftest import (
    REPO_ROOT,
    USER_DIR,
    cli_zygote,
    dynamo_config_overrides,
    fairseq_cli,
    json_log_records,
    restore_dynamo_config,
    search_path,
)

PLUGIN = str(USER_DIR)


@pytest.fixture
def zygote():
    """This process's fork server; the test is skipped where there is none (a GPU machine, or
    ``FAIRSEQ_EXT_TEST_ZYGOTE=0``)."""
    server = cli_zygote()
    if server is None:
        pytest.skip("no fork server here (GPU machine or FAIRSEQ_EXT_TEST_ZYGOTE=0)")
    return server


def request(cli, *args, cwd=REPO_ROOT):
    return {"cli": cli, "args": list(args), "cwd": str(cwd)}


def test_what_is_served_and_what_is_declined(tmp_path):
    link = tmp_path / "fairseq_ext"
    link.symlink_to(USER_DIR)
    copy = tmp_path / "copy" / "fairseq_ext"
    copy.mkdir(parents=True)
    (tmp_path / "with_plugin.yaml").write_text("common:\n  user_dir: ${fairseq_ext.user_dir:}\n")
    (tmp_path / "bare.yaml").write_text("common:\n  log_interval: 1\n")
    (tmp_path / "uses.py").write_text("import fairseq_ext\n")
    (tmp_path / "plain.py").write_text("import json\n")
    served = [
        request("fairseq-train", "data", "--user-dir", "fairseq_ext"),
        request("fairseq-validate", "data", f"--user-dir={PLUGIN}"),
        request("fairseq-train", "data", "--user-dir", "fairseq_ext", cwd=tmp_path),  # a link
        request("fairseq-hydra-train", "--config-dir", str(tmp_path), "--config-name",
                "with_plugin"),
        request("fairseq-preprocess", "--only-source"),
        request("python", "-m", "fairseq_ext.flops", "--arch", "roberta_base"),
        request("python", "uses.py", "x", cwd=tmp_path),
        request("python", "-m", "fairseq_cli.preprocess", "--only-source"),
        request("python", "-m", "fairseq_cli.validate", "data", "--user-dir", "fairseq_ext"),
    ]
    declined = [
        request("fairseq-train", "data"),  # a fresh process has no plugin registered
        request("fairseq-train", "data", "--user-dir", str(copy)),  # another copy of it
        request("fairseq-hydra-train", "--config-dir", str(tmp_path), "--config-name", "bare"),
        request("fairseq-hydra-train", "-m", "--config-dir", str(tmp_path), "--config-name",
                "with_plugin"),
        request("python", "-c", "import fairseq_ext"),
        request("python", "-m", "fairseq_cli.train"),
        request("python", "plain.py", cwd=tmp_path),
        request("python", "missing.py", cwd=tmp_path),
    ]
    assert [loads_this_plugin(r, PLUGIN) for r in served] == [True] * len(served)
    assert [loads_this_plugin(r, PLUGIN) for r in declined] == [False] * len(declined)


def train_args(data, save):
    return [data, "--user-dir", USER_DIR, "--task", "masked_lm", "--criterion", "masked_lm",
            "--arch", "roberta_tiny", "--tokens-per-sample", "64", "--batch-size", "8",
            "--optimizer", "adam", "--lr", "1e-3", "--max-update", "4", "--save-dir", save,
            "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--seed", "2",
            "--log-format", "json", "--log-interval", "1", "--no-progress-bar"]


def served_lines(zygote):
    with open(zygote.log) as log:
        return [line for line in log if line.startswith(("served:", "declined:"))]


@pytest.mark.slow
def test_a_served_run_logs_what_the_console_script_logs(zygote, tiny_data_bin, tmp_path):
    """The same fairseq-train through the shim and through the real console script: the same
    training records and checkpoints' losses, the same lines but for timings, and the zygote's
    log says it served the one and never saw the other."""
    env = dict(os.environ, PATH=search_path(), OMP_NUM_THREADS="1")
    outputs = {}
    for real in (False, True):
        before = len(served_lines(zygote))
        proc = subprocess.run([fairseq_cli("fairseq-train", real=real),
                               *map(str, train_args(tiny_data_bin, tmp_path / str(real)))],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[real] = proc.stdout
        seen = served_lines(zygote)[before:]
        assert seen == ([] if real else [seen[0]]) and (real or seen[0].startswith("served: "))
    timing = ("wps", "ups", "wall", "gb_free")
    records = {real: [{k: v for k, v in record.items() if not k.endswith(timing)}
                      for record in json_log_records(text)] for real, text in outputs.items()}
    assert records[False] == records[True] and len(records[True]) >= 4

    def lines(real):  # each line's logger and message, numbers (timings) and save dir masked
        text = outputs[real].replace(str(tmp_path / str(real)), "SAVE_DIR")
        return [re.sub(r"\d+(\.\d+)?", "#", line.split(" | ", 3)[2:4][-1])
                for line in text.splitlines() if line.count(" | ") >= 3 and "{" not in line]

    assert lines(False) == lines(True) and len(lines(True)) > 10


SLEEPER = """import os, signal, sys, time
import fairseq_ext  # noqa: F401
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
if sys.argv[2] == "exit":
    sys.exit(int(sys.argv[3]))
if sys.argv[2] == "raise":
    raise ValueError("raised on purpose")
time.sleep(120)
"""


def start_sleeper(zygote, tmp_path, *args):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pid_file = tmp_path / f"pid-{'-'.join(args)}"
    shim = os.path.join(zygote.shims, "python")
    proc = subprocess.Popen([shim, str(script), str(pid_file), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()):
        assert proc.poll() is None or args[0] != "sleep", proc.communicate()
        if proc.poll() is not None:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc, pid_file


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.slow
def test_exit_status_signals_and_kills_reach_the_served_run(zygote, tmp_path):
    proc, _ = start_sleeper(zygote, tmp_path, "exit", "3")
    assert proc.wait(timeout=60) == 3
    proc, _ = start_sleeper(zygote, tmp_path, "raise")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "ValueError: raised on purpose" in err
    # a signal to the shim is the run's: it dies of it, and the shim's status says so
    proc, pid_file = start_sleeper(zygote, tmp_path, "sleep", "term")
    run = int(pid_file.read_text())
    assert run != proc.pid and alive(run)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert not alive(run)
    # a shim killed outright takes its run with it
    proc, pid_file = start_sleeper(zygote, tmp_path, "sleep", "kill")
    run = int(pid_file.read_text())
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while alive(run):
        assert time.monotonic() < deadline, "the run outlived its killed shim"
        time.sleep(0.05)
    served = [line for line in served_lines(zygote) if "sleeper.py" in line]
    assert len(served) == 4 and all(line.startswith("served: ") for line in served)


def test_the_shim_runs_the_real_script_without_a_server(tmp_path):
    """Outside the suite's server (no socket named), a shim is the real console script."""
    from cli_zygote import write_shims

    real = tmp_path / "real"
    real.mkdir()
    (real / "fairseq-train").write_text("#!/bin/sh\necho real \"$@\"\n")
    (real / "fairseq-train").chmod(0o755)
    write_shims(str(tmp_path / "bin"), str(real))
    env = {k: v for k, v in os.environ.items() if k != "FAIRSEQ_EXT_TEST_CLI_SOCKET"}
    proc = subprocess.run([str(tmp_path / "bin" / "fairseq-train"), "a", "b c"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "real a b c\n")


# --- parity with a fresh process: each check with a planted difference ------------------------

def test_a_request_whose_python_variables_differ_is_declined(tmp_path):
    """The PYTHON* variables a fresh interpreter reads as it starts must be the server's: any
    that differs, is missing or is extra declines the request."""
    server = {"PYTHONPATH": "/a", "PYTHONHASHSEED": "0"}
    fresh = request("python", "-m", "fairseq_ext.flops")
    for env, reason in [
        (dict(server, HOME="/elsewhere", OMP_NUM_THREADS="3"), None),
        (dict(server, PYTHONPATH="/a:/b"), "PYTHONPATH not the server's"),
        ({"PYTHONPATH": "/a"}, "PYTHONHASHSEED not the server's"),
        (dict(server, PYTHONWARNINGS="ignore", PYTHONHASHSEED="1"),
         "PYTHONHASHSEED, PYTHONWARNINGS not the server's"),
    ]:
        assert decline_reason(dict(fresh, env=env), PLUGIN, server) == reason
    assert "plugin" in decline_reason(dict(request("fairseq-train", "data"), env=server), PLUGIN,
                                      server)
    assert python_environment({"PYTHONX": "1", "PATH": "/bin", "MYPYTHON": "2"}) == {"PYTHONX": "1"}


PROBE = """import atexit, os, sys, threading, time
if False:  # the server serves a script that imports the plugin; not imported: fresh runs are quick
    import fairseq_ext  # noqa: F401
what = sys.argv[1]
if what == "hash":
    print(hash("x"))
elif what == "path":
    import planted_module
    print(planted_module.WHERE)
elif what == "thread":
    def late():
        time.sleep(float(sys.argv[2]))
        print("thread done", flush=True)
    threading.Thread(target=late).start()  # not a daemon: the process waits for it
    atexit.register(lambda: print("atexit", flush=True))
    print("main done", flush=True)
"""


def run_probe(zygote, tmp_path, *args, served=True, **env):
    """(completed process, the server's log lines of it) of the probe script run through the
    python shim (``served``) or by this interpreter, with ``env`` added to this process's."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    before = len(served_lines(zygote))
    python = os.path.join(zygote.shims, "python") if served else sys.executable
    proc = subprocess.run([python, str(script), *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **env))
    return proc, [line for line in served_lines(zygote)[before:] if "probe.py" in line]


@pytest.mark.slow
def test_a_different_pythonpath_runs_fresh_and_sees_its_path(zygote, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "planted_module.py").write_text("WHERE = 'planted on PYTHONPATH'\n")
    path = os.pathsep.join(filter(None, [str(extra), os.environ.get("PYTHONPATH")]))
    proc, lines = run_probe(zygote, tmp_path, "path", PYTHONPATH=path)
    assert (proc.returncode, proc.stdout) == (0, "planted on PYTHONPATH\n"), proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("declined: python ")
    assert lines[0].rstrip().endswith("[PYTHONPATH not the server's]")
    # without it, served: the module is not found, as in a fresh process without it
    proc, lines = run_probe(zygote, tmp_path, "path")
    assert proc.returncode == 1 and "No module named 'planted_module'" in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("served: python ")


@pytest.mark.slow
def test_a_different_hash_seed_runs_fresh_with_its_hashes(zygote, tmp_path):
    hashes = {}
    for seed in ("1", "2"):
        proc, lines = run_probe(zygote, tmp_path, "hash", PYTHONHASHSEED=seed)
        real, _ = run_probe(zygote, tmp_path, "hash", served=False, PYTHONHASHSEED=seed)
        assert proc.returncode == 0 and proc.stdout == real.stdout, proc.stderr[-3000:]
        assert len(lines) == 1 and "[PYTHONHASHSEED not the server's]" in lines[0]
        hashes[seed] = proc.stdout
    assert hashes["1"] != hashes["2"]
    # The server's own seed: served runs share it (why the determinism tests run real
    # processes), where two fresh processes without a seed have two.
    served = [run_probe(zygote, tmp_path, "hash") for _ in range(2)]
    assert all(lines[0].startswith("served: ") for _, lines in served)
    assert served[0][0].stdout == served[1][0].stdout
    if "PYTHONHASHSEED" not in os.environ:
        real = [run_probe(zygote, tmp_path, "hash", served=False)[0].stdout for _ in range(2)]
        assert real[0] != real[1]


@pytest.mark.slow
def test_a_served_run_waits_for_its_non_daemon_thread_as_a_fresh_one_does(zygote, tmp_path):
    """A thread that is not a daemon keeps a process alive after its main code ends (and
    before its atexit functions): the served run too, however long it takes."""
    outputs = []
    for served in (True, False):
        start = time.monotonic()
        proc, lines = run_probe(zygote, tmp_path, "thread", "1.5", served=served)
        assert time.monotonic() - start >= 1.5
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(lines) == (1 if served else 0) and (not served or lines[0].startswith("served"))
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] == "main done\nthread done\natexit\n"


def test_a_dynamo_config_change_is_set_back_for_the_next_test():
    """What conftest.dynamo_config_restored does after each test: the patched Trainer's
    --torch-compile setup raises dynamo's limits for the whole process; they are set back."""
    import argparse

    import torch
    from fairseq.trainer import Trainer
    from torch._dynamo import config

    before = dynamo_config_overrides()
    limit, capture = config.recompile_limit, config.capture_dynamic_output_shape_ops
    fake = argparse.Namespace(
        cfg=argparse.Namespace(
            common=argparse.Namespace(torch_compile=True, torch_compile_mode=None, tpu=False,
                                      torch_compile_backend="eager"),
            distributed_training=argparse.Namespace(ddp_backend="legacy_ddp",
                                                    pipeline_model_parallel=False)),
        device=torch.device("cpu"), _model=torch.nn.Linear(2, 2))
    Trainer._compile_model(fake)  # compiles lazily: nothing compiled here
    assert (config.recompile_limit, config.capture_dynamic_output_shape_ops) == (
        max(limit, 64), True)
    assert limit < 64 and not capture  # (so the restore below does change them)
    config.suppress_errors = not config.suppress_errors  # and a setting set by hand
    assert sorted(restore_dynamo_config(before)) == [
        "capture_dynamic_output_shape_ops", "recompile_limit", "suppress_errors"]
    assert (config.recompile_limit, config.capture_dynamic_output_shape_ops) == (limit, capture)
    assert dynamo_config_overrides() == before and restore_dynamo_config(before) == []
    # from a process where dynamo was not imported yet ({}: nothing set): back to the defaults
    config.recompile_limit = limit + 1
    restore_dynamo_config({})
    assert config.recompile_limit == config._config["recompile_limit"].default
    restore_dynamo_config(before)
    assert dynamo_config_overrides() == before


@pytest.mark.slow
@pytest.mark.unserved
def test_an_unserved_test_runs_real_processes(zygote, tmp_path):
    assert SOCKET_ENV not in os.environ
    proc, lines = run_probe(zygote, tmp_path, "hash")
    assert proc.returncode == 0 and lines == []  # the shim ran the real interpreter
