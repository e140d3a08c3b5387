"""Fine-tuning with generalized bidirectionality (Artetxe et al., 2022, §3.2 "Fine-tuning",
Tables 9-11, Appendix B): the ``bidirectional_lm`` model's ``--r-bidir`` on batches without a
layout (n_bidir = round(R x n) per example; 0 causal, 1 bidirectional), against a hand-built
layout and by perturbation; fairseq's stock ``sentence_prediction`` task and criterion on it
(``<s> ... </s>``, the head on the final ``</s>``); the flag beside the ``bidirectional_lm``
task's own ``--r-bidir``; checkpoints with and without ``r_bidir``; the recipes
(``recipes/bidirectional/finetune_glue.sh``, ``finetune_grid.sh``, DRY_RUN and a fake grid) and
the grid report (``fairseq_ext_lab.evaluation.finetune_grid``) on fake logs; and, slow, both attention
settings fine-tuned end to end through the recipe from a pre-training checkpoint."""
import argparse
import json
import math
import os
import random
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary, indexed_dataset
from recipe_checks import dry_run, printed_commands

import fairseq_ext  # noqa: F401  (registers archs, tasks, criteria)
from conftest import REPO_ROOT, USER_DIR, WORDS, fairseq_cli, json_log_records, run_cli
from fairseq_ext.models.bidirectional_lm import example_layout
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch
from fairseq_ext_lab.evaluation import finetune_grid

VOCAB = 40
FINETUNE = REPO_ROOT / "recipes/bidirectional/finetune_glue.sh"
GRID = REPO_ROOT / "recipes/bidirectional/finetune_grid.sh"
#: Table 11's updates; RoBERTa's warmup and batch for the task (the paper is silent on warmup).
TABLE_11 = {"CoLA": (5336, 320, 16), "MNLI": (123873, 7432, 32), "MRPC": (2296, 137, 16),
            "QNLI": (33112, 1986, 32), "RTE": (2036, 122, 16), "SST-2": (20935, 1256, 32)}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def tiny(r_bidir=None, seed=0, task=None, **overrides):
    """bidir_lm_tiny without dropout, in eval mode; ``r_bidir`` as the flag's string (None:
    unset, as in a pre-training checkpoint)."""
    torch.manual_seed(seed)
    task = task or MaskedLmTaskStub(VOCAB)
    model = build_arch("bidir_lm_tiny", task, 64, dropout=0.0, attention_dropout=0.0,
                       r_bidir=r_bidir, **overrides)
    return model.eval(), task


def random_batch(pad, lengths, width, left_pad=False, seed=0):
    """Rows of random non-special tokens of the given ``lengths``, padded to ``width``."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), width), pad, dtype=torch.long)
    for row, n in enumerate(lengths):
        words = torch.randint(4, VOCAB - 1, (n,), generator=generator)
        if left_pad:
            tokens[row, width - n:] = words
        else:
            tokens[row, :n] = words
    return tokens


def hand_layout(tokens, pad, r_bidir):
    """The layout by hand, row by row: positions 0..n-1 over the real tokens, one document
    (0, padding -1), n_bidir = floor(R n + 1/2) on every real token."""
    positions = torch.zeros_like(tokens)
    doc_ids = torch.full_like(tokens, -1)
    bidir_lens = torch.zeros_like(tokens)
    for row in range(tokens.size(0)):
        columns = [c for c in range(tokens.size(1)) if tokens[row, c] != pad]
        n_bidir = math.floor(r_bidir * len(columns) + 0.5)
        for index, column in enumerate(columns):
            positions[row, column] = index
            doc_ids[row, column] = 0
            bidir_lens[row, column] = n_bidir
    return positions, doc_ids, bidir_lens


# --- the model's --r-bidir -----------------------------------------------------------------------

@pytest.mark.parametrize("r_bidir", [0.0, 0.25, 0.5, 0.7, 1.0])
@pytest.mark.parametrize("left_pad", [False, True])
def test_logits_equal_those_of_the_hand_built_layout(r_bidir, left_pad):
    model, task = tiny(str(r_bidir))
    pad = task.source_dictionary.pad()
    tokens = random_batch(pad, [9, 5, 2, 7], 9, left_pad=left_pad)
    positions, doc_ids, bidir_lens = hand_layout(tokens, pad, r_bidir)
    assert [int(bidir_lens[r][doc_ids[r] >= 0][0]) for r in range(4)] == [
        math.floor(r_bidir * n + 0.5) for n in (9, 5, 2, 7)]
    with torch.no_grad():
        ours = model(tokens)[0]
        by_hand = model(tokens, src_positions=positions, doc_ids=doc_ids, bidir_lens=bidir_lens)[0]
    real = tokens.ne(pad)
    assert torch.allclose(ours[real], by_hand[real], atol=1e-5)
    layout = example_layout(tokens, pad, r_bidir)
    for ours_field, hand_field in zip(layout, (positions, doc_ids, bidir_lens)):
        assert torch.equal(ours_field, hand_field)


def first_token_features(model, tokens):
    with torch.no_grad():
        return model(tokens, features_only=True)[0][:, 0]


@pytest.mark.parametrize("r_bidir, first_sees_last", [("1", True), ("0", False)])
def test_first_token_sees_the_last_only_with_bidirectional_attention(r_bidir, first_sees_last):
    """Perturbation: change the last token of an example (``</s>`` -> a word, and a word for
    another); the first token's features move with R = 1 and stay put with R = 0."""
    model, task = tiny(r_bidir)
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    tokens = random_batch(pad, [8, 8], 8)
    tokens[:, -1] = eos
    changed = tokens.clone()
    changed[0, -1] = 7
    changed[1, -1] = eos
    changed[1, -2] = (tokens[1, -2] + 1 - 4) % (VOCAB - 5) + 4  # another word before the </s>
    before, after = first_token_features(model, tokens), first_token_features(model, changed)
    for row in range(2):
        moved = not torch.allclose(before[row], after[row], atol=1e-6)
        assert moved == first_sees_last, row


