"""Tables 3-5 of Artetxe et al. (2022) for ``bidirectional_lm`` checkpoints, from stock
``fairseq-validate`` runs (``recipes/bidirectional/evaluate.sh``), with standard errors::

    python -m fairseq_ext_lab.evaluation.bidirectional_report DATA CKPT [CKPT ...] [--r-bidir ...]
        [--infill-positions K] [--log-dir DIR] [--json FILE] [--force]

For each checkpoint it runs ``fairseq-validate DATA --user-dir fairseq_ext --task
bidirectional_lm --eval-mode M --eval-scores-out FILE`` for ``full_doc_ppl`` (Table 3),
``suffix_ppl --r-bidir R,...`` (Table 4) and ``infill --r-bidir R,... --infill-positions K``
(Table 5), skipping the modes the checkpoint was never trained for (``-`` in the table:
perplexity for ``msk_*``, footnote 5; direct infilling for ``nxt_*``, which
``scripts/infill_rescore.py`` serves instead), and prints two tables:

1. a row per checkpoint, full-document ppl, suffix ppl per R, infill accuracy (%) per R, each
   ``value ± standard error`` as fairseq-validate computed it (delta method over documents for
   perplexities, binomial over positions for accuracy: :mod:`fairseq_ext.reporting.uncertainty`);
2. per column, each checkpoint's difference to the column's best (lowest ppl, highest accuracy),
   ``difference ± standard error of the difference``, paired over the same rows (the documents
   and masked positions that ``--eval-scores-out`` lists, :mod:`fairseq_ext.reporting.eval_scores`),
   marked ``*`` when resolved: larger than twice its standard error. Paired, that error is
   smaller than either model's own where the models agree on most rows.

``--json FILE`` also writes the rows and every pairwise difference; ``--log-dir DIR`` keeps each
run's log as ``DIR/<name>.<mode>.log`` and its scored rows as ``DIR/<name>.<mode>.scores.jsonl``,
``<name>`` the checkpoint's file stem (``<parent dir>-<stem>`` where stems repeat, as
``recipes/bidirectional/compare_variants.sh``'s ``<variant>/checkpoint_last.pt`` do); without it
the rows go to a temporary directory. Neither the JSON file nor a log nor a scores file is
overwritten without ``--force``: all are checked before the first ``fairseq-validate`` run
(:mod:`fairseq_ext.training.output_files`).

A checkpoint written before fairseq-ext had ``--eval-scores-out`` cannot take it (fairseq-validate
drops flags the checkpoint's saved config lacks): its figures are printed with their standard
errors, and its paired differences are left out, with a note.
"""
import argparse
import contextlib
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_ext.data.bidirectional_eval_dataset import (
    EVAL_MODES,
    PAPER_R_VALUES,
    parse_r_bidir,
    r_label,
)
from fairseq_ext.reporting.eval_scores import read_eval_scores
from fairseq_ext.reporting.uncertainty import (
    RESOLVED_AT,
    Estimate,
    accuracy,
    paired_accuracy_difference,
    paired_perplexity_difference,
)
from fairseq_ext.training.output_files import OutputError, error_line, refused, write_text
from fairseq_ext_lab.evaluation.fairseq_validate import validate_command
from fairseq_ext_lab.reporting.log_records import parse_json_record
from fairseq_ext_lab.reporting.text_tables import ascii_table

#: A column of the tables: ``(mode, group label)``; its figure and whether lower is better.
Column = Tuple[str, str]
FIGURE_OF_MODE = {"full_doc_ppl": "full_ppl", "suffix_ppl": "suffix_ppl", "infill": "infill_acc"}
LOWER_IS_BETTER = {"full_doc_ppl": True, "suffix_ppl": True, "infill": False}


def checkpoint_capabilities(path: Path) -> Dict[str, object]:
    """``{"variant": ..., "trained": frozenset}`` of a ``bidirectional_lm`` checkpoint, from its
    saved task config (:meth:`ObjectiveSampler.trained_capabilities`)."""
    from fairseq_ext.training.checkpoint_loading import load_checkpoint_to_cpu
    from fairseq_ext_lab.evaluation.sequence_scoring import checkpoint_capabilities as trained_on

    state = load_checkpoint_to_cpu(str(path))
    task = state["cfg"]["task"]
    if task.get("_name") != "bidirectional_lm":
        raise SystemExit(f"error: {path} was trained with --task {task.get('_name')}, not "
                         "bidirectional_lm")
    return {"variant": str(task["variant"]), "trained": trained_on(task),
            "takes_scores_out": "eval_scores_out" in task}


