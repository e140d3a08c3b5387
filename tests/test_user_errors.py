"""A new user's first hour: the mistakes fairseq reports badly or not at all, each
run as the user runs it, and the message that says what to change."""
import argparse
import os
import sys

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY

import fairseq_ext  # noqa: F401  (registers our archs)
from conftest import (
    REPO_ROOT,
    TINY_HYDRA_OVERRIDES,
    USER_DIR,
    fairseq_cli,
    json_log_records,
    run_cli,
)
from fairseq_ext.cli.errors import TRACEBACK_VARIABLE
from fairseq_ext.flops import cli as flops_cli
from fairseq_ext.models import validation
from fairseq_ext.training.checkpoint_loading import (
    CheckpointLoadError,
    allow_fairseq_checkpoint_globals,
    checkpoint_error_message,
    load_checkpoint_to_cpu,
)
from fairseq_ext_lab import demo

#: One arch of each family fairseq-ext registers.
OUR_ARCHS = ("roberta_tiny", "roberta_large_prenorm", "bert_orig_tiny", "bert_rab_tiny",
             "swishrnn_bert_tiny", "3ml_self_tiny", "3ml_cross_tiny")
TRAIN_TINY = ["--tokens-per-sample", "64", "--batch-size", "8", "--max-update", "2",
              "--optimizer", "adam", "--lr", "1e-4", "--cpu", "--num-workers", "0",
              "--no-progress-bar"]


def last_line(output):
    return output.strip().splitlines()[-1]


def one_line(program, message):
    """The line a fairseq tool prints for an error of ours (fairseq_ext.cli.errors)."""
    return f"{program}: error: {message} ({TRACEBACK_VARIABLE}=1 prints the traceback)"


def fairseq_train_args(**flags):
    """The Namespace fields an arch function sees under ``fairseq-train``."""
    return argparse.Namespace(**{"task": "masked_lm", "criterion": "masked_lm_categories",
                                 "mask_prob": 0.15, "leave_unmasked_prob": 0.1,
                                 "random_token_prob": 0.1, **flags})


# --- 1. a forgotten --criterion ------------------------------------------------------------------

@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_our_archs_refuse_cross_entropy_on_masked_lm(arch):
    with pytest.raises(ValueError, match="--criterion masked_lm_categories"):
        ARCH_CONFIG_REGISTRY[arch](fairseq_train_args(criterion="cross_entropy"))
    ARCH_CONFIG_REGISTRY[arch](fairseq_train_args())  # our criterion: accepted
    ARCH_CONFIG_REGISTRY[arch](fairseq_train_args(task="sentence_prediction",
                                                  criterion="cross_entropy"))
    # fairseq's own archs are not ours to police
    ARCH_CONFIG_REGISTRY["roberta_base"](fairseq_train_args(criterion="cross_entropy"))