def test_a_partial_prefix_sees_exactly_its_first_n_bidir_tokens():
    """R = 0.5 over 8 tokens: n_bidir = 4, so the first token sees tokens 0..3 and not 4..7."""
    model, task = tiny("0.5")
    pad = task.source_dictionary.pad()
    tokens = random_batch(pad, [8], 8)
    base = first_token_features(model, tokens)
    for column in range(8):
        changed = tokens.clone()
        changed[0, column] = (tokens[0, column] + 1 - 4) % (VOCAB - 5) + 4
        moved = not torch.allclose(base, first_token_features(model, changed), atol=1e-6)
        assert moved == (column < 4), column


@pytest.mark.parametrize("r_bidir", ["0", "1"])
def test_padding_is_excluded_left_or_right(r_bidir):
    """An example's classification logits do not depend on the padding around it."""
    model, task = tiny(r_bidir)
    model.register_classification_head("sentence", num_classes=3)
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    alone = random_batch(pad, [6], 6)
    alone[0, -1] = eos
    right = torch.full((2, 10), pad, dtype=torch.long)
    right[0, :6] = alone[0]
    right[1, :10] = random_batch(pad, [10], 10, seed=1)[0]
    left = torch.full((2, 10), pad, dtype=torch.long)
    left[0, 4:] = alone[0]
    left[1] = right[1]
    with torch.no_grad():
        expected = model(alone, classification_head_name="sentence")[0][0]
        for batch in (right, left):
            got = model(batch, classification_head_name="sentence")[0][0]
            assert torch.allclose(got, expected, atol=1e-5)


def test_the_head_reads_the_final_eos_with_bidirectional_attention():
    model, task = tiny("1")
    model.register_classification_head("sentence", num_classes=2)
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    tokens = random_batch(pad, [7, 4], 7)
    tokens[0, 6] = tokens[1, 3] = eos
    with torch.no_grad():
        logits = model(tokens, features_only=True, classification_head_name="sentence")[0]
        features = model(tokens, features_only=True)[0]
    head = model.classification_heads["sentence"]
    last = torch.stack([features[0, 6], features[1, 3]])
    assert torch.allclose(logits, head.out_proj(torch.tanh(head.dense(last))), atol=1e-6)


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "abc", "0,1", ""])
def test_r_bidir_outside_0_1_is_an_error_naming_the_flag(value):
    with pytest.raises(ValueError, match="--r-bidir"):
        tiny(value)


def test_unset_r_bidir_is_causal_and_the_value_is_kept_in_the_args():
    model, _ = tiny(None)  # a pre-training checkpoint's args have no r_bidir
    assert model.decoder.r_bidir == 0.0 and model.args.r_bidir == 0.0
    model, _ = tiny("0.25")
    assert model.decoder.r_bidir == 0.25 and model.args.r_bidir == 0.25  # saved as a float
    model, _ = tiny(1.0)  # a fine-tuned checkpoint's value
    assert model.decoder.r_bidir == 1.0