def modes_for(trained) -> List[str]:
    """The evaluation modes a checkpoint trained with ``trained`` capabilities can serve."""
    modes = []
    if "next" in trained:
        modes += ["full_doc_ppl", "suffix_ppl"]
    if "mask" in trained:
        modes.append("infill")
    return modes


def run_validate(data: Path, checkpoint: Path, mode: str, r_values: Optional[str],
                 subset: str, batch_size: int, cpu: bool, log_path: Optional[Path],
                 scores_path: Optional[Path] = None, infill_positions: int = 1,
                 env: Optional[Dict[str, str]] = None,
                 max_documents: int = 0) -> Dict[str, float]:
    """One stock ``fairseq-validate`` run (``env``: variables to add to its environment;
    ``max_documents``: ``--eval-max-documents``, 0 every document); its final JSON record's
    ``valid_*`` values."""
    cmd = validate_command(data, checkpoint, "bidirectional_lm", subset, batch_size, cpu,
                           "--eval-mode", mode)
    if r_values is not None:
        cmd += ["--r-bidir", r_values]
    if mode == "infill" and infill_positions != 1:
        cmd += ["--infill-positions", str(infill_positions)]
    if max_documents:
        cmd += ["--eval-max-documents", str(max_documents)]
    if scores_path is not None:
        cmd += ["--eval-scores-out", str(scores_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    output = proc.stdout + proc.stderr
    if log_path is not None:
        log_path.write_text(" ".join(cmd) + "\n" + output)
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise SystemExit(f"error: fairseq-validate --eval-mode {mode} failed on {checkpoint}:\n{tail}")
    result = None
    for line in output.splitlines():
        record = parse_json_record(line)
        if record and "valid_loss" in record:
            result = record
        elif record and f"{subset}_loss" in record:
            result = {key.replace(f"{subset}_", "valid_", 1): value for key, value in record.items()}
    if result is None:
        raise SystemExit(f"error: fairseq-validate printed no result for {checkpoint} ({mode})")
    return {key[len("valid_"):]: float(value) for key, value in result.items()
            if key.startswith("valid_")}


def scores_file(directory: Path, name: str, mode: str) -> Path:
    return directory / f"{name}.{mode}.scores.jsonl"


def evaluate_checkpoint(data: Path, checkpoint: Path, r_values: str, subset: str = "valid",
                        batch_size: int = 16, cpu: bool = False,
                        log_dir: Optional[Path] = None, log_name: Optional[str] = None,
                        infill_positions: int = 1, scores_dir: Optional[Path] = None,
                        env: Optional[Dict[str, str]] = None,
                        max_documents: int = 0) -> Dict[str, object]:
    """Every mode ``checkpoint`` can serve: ``{"checkpoint", "variant", "full_ppl",
    "full_ppl_se", "suffix_ppl": {R: ppl}, "suffix_ppl_se": {R: se}, "infill_acc": {R: %},
    "infill_acc_se", "infill_ppl", "infill_positions": count, "scores": {mode: path or None}}``
    (absent: not served). With ``log_dir``, each run's log is ``log_dir/<log_name>.<mode>.log``
    (default name: the checkpoint's file stem); the scored rows go to ``scores_dir`` (default
    ``log_dir``; neither: none are kept, and no paired difference can be formed); ``env``: added
    to the environment of the fairseq-validate runs; ``max_documents``: score that many
    documents spread over the split (``--eval-max-documents``; 0: all)."""
    info = checkpoint_capabilities(checkpoint)
    row: Dict[str, object] = {"checkpoint": str(checkpoint), "variant": info["variant"],
                              "scores": {}}
    values = parse_r_bidir(r_values)
    name = log_name or checkpoint.stem
    scores_dir = scores_dir if scores_dir is not None else log_dir
    for mode in modes_for(info["trained"]):
        log_path = None if log_dir is None else log_dir / f"{name}.{mode}.log"
        scores_path = (scores_file(scores_dir, name, mode)
                       if scores_dir is not None and info["takes_scores_out"] else None)
        result = run_validate(data, checkpoint, mode, None if mode == "full_doc_ppl" else r_values,
                              subset, batch_size, cpu, log_path, scores_path, infill_positions,
                              env, max_documents)
        row["scores"][mode] = (str(scores_path) if scores_path is not None and scores_path.is_file()
                               else None)
        if mode == "full_doc_ppl":
            row["full_ppl"], row["full_ppl_se"] = result["ppl"], result.get("ppl_se")
            row["documents"] = result.get("documents")
        elif mode == "suffix_ppl":
            row["suffix_ppl"] = {r: result[f"suffix_ppl_{r_label(r)}"] for r in values}
            row["suffix_ppl_se"] = {r: result.get(f"suffix_ppl_{r_label(r)}_se") for r in values}
        else:
            row["infill_acc"] = {r: result[f"infill_acc_{r_label(r)}"] for r in values}
            row["infill_acc_se"] = {r: result.get(f"infill_acc_{r_label(r)}_se") for r in values}
            row["infill_ppl"] = {r: result[f"infill_ppl_{r_label(r)}"] for r in values}
            row["infill_positions"] = result.get(f"positions_{r_label(values[0])}")
    return row


def log_names(checkpoints: Sequence[Path]) -> List[str]:
    """One ``--log-dir`` file name per checkpoint, distinct so that no run's log replaces
    another's: the file stem; where stems repeat, ``<parent dir>-<stem>``; where those repeat
    too, numbered."""
    for name in (lambda index, path: path.stem,
                 lambda index, path: f"{path.parent.name}-{path.stem}",
                 lambda index, path: f"{index + 1}-{path.parent.name}-{path.stem}"):
        names = [name(index, Path(path)) for index, path in enumerate(checkpoints)]
        if len(set(names)) == len(names):
            return names
    raise AssertionError("numbered names are distinct")


def columns(r_values: str) -> List[Column]:
    """The tables' columns, in order: full ppl, suffix ppl per R, infill accuracy per R."""
    labels = [r_label(r) for r in parse_r_bidir(r_values)]
    return ([("full_doc_ppl", "full")] + [("suffix_ppl", label) for label in labels]
            + [("infill", label) for label in labels])


def column_title(column: Column) -> str:
    mode, label = column
    if mode == "full_doc_ppl":
        return "full ppl"
    return f"{'suffix ppl' if mode == 'suffix_ppl' else 'infill acc'} R={label[1:]}"


def estimate_of(row: Dict[str, object], column: Column) -> Optional[Estimate]:
    """A row's figure and standard error in ``column``; ``None`` where it is not served."""
    mode, label = column
    figure = FIGURE_OF_MODE[mode]
    if mode == "full_doc_ppl":
        value, error = row.get(figure), row.get(f"{figure}_se")
    else:
        by_r = {r_label(r): v for r, v in (row.get(figure) or {}).items()}
        errors = {r_label(r): v for r, v in (row.get(f"{figure}_se") or {}).items()}
        value, error = by_r.get(label), errors.get(label)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return Estimate(float(value), math.nan if error is None else float(error))


@functools.lru_cache(maxsize=32)
def _read_scores_version(path: str, mtime_ns: int, size: int):
    return read_eval_scores(path)


def scores_of(path) -> tuple:
    """:func:`read_eval_scores` of ``path``, parsed once per version of the file: the report
    pairs every file with several others, in every column it serves."""
    stat = os.stat(path)
    return _read_scores_version(str(path), stat.st_mtime_ns, stat.st_size)


def paired_difference(row_a: Dict[str, object], row_b: Dict[str, object],
                      column: Column) -> Tuple[Optional[Estimate], str]:
    """``(figure_A - figure_B, why not)`` over the rows both scored in ``column``, paired
    (:mod:`fairseq_ext.reporting.uncertainty`); ``(None, reason)`` when they cannot be paired."""
    mode, label = column
    paths = [(row.get("scores") or {}).get(mode) for row in (row_a, row_b)]
    if any(path is None for path in paths):
        return None, "no scored rows (a checkpoint predates --eval-scores-out)"
    (settings_a, rows_a), (settings_b, rows_b) = (scores_of(path) for path in paths)
    differing = sorted(key for key in settings_a if settings_a[key] != settings_b.get(key))
    if differing:
        return None, "scored with other settings: " + ", ".join(
            f"{key} {settings_a[key]} vs {settings_b.get(key)}" for key in differing)
    keys = sorted(key for key in rows_a if key[3] == label)
    if keys != sorted(key for key in rows_b if key[3] == label):
        return None, "scored other rows (documents or positions differ)"
    if not keys:
        return None, "no rows"
    if mode == "infill":
        return paired_accuracy_difference([rows_a[key]["correct"] for key in keys],
                                          [rows_b[key]["correct"] for key in keys]), ""
    tokens = [rows_a[key]["tokens"] for key in keys]
    if tokens != [rows_b[key]["tokens"] for key in keys]:
        return None, "scored other tokens"
    return paired_perplexity_difference([rows_a[key]["loss"] for key in keys],
                                        [rows_b[key]["loss"] for key in keys], tokens), ""


def constant_guess_baseline(row: Dict[str, object], label: str,
                            piece: int) -> Tuple[Optional[Estimate], Optional[Estimate], str]:
    """The infilling baseline that always guesses ``piece`` (the training split's commonest
    piece), on the positions ``row``'s checkpoint filled in group ``label`` (``r1``):
    ``(baseline accuracy %, model - baseline in points paired over those positions, why not)``.
    Reads the ``target`` of each scored row (files written before it was recorded cannot say)."""
    path = (row.get("scores") or {}).get("infill")
    if path is None:
        return None, None, "no scored infill rows"
    _settings, rows = scores_of(path)
    keys = sorted(key for key in rows if key[3] == label)
    if not keys or any(rows[key].get("target") is None for key in keys):
        return None, None, "the scored rows lack their targets (written before they were kept)"
    guessed = [float(rows[key]["target"] == piece) for key in keys]
    return (accuracy(guessed),
            paired_accuracy_difference([rows[key]["correct"] for key in keys], guessed), "")


def best_row(rows: Sequence[Dict[str, object]], column: Column) -> Optional[int]:
    """Index of the row with the best figure in ``column`` (lowest ppl, highest accuracy)."""
    served = [(estimate_of(row, column).value, index) for index, row in enumerate(rows)
              if estimate_of(row, column) is not None]
    if not served:
        return None
    sign = 1.0 if LOWER_IS_BETTER[column[0]] else -1.0
    return min(served, key=lambda item: (sign * item[0], item[1]))[1]


def all_differences(rows: Sequence[Dict[str, object]], r_values: str,
                    names: Sequence[str]) -> List[Dict[str, object]]:
    """Every pair of rows in every column both serve: ``{"column", "a", "b", "difference",
    "standard_error", "resolved", "note"}`` (difference = a - b)."""
    out = []
    for column in columns(r_values):
        served = [index for index, row in enumerate(rows) if estimate_of(row, column) is not None]
        for position, a in enumerate(served):
            for b in served[position + 1:]:
                estimate, note = paired_difference(rows[a], rows[b], column)
                out.append({"column": column_title(column), "a": names[a], "b": names[b],
                            "difference": None if estimate is None else estimate.value,
                            "standard_error": None if estimate is None else estimate.standard_error,
                            "resolved": None if estimate is None else estimate.resolved(),
                            "note": note})
    return out


def row_names(rows: Sequence[Dict[str, object]], names: Optional[Sequence[str]]) -> List[str]:
    """The tables' row names: ``names`` if given, else each checkpoint's folder (the variant in
    parentheses where the folder is not named after it), or :func:`log_names` where those repeat."""
    if names is not None:
        return list(names)
    default = []
    for row in rows:
        folder, variant = Path(str(row["checkpoint"])).parent.name, str(row["variant"])
        default.append(folder if folder == variant else f"{folder} ({variant})")
    if len(set(default)) == len(default):
        return default
    return log_names([Path(str(row["checkpoint"])) for row in rows])


def format_report(rows: Sequence[Dict[str, object]], r_values: str,
                  names: Optional[Sequence[str]] = None) -> str:
    """The two tables of the module docstring: figures ± standard errors, then paired
    differences to each column's best; ``-`` where a mode is not served."""
    names = row_names(rows, names)
    cols = columns(r_values)

    def figure(estimate: Optional[Estimate]) -> str:
        if estimate is None:
            return "-"
        if math.isnan(estimate.standard_error):
            return f"{estimate.value:.2f}"
        return f"{estimate.value:.2f} ± {estimate.standard_error:.2f}"

    figures = ascii_table(["model"] + [column_title(c) for c in cols],
                          [[name] + [figure(estimate_of(row, c)) for c in cols]
                           for name, row in zip(names, rows)])
    notes = []
    cells = [[name] for name in names]
    for column in cols:
        best = best_row(rows, column)
        for index, row in enumerate(rows):
            if estimate_of(row, column) is None:
                cells[index].append("-")
            elif index == best:
                cells[index].append("best")
            else:
                estimate, note = paired_difference(row, rows[best], column)
                if estimate is None:
                    cells[index].append("n/a")
                    notes.append(f"{names[index]}, {column_title(column)}: {note}")
                else:
                    mark = " *" if estimate.resolved() else ""
                    cells[index].append(f"{estimate.value:+.2f} ± {estimate.standard_error:.2f}"
                                        f"{mark}")
    differences = ascii_table(["model"] + [column_title(c) for c in cols], cells)
    legend = (f"± 1 standard error: perplexities by the delta method over documents, accuracy "
              f"(%) binomial over positions.\nDifferences to each column's best, paired over the "
              f"same rows; * resolved (|difference| > {RESOLVED_AT:g} standard errors of the "
              f"difference).")
    return "\n".join([figures, "", differences, legend, *(f"note: {n}" for n in notes)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_ext_lab.evaluation.bidirectional_report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the data-bin to score (its --valid-subset split)")
    parser.add_argument("checkpoints", type=Path, nargs="+", help="bidirectional_lm checkpoints")
    parser.add_argument("--r-bidir", default=PAPER_R_VALUES,
                        help=f"R values of the suffix and infill sweeps (default {PAPER_R_VALUES})")
    parser.add_argument("--infill-positions", type=int, default=1,
                        help="masked positions per document for infilling (default 1, the "
                             "paper's); more give smaller standard errors on the same documents")
    parser.add_argument("--max-documents", type=int, default=0,
                        help="score only this many documents, spread evenly over the split "
                             "(fairseq-validate --eval-max-documents; default 0: all)")
    parser.add_argument("--valid-subset", default="valid")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep each fairseq-validate log and its scored rows there")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the rows and the pairwise differences as JSON")
    parser.add_argument("--force", action="store_true",
                        help="overwrite the --json file and --log-dir logs if they exist")
    args = parser.parse_args(argv)
    try:
        parse_r_bidir(args.r_bidir)
    except ValueError as error:
        parser.error(str(error))
    if args.infill_positions < 1:
        parser.error(f"--infill-positions {args.infill_positions} must be at least 1")
    if args.max_documents < 0:
        parser.error(f"--max-documents {args.max_documents}: give 0 (every document) or more")
    for path in [args.data / "dict.txt", *args.checkpoints]:
        if not path.is_file():
            parser.error(f"{path} does not exist")
    names = log_names(args.checkpoints)
    logs = ([] if args.log_dir is None else
            [args.log_dir / f"{name}.{mode}{suffix}" for name in names for mode in EVAL_MODES
             for suffix in (".log", ".scores.jsonl")])
    if refused(parser.prog, [args.json, *logs], args.force):  # before the first fairseq-validate
        return 2
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        for path in logs:  # --force: the scores files are new files to fairseq-validate
            if path.name.endswith(".scores.jsonl") and path.exists():
                path.unlink()
    with contextlib.ExitStack() as stack:
        scores_dir = (args.log_dir if args.log_dir is not None
                      else Path(stack.enter_context(tempfile.TemporaryDirectory())))
        rows = [evaluate_checkpoint(args.data, checkpoint, args.r_bidir, args.valid_subset,
                                    args.batch_size, args.cpu, args.log_dir, name,
                                    args.infill_positions, scores_dir,
                                    max_documents=args.max_documents)
                for checkpoint, name in zip(args.checkpoints, names)]
        table_names = row_names(rows, None)  # the log names above are file names
        print(format_report(rows, args.r_bidir, table_names))
        differences = all_differences(rows, args.r_bidir, table_names)
        if args.log_dir is None:
            for row in rows:
                row["scores"] = {}  # the temporary files are gone after this
    if args.json is not None:
        try:
            write_text(args.json, json.dumps({"rows": rows, "differences": differences},
                                             indent=2, default=str), args.force)
        except OutputError as error:  # made while the runs went on
            print(error_line(parser.prog, error), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