@pytest.mark.parametrize("arch", ["roberta_tiny", "3ml_self_tiny"])
def test_fairseq_train_without_criterion_stops_before_training(arch, tiny_data_bin, tmp_path):
    """The user's command, --criterion forgotten: fairseq-train would log ppl 3.8 at init."""
    proc = run_cli([fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR,
                    "--task", "masked_lm", "--arch", arch, "--save-dir", tmp_path / "ckpt",
                    *TRAIN_TINY], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert last_line(proc.stderr).startswith(
        f"fairseq-train: error: --arch {arch} with --task masked_lm and --criterion "
        "cross_entropy (fairseq-train's default when --criterion is not given)")
    assert "--criterion masked_lm_categories" in last_line(proc.stderr)
    assert not (tmp_path / "ckpt").exists()


def test_hydra_config_with_cross_entropy_stops(tiny_data_bin, tmp_path):
    """Under fairseq-hydra-train the arch sees the criterion through its config's parent."""
    config = (REPO_ROOT / "recipes/config/roberta/demo.yaml").read_text()
    config = "\n".join("criterion: cross_entropy" if line.startswith("criterion:") else line
                       for line in config.splitlines())
    (tmp_path / "ce.yaml").write_text(config)
    proc = run_cli([fairseq_cli("fairseq-hydra-train"), "--config-dir", tmp_path,
                    "--config-name", "ce", f"task.data={tiny_data_bin}",
                    f"checkpoint.save_dir={tmp_path / 'ckpt'}", *TINY_HYDRA_OVERRIDES],
                   cwd=REPO_ROOT, check=False)
    assert proc.returncode != 0
    assert "criterion: masked_lm_categories" in proc.stdout + proc.stderr
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def validate_cmd(data, checkpoint, *flags):
    return [fairseq_cli("fairseq-validate"), data, "--user-dir", USER_DIR, "--task", "masked_lm",
            "--path", checkpoint, "--batch-size", "8", "--cpu", "--log-format", "json", *flags]


def test_validate_says_criterion_is_ignored_and_the_hint_works(shell_trained, tiny_data_bin):
    """The demo recipe trains with masked_lm_flops; fairseq-validate --criterion masked_lm
    scores with masked_lm_flops anyway (per-category metrics and all)."""
    checkpoint = shell_trained[0] / "checkpoint_last.pt"
    proc = run_cli(validate_cmd(tiny_data_bin, checkpoint, "--criterion", "masked_lm"))
    output = proc.stdout + proc.stderr
    assert ("fairseq-validate ignores --criterion masked_lm: it scores with the criterion saved "
            "in the checkpoint, masked_lm_flops") in output
    (record,) = json_log_records(output, key="valid_loss")
    assert "valid_loss_mask" in record  # masked_lm_flops did the scoring
    override = validation.criterion_override("masked_lm")
    assert override in output
    # the hint, as printed: scores with fairseq's masked_lm, the same loss, no per-category ones
    proc = run_cli(validate_cmd(tiny_data_bin, checkpoint, "--criterion", "masked_lm",
                                "--model-overrides", "{'criterion': {'_name': 'masked_lm'}}"))
    output = proc.stdout + proc.stderr
    assert "ignores --criterion" not in output
    (overridden,) = json_log_records(output, key="valid_loss")
    assert "valid_loss_mask" not in overridden
    assert overridden["valid_loss"] == record["valid_loss"]


def test_validate_names_the_saved_criterion_of_a_hydra_checkpoint(hydra_trained, tiny_data_bin):
    proc = run_cli(validate_cmd(tiny_data_bin, hydra_trained[0] / "checkpoint_last.pt",
                                "--criterion", "masked_lm_categories"))
    output = proc.stdout + proc.stderr
    assert output.count("fairseq-validate ignores --criterion masked_lm_categories: it scores "
                        "with the criterion saved in the checkpoint, masked_lm_flops") == 1


@pytest.mark.parametrize("argv, expected", [
    (["/venv/bin/fairseq-validate", "data", "--criterion", "masked_lm"], "masked_lm"),
    (["/venv/bin/fairseq-validate", "data", "--criterion=masked_lm_flops"], "masked_lm_flops"),
    (["/venv/lib/python3.11/site-packages/fairseq_cli/validate.py", "--criterion", "x"], "x"),
    (["/venv/bin/fairseq-validate", "data", "--path", "c.pt"], None),
    (["/venv/bin/fairseq-train", "data", "--criterion", "masked_lm"], None),
    (["/work/validate.py", "--criterion", "masked_lm"], None),
    ([], None),
])
def test_the_criterion_of_a_fairseq_validate_command_line(argv, expected):
    arguments = validation.fairseq_validate_arguments(argv)
    assert (validation.criterion_flag(arguments) if arguments is not None else None) == expected


# --- 2. errors that point at the fix -------------------------------------------------------------

@pytest.mark.parametrize("arch", OUR_ARCHS)
@pytest.mark.parametrize("flags, message", [
    ({"mask_prob": 1.5}, r"--mask-prob must be in \(0, 1\); got 1.5"),
    ({"mask_prob": 0.0}, r"--mask-prob must be in \(0, 1\); got 0.0"),
    ({"leave_unmasked_prob": 0.6, "random_token_prob": 0.6}, "--leave-unmasked-prob and"),
    ({"mask_multiple_length": 0}, "--mask-multiple-length must be at least 1"),
])
def test_our_archs_check_masking_when_the_config_is_read(arch, flags, message):
    with pytest.raises(ValueError, match=message):
        ARCH_CONFIG_REGISTRY[arch](fairseq_train_args(**flags))


def test_fairseq_train_mask_prob_above_one_on_roberta_tiny(tiny_data_bin, tmp_path):
    """fairseq's MaskTokensDataset would stop with a bare AssertionError."""
    proc = run_cli([fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR,
                    "--task", "masked_lm", "--criterion", "masked_lm_categories",
                    "--arch", "roberta_tiny", "--mask-prob", "1.5",
                    "--save-dir", tmp_path / "ckpt", *TRAIN_TINY], check=False)
    assert proc.returncode == 1
    assert last_line(proc.stderr) == one_line("fairseq-train", "--mask-prob must be in (0, 1); got 1.5")
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr


@pytest.fixture
def saved_checkpoint(tmp_path):
    """A checkpoint shaped as fairseq-train writes it (a Namespace model config)."""
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"cfg": {"model": argparse.Namespace(arch="roberta_tiny", _name="roberta_tiny")},
                "model": {"w": torch.arange(100000.0)}, "optimizer_history": [],
                "extra_state": {}}, path)
    return path


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_truncated_checkpoint_is_named_with_its_size(saved_checkpoint, keep):
    data = saved_checkpoint.read_bytes()
    truncated = saved_checkpoint.with_name("truncated.pt")
    truncated.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(CheckpointLoadError) as error:
        load_checkpoint_to_cpu(truncated)
    # fairseq's own line (our patch's item 6), naming the complete checkpoint beside it.
    assert str(error.value) == (
        f"checkpoint {truncated} is truncated ({truncated.stat().st_size} bytes: its write or "
        f"copy was cut short); the newest complete checkpoint in {truncated.parent} is "
        f"{saved_checkpoint.name}")