def test_under_the_bidirectional_lm_task_r_bidir_is_the_tasks():
    """--task bidirectional_lm's --r-bidir is its evaluation R (a list too): the task builds
    the model with R = 0 in the model's args (its batches carry their own layout) and keeps its
    own value."""
    from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask

    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary) - 1):
        dictionary.add_symbol(f"w{i}")
    task = BidirectionalLMTask(BidirectionalLMConfig(data="unused", seed=1, tokens_per_sample=64,
                                                     eval_mode="suffix_ppl", r_bidir="0,0.5,1"),
                               dictionary)
    args = argparse.Namespace(arch="bidir_lm_tiny", tokens_per_sample=64, task="bidirectional_lm",
                              r_bidir="0,0.5,1")
    model = task.build_model(args)
    assert model.decoder.r_bidir == 0.0 and args.r_bidir == 0.0
    assert task.cfg.r_bidir == "0,0.5,1"


def test_incremental_decoding_refuses_a_bidirectional_model():
    model, task = tiny("1")
    tokens = random_batch(task.source_dictionary.pad(), [3], 3)
    with pytest.raises(ValueError, match="--r-bidir"):
        model.decoder(tokens, incremental_state={})


def parse_train(*argv):
    return options.parse_args_and_arch(options.get_training_parser(),
                                       input_args=["DATA", "--user-dir", str(USER_DIR), *argv])


def test_one_flag_serves_the_model_and_the_bidirectional_lm_task():
    """fairseq-train declares the model's flags, then the task's, on one parser and keeps the
    first declaration: --r-bidir is the model's under sentence_prediction, and still takes the
    bidirectional_lm task's lists (unset: absent, so the task sees its default)."""
    args = parse_train("--task", "sentence_prediction", "--criterion", "sentence_prediction",
                       "--num-classes", "2", "--arch", "bidir_lm_tiny", "--r-bidir", "1")
    assert args.r_bidir == "1"
    lm = ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm", "--arch",
          "bidir_lm_tiny"]
    args = parse_train(*lm, "--eval-mode", "suffix_ppl", "--r-bidir", "0,0.5")
    assert args.r_bidir == "0,0.5"
    assert not hasattr(parse_train(*lm), "r_bidir")


# --- fairseq's stock sentence_prediction task and criterion ----------------------------------------

def write_split(folder: Path, split: str, lines, dictionary: Dictionary):
    """``folder/split.{bin,idx}`` as fairseq-preprocess writes them (a </s> ends each line)."""
    folder.mkdir(parents=True, exist_ok=True)
    builder = indexed_dataset.make_builder(str(folder / f"{split}.bin"), impl="mmap",
                                           vocab_size=len(dictionary))
    for line in lines:
        builder.add_item(dictionary.encode_line(line, add_if_not_exist=False, append_eos=True))
    builder.finalize(str(folder / f"{split}.idx"))


def sentence_prediction_bin(root: Path, pairs: bool = False) -> Path:
    words = Dictionary()
    for i in range(VOCAB - 5):
        words.add_symbol(f"w{i}")
    labels = Dictionary()
    for label in ("0", "1"):
        labels.add_symbol(label)
    rng = random.Random(0)
    sentences = [" ".join(f"w{rng.randrange(VOCAB - 5)}" for _ in range(rng.randint(3, 9)))
                 for _ in range(8)]
    write_split(root / "input0", "valid", sentences, words)
    if pairs:
        write_split(root / "input1", "valid", reversed(sentences), words)
    write_split(root / "label", "valid", [str(i % 2) for i in range(8)], labels)
    words.save(str(root / "input0" / "dict.txt"))
    labels.save(str(root / "label" / "dict.txt"))
    return root


