"""Tables 3-5 of Artetxe et al. (2022) for ``bidirectional_lm`` checkpoints, from stock
``fairseq-validate`` runs (``recipes/bidirectional/evaluate.sh``)::

    python -m fairseq_ext.evaluation.bidirectional_report DATA CKPT [CKPT ...] [--r-bidir ...]
        [--log-dir DIR] [--json FILE] [--force]

For each checkpoint it runs ``fairseq-validate DATA --user-dir fairseq_ext --task
bidirectional_lm --eval-mode M`` for ``full_doc_ppl`` (Table 3), ``suffix_ppl --r-bidir R,...``
(Table 4) and ``infill --r-bidir R,...`` (Table 5), skipping the modes the checkpoint was never
trained for (``-`` in the table: perplexity for ``msk_*``, footnote 5; direct infilling for
``nxt_*``, which ``scripts/infill_rescore.py`` serves instead), and prints one table: a row per
checkpoint, full-document ppl, suffix ppl per R, infill accuracy (%) per R.

``--json FILE`` also writes the rows; ``--log-dir DIR`` keeps each run's log as
``DIR/<name>.<mode>.log``, ``<name>`` the checkpoint's file stem (``<parent dir>-<stem>`` where
stems repeat, as ``recipes/bidirectional/compare_variants.sh``'s ``<variant>/checkpoint_last.pt``
do). Neither the JSON file nor a log is overwritten without ``--force``: both are checked before
the first ``fairseq-validate`` run (:mod:`fairseq_ext.output_files`).
"""
import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq_ext.data.bidirectional_eval_dataset import (
    EVAL_MODES,
    PAPER_R_VALUES,
    parse_r_bidir,
    r_label,
)
from fairseq_ext.log_records import parse_json_record
from fairseq_ext.output_files import OutputError, error_line, refused, write_text
from fairseq_ext.text_tables import ascii_table

PACKAGE_DIR = Path(__file__).resolve().parents[1]
BIN_DIR = Path(sys.executable).parent


def checkpoint_capabilities(path: Path) -> Dict[str, object]:
    """``{"variant": ..., "trained": frozenset}`` of a ``bidirectional_lm`` checkpoint, from its
    saved task config (:meth:`ObjectiveSampler.trained_capabilities`)."""
    import fairseq_ext  # noqa: F401  (the checkpoint allow-list)
    from fairseq_ext.checkpoint_loading import load_checkpoint_to_cpu
    from fairseq_ext.evaluation.sequence_scoring import checkpoint_capabilities as trained_on

    state = load_checkpoint_to_cpu(str(path))
    task = state["cfg"]["task"]
    if task.get("_name") != "bidirectional_lm":
        raise SystemExit(f"error: {path} was trained with --task {task.get('_name')}, not "
                         "bidirectional_lm")
    return {"variant": str(task["variant"]), "trained": trained_on(task)}


def modes_for(trained) -> List[str]:
    """The evaluation modes a checkpoint trained with ``trained`` capabilities can serve."""
    modes = []
    if "next" in trained:
        modes += ["full_doc_ppl", "suffix_ppl"]
    if "mask" in trained:
        modes.append("infill")
    return modes


def run_validate(data: Path, checkpoint: Path, mode: str, r_values: Optional[str],
                 subset: str, batch_size: int, cpu: bool, log_path: Optional[Path]) -> Dict[str, float]:
    """One stock ``fairseq-validate`` run; its final JSON record's ``valid_*`` values."""
    cmd = [str(BIN_DIR / "fairseq-validate"), str(data), "--user-dir", str(PACKAGE_DIR),
           "--task", "bidirectional_lm", "--path", str(checkpoint), "--eval-mode", mode,
           "--valid-subset", subset, "--batch-size", str(batch_size), "--log-format", "json"]
    if r_values is not None:
        cmd += ["--r-bidir", r_values]
    if cpu:
        cmd.append("--cpu")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
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


