"""Checkpoints written by fairseq-train and fairseq-hydra-train load on torch >= 2.6.

The plugin allow-lists exactly the globals fairseq checkpoints contain and keeps
``weights_only=True``; these tests check both halves of that sentence.
"""
import json
import pickle
import subprocess
import sys

import pytest
import torch

import fairseq_ext
from conftest import (
    TINY_UPDATES,
    USER_DIR,
    fairseq_cli,
    json_log_records,
    run_cli,
    train_with_hydra_recipe,
    train_with_shell_recipe,
)
from fairseq_ext.training.checkpoint_loading import FAIRSEQ_CHECKPOINT_GLOBALS

ALLOWED_NAMES = {f"{g.__module__}.{g.__qualname__}" for g in FAIRSEQ_CHECKPOINT_GLOBALS}


@pytest.fixture(params=["shell", "hydra"])
def checkpoint(request, shell_trained, hydra_trained):
    save_dir, _ = shell_trained if request.param == "shell" else hydra_trained
    return save_dir / "checkpoint_last.pt"


def _globals_in_checkpoints_without_plugin(paths):
    """torch's scan of non-builtin globals, in a fresh process where nothing is allow-listed."""
    code = (
        "import json, sys, torch\n"
        "found = set()\n"
        "for p in sys.argv[1:]:\n"
        "    found |= set(torch.serialization.get_unsafe_globals_in_checkpoint(p))\n"
        "print(json.dumps(sorted(found)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_allow_list_is_exactly_what_fairseq_checkpoints_contain(shell_trained, hydra_trained):
    paths = [p for save_dir, _ in (shell_trained, hydra_trained) for p in save_dir.glob("*.pt")]
    assert len(paths) >= 4  # checkpoint_last.pt and checkpoint_best.pt of both runs
    # Nothing outside the allow-list, and nothing in it that checkpoints do not contain.
    assert _globals_in_checkpoints_without_plugin(paths) == ALLOWED_NAMES


def test_plain_torch_load_fails_without_the_plugin(checkpoint, shell_trained):
    """The failure our users would see: proves the fixture reproduces the real problem."""
    code = (
        "import sys, torch\n"
        "try:\n"
        "    torch.load(sys.argv[1], map_location='cpu')\n"
        "except Exception as e:\n"
        "    print('ERROR', e)\n"
        "else:\n"
        "    print('LOADED')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(shell_trained[0] / "checkpoint_last.pt")],
                         capture_output=True, text=True, check=True).stdout
    assert "ERROR" in out and "argparse.Namespace" in out


def test_weights_only_still_refuses_other_globals(tmp_path):
    """Importing the plugin must not turn weights_only off: arbitrary classes stay refused."""
    assert fairseq_ext  # imported: allow-list installed
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": pickle.PickleError("not a fairseq type")}, path)
    with pytest.raises(pickle.UnpicklingError, match="Unsupported global"):
        torch.load(path, map_location="cpu")


def test_load_model_ensemble_reproduces_saved_weights(checkpoint):
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    state = torch.load(checkpoint, map_location="cpu")["model"]
    loaded = model.state_dict()
    assert set(state) == set(loaded)
    for name, tensor in state.items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0)
    # and it runs: predictions at masked positions over the task's dictionary
    tokens = torch.tensor([[0, 10, 11, task.source_dictionary.index("<mask>"), 12, 2]])
    logits, _ = model(tokens)
    assert logits.shape == (1, tokens.shape[1], len(task.source_dictionary))
    assert torch.isfinite(logits).all()


def test_fairseq_validate(checkpoint, tiny_data_bin):
    proc = run_cli([
        fairseq_cli("fairseq-validate"), tiny_data_bin, "--user-dir", USER_DIR,
        "--task", "masked_lm", "--criterion", "masked_lm", "--path", checkpoint,
        "--batch-size", "8", "--cpu", "--log-format", "json",
    ])
    output = proc.stdout + proc.stderr
    assert "Unsupported global" not in output
    (record,) = json_log_records(output, key="valid_loss")
    assert 0 < float(record["valid_loss"]) < 20


def test_resume_shell_checkpoint_with_restore_file(shell_trained, tiny_data_bin, tmp_path):
    save_dir, first = shell_trained
    proc = train_with_shell_recipe(
        tiny_data_bin, tmp_path, extra_env={"TOTAL_UPDATES": str(TINY_UPDATES + 2)},
        extra_args=["--restore-file", str(save_dir / "checkpoint_last.pt")],
    )
    output = proc.stdout + proc.stderr
    assert f"@ {TINY_UPDATES} updates" in output  # "Loaded checkpoint ... (epoch N @ 6 updates)"
    updates = [int(r["num_updates"]) for r in json_log_records(output)]
    assert max(updates) == TINY_UPDATES + 2


def test_resume_hydra_checkpoint(hydra_trained, tiny_data_bin, tmp_path):
    save_dir, _ = hydra_trained
    proc = train_with_hydra_recipe(
        tiny_data_bin, tmp_path,
        extra_overrides=[f"checkpoint.restore_file={save_dir / 'checkpoint_last.pt'}",
                         f"optimization.max_update={TINY_UPDATES + 2}"],
    )
    output = proc.stdout + proc.stderr
    assert f"@ {TINY_UPDATES} updates" in output
    updates = [int(r["num_updates"]) for r in json_log_records(output)]
    assert max(updates) == TINY_UPDATES + 2