@pytest.mark.parametrize("pairs", [False, True])
def test_stock_sentence_prediction_classifies_from_the_final_eos(pairs, tmp_path):
    """fairseq's sentence_prediction (RoBERTa's --init-token 0 --separator-token 2): each row
    is <s> A </s> [</s> B </s>]; the model registers the task's head, the head reads the final
    </s>, and fairseq's criterion trains it."""
    from fairseq.criterions.sentence_prediction import (
        SentencePredictionConfig as CriterionConfig,
    )
    from fairseq.criterions.sentence_prediction import SentencePredictionCriterion
    from fairseq.tasks.sentence_prediction import (
        SentencePredictionConfig,
        SentencePredictionTask,
    )

    data = sentence_prediction_bin(tmp_path, pairs)
    cfg = SentencePredictionConfig(data=str(data), num_classes=2, init_token=0,
                                   separator_token=2, max_positions=64,
                                   classification_head_name="sentence_classification_head",
                                   regression_target=False, seed=1)
    task = SentencePredictionTask.setup_task(cfg)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(8)])
    tokens = sample["net_input"]["src_tokens"]
    dictionary = task.source_dictionary
    real = tokens.ne(dictionary.pad())
    last = real.long().sum(dim=1) - 1  # right padding
    assert torch.all(tokens[:, 0] == dictionary.bos())
    assert torch.all(tokens[torch.arange(8), last] == dictionary.eos())
    if pairs:  # A </s> </s> B </s>
        assert torch.all((tokens == dictionary.eos()).sum(dim=1) == 3)

    torch.manual_seed(0)
    model = task.build_model(argparse.Namespace(arch="bidir_lm_tiny", r_bidir="1", dropout=0.0,
                                                attention_dropout=0.0)).eval()
    assert model.decoder.r_bidir == 1.0 and model.decoder.max_positions() == 64
    with torch.no_grad():
        logits, _ = model(**sample["net_input"], features_only=True,
                          classification_head_name="sentence_classification_head")
        features = model(tokens, features_only=True)[0]
    head = model.classification_heads["sentence_classification_head"]
    at_eos = features[torch.arange(8), last]
    assert torch.allclose(logits, head.out_proj(torch.tanh(head.dense(at_eos))), atol=1e-6)

    criterion = SentencePredictionCriterion(
        CriterionConfig(classification_head_name="sentence_classification_head"), task)
    model.train()
    loss, sample_size, logging_output = criterion(model, sample)
    loss.backward()
    assert math.isfinite(loss.item()) and sample_size == 8 and logging_output["ncorrect"] >= 0
    assert head.out_proj.weight.grad is not None
    assert model.decoder.embed_tokens.weight.grad.abs().sum() > 0


# --- the recipes (DRY_RUN) -----------------------------------------------------------------------

@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "checkpoint_last.pt"
    path.touch()
    return str(path)


@pytest.mark.parametrize("task", sorted(TABLE_11))
def test_finetune_recipe_follows_table_11_and_appendix_b(task, ckpt):
    updates, warmup, batch = TABLE_11[task]
    argv, flags = dry_run(FINETUNE, TASK=task.lower(), CKPT=ckpt, R_BIDIR="1")
    assert flags["--task"] == flags["--criterion"] == "sentence_prediction"
    assert flags["--arch"] == "bidir_lm_125m" and flags["--r-bidir"] == "1"
    assert flags["--restore-file"] == ckpt
    assert {"--reset-optimizer", "--reset-dataloader", "--reset-meters"} <= set(flags)
    assert flags["--num-classes"] == ("3" if task == "MNLI" else "2")
    # the same number of updates for every setup (Table 11), RoBERTa's 6% warmup
    assert int(flags["--max-update"]) == int(flags["--total-num-update"]) == updates
    assert int(flags["--warmup-updates"]) == warmup == int(0.06 * updates)
    assert flags["--lr-scheduler"] == "polynomial_decay" and flags["--power"] == "1"
    assert flags["--lr"] == "1e-05" and flags["--optimizer"] == "fused_adamw"
    assert flags["--adam-betas"] == "(0.9,0.98)" and flags["--weight-decay"] == "0.1"
    assert int(flags["--batch-size"]) * int(flags["--update-freq"]) == batch
    # Table 10 reports accuracy for every task (CoLA and MRPC too)
    assert flags["--best-checkpoint-metric"] == "accuracy"
    assert flags["--maximize-best-checkpoint-metric"] is True
    # RoBERTa's <s> A </s> </s> B </s>; the position table of pretrain.sh's 1024 tokens
    assert (flags["--init-token"], flags["--separator-token"]) == ("0", "2")
    assert flags["--max-positions"] == flags["--max-target-positions"] == "1024"
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv[1:])
    assert (args.task, args.arch, args.r_bidir, args.max_target_positions) == (
        "sentence_prediction", "bidir_lm_125m", "1", 1024)


