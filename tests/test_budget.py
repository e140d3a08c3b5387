"""The FLOP budget (fairseq_ext_lab.budget) reads a run's settings where the run does: the
recipe's fairseq-train command as fairseq's own parser builds it, counted with the function the
training criteria count a batch with (fairseq_ext.flops.run_flops)."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fairseq import tasks
from fairseq.data import Dictionary, indexed_dataset
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.tasks import TASK_DATACLASS_REGISTRY
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from fairseq_ext import flops
from fairseq_ext.flops.training_metrics import TRAIN_FLOPS_KEY
from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask
from fairseq_ext_lab import budget, demo
from fairseq_ext_lab.recipe_runs import REPO_ROOT, RecipeRun

ROBERTA = RecipeRun("roberta", "recipes/roberta/demo.sh")
THREE_ML = RecipeRun("3ml-self", "recipes/3ml/demo.sh")
HYB_PRE = RecipeRun("hyb_pre", "recipes/bidirectional/demo.sh", {"VARIANT": "hyb_pre"})
#: 10 of a 64-token row corrupted: 8 <mask>, 1 replaced, 1 unchanged under 80/10/10, so a batch
#: can hold exactly the expected corruption of every row.
WHOLE_MASK_PROB = "0.15625"


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory) -> Path:
    """A data-bin of 200 one-line documents of 1-100 tokens (the share of a variant's predicted
    tokens depends on the lengths), made in-process."""
    dest = tmp_path_factory.mktemp("budget") / "data-bin"
    dest.mkdir()
    dictionary = Dictionary()
    for index in range(40):
        dictionary.add_symbol(f"w{index}")
    dictionary.save(str(dest / "dict.txt"))
    rng = np.random.default_rng(0)
    for split, count in (("train", 200), ("valid", 20)):
        builder = indexed_dataset.make_builder(str(dest / f"{split}.bin"), impl="mmap",
                                               vocab_size=len(dictionary))
        for n in rng.integers(1, 101, size=count):
            words = rng.integers(dictionary.nspecial, len(dictionary), size=n - 1)
            builder.add_item(torch.tensor([*words, dictionary.eos()], dtype=torch.int32))
        builder.finalize(str(dest / f"{split}.idx"))
    return dest


def without_flag(command, flag):
    """``command`` without ``flag`` and its value (the run then takes the parser's default)."""
    at = command.index(flag)
    return command[:at] + command[at + 2:]


def pflops(command):
    return budget.analytic_pflops_per_update(command)


# --- (a) the budget is what the criterion counts ----------------------------------------------

def corrupted_batch(task, rows: int, length: int, corrupted: int):
    """``rows`` full rows of ``length`` tokens, each with ``corrupted`` targets: 80% <mask>, 10%
    replaced by another token, 10% left unchanged (``corrupted`` a multiple of 10)."""
    dictionary = task.source_dictionary
    generator = torch.Generator().manual_seed(0)
    words = torch.randint(dictionary.nspecial, task.mask_idx, (rows, length), generator=generator)
    source, target = words.clone(), torch.full_like(words, dictionary.pad())
    masked, replaced = corrupted * 8 // 10, corrupted // 10
    target[:, :corrupted] = words[:, :corrupted]
    source[:, :masked] = task.mask_idx
    replacement = words[:, masked:masked + replaced] + 1
    source[:, masked:masked + replaced] = torch.where(replacement < task.mask_idx, replacement,
                                                      dictionary.nspecial)
    return {"net_input": {"src_tokens": source,
                          "src_lengths": torch.full((rows,), length, dtype=torch.long)},
            "target": target, "ntokens": rows * length, "nsentences": rows, "id": torch.arange(rows)}


@pytest.mark.parametrize("run", [
    ROBERTA,
    THREE_ML,
    RecipeRun("3ml-cross", "recipes/3ml/demo.sh", {"ARCH": "3ml_cross_mini"}),
    RecipeRun("swishrnn-bert", "recipes/swishrnn/demo.sh"),
], ids=lambda run: run.name)
def test_an_updates_budget_is_what_the_criterion_counts_for_it(run, data_bin):
    """The model, task and criterion fairseq-train builds from the recipe's command count, for
    one update whose batch holds the expected corruption of every row, the budget's FLOPs."""
    run = dataclasses.replace(run, env={**run.env, "MASK_PROB": WHOLE_MASK_PROB})
    command = budget.planned_command(run, data_bin)
    args = flops.training_args(command[1:])
    assert args.update_freq == [1] and args.mask_prob * args.tokens_per_sample == 10
    task = tasks.setup_task(args)
    model, criterion = task.build_model(args), task.build_criterion(args)
    model.train()
    batch = corrupted_batch(task, args.batch_size, args.tokens_per_sample, 10)
    with torch.no_grad():
        logging_output = criterion(model, batch)[2]
    counted = float(logging_output[TRAIN_FLOPS_KEY])
    assert int(logging_output["n_mask"]) == 8 * args.batch_size
    assert budget.analytic_pflops_per_update(command) * 1e15 == pytest.approx(counted, rel=1e-12)


def test_a_bidirectional_budget_counts_what_the_criterion_would(data_bin):
    """``bidirectional_lm``: the budget is the criterion's count of a batch of ``--max-tokens``
    tokens with the task's expected predicted share, with the model and criterion built from
    the command, and the share the task's own objective sampler draws."""
    command = budget.planned_command(HYB_PRE, data_bin)
    args = flops.training_args(command[1:])
    task = tasks.setup_task(args)
    model, criterion = task.build_model(args), task.build_criterion(args)
    rows = args.max_tokens / args.tokens_per_sample
    predicted = budget.bidirectional_predicted_per_sequence(args, task)
    assert 0 < predicted < args.tokens_per_sample
    counted = criterion.training_flops.of_batch(model, rows, args.tokens_per_sample, 0.0,
                                                predicted * rows)
    assert budget.analytic_pflops_per_update(command) * 1e15 == pytest.approx(counted, rel=1e-12)


# --- (b) a changed setting, wherever it is set, changes the budget ----------------------------

def test_a_recipes_settings_reach_the_budget(data_bin):
    """What a recipe reads from its environment (masking rate, length, arch) moves the budget;
    a setting it does not pass (the seed) does not."""
    base = pflops(budget.planned_command(ROBERTA, data_bin))
    for setting in ({"MASK_PROB": "0.3"}, {"TOKENS_PER_SAMPLE": "32"},
                    {"ARCH": "roberta_tiny"}, {"BATCH_SIZE": "32", "MAX_SENTENCES": "32"}):
        run = dataclasses.replace(ROBERTA, env=setting)
        assert pflops(budget.planned_command(run, data_bin)) != base, setting
    seeded = dataclasses.replace(ROBERTA, args=("--seed", "7"))
    assert pflops(budget.planned_command(seeded, data_bin)) == base


def test_a_changed_recipe_default_changes_the_budget(data_bin, tmp_path):
    """A copy of the RoBERTa demo recipe whose default length is 32, not 64: its budget is the
    one of a 32-token run."""
    recipe = (REPO_ROOT / ROBERTA.recipe).read_text()
    assert 'TOKENS_PER_SAMPLE="${TOKENS_PER_SAMPLE:-64}"' in recipe
    copy = tmp_path / "demo.sh"
    copy.write_text(recipe.replace('TOKENS_PER_SAMPLE:-64', 'TOKENS_PER_SAMPLE:-32').replace(
        '"$(dirname "${BASH_SOURCE[0]}")/pretrain.sh"',
        f'"{REPO_ROOT / "recipes" / "roberta" / "pretrain.sh"}"'))
    changed = pflops(budget.planned_command(RecipeRun("copy", str(copy)), data_bin))
    assert changed != pflops(budget.planned_command(ROBERTA, data_bin))
    shorter = dataclasses.replace(ROBERTA, env={"TOKENS_PER_SAMPLE": "32"})
    assert changed == pflops(budget.planned_command(shorter, data_bin))


def drifted(config, **defaults):
    """A subclass of the dataclass ``config`` with other ``defaults`` (each field's help kept)."""
    return dataclasses.make_dataclass(
        f"Drifted{config.__name__}",
        [(name, type(value), dataclasses.field(
            default=value, metadata=config.__dataclass_fields__[name].metadata))
         for name, value in defaults.items()], bases=(config,))


@pytest.mark.parametrize("run,task_class,config,flag,value", [
    (ROBERTA, MaskedLMTask, MaskedLMConfig, "--mask-prob", 0.3),
    # the [MASK] share sets the tokens 3ML's encoder keeps (RoBERTa's FLOPs do not see it)
    (THREE_ML, MaskedLMTask, MaskedLMConfig, "--leave-unmasked-prob", 0.3),
    (THREE_ML, MaskedLMTask, MaskedLMConfig, "--random-token-prob", 0.3),
    (ROBERTA, MaskedLMTask, MaskedLMConfig, "--tokens-per-sample", 32),
    (HYB_PRE, BidirectionalLMTask, BidirectionalLMConfig, "--plain-lm-prob", 0.5),
    (HYB_PRE, BidirectionalLMTask, BidirectionalLMConfig, "--mask-prob", 0.3),
], ids=["roberta-mask-prob", "3ml-leave-unmasked-prob", "3ml-random-token-prob",
        "roberta-tokens-per-sample", "hyb_pre-plain-lm-prob", "hyb_pre-mask-prob"])
def test_a_changed_task_default_changes_the_budget(run, task_class, config, flag, value,
                                                   data_bin, monkeypatch):
    """A flag the command leaves out takes the task config's default, as in fairseq-train: a
    changed default gives the budget of the flag set to it."""
    command = budget.planned_command(run, data_bin)
    before = pflops(without_flag(command, flag))
    name = flag[2:].replace("-", "_")
    changed = drifted(config, **{name: value})
    monkeypatch.setattr(task_class, "__dataclass", changed)
    monkeypatch.setitem(TASK_DATACLASS_REGISTRY, command[command.index("--task") + 1], changed)
    after = pflops(without_flag(command, flag))
    assert after != before
    assert after == pflops(without_flag(command, flag) + [flag, str(value)])


def test_a_changed_arch_default_changes_the_budget(data_bin, monkeypatch):
    """Sizes the command does not give are the arch function's: a changed default there gives
    the budget of the flag set to it."""
    command = budget.planned_command(ROBERTA, data_bin)
    arch = command[command.index("--arch") + 1]
    assert "--encoder-layers" not in command
    before = pflops(command)
    original = ARCH_CONFIG_REGISTRY[arch]

    def deeper(args):
        args.encoder_layers = getattr(args, "encoder_layers", 5)
        original(args)

    monkeypatch.setitem(ARCH_CONFIG_REGISTRY, arch, deeper)
    assert pflops(command) != before
    assert pflops(command) == pflops(command + ["--encoder-layers", "5"])


# --- (c) the demo's committed plan -------------------------------------------------------------

DEMO_DATA = REPO_ROOT / "data-bin" / "english-spm8000"


@pytest.mark.slow  # reads the 1.4M-line corpus for the bidirectional variants' shares
@pytest.mark.skipif(not (DEMO_DATA / "dict.txt").is_file(), reason="no demo corpus here")
def test_the_demos_committed_plan_is_reproduced():
    """On the demo corpus, the budget gives docs/demo/summary.json's updates and per-update
    PFLOPs for every group of the demo (each group's first run its baseline)."""
    summary = json.loads((REPO_ROOT / "docs" / "demo" / "summary.json").read_text())
    committed = {row["name"]: row for row in summary["masked_lm"] + summary["bidirectional"]
                 if "updates" in row}
    groups = [[run for run in demo.DEMO_RUNS if run.group == group]
              for group in demo.MASKED_LM_GROUPS] + [demo.BIDIRECTIONAL_RUNS]
    for runs in groups:
        updates = budget.equal_flops_updates(runs, DEMO_DATA)
        assert updates == [committed[run.name]["updates"] for run in runs]
        for run in runs:
            assert pflops(budget.planned_command(run, DEMO_DATA)) == pytest.approx(
                committed[run.name]["analytic_pflops_per_update"], rel=1e-12)
    assert {run.name: committed[run.name]["updates"] for runs in groups for run in runs} == {
        "roberta-15%": 700, "3ml-self-40%": 868, "bert-rab": 600, "swishrnn-bert": 604,
        "nxt_uni": 250, "msk_bi": 642, "hyb_pre": 368}