def test_a_file_that_is_not_a_zip_gives_the_same_advice(tmp_path):
    """torch's own error here is ``KeyError: 101``."""
    path = tmp_path / "checkpoint_last.pt"
    path.write_text("hello world")
    with pytest.raises(CheckpointLoadError, match=r"truncated or corrupt \(11 bytes; KeyError: 101\)"):
        load_checkpoint_to_cpu(path)


def test_checkpoint_without_the_allow_list_names_user_dir(saved_checkpoint):
    allowed = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        with pytest.raises(Exception) as error:  # what fairseq-validate without --user-dir hits
            torch.load(saved_checkpoint, weights_only=True)
    finally:
        torch.serialization.add_safe_globals(allowed)
        allow_fairseq_checkpoint_globals()
    message = checkpoint_error_message(saved_checkpoint, error.value)
    assert "add `--user-dir fairseq_ext`" in message and "import fairseq_ext" in message


@pytest.mark.slow
def test_export_of_a_truncated_checkpoint(saved_checkpoint, tmp_path):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(saved_checkpoint.read_bytes()[:50000])
    proc = run_cli([sys.executable, REPO_ROOT / "scripts/export_encoder.py", truncated,
                    tmp_path / "out.pt"], check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("export_encoder.py: error: ")
    assert line.endswith(f"it is truncated (50000 bytes: its write or copy was cut short); "
                         f"the newest complete checkpoint in {tmp_path} is checkpoint_last.pt")


def test_flops_calculator_suggests_the_arch_meant(capsys):
    assert flops_cli.main(["--arch", "3ml_self_bse"]) == 2
    err = capsys.readouterr().err
    assert "unknown arch '3ml_self_bse'" in err and "did you mean 3ml_self_base" in err


def test_demo_data_without_dict(tmp_path):
    with pytest.raises(SystemExit, match=f"--data {tmp_path} has no dict.txt: point --data at a "
                                         "fairseq data-bin"):
        demo.main(["--data", str(tmp_path), "--runs-dir", str(tmp_path / "runs")])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("recipe", ["recipes/roberta/demo.sh", "recipes/3ml/demo.sh",
                                    "recipes/swishrnn/demo.sh"])
def test_recipe_with_a_wrong_data_path_stops_before_fairseq(recipe, tmp_path):
    """DRY_RUN off; a stand-in fairseq-train records whether it was started."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    started = tmp_path / "fairseq-train-started"
    (fake_bin / "fairseq-train").write_text(f"#!/bin/sh\ntouch {started}\n")
    (fake_bin / "fairseq-train").chmod(0o755)
    data = tmp_path / "not-a-data-bin"
    data.mkdir()
    proc = run_cli([REPO_ROOT / recipe], check=False, env={
        "DATA": str(data), "SAVE_DIR": str(tmp_path / "ckpt"), "FAIRSEQ_BIN": str(fake_bin),
        "DRY_RUN": "0", "NUM_GPUS": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: DATA={data} has no dict.txt: run scripts/prepare_corpus.sh (or make demo) first, "
        "or point DATA at a fairseq data-bin")
    assert not started.exists() and not (tmp_path / "ckpt").exists()
    # the same recipe starts fairseq-train once DATA is a data-bin
    (data / "dict.txt").write_text("the 1\n")
    run_cli([REPO_ROOT / recipe], env={"DATA": str(data), "SAVE_DIR": str(tmp_path / "ckpt"),
                                       "FAIRSEQ_BIN": str(fake_bin), "NUM_GPUS": "1"})
    assert started.exists()


# --- 3. wrong data for a checkpoint, empty validation set, no plugin, no data ----------------------

#: 1-update runs of one model of each kind whose loading differs: fairseq's own roberta (archs
#: roberta_*, bert_orig_*), a RoBERTa subclass of ours (3ML, BERT-rab, SwishRNN-BERT) and
#: bidirectional_lm.
ONE_UPDATE = {
    "roberta_tiny": ["--task", "masked_lm", "--criterion", "masked_lm_flops",
                     "--arch", "roberta_tiny", "--batch-size", "4"],
    "3ml_self_tiny": ["--task", "masked_lm", "--criterion", "masked_lm_flops",
                      "--arch", "3ml_self_tiny", "--batch-size", "4"],
    "bidir_lm_tiny": ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm",
                      "--arch", "bidir_lm_tiny", "--max-tokens", "128"],
}
TRAIN_ONE = ["--user-dir", USER_DIR, "--tokens-per-sample", "32", "--optimizer", "adam",
             "--lr", "1e-4", "--max-update", "1", "--cpu", "--num-workers", "0",
             "--no-progress-bar"]


def validate_args(arch, data, checkpoint):
    task = ONE_UPDATE[arch][:2]
    mode = ["--eval-mode", "full_doc_ppl"] if arch == "bidir_lm_tiny" else []
    return [data, "--user-dir", USER_DIR, *task, *mode, "--path", checkpoint,
            "--batch-size", "4", "--cpu", "--num-workers", "0"]


@pytest.fixture(scope="module")
def one_update(served_cli, tiny_data_bin, tmp_path_factory):
    """{arch: checkpoint_last.pt after one update on tiny_data_bin}."""
    root = tmp_path_factory.mktemp("one_update")
    checkpoints = {}
    for arch, flags in ONE_UPDATE.items():
        served_cli.run("fairseq-train", [tiny_data_bin, *flags, *TRAIN_ONE, "--disable-validation",
                                     "--save-dir", root / arch], root / f"{arch}.log")
        checkpoints[arch] = root / arch / "checkpoint_last.pt"
    return checkpoints


def copy_data_bin(source, dest, keep_dict_lines=None, empty_valid=False):
    """A copy of a data-bin with its dictionary cut to its first ``keep_dict_lines`` entries
    (another dictionary), or with an empty valid split (fairseq-preprocess of an empty file)."""
    import shutil

    from fairseq.data import indexed_dataset

    shutil.copytree(source, dest)
    if keep_dict_lines is not None:
        lines = (dest / "dict.txt").read_text().splitlines()[:keep_dict_lines]
        (dest / "dict.txt").write_text("\n".join(lines) + "\n")
    if empty_valid:
        builder = indexed_dataset.make_builder(str(dest / "valid.bin"), impl="mmap",
                                               vocab_size=100)
        builder.finalize(str(dest / "valid.idx"))
        assert (dest / "valid.bin").stat().st_size == 0
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("arch", ONE_UPDATE)
def test_checkpoint_on_a_data_bin_with_another_dictionary(arch, one_update, served_cli, tiny_data_bin,
                                                          tmp_path):
    """fairseq-validate and fairseq-train --restore-file: our models name the dictionary and
    both vocabulary sizes in one line; fairseq's roberta keeps torch's size-mismatch dump."""
    other = copy_data_bin(tiny_data_bin, tmp_path / "other", keep_dict_lines=40)
    checkpoint = one_update[arch]
    embedding = next(t for k, t in torch.load(checkpoint)["model"].items()
                     if k.endswith("embed_tokens.weight"))
    trained_dict = len((tiny_data_bin / "dict.txt").read_text().splitlines())
    # <s> <pad> </s> <unk> and <mask> besides dict.txt's entries
    assert embedding.shape[0] == trained_dict + 5
    validate = served_cli.run("fairseq-validate", validate_args(arch, other, checkpoint),
                          tmp_path / "validate.log", check=False)
    restore = served_cli.run("fairseq-train", [other, *ONE_UPDATE[arch], *TRAIN_ONE,
                                           "--max-update", "2", "--restore-file", checkpoint,
                                           "--save-dir", tmp_path / "ckpt"],
                         tmp_path / "restore.log", check=False)
    if arch == "roberta_tiny":  # fairseq's own model: torch's message, which says the sizes
        ours = None
        theirs = (f"size mismatch for encoder.sentence_encoder.embed_tokens.weight: copying a "
                  f"param with shape torch.Size([{trained_dict + 5}, 64]) from checkpoint, the "
                  f"shape in current model is torch.Size([45, 64])")
    else:
        ours = (f"the checkpoint was trained with a dictionary of {trained_dict + 5} symbols, "
                f"but the dictionary {other}/dict.txt gives 45 (")
    if ours:  # one line each; fairseq-train's wrapper exception prints as the error it wraps
        for program, output in (("fairseq-validate", validate), ("fairseq-train", restore)):
            assert "Traceback" not in output, output[-3000:]
            assert last_line(output).startswith(f"{program}: error: {ours}"), output[-3000:]
            assert "run it on the data-bin it was trained on" in last_line(output)
        return
    for output in (validate, restore):
        assert ("Traceback" in output) and theirs in output, output[-3000:]
    # fairseq-train adds the file it was loading
    assert last_line(restore) == (f"Exception: Cannot load model parameters from checkpoint "
                                  f"{checkpoint}; please ensure that the architectures match.")


EMPTY_VALID = ("the valid split of {data} is empty ({data}/valid.bin has 0 bytes): "
               "add documents to it (scripts/prepare_corpus.sh --valid-fraction), validate on "
               "another split (--valid-subset), or train without validation "
               "(--disable-validation)")


@pytest.mark.slow
def test_empty_validation_set(one_update, served_cli, tiny_data_bin, tmp_path):
    """fairseq would stop in np.memmap with 'cannot mmap an empty file'. masked_lm runs are
    stopped while fairseq reads the flags, before anything is written."""
    data = copy_data_bin(tiny_data_bin, tmp_path / "data", empty_valid=True)
    expected = EMPTY_VALID.format(data=data)
    for arch in ("3ml_self_tiny", "bidir_lm_tiny"):
        output = served_cli.run("fairseq-train", [data, *ONE_UPDATE[arch], *TRAIN_ONE,
                                              "--save-dir", tmp_path / arch],
                            tmp_path / f"train-{arch}.log", check=False)
        assert last_line(output) == one_line("fairseq-train", expected), output[-3000:]
        assert "cannot mmap" not in output and "Traceback" not in output
        assert arch == "bidir_lm_tiny" or not (tmp_path / arch).exists()
        output = served_cli.run("fairseq-validate", validate_args(arch, data, one_update[arch]),
                            tmp_path / f"validate-{arch}.log", check=False)
        assert last_line(output) == one_line("fairseq-validate", expected), output[-3000:]
    # the fix it offers works: training without validation runs
    served_cli.run("fairseq-train", [data, *ONE_UPDATE["roberta_tiny"], *TRAIN_ONE,
                                 "--disable-validation", "--save-dir", tmp_path / "ok"],
               tmp_path / "ok.log")
    assert (tmp_path / "ok" / "checkpoint_last.pt").is_file()


@pytest.mark.slow
def test_data_path_that_does_not_exist(one_update, served_cli, tmp_path):
    """One line from our bidirectional_lm task, and from our archs on fairseq's masked_lm under
    fairseq-train (checked when the config is read). fairseq-validate sets fairseq's masked_lm
    task up (reading dict.txt) before it builds the model, so that one stays fairseq's
    FileNotFoundError at the end of a traceback, as docs/troubleshooting.md lists it."""
    missing = tmp_path / "no-such-data-bin"
    expected = (f"the data-bin {missing} does not exist: check the path (the positional DATA "
                "argument), or make it with scripts/prepare_corpus.sh")
    for arch in ("roberta_tiny", "bidir_lm_tiny"):
        train = served_cli.run("fairseq-train", [missing, *ONE_UPDATE[arch], *TRAIN_ONE,
                                             "--save-dir", tmp_path / arch],
                           tmp_path / f"train-{arch}.log", check=False)
        validate = served_cli.run("fairseq-validate", validate_args(arch, missing, one_update[arch]),
                              tmp_path / f"validate-{arch}.log", check=False)
        for program, output in (("fairseq-train", train), ("fairseq-validate", validate)):
            if (program, arch) == ("fairseq-validate", "roberta_tiny"):
                assert last_line(output) == ("FileNotFoundError: [Errno 2] No such file or "
                                             f"directory: '{missing}/dict.txt'"), output[-3000:]
                continue
            assert last_line(output) == one_line(program, expected), output[-3000:]
            assert "Traceback" not in output
    assert "FileNotFoundError: ...\n  '<DATA>/dict.txt'" in (
        REPO_ROOT / "docs" / "troubleshooting.md").read_text()


@pytest.mark.slow
def test_checkpoint_of_ours_without_user_dir(one_update, tiny_data_bin):
    """No plugin code runs without --user-dir, so fairseq's own messages are what the user sees;
    docs/troubleshooting.md maps each to "add --user-dir fairseq_ext"."""
    readme = (REPO_ROOT / "docs" / "troubleshooting.md").read_text()
    proc = run_cli([fairseq_cli("fairseq-validate"), tiny_data_bin, "--task", "masked_lm",
                    "--path", one_update["3ml_self_tiny"], "--batch-size", "4", "--cpu"],
                   check=False, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0
    assert "Unsupported global: GLOBAL argparse.Namespace" in proc.stderr
    assert "Unsupported global: GLOBAL\n  argparse.Namespace`**" in readme
    proc = run_cli([fairseq_cli("fairseq-validate"), tiny_data_bin, "--task", "bidirectional_lm",
                    "--path", one_update["bidir_lm_tiny"], "--batch-size", "4", "--cpu"],
                   check=False, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2
    assert "error: argument --task: invalid choice: 'bidirectional_lm'" in proc.stderr
    assert "the plugin is not loaded. Add `--user-dir fairseq_ext`" in readme


@pytest.mark.parametrize("recipe", ["recipes/roberta/pretrain.sh",
                                    "recipes/bidirectional/pretrain.sh"])
def test_recipe_with_a_data_path_that_does_not_exist(recipe, tmp_path):
    missing = tmp_path / "no-such-data-bin"
    proc = run_cli([REPO_ROOT / recipe], check=False, env={
        "DATA": str(missing), "SAVE_DIR": str(tmp_path / "ckpt"), "DRY_RUN": "0", "NUM_GPUS": "1",
        "FAIRSEQ_BIN": str(tmp_path / "no-fairseq-here")})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: DATA={missing} has no dict.txt: run scripts/prepare_corpus.sh (or make demo) "
        "first, or point DATA at a fairseq data-bin")
    assert not (tmp_path / "ckpt").exists()


# --- 4. one line, not a traceback -----------------------------------------------------------------

#: A new user's mistakes under fairseq's tools, each with the start of the line that says what to
#: change: (cli, arch or None for a fairseq-validate of bidir_lm_tiny, flags, message start).
BAD_INPUT = {
    "mask_prob": ("fairseq-train", "roberta_tiny", ["--mask-prob", "1.5"],
                  "--mask-prob must be in (0, 1); got 1.5"),
    "encoder_heads": ("fairseq-train", "roberta_tiny", ["--encoder-attention-heads", "3"],
                      "--encoder-embed-dim (64) must be divisible by --encoder-attention-heads (3)"),
    "decoder_heads": ("fairseq-train", "3ml_self_tiny", ["--decoder-attention-heads", "3"],  # 3ML's
                      # decoder is half as wide as the encoder's 64 (three_ml.py's defaults)
                      "--decoder-embed-dim (32) must be divisible by --decoder-attention-heads (3)"),
    "step_sizes": ("fairseq-train", "swishrnn_bert_tiny", ["--swishrnn-step-sizes", "0"],
                   "--swishrnn-step-sizes must be a comma-separated list of integers >= 1"),
    "flex_on_cpu": ("fairseq-train", "bidir_lm_tiny", ["--attention-impl", "flex"],
                    "--attention-impl flex cannot train here (fairseq-train on CPU)"),
    "no_eval_mode": ("fairseq-validate", None, [],
                     "fairseq-validate on a bidirectional_lm checkpoint needs an evaluation mode"),
    "r_bidir": ("fairseq-validate", None, ["--eval-mode", "suffix_ppl", "--r-bidir", "1.7"],
                "--r-bidir '1.7': 1.7 is outside [0, 1]"),
    "infill_positions": ("fairseq-validate", None,
                         ["--eval-mode", "infill", "--r-bidir", "0", "--infill-positions", "0"],
                         "--infill-positions 0 must be at least 1"),
}


def run_to_the_end(served_cli, cli, args, log):
    """(exit status, output) of a fairseq CLI run."""
    served_cli.start(cli, args, log)
    return served_cli.wait(), log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD_INPUT)
def test_our_errors_print_one_line_through_the_clis(case, one_update, served_cli, tiny_data_bin,
                                                    tmp_path):
    cli, arch, flags, message = BAD_INPUT[case]
    if cli == "fairseq-train":
        family = ONE_UPDATE["bidir_lm_tiny" if arch == "bidir_lm_tiny" else "3ml_self_tiny"]
        args = [tiny_data_bin, *family[:4], "--arch", arch, *family[6:], *TRAIN_ONE, *flags,
                "--save-dir", tmp_path / "ckpt"]
    else:
        args = [tiny_data_bin, "--user-dir", USER_DIR, "--task", "bidirectional_lm",
                "--path", one_update["bidir_lm_tiny"], "--batch-size", "4", "--cpu",
                "--num-workers", "0", *flags]
    status, output = run_to_the_end(served_cli, cli, args, tmp_path / "run.log")
    assert status == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    line = last_line(output)
    assert line.startswith(f"{cli}: error: {message}"), output[-3000:]
    assert line.endswith(f"({TRACEBACK_VARIABLE}=1 prints the traceback)")
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def cut_split(data, split, keep=0.5):
    """Cut ``data``'s ``split.bin`` to ``keep`` of its bytes, as a killed copy leaves it;
    returns (bytes kept, bytes the index lists)."""
    path = data / f"{split}.bin"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))
    return int(size * keep), size


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["3ml_self_tiny", "bidir_lm_tiny"])
def test_a_truncated_data_bin_is_one_line_naming_the_file(arch, one_update, served_cli,
                                                         tiny_data_bin, tmp_path):
    """fairseq would map the cut train.bin and stop when a batch first reaches the lost
    sequences: ``ValueError: offset must be non-negative and no greater than buffer length``."""
    data = copy_data_bin(tiny_data_bin, tmp_path / "data")
    kept, size = cut_split(data, "train")
    status, output = run_to_the_end(served_cli, "fairseq-train", [
        data, *ONE_UPDATE[arch], *TRAIN_ONE, "--save-dir", tmp_path / "ckpt"],
        tmp_path / "train.log")
    assert status == 1 and "Traceback" not in output, output[-3000:]
    sequences = len(data_utils_sizes(data, "train"))
    assert last_line(output) == one_line("fairseq-train", (
        f"the train split of {data} is truncated: {data}/train.bin has {kept} bytes, but "
        f"{data}/train.idx indexes {size} ({sequences} sequences; its write or copy was cut "
        "short); re-run fairseq-preprocess (or scripts/prepare_corpus.sh) to rebuild it, or copy "
        "the data-bin again")), output[-3000:]
    assert "offset must be non-negative" not in output
    # fairseq-validate reads the valid split, checked the same way
    kept, size = cut_split(data, "valid", keep=0.9)
    status, output = run_to_the_end(served_cli, "fairseq-validate", validate_args(
        arch, data, one_update[arch]), tmp_path / "validate.log")
    assert status == 1 and "Traceback" not in output, output[-3000:]
    assert last_line(output).startswith(
        f"fairseq-validate: error: the valid split of {data} is truncated: {data}/valid.bin has "
        f"{kept} bytes, but {data}/valid.idx indexes {size} ("), output[-3000:]


def data_utils_sizes(data, split):
    """The sequence lengths fairseq's index lists for ``split`` (read from the .idx only)."""
    from fairseq.data import indexed_dataset

    return indexed_dataset.MMapIndexedDataset.Index(str(data / f"{split}.idx")).sizes


@pytest.mark.slow
def test_one_line_in_a_fresh_process_and_the_traceback_on_request(tiny_data_bin, tmp_path):
    """Not served: importing the plugin through --user-dir installs the one-line printing in a
    fresh fairseq-train; FAIRSEQ_EXT_TRACEBACK=1 brings Python's traceback back."""
    command = [fairseq_cli("fairseq-train", real=True), tiny_data_bin, "--user-dir", USER_DIR,
               "--task", "masked_lm", "--criterion", "masked_lm_categories",
               "--arch", "3ml_self_tiny", "--mask-stdev", "-1", *TRAIN_TINY,
               "--save-dir", tmp_path / "ckpt"]
    message = "--mask-stdev must be at least 0; got -1.0"
    proc = run_cli(command, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last_line(proc.stderr) == one_line("fairseq-train", message)
    proc = run_cli(command, check=False, env={TRACEBACK_VARIABLE: "1"})
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert last_line(proc.stderr) == f"fairseq_ext.cli.errors.ConfigError: {message}"


@pytest.mark.slow
def test_one_line_under_fairseq_hydra_train(tiny_data_bin, tmp_path):
    """hydra prints its own abridged traceback of an error; the plugin sets HYDRA_FULL_ERROR so
    that ours reach Python's handler and print one line there too."""
    proc = run_cli([fairseq_cli("fairseq-hydra-train"), "--config-dir",
                    REPO_ROOT / "recipes/config/roberta", "--config-name", "demo",
                    f"task.data={tiny_data_bin}", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
                    *TINY_HYDRA_OVERRIDES, "task.mask_prob=1.5"], cwd=REPO_ROOT, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert last_line(proc.stderr) == one_line("fairseq-hydra-train",
                                              "--mask-prob must be in (0, 1); got 1.5")
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_the_hook_prints_ours_and_hands_on_the_rest(monkeypatch, capsys):
    from fairseq_ext.cli import errors

    handed_on = []
    hook = errors.one_line_excepthook("fairseq-train", lambda *exc: handed_on.append(exc[1]))
    ours = errors.ConfigError("--mask-prob must be in (0, 1); got 1.5\n  (a second line)")
    hook(type(ours), ours, None)
    assert capsys.readouterr().err == one_line(
        "fairseq-train", "--mask-prob must be in (0, 1); got 1.5 (a second line)") + "\n"
    other = KeyError("not ours")
    hook(type(other), other, None)
    assert handed_on == [other] and capsys.readouterr().err == ""
    monkeypatch.setenv(TRACEBACK_VARIABLE, "1")
    hook(type(ours), ours, None)
    assert handed_on == [other, ours]


def test_an_error_fairseq_wraps_prints_as_the_one_it_wraps():
    """fairseq-train --restore-file raises ``Exception: Cannot load model parameters ...``
    while our DictionaryMismatchError is being handled."""
    from fairseq_ext.cli.errors import one_line_error
    from fairseq_ext.data.data_bin import DataBinError

    with pytest.raises(Exception) as raised:
        try:
            raise DataBinError("the dictionary DATA/dict.txt gives 45")
        except DataBinError:
            raise Exception("Cannot load model parameters from checkpoint c.pt")
    assert one_line_error("fairseq-train", raised.value) == one_line(
        "fairseq-train", "the dictionary DATA/dict.txt gives 45")
    assert one_line_error("fairseq-train", RuntimeError("a bug")) is None


def test_the_hook_is_installed_once_and_only_under_fairseq_tools(monkeypatch):
    from fairseq_ext.cli import errors

    original = sys.excepthook
    monkeypatch.setattr(sys, "excepthook", original)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    errors.install_one_line_errors(None)  # not under a fairseq tool (a script, a notebook)
    assert sys.excepthook is original
    errors.install_one_line_errors("fairseq-hydra-train")
    installed = sys.excepthook
    assert installed.fairseq_ext_program == "fairseq-hydra-train"
    assert os.environ["HYDRA_FULL_ERROR"] == "1"
    errors.install_one_line_errors("fairseq-hydra-train")
    assert sys.excepthook is installed