#: Each environment variable of finetune_glue.sh and the flag it sets.
ENV_TO_FLAG = {
    "ARCH": "--arch", "R_BIDIR": "--r-bidir", "MAX_TARGET_POSITIONS": "--max-target-positions",
    "MAX_POSITIONS": "--max-positions", "LR": "--lr", "TOTAL_UPDATES": "--max-update",
    "WARMUP_UPDATES": "--warmup-updates", "LR_POWER": "--power", "SEED": "--seed",
    "WEIGHT_DECAY": "--weight-decay", "ADAM_BETAS": "--adam-betas", "ADAM_EPS": "--adam-eps",
    "CLIP_NORM": "--clip-norm", "DROPOUT": "--dropout", "ATTENTION_DROPOUT": "--attention-dropout",
    "CRITERION": "--criterion", "OPTIMIZER": "--optimizer", "SHORTEN_METHOD": "--shorten-method",
    "NUM_CLASSES": "--num-classes", "BEST_METRIC": "--best-checkpoint-metric",
    "VALID_SUBSET": "--valid-subset", "SAVE_DIR": "--save-dir", "LOG_INTERVAL": "--log-interval",
    "NUM_WORKERS": "--num-workers", "POOLING": "--classification-pooling",
}


def test_every_hyperparameter_is_an_environment_variable(ckpt):
    env = {var: f"v{i}" for i, var in enumerate(ENV_TO_FLAG)}
    env.update(R_BIDIR="0.5", BATCH="64", MAX_SENTENCES="8", CPU="1", NO_SAVE="1",
               MAX_TARGET_POSITIONS="512", MAX_POSITIONS="256", POOLING="mean")
    argv, flags = dry_run(FINETUNE, "--extra", "appended", TASK="RTE", CKPT=ckpt, **env)
    for var, flag in ENV_TO_FLAG.items():
        assert flags[flag] == env[var], (var, flag)
    assert flags["--total-num-update"] == env["TOTAL_UPDATES"]
    assert flags["--update-freq"] == "8" and flags["--cpu"] is True and flags["--no-save"]
    assert argv[-2:] == ["--extra", "appended"]
    assert dry_run(FINETUNE, TASK="RTE", CKPT=ckpt, R_BIDIR="0", SIZE="1_3b")[1]["--arch"] == \
        "bidir_lm_1_3b"


@pytest.mark.parametrize("env, message", [
    ({"TASK": "QQP"}, "TASK=QQP is not among the paper's fine-tuning tasks (Table 11"),
    ({"TASK": "sts"}, "TASK=STS-B is not among"),
    ({"R_BIDIR": "1.5"}, "R_BIDIR=1.5 must be a number in [0, 1]"),
    ({"POOLING": "first"}, "POOLING=first: one of last or mean"),
    ({"R_BIDIR": "-1"}, "R_BIDIR=-1 must be a number in [0, 1]"),
    ({"R_BIDIR": None}, "set R_BIDIR: 0 (causal attention"),
    ({"CKPT": "/nonexistent.pt"}, "CKPT=/nonexistent.pt: no such file"),
    ({"MAX_POSITIONS": "2048"}, "MAX_POSITIONS=2048 exceeds MAX_TARGET_POSITIONS=1024"),
])
def test_finetune_recipe_errors_name_the_variable(env, message, ckpt):
    full = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "DATA": "D", "NUM_GPUS": "1",
            "TASK": "RTE", "CKPT": ckpt, "R_BIDIR": "1", **env}
    full = {k: v for k, v in full.items() if v is not None}
    proc = subprocess.run(["bash", str(FINETUNE)], env=full, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_grid_dry_run_covers_appendix_b(ckpt):
    proc = run_cli([GRID], env={"DRY_RUN": "1", "NUM_GPUS": "1", "CKPT": ckpt,
                                "DATA_ROOT": "glue", "TASKS": "rte mnli"})
    commands = printed_commands(proc.stdout)
    assert proc.stdout.rstrip().endswith("48 runs") and len(commands) == 48
    points = set()
    for argv in commands:
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv[1:])
        task = "RTE" if args.data == "glue/RTE-bin" else "MNLI"
        batch = args.batch_size * args.update_freq[0]
        points.add((task, args.r_bidir, args.lr[0], batch))
        assert args.max_update == TABLE_11[task][0] and args.no_save  # whatever the batch
        assert args.save_dir.endswith(f"{task}/r{args.r_bidir}_lr{argv[argv.index('--lr') + 1]}"
                                      f"_bs{batch}")
        assert args.log_format == "json" and args.log_file is None  # the grid logs stdout
    assert points == {(t, r, lr, b) for t in ("RTE", "MNLI") for r in ("0", "1")
                      for lr in (5e-6, 1e-5, 2e-5, 5e-5) for b in (16, 32, 64)}


