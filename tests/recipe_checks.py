"""Running the recipes in tests: their dry-run command, and the hydra twin of a demo run."""
import os
import shlex
import subprocess
from typing import Dict, List

from conftest import REPO_ROOT, fairseq_cli, run_cli


def printed_commands(output: str) -> List[List[str]]:
    """The commands a recipe printed (``+ fairseq-train ...``), as argv lists."""
    return [shlex.split(line[2:]) for line in output.splitlines() if line.startswith("+ ")]


def flag_values(command: List[str]) -> Dict[str, object]:
    """``--flag value`` pairs of a command line, the last one winning (a bare flag maps to
    True); words that are neither (the program, positional arguments) are skipped."""
    values, i = {}, 0
    while i < len(command):
        if command[i].startswith("--"):
            has_value = i + 1 < len(command) and not command[i + 1].startswith("--")
            values[command[i]] = command[i + 1] if has_value else True
            i += 2 if has_value else 1
        else:
            i += 1
    return values


def dry_run(recipe, *args, **env):
    """The fairseq-train command a recipe prints with DRY_RUN=1, on one GPU, in a clean
    environment (none of the caller's ARCH, BATCH_SIZE, ...): (argv, {flag: value or True})."""
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
             "DRY_RUN": "1", "DATA": "DATA", "NUM_GPUS": "1", "NNODES": "1", **env}
    proc = subprocess.run(["bash", str(recipe), *args], capture_output=True, text=True,
                          env=clean, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("+ "), proc.stdout
    argv = shlex.split(lines[0][2:])
    assert argv[0].endswith("fairseq-train") and argv[1] == env.get("DATA", "DATA")
    assert all(a.startswith("--") for a in argv[2:3]), argv
    flags = flag_values(argv[2:])
    return argv, flags


def hydra_demo(config_dir, data, save_dir, overrides=(), cwd=REPO_ROOT):
    """fairseq-hydra-train on a demo YAML (json log, no progress bar) with `overrides`, run in
    `cwd`."""
    return run_cli(
        [fairseq_cli("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "recipes/config" /
         config_dir, "--config-name", "demo", f"task.data={data}",
         f"checkpoint.save_dir={save_dir}", "common.log_format=json",
         "common.no_progress_bar=true", *overrides],
        cwd=cwd,
    )
