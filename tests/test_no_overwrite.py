"""Nothing the user saved is overwritten without ``--force``: every command that writes
a file the user keeps (exports, prepared data-bins, results pages, plots, report JSON, candidate
and prediction files, grid results, benchmark results) refuses an existing one, with one line on
stderr and exit status 2, before any expensive work: each case gives the command inputs it would
fail on had it read them (a checkpoint that is not one, for instance), so reaching the refusal
proves the check comes first. Where it is cheap, ``--force`` is shown to replace the file.
:mod:`fairseq_ext.training.output_files`' atomic writes leave an earlier file whole when a write fails.
"""
import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from fairseq_ext.corpus import glue, prepare_corpus
from fairseq_ext.export import encoder as export
from fairseq_ext.export import huggingface as hf_export
from fairseq_ext.training.output_files import OutputError, atomic_directory, atomic_file
from fairseq_ext_lab import demo
from fairseq_ext_lab.benchmarks import bidirectional as bench_bidirectional
from fairseq_ext_lab.benchmarks import three_ml as bench_3ml
from fairseq_ext_lab.evaluation import bidirectional_report, finetune_grid, infill_rescore, multiple_choice
from fairseq_ext_lab.reporting import curves

PRECIOUS = b"the user's own\n"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclasses.dataclass
class Writer:
    """One command, in process: ``main(argv)`` must refuse to write over ``out``."""

    main: Callable[[List[str]], int]
    argv: List[object]
    out: Path
    message: str  # the stderr line (a regex)

    def run(self, *extra) -> int:
        return self.main([str(arg) for arg in [*self.argv, *extra]])


def refusal(prog: str, out: Path) -> str:
    return re.escape(f"{prog}: error: {out} exists; pass --force to overwrite it")


