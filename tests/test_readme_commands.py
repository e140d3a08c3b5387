"""Every command of the ```bash blocks of the README and of the system pages in docs/, run on the
demo's outputs.

The commands are read out of :data:`PAGES` (``\\`` continuations joined, ``# comments`` dropped):
README.md first, then the docs pages the README's per-system sections moved to, in this order,
which keeps every command after the ones whose outputs it reads: README.md (``make demo``, the
plugin's CLIs, the corpus, the recipes that train ``checkpoints/roberta_demo`` and
``checkpoints/3ml_demo``), docs/three_ml.md (the encoder export of ``3ml_demo`` and its
fine-tuning, the Table 3 speedup), docs/bidirectional.md (the ``hyb_pre`` demo checkpoint and
its evaluation), docs/bidirectional_finetuning.md and docs/bidirectional_scoring.md (both on that
checkpoint), docs/swishrnn.md (a run and its scores), docs/flops.md (the equal budget, the curves
of ``roberta_demo`` and ``3ml_demo``) and docs/exports.md (hub and Hugging Face exports of
``3ml_demo``). In those pages, examples that cannot run here (paper-scale runs, placeholders,
long studies) are fenced ```sh, which is not read; a docs page outside :data:`PAGES` with a
```bash block must be in :data:`UNREAD_PAGES` with the reason
(:func:`test_every_docs_page_with_bash_blocks_is_read_or_excused`).

Each command runs with ``bash -c`` in a temporary directory laid out like the repository root
(``fairseq_ext``, ``recipes`` and ``scripts`` are links to this checkout), with the virtual
environment's ``bin`` first on ``PATH`` as after ``make install``, in the order above. The corpus
is prepared first, as ``make demo`` does, by the README's own ``scripts/prepare_corpus.sh`` scaled
to a small English-like corpus the test writes (nothing is downloaded), so later commands find
what earlier ones wrote: the data-bin, the demo recipes' checkpoints, the export.

:data:`COMMANDS` says how each README command runs: as written, scaled down (a few updates, the
small corpus), under ``DRY_RUN=1`` where it cannot run on a CPU (its printed fairseq command is
checked for the documented values), or skipped with the reason. Each run checks the command's
effect, not only its exit status. A documented command without an entry, or an entry that
matches no documented command, fails
:func:`test_every_readme_command_has_an_entry_and_every_entry_a_command` (a fast test), so
neither the pages nor the table can drift.
"""
import dataclasses
import hashlib
import json
import math
import os
import random
import re
import shlex
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import torch
from recipe_checks import flag_values, printed_commands

import fairseq_ext  # noqa: F401  (fairseq checkpoints load with torch's weights-only unpickler)
from conftest import REPO_ROOT, WORDS, json_log_records, search_path
from fairseq_ext_lab import demo

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
#: The pages whose ```bash commands run, in the order they run (module doc: each command's inputs
#: come from pages before it).
PAGES = (README, DOCS / "three_ml.md", DOCS / "bidirectional.md",
         DOCS / "bidirectional_finetuning.md", DOCS / "bidirectional_scoring.md",
         DOCS / "swishrnn.md", DOCS / "flops.md", DOCS / "exports.md")
#: Docs pages with ```bash blocks that this test does not run, and why.
UNREAD_PAGES = {
    "benchmarks.md": "benchmark and GPU commands (scripts/gpu_suite.sh runs them on a lent GPU; "
                     "the CPU benchmarks take minutes each)",
}
DATA = "data-bin/python-docs-spm8000"
#: The test's stand-in for the embedded corpus (the Python docs, a Debian package download).
CORPUS = "corpus/python-docs.txt"
#: ``scripts/demo.py --updates``: the baseline's updates (a run with one update has no timed
#: interval, so the smallest run must get two; 4 gives RoBERTa-40% 2 at equal FLOPs).
DEMO_UPDATES = 4
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: The demo runs the README test scales `make demo` to (see scale_demo).
README_DEMO_RUNS = ("roberta-15%", "3ml-self-40%", "hyb_pre")
BIDIR_DEMO_CHECKPOINT = "checkpoints/bidirectional_demo/hyb_pre/checkpoint_last.pt"
AS_WRITTEN, SCALED, DRY_RUN, SKIPPED = "as written", "scaled", "DRY_RUN=1", "skipped"


# --- the README's commands ---------------------------------------------------------------------

def readme_commands(text: str) -> List[str]:
    """The commands of the ```bash blocks of a markdown text, in order: ``\\`` continuations
    joined, trailing ``# comments`` and comment-only or blank lines dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            line = re.sub(r"(^|\s)#.*$", "", pending + line).strip()
            pending = ""
            if line:
                commands.append(line)
        assert not pending, f"a ```bash block ends in a continuation: {block!r}"
    return commands


def documented_commands() -> List[str]:
    """The commands of :data:`PAGES`' ```bash blocks, page after page, in the order they run."""
    return [command for page in PAGES for command in readme_commands(page.read_text())]


def normalized(command: str) -> str:
    """The table's key of a command: its words joined by single spaces."""
    return " ".join(command.split())


# --- running them ------------------------------------------------------------------------------