def test_grid_refuses_tasks_outside_table_11_before_running_anything(ckpt):
    proc = run_cli([GRID], env={"DRY_RUN": "1", "CKPT": ckpt, "DATA_ROOT": "glue",
                                "TASKS": "RTE QQP"}, check=False)
    assert proc.returncode == 2 and "TASK QQP in TASKS" in proc.stderr
    assert "fairseq-train" not in proc.stdout


FAKE_RUN = r"""#!/usr/bin/env bash
# Stands in for finetune_glue.sh: logs a command line and fairseq json records whose dev
# accuracy follows the settings: 60 + 10 R + lr/1e-6 + batch/16 (+ 5 on RTE), reached at the
# second validation; a running best (valid_best_accuracy) above it and a train record.
echo "+ fairseq-train $DATA --valid-subset valid --best-checkpoint-metric accuracy" \
  "--maximize-best-checkpoint-metric --r-bidir $R_BIDIR --lr $LR $*"
acc=$(awk -v r="$R_BIDIR" -v lr="$LR" -v b="$BATCH" -v t="$TASK" \
  'BEGIN { printf "%g", 60 + 10 * r + lr / 1e-6 + b / 16 + (t == "RTE" ? 5 : 0) }')
log() { echo "2026-01-01 00:00:00 | INFO | $1 | {\"epoch\": $2, $3}"; }
best='"valid_loss": "0.5", "valid_best_accuracy": "99"'
log valid 1 "$best, \"valid_accuracy\": \"50\""
log train 1 '"train_loss": "0.5", "train_accuracy": "99.9"'
log valid 2 "$best, \"valid_accuracy\": \"$acc\""
"""


def test_grid_reports_the_best_dev_accuracy_per_task_and_resumes(ckpt, tmp_path):
    fake = tmp_path / "fake_finetune.sh"
    fake.write_text(FAKE_RUN)
    fake.chmod(0o755)
    env = {"FINETUNE_RECIPE": str(fake), "CKPT": ckpt, "DATA_ROOT": str(tmp_path / "glue"),
           "SAVE_ROOT": str(tmp_path / "grid"), "TASKS": "RTE CoLA", "LRS": "1e-05 5e-05",
           "BATCHES": "16 64"}
    proc = run_cli([GRID], cwd=tmp_path, env=env)
    report = (tmp_path / "grid/report.md").read_text()
    assert report in proc.stdout
    # best over lr x batch: lr 5e-5, batch 64: 60 + 10 R + 50 + 4 (+ 5 on RTE)
    assert "| r_bidir | RTE | CoLA | avg |" in report
    assert "| 0 | 119.0 | 114.0 | 116.5 |" in report
    assert "| 1 | 129.0 | 124.0 | 126.5 |" in report
    assert "| best | 129.0 | 124.0 | 126.5 |" in report
    assert "| best | 5e-05, 64, r1 (8/8) | 5e-05, 64, r1 (8/8) |" in report
    rows = (tmp_path / "grid/grid.tsv").read_text().splitlines()
    assert rows[0] == "task\tr_bidir\tlr\tbatch\tscore" and len(rows) == 1 + 2 * 8
    assert "RTE\t1\t5e-05\t64\t129.0" in rows
    again = run_cli([GRID], cwd=tmp_path, env=env)
    assert again.stdout.count("done already") == 16


# --- the grid report on fake logs --------------------------------------------------------------

def valid_record(epoch, subset="valid", **metrics):
    fields = {"epoch": epoch, f"{subset}_loss": "0.5"}
    fields.update({f"{subset}_{k}": str(v) for k, v in metrics.items()})
    return f"2026-01-01 00:00:00 | INFO | {subset} | {json.dumps(fields)}"


def test_best_scores_reads_validations_only():
    lines = [
        "+ fairseq-train DATA --valid-subset valid,valid1",
        "not a record {",
        valid_record(1, accuracy=70.5, best_accuracy=70.5),
        valid_record(1, "valid1", accuracy=69),
        json.dumps({"epoch": 1, "train_loss": "0.1", "train_accuracy": "99.5"}),
        json.dumps({"epoch": 1, "loss": "0.1", "accuracy": "98"}),  # train_inner
        valid_record(2, accuracy=82.25, best_accuracy=82.25),
        valid_record(3, accuracy=80, best_accuracy=82.25),
        valid_record(3, "valid1", accuracy="nan"),
        json.dumps({"epoch": 4, "valid_best_accuracy": "99"}),  # no valid_loss: not a score
    ]
    assert finetune_grid.best_scores(lines) == {"valid": 82.25, "valid1": 69.0}
    assert finetune_grid.best_scores(lines, "loss", maximize=False) == {"valid": 0.5,
                                                                         "valid1": 0.5}