def put(path: Path, data: bytes = b"not what the command expects\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def data_bin(root: Path) -> Path:
    """A data-bin as far as the commands look before their outputs: a dict.txt."""
    put(root / "data-bin" / "dict.txt", b"hello 5\nworld 3\n")
    return root / "data-bin"


# --- the writers: a builder per command, from its inputs (tmp/in) and its output (tmp/out) --------

def export_encoder_file(inp, out):
    target = put(out / "encoder.pt", PRECIOUS)
    return Writer(export.main, [put(inp / "checkpoint.pt"), target], target,
                  refusal("export_encoder.py", target))


def export_encoder_hub(inp, out):
    target = out / "3ml-hub"
    put(target / "model.pt", PRECIOUS)
    return Writer(export.main, [put(inp / "checkpoint.pt"), target], target,
                  refusal("export_encoder.py", target))


def export_hf_directory(inp, out):
    pytest.importorskip("transformers")  # the hf extra (requirements-hf.txt)
    target = out / "3ml-hf"
    put(target / "config.json", PRECIOUS)
    return Writer(hf_export.main, [put(inp / "checkpoint.pt"), target], target,
                  refusal("export_hf.py", target))


def prepare_glue_bin(inp, out):
    (inp / "glue" / "RTE").mkdir(parents=True)
    target = out / "RTE-bin"
    put(target / "input0" / "train.bin", PRECIOUS)
    argv = [inp / "glue", put(inp / "spm.model"), data_bin(inp) / "dict.txt", out, "RTE"]
    return Writer(glue.main, argv, target, refusal("prepare_glue.sh", target))


def prepare_corpus_foreign_files(inp, out):
    """A destdir with files the tool would write but no manifest: refused even with
    --overwrite."""
    put(out / "dict.txt", PRECIOUS)
    argv = ["--input", put(inp / "corpus.txt", b"One line.\n\nAnother one.\n"), "--destdir", out,
            "--vocab-size", "50"]
    return Writer(prepare_corpus.main, argv, out, re.escape(
        f"fairseq-ext-prepare-corpus: error: {out} already has dict.txt but no manifest.json, so "
        "this tool did not make them; choose another --destdir (nothing was changed)"))


def prepare_corpus_other_settings(inp, out):
    """A data-bin built with other settings (a finished step): replaced only with
    --overwrite."""
    put(out / "manifest.json", json.dumps({"settings": {"vocab_size": 8000}}).encode())
    put(out / "prep" / "clean.stamp.json", b"{}")
    put(out / "dict.txt", PRECIOUS)
    argv = ["--input", put(inp / "corpus.txt", b"One line.\n\nAnother one.\n"), "--destdir", out,
            "--vocab-size", "50"]
    return Writer(prepare_corpus.main, argv, out, re.escape(
        f"fairseq-ext-prepare-corpus: error: {out} holds a data-bin built with other settings (")
        + r".*vocab_size: 8000 -> 50.*" + re.escape(
        "); choose another --destdir, or pass --overwrite to replace this tool's files there"))


def plot_curves_png(inp, out):
    target = put(out / "curves.png", PRECIOUS)
    return Writer(curves.main, [training_log(inp / "run" / "train.log"), "--out", target], target,
                  refusal("plot_curves.py", target))


def finetune_grid_tsv(inp, out):
    target = put(out / "grid.tsv", PRECIOUS)
    return Writer(finetune_grid.main, [grid_run(inp / "grid"), "--tsv", target], target,
                  refusal("python -m fairseq_ext_lab.evaluation.finetune_grid", target))


def bidirectional_report_json(inp, out):
    target = put(out / "report.json", PRECIOUS)
    argv = [data_bin(inp), put(inp / "hyb_pre" / "checkpoint_last.pt"), "--json", target]
    return Writer(bidirectional_report.main, argv, target,
                  refusal("python -m fairseq_ext_lab.evaluation.bidirectional_report", target))


def bidirectional_report_logs(inp, out):
    """--log-dir keeps each fairseq-validate log: an earlier evaluation's stays."""
    target = put(out / "checkpoint_last.infill.log", PRECIOUS)
    argv = [data_bin(inp), put(inp / "hyb_pre" / "checkpoint_last.pt"), "--log-dir", out]
    return Writer(bidirectional_report.main, argv, target,
                  refusal("python -m fairseq_ext_lab.evaluation.bidirectional_report", target))


def infill_rescore_candidates(inp, out):
    target = put(out / "candidates.jsonl", PRECIOUS)
    argv = [data_bin(inp), "--proposer", put(inp / "msk_bi.pt"), "--candidates-out", target,
            "--cpu"]
    return Writer(infill_rescore.main, argv, target, refusal("infill_rescore.py", target))


def infill_rescore_json(inp, out):
    target = put(out / "results.json", PRECIOUS)
    argv = [data_bin(inp), "--proposer", put(inp / "msk_bi.pt"), "--scorer",
            put(inp / "nxt_uni.pt"), "--json", target, "--cpu"]
    return Writer(infill_rescore.main, argv, target, refusal("infill_rescore.py", target))


def score_choices_output(inp, out):
    target = put(out / "predictions.jsonl", PRECIOUS)
    argv = ["--path", put(inp / "nxt_uni.pt"), "--data", data_bin(inp), "--input",
            put(inp / "rows.jsonl", b"not JSON\n"), "--output", target, "--cpu"]
    return Writer(multiple_choice.main, argv, target, refusal("score_choices.py", target))


def bench_3ml_json(inp, out):
    target = put(out / "bench-3ml.json", PRECIOUS)
    # tiny settings: without the check, the benchmark would run (briefly) and the test fail
    argv = ["--size", "tiny", "--seq-len", "16", "--batch-size", "1", "--vocab-size", "64",
            "--mask-rates", "0.15", "--models", "roberta", "--warmup", "0", "--iters", "1",
            "--batches", "1", "--quiet", "--json", target]
    return Writer(bench_3ml.main, argv, target, refusal("bench_3ml.py", target))


def bench_bidirectional_json(inp, out):
    target = put(out / "bench-bidir.json", PRECIOUS)
    argv = ["--arch-size", "tiny", "--seq-len", "16", "--batch-size", "1", "--vocab-size", "64",
            "--warmup", "0", "--rounds", "1", "--batches", "1", "--quiet", "--json", target]
    return Writer(bench_bidirectional.main, argv, target,
                  refusal("bench_bidirectional.py", target))


WRITERS: Dict[str, Callable[[Path, Path], Writer]] = {
    builder.__name__: builder for builder in (
        export_encoder_file, export_encoder_hub, export_hf_directory, prepare_glue_bin,
        prepare_corpus_foreign_files, prepare_corpus_other_settings, plot_curves_png,
        finetune_grid_tsv, bidirectional_report_json, bidirectional_report_logs,
        infill_rescore_candidates, infill_rescore_json, score_choices_output, bench_3ml_json,
        bench_bidirectional_json)
}


def training_log(path: Path) -> Path:
    """A fairseq --log-file of a masked_lm_flops run: two intervals, two validations."""
    records = [
        {"num_updates": "2", "total_pflops": "0.002", "total_tokens": "512", "wall": "4"},
        {"valid_loss": "9.5", "valid_num_updates": "2"},
        {"num_updates": "4", "total_pflops": "0.004", "total_tokens": "1024", "wall": "8"},
        {"valid_loss": "8.0", "valid_num_updates": "4"},
    ]
    return put(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def grid_run(root: Path) -> Path:
    """A fine-tuning grid's SAVE_ROOT with one RTE run that validated once (accuracy 61.5)."""
    record = {"epoch": 1, "valid_loss": "0.7", "valid_accuracy": "61.5"}
    put(root / "RTE" / "r0_lr1e-05_bs16" / "train.log",
        f"2026-01-01 00:00:00 | INFO | valid | {json.dumps(record)}\n".encode())
    return root


def tree(root: Path) -> Dict[str, bytes]:
    """Every file under ``root`` (temporary files included) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def in_out(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path / "in", tmp_path / "out"


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_an_existing_output_is_refused_before_any_work(name, in_out, capsys):
    inp, out = in_out
    writer = WRITERS[name](inp, out)
    before = tree(out)
    assert before, "the case must put the user's file in place"
    assert writer.run() == 2
    err = capsys.readouterr().err
    assert re.fullmatch(writer.message + "\n", err), err
    assert tree(out) == before  # the user's file as it was, and nothing added beside it


def test_force_replaces_a_plot_atomically(in_out, capsys):
    writer = plot_curves_png(*in_out)
    assert writer.run("--force") == 0
    assert writer.out.read_bytes()[:8] == PNG_MAGIC
    assert sorted(os.listdir(writer.out.parent)) == ["curves.png"]  # no temporary left
    assert f"wrote {writer.out}" in capsys.readouterr().out


def test_force_replaces_grid_results(in_out):
    writer = finetune_grid_tsv(*in_out)
    assert writer.run("--force") == 0
    assert writer.out.read_text() == "task\tr_bidir\tlr\tbatch\tscore\nRTE\t0\t1e-05\t16\t61.5\n"


def test_the_demo_never_reuses_a_runs_directory(in_out):
    """The demo has no --force: a --runs-dir with an earlier summary (or plot, or run) is refused
    before the corpus is prepared or anything trains."""
    inp, out = in_out
    put(out / "summary.json", PRECIOUS)
    before = tree(out)
    with pytest.raises(SystemExit) as refused:
        demo.main(["--data", str(data_bin(inp)), "--runs-dir", str(out), "--only", "nxt_uni"])
    assert str(refused.value) == (f"error: {out / 'summary.json'} already exists; choose another "
                                  "--runs-dir (the demo never overwrites earlier runs)")
    assert tree(out) == before


def test_evaluation_logs_of_same_named_checkpoints_stay_apart():
    """compare_variants.sh scores <variant>/checkpoint_last.pt for several variants into one
    LOG_DIR: each keeps its own logs."""
    names = bidirectional_report.log_names([Path("runs/nxt_uni/checkpoint_last.pt"),
                                            Path("runs/msk_bi/checkpoint_last.pt")])
    assert names == ["nxt_uni-checkpoint_last", "msk_bi-checkpoint_last"]
    assert bidirectional_report.log_names([Path("a/x.pt"), Path("b/y.pt")]) == ["x", "y"]
    assert bidirectional_report.log_names([Path("a/x.pt"), Path("b/a/x.pt")]) == ["1-a-x", "2-a-x"]


# --- the atomic writes --------------------------------------------------------------------------

def test_a_failed_write_leaves_the_earlier_file_whole(tmp_path):
    path = put(tmp_path / "results.json", PRECIOUS)
    with pytest.raises(RuntimeError):
        with atomic_file(path, force=True) as handle:
            handle.write('{"half": ')
            raise RuntimeError("interrupted")
    assert tree(tmp_path) == {"results.json": PRECIOUS}
    with pytest.raises(OutputError, match="results.json exists; pass --force to overwrite it"):
        with atomic_file(path, force=False):
            pass
    with atomic_file(path, force=True) as handle:
        handle.write("new\n")
    assert tree(tmp_path) == {"results.json": b"new\n"}
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_a_failed_directory_write_leaves_the_earlier_directory_whole(tmp_path):
    hub = tmp_path / "hub"
    put(hub / "model.pt", PRECIOUS)
    with pytest.raises(RuntimeError):
        with atomic_directory(hub, force=True) as building:
            put(building / "model.pt", b"half")
            raise RuntimeError("interrupted")
    assert tree(tmp_path) == {"hub/model.pt": PRECIOUS}
    with atomic_directory(hub, force=True) as building:
        put(building / "dict.txt", b"new 1\n")
    assert tree(tmp_path) == {"hub/dict.txt": b"new 1\n"}  # replaced whole, nothing beside it
    umask = os.umask(0)
    os.umask(umask)
    assert hub.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