@dataclasses.dataclass
class Work:
    """The temporary repository-like directory the commands run in, and what their checks noted
    for later ones."""

    root: Path
    notes: Dict[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Run:
    command: str  # what ran
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_shell(command: str, work: Work, timeout: int = 900) -> Run:
    env = dict(os.environ, PATH=search_path(), OMP_NUM_THREADS="1")
    for name in ("DRY_RUN", "NUM_GPUS", "DATA", "SAVE_DIR", "LOG_FILE"):  # the README's alone
        env.pop(name, None)
    proc = subprocess.run(["bash", "-c", command], cwd=work.root, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return Run(command, proc.returncode, proc.stdout, proc.stderr)


Scale = Callable[[str, Work], str]
Check = Callable[[Work, Optional[Run]], None]


@dataclasses.dataclass(frozen=True)
class Entry:
    """How one README command is run (``how``), the command that runs (``scale`` of the README
    command; None: as written) and what must hold afterwards (``check``; for a skipped command, a
    check of the stated ``reason``)."""

    how: str
    check: Check
    scale: Optional[Scale] = None
    reason: str = ""


def append(*words: str) -> Scale:
    """Words appended to the command (fairseq's argparse takes the last of a repeated flag)."""
    return lambda command, work: f"{command} {' '.join(words)}"


def with_env(command: str, **env: object) -> str:
    """``command`` with ``NAME=value`` assignments inserted right before its first word that is
    not an assignment (after the README's own, so they win)."""
    match = re.match(r"((?:[A-Za-z_]\w*=\S*\s+)*)(.*)", command, flags=re.S)
    assignments, rest = match.groups()
    assert "$(" not in assignments, f"cannot insert assignments safely into {command!r}"
    return assignments + " ".join(f"{name}={shlex.quote(str(value))}" for name, value in env.items()) \
        + " " + rest


def dry_run(**env: object) -> Scale:
    return lambda command, work: f"DRY_RUN=1 {with_env(command, **env)}"


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu")  # weights-only, with the plugin's allow-list


def updates_of(checkpoint: Path) -> int:
    """The updates a checkpoint was trained for (0 when there is none)."""
    if not checkpoint.exists():
        return 0
    return int(load_checkpoint(checkpoint)["optimizer_history"][-1]["num_updates"])


# --- scaling and checks of the training commands -----------------------------------------------

def two_more_updates(save_dir: str, overrides: Callable[[str, int], str], json_log: bool = True,
                     reason: str = "2 updates") -> Entry:
    """A training command scaled to 2 updates past the ``checkpoint_last.pt`` already in its
    ``save_dir`` (a later README command resumes an earlier one's run, as it would for a user);
    the check: the checkpoint got there, validated (a finite ``val_loss``), and with
    ``json_log`` (the recipes and YAMLs) the run's JSON log ``save_dir/train.log`` holds that
    validation."""
    last = Path(save_dir) / "checkpoint_last.pt"

    def scale(command: str, work: Work) -> str:
        target = updates_of(work.root / last) + 2
        work.notes[save_dir] = target
        return overrides(command, target)

    def check(work: Work, run: Run) -> None:
        target = work.notes[save_dir]
        state = load_checkpoint(work.root / last)
        assert state["optimizer_history"][-1]["num_updates"] == target
        assert math.isfinite(state["extra_state"]["val_loss"])
        log = work.root / save_dir / "train.log"
        if json_log:
            valid = json_log_records(log.read_text(), key="valid_num_updates")
            assert valid and int(valid[-1]["valid_num_updates"]) == target, log

    return Entry(SCALED, check, scale, reason)


def train_cli_overrides(command: str, target: int) -> str:
    return f"{command} --max-update {target} --cpu"


def hydra_overrides(command: str, target: int) -> str:
    return f"{command} optimization.max_update={target}"


def recipe_overrides(command: str, target: int) -> str:
    return with_env(command, TOTAL_UPDATES=target, WARMUP_UPDATES=1)


# --- the other checks ----------------------------------------------------------------------------

def makefile_rule(target: str) -> List[str]:
    """The recipe lines of a Makefile target."""
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", (REPO_ROOT / "Makefile").read_text(),
                      flags=re.M)
    assert match, f"the Makefile has no {target} rule"
    return [line.strip() for line in match.group(1).splitlines()]


def scale_demo(command: str, work: Work) -> str:
    # What `make demo` runs (`$(PY) scripts/demo.py`), at a few updates on the data-bin prepared
    # first. Absolute paths: the driver runs the recipes from the checkout it belongs to.
    runs_dir = work.root / "runs" / "demo" / "20260101-000000"
    work.notes["demo_runs"] = runs_dir
    # One run of each kind (the baseline, 3ML, a bidirectional variant): tests/test_demo.py runs
    # every DEMO_RUNS and BIDIRECTIONAL_RUNS entry end to end, so this one keeps CI's time down;
    # no fine-tuning table (its package download; tests/test_finetuning_stage.py runs the stage).
    return (f"python scripts/demo.py --updates {DEMO_UPDATES} --data {work.root / DATA} "
            f"--runs-dir {runs_dir} --only {' '.join(README_DEMO_RUNS)} --no-finetune")


def check_demo(work: Work, run: Run) -> None:
    # make demo runs the demo, comparing with a reference when COMPARE= names one
    assert makefile_rule("demo") == ["$(PY) scripts/demo.py $(if $(COMPARE),--compare $(COMPARE))"]
    runs_dir = work.notes["demo_runs"]
    summary = json.loads((runs_dir / "summary.json").read_text())
    rows = summary["masked_lm"]
    assert [row["name"] for row in rows] == [r.name for r in demo.DEMO_RUNS
                                             if r.name in README_DEMO_RUNS]
    assert [row["name"] for row in summary["bidirectional"]] == [
        r.name for r in demo.BIDIRECTIONAL_RUNS if r.name in README_DEMO_RUNS]
    assert all(row["updates"] == DEMO_UPDATES for row in summary["bidirectional"])
    assert rows[0]["updates"] == DEMO_UPDATES
    for row in rows:
        assert math.isfinite(row["mask_loss"]) and row["updates"] >= 1
        run_dir = runs_dir / row["name"].replace("%", "pct")
        assert updates_of(run_dir / "checkpoints" / "checkpoint_last.pt") == row["updates"]
    assert (runs_dir / "curves.png").read_bytes()[:8] == PNG_MAGIC
    assert "ppl [MASK]" in run.stdout and "infill acc R=1" in run.stdout


def check_make_test(work: Work, run: None) -> None:
    # `make test` is lint + the whole suite but for its heavy, real-process and lab tests (make
    # test-fresh runs them), this test included: running it here would recurse.
    assert makefile_rule("test") == [
        '$(PYTEST) -m "not heavy and not real_processes and not lab" tests $(PYTEST_ARGS)']
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^PYTEST := .*\$\(PY\) -m pytest -q", makefile, flags=re.M)


def check_validate(work: Work, run: Run) -> None:
    match = re.search(r"valid on 'valid' subset \| loss (\S+) \| loss_mask (\S+)", run.output)
    assert match, "fairseq-validate logged no valid loss"
    # the checkpoint's criterion (masked_lm_flops: per-category losses too), a finite loss
    assert all(math.isfinite(float(value)) and float(value) > 0 for value in match.groups())


def scale_prepare_corpus(command: str, work: Work) -> str:
    # The bare command builds the embedded English corpus (Debian packages, downloaded), and
    # --source python-docs Debian's python3.11-doc; the same defaults on the small corpus
    # (--input wins over --source), into the data-bin make demo reads.
    return f"{command} --input {CORPUS} --destdir {DATA}"


def dict_digest(work: Work) -> str:
    return hashlib.sha256((work.root / DATA / "dict.txt").read_bytes()).hexdigest()


def check_prepare_corpus(work: Work, run: Run) -> None:
    # the data-bin prepared before the first command is complete and is reused, not rebuilt
    for step in ("clean", "tokenizer", "encode", "dict", "preprocess"):
        assert f"skip: {step} (done)" in run.stdout
    assert dict_digest(work) == work.notes["dict"]
    assert f"summary: {DATA}" in run.stdout


def check_my_docs(work: Work, run: Run) -> None:
    destdir = work.root / "data-bin/mine"
    manifest = json.loads((destdir / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert sum(manifest["summary"]["documents"].values()) == len(list((work.root / "my_docs").iterdir()))
    for name in ("dict.txt", "spm.model", *(f"{split}.{ext}" for split in ("train", "valid", "test")
                                              for ext in ("bin", "idx"))):
        assert (destdir / name).is_file(), name


def check_pretrain_dry_run(work: Work, run: Run) -> None:
    [command] = printed_commands(run.stdout)
    assert Path(command[0]).name == "fairseq-train" and command[1] == DATA
    flags = flag_values(command)
    assert flags["--arch"] == "roberta_base"
    # BATCH_SIZE=2048 sequences = 16 per GPU x NUM_GPUS=8 x update_freq 16
    assert (flags["--batch-size"], flags["--update-freq"]) == ("16", "16")
    assert flags["--max-update"] == "500000" and flags["--tokens-per-sample"] == "512"
    assert not (work.root / "checkpoints/roberta").exists()  # printed, not run


def check_bidirectional_pretrain_dry_run(work: Work, run: Run) -> None:
    [command] = printed_commands(run.stdout)
    assert Path(command[0]).name == "fairseq-train" and command[1] == DATA
    flags = flag_values(command)
    assert (flags["--task"], flags["--variant"], flags["--arch"]) == (
        "bidirectional_lm", "msk_bi", "bidir_lm_355m")
    # Table 2 at 355M: 0.5M tokens = 8192 per GPU x NUM_GPUS=8 x update_freq 8, lr 3e-4
    assert (flags["--max-tokens"], flags["--update-freq"], flags["--lr"]) == ("8192", "8", "0.0003")
    assert not (work.root / "checkpoints/bidirectional").exists()  # printed, not run


def check_eval_mode(run: Run, mode: str, r_values: List[str]) -> None:
    """A fairseq-validate --eval-mode run: one report line per R (or the full-document line),
    each with finite figures, and the summary with the mode's metrics."""
    lines = re.findall(rf"\| {mode}(?: \| r_bidir (\S+))? \| (?:documents|positions) (\d+) \| "
                       r"tokens (\d+) \| loss (\S+) ± (\S+) \| ppl (\S+) ± (\S+)", run.output)
    assert [r for r, *_ in lines] == (r_values or [""]), run.output[-2000:]
    for _, rows, tokens, loss, loss_se, ppl, ppl_se in lines:
        assert int(rows) > 0 and int(tokens) > 0 and math.isfinite(float(loss))
        assert float(ppl) == pytest.approx(2 ** float(loss), rel=1e-2)
        # the delta method: SE(2^loss) = 2^loss * ln 2 * SE(loss)
        assert float(loss_se) > 0
        rounding = float(ppl) * math.log(2) * 0.0005 + 0.005  # loss_se printed to 3 places, ppl_se to 2
        assert float(ppl_se) == pytest.approx(float(ppl) * math.log(2) * float(loss_se), abs=rounding)
    summary = run.output[run.output.index("valid on 'valid' subset"):]
    expected = {"full_doc_ppl": ["ppl", "documents"], "suffix_ppl": [f"suffix_ppl_r{r}" for r in r_values],
                "infill": [f"infill_acc_r{r}" for r in r_values]}[mode]
    assert all(f"| {name} " in summary for name in expected), summary


def check_masked_lm_scores(run: Run) -> None:
    """One line per checkpoint: its [MASK] loss, the training unigram's on the same positions
    and the paired gap, each ± its standard error, and the gap is the difference of the two."""
    match = re.search(r"\[MASK\] (\S+) ± (\S+) bits; unigram (\S+) ± (\S+); below it "
                      r"(\S+) ± (\S+) \((\d+) sequences, (\d+) \[MASK\]\)", run.output)
    assert match, run.output[-2000:]
    loss, _, unigram, _, below, error = (float(v) for v in match.groups()[:6])
    assert below == pytest.approx(unigram - loss, abs=2e-3) and error > 0
    assert int(match.group(7)) > 0 and int(match.group(8)) > 0


def check_evaluate_table(run: Run) -> None:
    assert "| full ppl |" in run.stdout and "infill acc R=1" in run.stdout
    row = next(line for line in run.stdout.splitlines() if line.startswith("| hyb_pre"))
    cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
    # each cell "value ± standard error"
    pairs = [re.fullmatch(r"(\S+) ± (\S+)", cell) for cell in cells]
    assert len(cells) == 11 and all(pairs), row
    assert all(math.isfinite(float(pair[1])) and float(pair[2]) >= 0 for pair in pairs), row


def check_equal_budget_dry_run(work: Work, run: Run) -> None:
    [command] = printed_commands(run.stdout)
    assert Path(command[0]).name == "fairseq-train" and command[1] == DATA
    flags = flag_values(command)
    assert flags["--arch"] == "3ml_self_base" and flags["--mask-prob"] == "0.4"
    # the updates that buy roberta_base's 125K updates (python -m fairseq_ext.flops)
    assert flags["--max-update"] == flags["--total-num-update"] == "152441"


def check_export(work: Work, run: Run) -> None:
    export = torch.load(work.root / "exports/3ml.pt", weights_only=True)  # plain dicts only
    source = load_checkpoint(work.root / "checkpoints/3ml_demo/checkpoint_last.pt")["model"]
    assert export["cfg"]["model"]["_name"] == "roberta"
    assert not [key for key in export["model"] if key.startswith("mask_decoder")]
    encoder = [key for key in source if key.startswith("encoder.sentence_encoder.")]
    assert encoder and all(torch.equal(export["model"][key], source[key]) for key in encoder)


def check_finetune_args(work: Work, run: Run) -> None:
    flags = run.stdout.split()
    # the 3ML demo trains on samples of up to 64 tokens (recipes/3ml/demo.sh)
    assert flags[0] == "--arch" and flags[-2:] == ["--max-positions", "64"], run.stdout
    work.notes["finetune_args"] = flags


def assert_export_flags(command: List[str], work: Work) -> None:
    """The fine-tuning command rebuilds the export's encoder: the model flags and
    ``--max-positions`` that ``--print-finetune-args`` printed."""
    *model, max_positions_flag, max_positions = work.notes["finetune_args"]
    assert any(command[i:i + len(model)] == model for i in range(len(command))), model
    assert flag_values(command)[max_positions_flag] == max_positions


#: RTE's training examples (the GLUE download): the dry runs have no data-bin to count them in.
RTE_TRAIN_EXAMPLES = 2490
GLUE_DATA_REASON = (
    "glue/RTE-bin is made by scripts/prepare_glue.sh from GLUE files the user downloads, and "
    "nothing can be downloaded here, so the recipe prints its command")
GLUE_DRY_RUN_REASON = (f"{GLUE_DATA_REASON}, counting RTE's {RTE_TRAIN_EXAMPLES} training "
                       "examples (TRAIN_EXAMPLES)")


def check_finetune_dry_run(work: Work, run: Run) -> None:
    [command] = printed_commands(run.stdout)
    assert Path(command[0]).name == "fairseq-train" and command[1] == "glue/RTE-bin"
    flags = flag_values(command)
    assert flags["--restore-file"] == "exports/3ml.pt"
    assert flags["--lr"] == "3e-05" and flags["--max-epoch"] == "10"
    assert (flags["--batch-size"], flags["--update-freq"]) == ("16", "1")
    total = 10 * math.ceil(RTE_TRAIN_EXAMPLES / 16)  # EPOCHS x updates per epoch
    assert flags["--total-num-update"] == str(total)
    assert flags["--warmup-updates"] == str(round(0.06 * total))
    assert flags["--num-classes"] == "2" and flags["--best-checkpoint-metric"] == "accuracy"
    assert_export_flags(command, work)


def check_grid_dry_run(work: Work, run: Run) -> None:
    commands = printed_commands(run.stdout)
    assert len(commands) == 1 and "1 points" in run.stdout
    flags = flag_values(commands[0])
    assert commands[0][1] == "glue/RTE-bin" and flags["--restore-file"] == "exports/3ml.pt"
    assert (flags["--lr"], flags["--batch-size"], flags["--max-epoch"], flags["--seed"]) == (
        "3e-05", "16", "10", "1")
    assert flags["--save-dir"] == "checkpoints/3ml_glue/RTE/lr3e-05_bs16_ep10_seed1"
    assert_export_flags(commands[0], work)


def check_bidirectional_finetune_dry_run(run: Run) -> None:
    """Stock sentence_prediction on the demo checkpoint, with its arch, the attention setting and
    Table 11's RTE updates."""
    [command] = printed_commands(run.stdout)
    assert command[1] == "glue/RTE-bin"
    flags = flag_values(command)
    assert flags["--restore-file"] == BIDIR_DEMO_CHECKPOINT
    assert (flags["--task"], flags["--criterion"]) == ("sentence_prediction", "sentence_prediction")
    assert (flags["--arch"], flags["--r-bidir"]) == ("bidir_lm_mini", "1")
    assert flags["--max-update"] == "2036" and flags["--num-classes"] == "2"


def check_bidirectional_grid_dry_run(run: Run) -> None:
    """The Table 10 grid on RTE: lr x batch x r_bidir, 24 runs."""
    commands = printed_commands(run.stdout)
    flags = [flag_values(command) for command in commands]
    points = {(f["--lr"], int(f["--batch-size"]) * int(f["--update-freq"]), f["--r-bidir"])
              for f in flags}
    assert len(commands) == 24 and len(points) == 24
    assert {lr for lr, _, _ in points} == {"5e-06", "1e-05", "2e-05", "5e-05"}
    assert {batch for _, batch, _ in points} == {16, 32, 64}
    assert {r for _, _, r in points} == {"0", "1"}


def check_infill_rescore(run: Run) -> None:
    """Table 6's report: the proposer's direct accuracy, the top-8 upper bound (at least it) and
    the scorer's accuracy (at most the bound), on every scorable document."""
    assert run.returncode == 0, run.output[-2000:]
    figures = dict(re.findall(r"^(proposer|top-8|scorer) .*\| accuracy (\S+)(?: ± \S+)?$",
                              run.stdout, re.M))
    assert set(figures) == {"proposer", "top-8", "scorer"}, run.stdout
    direct, bound, rescored = (float(figures[k]) for k in ("proposer", "top-8", "scorer"))
    assert 0 <= direct <= bound <= 100 and 0 <= rescored <= bound
    assert int(re.search(r"documents (\d+)", run.stdout).group(1)) > 0


def check_verbalizers_are_split(work: Work) -> None:
    """The skip's reason: Table 8's verbalizers are not single pieces of the stand-in corpus."""
    symbols = {line.split()[0] for line in (work.root / DATA / "dict.txt").read_text().splitlines()}
    assert not {"\u2581Yes", "\u2581No", "\u2581Also"} <= symbols


def check_score_choices(run: Run) -> None:
    assert run.returncode == 0, run.output[-2000:]
    match = re.search(r"\| (\d+) rows \|.*\| accuracy (\S+) \((\d+)/(\d+) labelled rows\)",
                      run.stdout)
    assert match, run.stdout
    rows, accuracy, correct, labelled = match.groups()
    assert 0 < int(labelled) <= int(rows)  # the shipped file has an unlabelled row too
    assert float(accuracy) == pytest.approx(100.0 * int(correct) / int(labelled), abs=0.01)


def check_flops(work: Work, run: Run) -> None:
    updates = re.search(r"^updates: (\d+)$", run.stdout, flags=re.M)
    speedup = re.search(r"^speedup: (\S+)$", run.stdout, flags=re.M)
    assert updates and speedup, run.stdout
    # the figures docs/flops.md prints under the command
    claimed = re.search(r"# \.\.\. updates: (\d+) / speedup: (\S+)", (DOCS / "flops.md").read_text())
    assert claimed and (updates.group(1), speedup.group(1)) == claimed.groups()


def check_table_3_speedup(work: Work, run: Run) -> None:
    """3ML-self-large-40% against 24hBERT: docs/three_ml.md's (and Table 3's) 1.34."""
    speedup = re.search(r"^speedup: (\S+)$", run.stdout, flags=re.M)
    assert speedup and speedup.group(1) == "1.34", run.stdout
    assert "# ... speedup: 1.34" in (DOCS / "three_ml.md").read_text()


def check_plot(work: Work, run: Run) -> None:
    assert (work.root / "curves.png").read_bytes()[:8] == PNG_MAGIC
    for label in ("roberta_demo", "3ml_demo"):
        match = re.search(rf"^{label}: (\d+) valid points", run.stdout, flags=re.M)
        assert match and int(match.group(1)) >= 1, run.stdout
    assert "wrote curves.png" in run.stdout


def check_hub_export(work: Work, run: Run) -> None:
    hub = work.root / "exports/3ml-hub"
    assert sorted(p.name for p in hub.iterdir()) == ["dict.txt", "model.pt",
                                                     "sentencepiece.bpe.model"]
    export = torch.load(hub / "model.pt", weights_only=True)
    assert export["cfg"]["bpe"]["_name"] == "sentencepiece"
    assert (hub / "dict.txt").read_bytes() == (work.root / DATA / "dict.txt").read_bytes()
    assert (hub / "sentencepiece.bpe.model").read_bytes() == (
        work.root / DATA / "spm.model").read_bytes()
    assert not [key for key in export["model"] if key.startswith("mask_decoder")]


def check_full_hub_export(work: Work, run: Run) -> None:
    export = torch.load(work.root / "exports/3ml-full/model.pt", weights_only=True)
    source = load_checkpoint(work.root / "checkpoints/3ml_demo/checkpoint_last.pt")["model"]
    assert export["model"].keys() == source.keys()
    assert all(torch.equal(export["model"][key], value) for key, value in source.items())


def check_fill_mask_comparison(work: Work, run: Run) -> None:
    rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| ")][1:]
    assert [row[1].strip() for row in rows] == ["3ml-full", "3ml-hub"], run.stdout
    assert rows[0][2].strip() == "3ML, decoder kept" and rows[1][2].strip().startswith("encoder")
    assert rows[0][3] == rows[1][3] and int(rows[0][3]) > 0  # the same masked tokens


def check_hf_export(work: Work, run: Run) -> None:
    out = work.root / "exports/3ml-hf"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (out / name).is_file(), name
    info = json.loads((out / "fairseq_export.json").read_text())
    assert info["max_abs_logit_diff"] <= 1e-4, info


#: How each README command runs. Keys are the commands with single spaces.
COMMANDS: Dict[str, Entry] = {
    "make demo": Entry(
        SCALED, check_demo, scale_demo,
        "`make demo` runs `$(PY) scripts/demo.py`; here at --updates 4 on the prepared data-bin "
        "(tests/test_demo.py checks the driver's table in detail)"),
    "make test": Entry(
        SKIPPED, check_make_test,
        reason="runs the suite, this test included (it would recurse)"),
    "fairseq-train data-bin/python-docs-spm8000 --user-dir fairseq_ext --task masked_lm "
    "--criterion masked_lm_flops --arch roberta_small --tokens-per-sample 128 --max-positions 128 "
    "--batch-size 16 --optimizer fused_adamw --lr 5e-4 --max-update 1000 "
    "--save-dir checkpoints/roberta_small":
        two_more_updates("checkpoints/roberta_small", train_cli_overrides, json_log=False,
                         reason="2 updates, --cpu"),
    "fairseq-hydra-train --config-dir recipes/config/roberta --config-name demo "
    "task.data=data-bin/python-docs-spm8000":
        two_more_updates("checkpoints/roberta_demo", hydra_overrides),
    "fairseq-validate data-bin/python-docs-spm8000 --user-dir fairseq_ext --task masked_lm "
    "--path checkpoints/roberta_demo/checkpoint_last.pt --batch-size 16 "
    "--skip-invalid-size-inputs-valid-test":
        Entry(AS_WRITTEN, check_validate),
    "scripts/prepare_corpus.sh": Entry(
        SCALED, check_prepare_corpus, scale_prepare_corpus,
        "the default input is 40 Debian package downloads; the small corpus instead"),
    "scripts/prepare_corpus.sh --source python-docs": Entry(
        SCALED, check_prepare_corpus, scale_prepare_corpus,
        "the input is a Debian package download; the small corpus instead"),
    "scripts/prepare_corpus.sh --input my_docs/ --vocab-size 32000 --destdir data-bin/mine":
        Entry(AS_WRITTEN, check_my_docs, reason="my_docs/ is a directory of 40 small documents"),
    "DATA=data-bin/python-docs-spm8000 recipes/roberta/demo.sh":
        two_more_updates("checkpoints/roberta_demo", recipe_overrides),
    "DATA=data-bin/python-docs-spm8000 ARCH=roberta_base BATCH_SIZE=2048 NUM_GPUS=8 "
    "recipes/roberta/pretrain.sh":
        Entry(DRY_RUN, check_pretrain_dry_run, dry_run(),
              "roberta_base for 500K updates on 8 GPUs"),
    "DATA=data-bin/python-docs-spm8000 recipes/3ml/demo.sh":
        two_more_updates("checkpoints/3ml_demo", recipe_overrides),
    "DATA=data-bin/python-docs-spm8000 VARIANT=hyb_pre recipes/bidirectional/demo.sh":
        two_more_updates("checkpoints/bidirectional_demo/hyb_pre", recipe_overrides),
    "fairseq-validate data-bin/python-docs-spm8000 --user-dir fairseq_ext --path "
    f"{BIDIR_DEMO_CHECKPOINT} "
    "--task bidirectional_lm --eval-mode full_doc_ppl --batch-size 16 --cpu":
        Entry(AS_WRITTEN, lambda work, run: check_eval_mode(run, "full_doc_ppl", [])),
    "fairseq-validate data-bin/python-docs-spm8000 --user-dir fairseq_ext --path "
    f"{BIDIR_DEMO_CHECKPOINT} "
    "--task bidirectional_lm --eval-mode suffix_ppl --r-bidir 0,0.25,0.5,0.75,1 --batch-size 16 "
    "--cpu":
        Entry(AS_WRITTEN, lambda work, run: check_eval_mode(run, "suffix_ppl",
                                                            ["0", "0.25", "0.5", "0.75", "1"])),
    "fairseq-validate data-bin/python-docs-spm8000 --user-dir fairseq_ext --path "
    f"{BIDIR_DEMO_CHECKPOINT} "
    "--task bidirectional_lm --eval-mode infill --r-bidir 0,1 --batch-size 16 --cpu":
        Entry(AS_WRITTEN, lambda work, run: check_eval_mode(run, "infill", ["0", "1"])),
    f"DATA=data-bin/python-docs-spm8000 CPU=1 recipes/bidirectional/evaluate.sh {BIDIR_DEMO_CHECKPOINT}":
        Entry(AS_WRITTEN, lambda work, run: check_evaluate_table(run)),
    "python scripts/infill_rescore.py data-bin/python-docs-spm8000 --proposer "
    f"{BIDIR_DEMO_CHECKPOINT} --scorer {BIDIR_DEMO_CHECKPOINT} --top-k 8 --cpu":
        Entry(AS_WRITTEN, lambda work, run: check_infill_rescore(run)),
    f"python scripts/score_choices.py --path {BIDIR_DEMO_CHECKPOINT} --data "
    "data-bin/python-docs-spm8000 --input tests/data/choices_context.jsonl --cpu":
        Entry(AS_WRITTEN, lambda work, run: check_score_choices(run)),
    f"python scripts/score_choices.py --path {BIDIR_DEMO_CHECKPOINT} --data "
    "data-bin/python-docs-spm8000 --input tests/data/choices_premise_hypothesis.jsonl --template "
    '"{premise}, right? {choice}, {hypothesis}" --choices Yes,No,Also --scoring infill --cpu':
        Entry(SKIPPED, lambda work, run: check_verbalizers_are_split(work), reason=(
            "the test's stand-in corpus has no 'Yes', 'No' or 'Also', so its sentencepiece model "
            "splits them; tests/test_bidirectional_scoring.py runs this template on a data-bin "
            "where each is one token")),
    f"TASK=RTE DATA=glue/RTE-bin CKPT={BIDIR_DEMO_CHECKPOINT} SIZE=mini R_BIDIR=1 "
    "recipes/bidirectional/finetune_glue.sh":
        Entry(DRY_RUN, lambda work, run: check_bidirectional_finetune_dry_run(run), dry_run(),
              reason=GLUE_DATA_REASON),
    f"DATA_ROOT=glue CKPT={BIDIR_DEMO_CHECKPOINT} SIZE=mini TASKS=RTE "
    "recipes/bidirectional/finetune_grid.sh":
        Entry(DRY_RUN, lambda work, run: check_bidirectional_grid_dry_run(run), dry_run(),
              reason=GLUE_DATA_REASON),
    "DATA=data-bin/python-docs-spm8000 VARIANT=msk_bi SIZE=355m NUM_GPUS=8 "
    "recipes/bidirectional/pretrain.sh":
        Entry(DRY_RUN, check_bidirectional_pretrain_dry_run, dry_run(),
              "bidir_lm_355m for 190K updates on 8 GPUs"),
    "DATA=data-bin/python-docs-spm8000 SAVE_DIR=checkpoints/swishrnn_mini recipes/swishrnn/demo.sh":
        two_more_updates("checkpoints/swishrnn_mini", recipe_overrides),
    "python -m fairseq_ext_lab.evaluation.masked_lm_scores data-bin/python-docs-spm8000 "
    "checkpoints/swishrnn_mini/checkpoint_last.pt":
        Entry(AS_WRITTEN, lambda work, run: check_masked_lm_scores(run)),
    "DATA=data-bin/python-docs-spm8000 TOTAL_UPDATES=$(python -m fairseq_ext.flops --arch 3ml_self_base "
    "--mask-prob 0.4 --budget-of roberta_base:125000 | awk '/^updates:/ {print $2}') "
    "recipes/3ml/pretrain_longer.sh":
        Entry(DRY_RUN, check_equal_budget_dry_run,
              lambda command, work: f"DRY_RUN=1 {command}", "3ml_self_base for 152K updates"),
    "python scripts/export_encoder.py checkpoints/3ml_demo/checkpoint_last.pt exports/3ml.pt":
        Entry(AS_WRITTEN, check_export),
    "python scripts/export_encoder.py --print-finetune-args exports/3ml.pt":
        Entry(AS_WRITTEN, check_finetune_args),
    "TASK=RTE DATA=glue/RTE-bin PRETRAINED=exports/3ml.pt LR=3e-05 BATCH_SIZE=16 EPOCHS=10 "
    "recipes/3ml/finetune_glue.sh":
        Entry(DRY_RUN, check_finetune_dry_run, dry_run(TRAIN_EXAMPLES=RTE_TRAIN_EXAMPLES),
              GLUE_DRY_RUN_REASON),
    "TASK=RTE DATA=glue/RTE-bin PRETRAINED=exports/3ml.pt recipes/3ml/finetune_glue_grid.sh":
        Entry(DRY_RUN, check_grid_dry_run,
              dry_run(TRAIN_EXAMPLES=RTE_TRAIN_EXAMPLES, SEEDS=1, LRS="3e-05", BATCH_SIZES=16,
                      EPOCHS_LIST=10),
              GLUE_DRY_RUN_REASON + "; one point of the grid (each point reads the export's "
              "flags, seconds each; tests/test_three_ml_export.py checks the whole grid)"),
    "python -m fairseq_ext.flops --arch 3ml_self_base --tokens-per-sample 512 --mask-prob 0.4 "
    "--budget-of roberta_base:125000":
        Entry(AS_WRITTEN, check_flops),
    "python -m fairseq_ext.flops --arch 3ml_self_large --mask-prob 0.4 --vs roberta_large_prenorm "
    "--tokens-per-sample 128":
        Entry(AS_WRITTEN, check_table_3_speedup),
    "python scripts/plot_curves.py checkpoints/roberta_demo checkpoints/3ml_demo --out curves.png":
        Entry(AS_WRITTEN, check_plot),
    "python scripts/export_encoder.py checkpoints/3ml_demo/checkpoint_last.pt exports/3ml-hub":
        Entry(AS_WRITTEN, check_hub_export),
    "python scripts/export_encoder.py --keep-decoder checkpoints/3ml_demo/checkpoint_last.pt "
    "exports/3ml-full":
        Entry(AS_WRITTEN, check_full_hub_export),
    "python scripts/compare_fill_mask.py --data data-bin/python-docs-spm8000 --tokens-per-sample 64 "
    "exports/3ml-full exports/3ml-hub":
        Entry(AS_WRITTEN, check_fill_mask_comparison),
    "python scripts/export_hf.py exports/3ml-hub exports/3ml-hf":
        Entry(AS_WRITTEN, check_hf_export),
}


# --- the tests ------------------------------------------------------------------------------------

def test_readme_command_extraction():
    text = ("```\nnot bash\n```\n```bash\na --x 1 \\\n    --y 2   # comment\n\n# only a comment\n"
            "b 'c' && d\n```\n```python\nprint()\n```\n```bash\ne\n```\n")
    assert readme_commands(text) == ["a --x 1      --y 2", "b 'c' && d", "e"]
    assert with_env("A=1 B=2 recipes/x.sh --flag", C=3) == "A=1 B=2 C=3 recipes/x.sh --flag"
    assert with_env("recipes/x.sh", C="a b") == "C='a b' recipes/x.sh"


def test_every_readme_command_has_an_entry_and_every_entry_a_command():
    commands = {normalized(command) for command in documented_commands()}
    missing = sorted(commands - set(COMMANDS))
    assert not missing, ("documented commands with no entry in COMMANDS (say how they are run): "
                         f"{missing}")
    stale = sorted(set(COMMANDS) - commands)
    assert not stale, f"COMMANDS entries that match no command of {[p.name for p in PAGES]}: {stale}"
    for key, entry in COMMANDS.items():
        assert entry.how in (AS_WRITTEN, SCALED, DRY_RUN, SKIPPED), key
        assert (entry.scale is None) == (entry.how in (AS_WRITTEN, SKIPPED)), key
        assert entry.reason or entry.how == AS_WRITTEN, f"say why {key!r} is {entry.how}"


def test_every_docs_page_with_bash_blocks_is_read_or_excused():
    """A ```bash block in docs/ is run (its page is in PAGES) or its page says why not
    (UNREAD_PAGES); examples that cannot run are fenced ```sh instead."""
    read = {page.name for page in PAGES if page.parent == DOCS}
    with_bash = {page.name for page in DOCS.glob("*.md") if readme_commands(page.read_text())}
    unread = sorted(with_bash - read - set(UNREAD_PAGES))
    assert not unread, (f"docs pages with ```bash blocks that no test runs: {unread}; add them to "
                        "PAGES (with COMMANDS entries) or UNREAD_PAGES, or fence the examples ```sh")
    stale = sorted(name for name in UNREAD_PAGES if name not in with_bash)
    assert not stale, f"UNREAD_PAGES that have no ```bash block (remove them): {stale}"
    assert all(page.is_file() for page in PAGES), PAGES


def write_corpus(path: Path, documents: int, seed: int) -> None:
    """English-like documents (capitalised sentences over a small vocabulary), a blank line
    between them."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for _ in range(documents):
            for _ in range(rng.randint(2, 6)):
                sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20)))
                f.write(sentence[0].upper() + sentence[1:] + ".\n")
            f.write("\n")


def prepare_work(root: Path) -> Work:
    """The repository-like directory: links to the checkout's code, the small corpus, the user's
    ``my_docs/``, and the data-bin prepared as ``make demo`` does before its first command."""
    for name in ("fairseq_ext", "recipes", "scripts"):
        (root / name).symlink_to(REPO_ROOT / name)
    (root / "tests").mkdir()
    (root / "tests" / "data").symlink_to(REPO_ROOT / "tests" / "data")  # the shipped JSONL examples
    write_corpus(root / CORPUS, 400, seed=0)
    for number in range(40):
        write_corpus(root / "my_docs" / f"doc{number:02d}.txt", 2, seed=100 + number)
    work = Work(root)
    prepare = scale_prepare_corpus("scripts/prepare_corpus.sh", work)
    run = run_shell(prepare, work)
    assert run.returncode == 0, f"{prepare}\n{run.output[-6000:]}"
    work.notes["dict"] = dict_digest(work)
    return work


@pytest.mark.slow
def test_readme_commands_run_on_the_demo_outputs(tmp_path):
    work = prepare_work(tmp_path)
    commands = documented_commands()
    missing = [command for command in commands if normalized(command) not in COMMANDS]
    assert not missing, f"documented commands with no entry in COMMANDS: {missing}"
    for command in commands:
        entry = COMMANDS[normalized(command)]
        if entry.how == SKIPPED:
            entry.check(work, None)
            continue
        to_run = entry.scale(command, work) if entry.scale else command
        run = run_shell(to_run, work)
        context = (f"documented command ({entry.how}): {command}\nran: {to_run}\n"
                   f"--- stdout ---\n{run.stdout[-5000:]}\n--- stderr ---\n{run.stderr[-5000:]}")
        assert run.returncode == 0, context
        try:
            entry.check(work, run)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{context}") from error