def write_run(root, task, name, *records):
    folder = root / task / name
    folder.mkdir(parents=True)
    (folder / "train.log").write_text("\n".join(records) + "\n")


def test_report_picks_the_best_run_per_task_and_setting(tmp_path, capsys):
    write_run(tmp_path, "SST-2", "r0_lr1e-05_bs32", valid_record(1, accuracy=90))
    write_run(tmp_path, "SST-2", "r1_lr1e-05_bs32", valid_record(1, accuracy=92))
    write_run(tmp_path, "SST-2", "r1_lr5e-06_bs16", valid_record(1, accuracy=93.5))
    write_run(tmp_path, "CoLA", "r0_lr2e-05_bs64", valid_record(1, accuracy=80))
    write_run(tmp_path, "CoLA", "r1_lr2e-05_bs64", valid_record(1, accuracy=79))
    write_run(tmp_path, "CoLA", "r1_lr5e-05_bs16")  # running: nothing logged yet
    (tmp_path / "CoLA" / "results.tsv").write_text("")  # not a run
    (tmp_path / "CoLA" / "notes").mkdir()  # not a run either
    runs = finetune_grid.collect(tmp_path)
    assert len(runs) == 6 and {r.task for r in runs} == {"CoLA", "SST-2"}
    table = finetune_grid.grid_table(runs)
    assert table[("1", "SST-2")].score == 93.5 and table[("1", "SST-2")].run.batch == 16
    assert (table[("1", "CoLA")].scored, table[("1", "CoLA")].total) == (1, 2)
    assert table[("best", "CoLA")].run.r_bidir == "0"
    report = finetune_grid.format_report(runs)
    assert "| r_bidir | CoLA | SST-2 | avg |" in report  # Table 10's column order
    assert "| 0 | 80.0 | 90.0 | 85.0 |" in report
    assert "| 1 | 79.0 | 93.5 | 86.2 |" in report
    assert "| best | 80.0 | 93.5 | 86.8 |" in report
    assert "| 1 | 2e-05, 64 (1/2) | 5e-06, 16 (2/2) |" in report

    assert finetune_grid.main([str(tmp_path), "--tasks", "SST-2", "MNLI",
                               "--tsv", str(tmp_path / "all.tsv")]) == 0
    out = capsys.readouterr().out
    assert "| r_bidir | SST-2 | MNLI | avg |" in out
    assert "| 1 | 93.5 | - | - |" in out  # no average over an incomplete row
    assert "| 1 | 5e-06, 16 (2/2) | - (0/0) |" in out
    assert len((tmp_path / "all.tsv").read_text().splitlines()) == 1 + 3
    assert finetune_grid.main([str(tmp_path / "absent")]) == 2


# --- end to end (slow): pre-train, then fine-tune with each attention ------------------------------

POSITIVE, NEGATIVE = ["good", "great", "right", "well"], ["never", "no", "against", "off"]


def write_marker_split(root, split, n, rng):
    """Sentences labelled 1 when they hold two words of POSITIVE, 0 when two of NEGATIVE."""
    neutral = [w for w in WORDS if w not in POSITIVE + NEGATIVE]
    labels = [i % 2 for i in range(n)]
    rng.shuffle(labels)
    with open(root / f"{split}.input0", "w") as text, open(root / f"{split}.label", "w") as out:
        for label in labels:
            words = [rng.choice(neutral) for _ in range(rng.randint(5, 12))]
            for _ in range(2):
                words.insert(rng.randrange(len(words) + 1),
                             rng.choice(POSITIVE if label else NEGATIVE))
            text.write(" ".join(words) + "\n")
            out.write(f"{label}\n")