def evaluate_checkpoint(data: Path, checkpoint: Path, r_values: str, subset: str = "valid",
                        batch_size: int = 16, cpu: bool = False,
                        log_dir: Optional[Path] = None,
                        log_name: Optional[str] = None) -> Dict[str, object]:
    """Every mode ``checkpoint`` can serve: ``{"checkpoint", "variant", "full_ppl",
    "suffix_ppl": {R: ppl}, "infill_acc": {R: %}, "infill_ppl": {R: ppl}}`` (absent: not served).
    With ``log_dir``, each run's log is ``log_dir/<log_name>.<mode>.log`` (default name: the
    checkpoint's file stem)."""
    info = checkpoint_capabilities(checkpoint)
    row: Dict[str, object] = {"checkpoint": str(checkpoint), "variant": info["variant"]}
    values = parse_r_bidir(r_values)
    for mode in modes_for(info["trained"]):
        log_path = (None if log_dir is None
                    else log_dir / f"{log_name or checkpoint.stem}.{mode}.log")
        result = run_validate(data, checkpoint, mode, None if mode == "full_doc_ppl" else r_values,
                              subset, batch_size, cpu, log_path)
        if mode == "full_doc_ppl":
            row["full_ppl"] = result["ppl"]
            row["documents"] = result.get("documents")
        elif mode == "suffix_ppl":
            row["suffix_ppl"] = {r: result[f"suffix_ppl_{r_label(r)}"] for r in values}
        else:
            row["infill_acc"] = {r: result[f"infill_acc_{r_label(r)}"] for r in values}
            row["infill_ppl"] = {r: result[f"infill_ppl_{r_label(r)}"] for r in values}
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


def format_report(rows: Sequence[Dict[str, object]], r_values: str,
                  names: Optional[Sequence[str]] = None) -> str:
    """One table in the shape of Tables 3-5: a row per checkpoint; ``-`` where a mode is not
    served."""
    values = parse_r_bidir(r_values)
    titles = (["model", "full ppl"] + [f"suffix ppl R={r:g}" for r in values]
              + [f"infill acc R={r:g}" for r in values])

    def cell(value, fmt):
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)

    body = []
    for index, row in enumerate(rows):
        name = (names[index] if names is not None
                else f"{Path(str(row['checkpoint'])).parent.name} ({row['variant']})")
        suffix = row.get("suffix_ppl") or {}
        infill = row.get("infill_acc") or {}
        body.append([name, cell(row.get("full_ppl"), "{:.2f}")]
                    + [cell(suffix.get(r), "{:.2f}") for r in values]
                    + [cell(infill.get(r), "{:.2f}") for r in values])
    return ascii_table(titles, body)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_ext.evaluation.bidirectional_report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the data-bin to score (its --valid-subset split)")
    parser.add_argument("checkpoints", type=Path, nargs="+", help="bidirectional_lm checkpoints")
    parser.add_argument("--r-bidir", default=PAPER_R_VALUES,
                        help=f"R values of the suffix and infill sweeps (default {PAPER_R_VALUES})")
    parser.add_argument("--valid-subset", default="valid")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep each fairseq-validate log there")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--force", action="store_true",
                        help="overwrite the --json file and --log-dir logs if they exist")
    args = parser.parse_args(argv)
    try:
        parse_r_bidir(args.r_bidir)
    except ValueError as error:
        parser.error(str(error))
    for path in [args.data / "dict.txt", *args.checkpoints]:
        if not path.is_file():
            parser.error(f"{path} does not exist")
    names = log_names(args.checkpoints)
    logs = ([] if args.log_dir is None else
            [args.log_dir / f"{name}.{mode}.log" for name in names for mode in EVAL_MODES])
    if refused(parser.prog, [args.json, *logs], args.force):  # before the first fairseq-validate
        return 2
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    rows = [evaluate_checkpoint(args.data, checkpoint, args.r_bidir, args.valid_subset,
                                args.batch_size, args.cpu, args.log_dir, name)
            for checkpoint, name in zip(args.checkpoints, names)]
    print(format_report(rows, args.r_bidir))
    if args.json is not None:
        try:
            write_text(args.json, json.dumps(rows, indent=2, default=str), args.force)
        except OutputError as error:  # made while the runs went on
            print(error_line(parser.prog, error), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