@pytest.fixture(scope="module")
def pretrained_bidir(tiny_data_bin, tmp_path_factory):
    """A hyb_pre bidir_lm_tiny pre-training checkpoint (64 positions, 10 updates)."""
    save_dir = tmp_path_factory.mktemp("bidir_pretrained")
    run_cli([fairseq_cli("fairseq-train"), tiny_data_bin, "--user-dir", USER_DIR,
             "--task", "bidirectional_lm", "--criterion", "bidirectional_lm",
             "--variant", "hyb_pre", "--arch", "bidir_lm_tiny", "--tokens-per-sample", "64",
             "--max-tokens", "512", "--optimizer", "adam", "--lr", "1e-3", "--max-update", "10",
             "--log-format", "json", "--no-progress-bar", "--cpu", "--num-workers", "0",
             "--no-epoch-checkpoints", "--save-dir", save_dir],
            env={"OMP_NUM_THREADS": "1"})
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def marker_bin(tiny_data_bin, tmp_path_factory):
    """input0/ (the pre-training dictionary) and label/, as sentence_prediction reads them."""
    root = tmp_path_factory.mktemp("markers")
    rng = random.Random(0)
    write_marker_split(root, "train", 240, rng)
    write_marker_split(root, "valid", 80, rng)
    dest = root / "data-bin"
    for kind, extra in (("input0", ["--srcdict", tiny_data_bin / "dict.txt"]), ("label", [])):
        run_cli([fairseq_cli("fairseq-preprocess"), "--only-source",
                 "--trainpref", root / f"train.{kind}", "--validpref", root / f"valid.{kind}",
                 "--destdir", dest / kind, "--workers", "1", *extra])
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("r_bidir", ["0", "1"])
def test_both_attention_settings_fine_tune_through_the_recipe(r_bidir, pretrained_bidir,
                                                               marker_bin, tmp_path):
    """fairseq-train --task sentence_prediction --arch bidir_lm_tiny --r-bidir R from the
    pre-training checkpoint (a new head; the checkpoint has no r_bidir): dev accuracy far above
    chance (50%); the fine-tuned checkpoint keeps R, and reloads into a model whose logits are
    those of the hand-built layout."""
    from fairseq import checkpoint_utils

    save_dir = tmp_path / "finetune"
    proc = run_cli([FINETUNE, "--no-progress-bar", "--log-interval", "5"],
                   env={"TASK": "SST-2", "DATA": str(marker_bin), "CKPT": str(pretrained_bidir),
                        "R_BIDIR": r_bidir, "ARCH": "bidir_lm_tiny",
                        "MAX_TARGET_POSITIONS": "64", "TOTAL_UPDATES": "45",
                        "WARMUP_UPDATES": "3", "BATCH": "16", "MAX_SENTENCES": "16",
                        "LR": "1e-03", "CPU": "1", "NUM_WORKERS": "0", "NUM_GPUS": "1",
                        "SAVE_DIR": str(save_dir), "OMP_NUM_THREADS": "1"})
    output = proc.stdout + proc.stderr
    command = shlex.split(proc.stdout.splitlines()[0][2:])
    for expected in (["--task", "sentence_prediction"], ["--arch", "bidir_lm_tiny"],
                     ["--r-bidir", r_bidir], ["--restore-file", str(pretrained_bidir)]):
        assert any(command[i:i + 2] == expected for i in range(len(command))), expected
    assert f"Loaded checkpoint {pretrained_bidir} (epoch" in output
    valid = json_log_records(output, key="valid_accuracy")
    assert valid and float(valid[-1]["valid_accuracy"]) >= 85.0, valid
    assert max(float(r["valid_accuracy"]) for r in valid) == float(
        valid[-1]["valid_best_accuracy"])
    records = json_log_records((save_dir / "train.log").read_text(), key="valid_accuracy")
    assert finetune_grid.best_scores((save_dir / "train.log").read_text().splitlines()) == {
        "valid": max(float(r["valid_accuracy"]) for r in records)}

    pre = checkpoint_utils.load_checkpoint_to_cpu(str(pretrained_bidir))
    assert pre["cfg"].model.r_bidir == 0.0  # a pre-training checkpoint: the task's R = 0
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / "checkpoint_best.pt")])
    model = models[0].eval()
    assert model.decoder.r_bidir == float(r_bidir) and model.args.r_bidir == float(r_bidir)
    dataset = task.dataset("valid") if "valid" in task.datasets else None
    if dataset is None:
        task.load_dataset("valid")
        dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(6)])
    tokens = sample["net_input"]["src_tokens"]
    pad = task.source_dictionary.pad()
    positions, doc_ids, bidir_lens = hand_layout(tokens, pad, float(r_bidir))
    with torch.no_grad():
        logits = model(**sample["net_input"], features_only=True,
                       classification_head_name="sentence_classification_head")[0]
        by_hand = model(tokens, src_positions=positions, doc_ids=doc_ids, bidir_lens=bidir_lens,
                        features_only=True,
                        classification_head_name="sentence_classification_head")[0]
    assert torch.allclose(logits, by_hand, atol=1e-5)
