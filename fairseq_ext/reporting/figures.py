"""Published figures as data: what a run summary (``make demo``'s ``summary.json``, a study's
``study.json``) holds for a later run to be compared with, and the comparison itself.

A summary carries two sections besides its own tables:

* ``"figures"``: ``{name: {"value", "se", "dof", "unit"}}``, flat and named by what they are
  (``3ml/3ml-self-40%/mask_loss``), each figure the way the tables print it (value ± one standard
  error; ``dof`` the error's degrees of freedom where it comes from few seeds, ``null`` where it
  comes from many rows; ``se`` 0 for a count that must match exactly, such as updates);
* ``"provenance"``: the commit (and whether the tree had uncommitted changes), Python, torch,
  the CPU and the threads the figures came from (:func:`provenance`).

:func:`compare` reads both summaries' figures and, for each of the reference's, the difference
``fresh - reference`` in standard errors of that difference, ``z = d / sqrt(se_ref^2 +
se_fresh^2)``; it fails a figure beyond ``tolerance`` (:data:`TOLERANCE`, 3), a figure the fresh
summary lacks, and an exact figure that differs. Figures only the fresh summary has are listed,
not failed. ``python -m fairseq_ext.reporting.figures REFERENCE FRESH`` compares two files;
``scripts/demo.py --compare`` and ``scripts/study.py --compare`` compare their own run with a
reference when they finish.

What the tolerance can promise: a fixed seed on one machine repeats its figures exactly (one torch
thread, the same data: the runs are deterministic), so there any difference is a change in the
code or the recipe. On another CPU, float rounding differs from the first update and the
training takes another path, which the standard errors of a single-seed figure (over sequences)
do not cover: a study's figures, whose errors are over seeds, are the ones that carry to another
machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_ext.reporting.text_tables import ascii_table
from fairseq_ext.reporting.uncertainty import Estimate

FIGURES, PROVENANCE = "figures", "provenance"
#: A figure fails the comparison beyond this many standard errors of its difference.
TOLERANCE = 3.0


def figure(estimate: Estimate, unit: str) -> dict:
    """One figure of a summary's ``"figures"`` section."""
    return {"value": _number(estimate.value), "se": _number(estimate.standard_error),
            "dof": estimate.degrees_of_freedom, "unit": unit}


def exact(value: float, unit: str) -> dict:
    """A figure that a repeated run must match exactly (a count: updates, runs, tokens)."""
    return {"value": _number(value), "se": 0.0, "dof": None, "unit": unit}


def _number(value: float) -> Optional[float]:
    """JSON has no NaN: an unknown figure or error is ``null``."""
    return float(value) if value is not None and math.isfinite(value) else None


def provenance(repo: Optional[Path] = None, threads: Optional[int] = None,
               device: str = "cpu") -> dict:
    """Where the figures came from: the commit of ``repo`` (and ``dirty`` when it had
    uncommitted changes to tracked files), Python, torch, the CPU model and the torch threads of
    each run; with ``device`` ``cuda`` also the GPU's name and torch's CUDA version."""
    info = {"python": platform.python_version(), "machine": platform.machine(),
            "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": threads}
    try:
        import torch

        info["torch"] = torch.__version__
        if device == "cuda" and torch.cuda.is_available():
            info.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
    except ImportError:  # pragma: no cover - the plugin always has torch
        info["torch"] = None
    if repo is not None:
        info.update(_git(repo))
    return info


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(repo: Path) -> dict:
    def git(*args: str) -> Optional[str]:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def relative_paths(value, root: Path):
    """``value`` (JSON-like: dicts, lists, strings) with every path under ``root`` written
    relative to it, so that a summary holds no machine's paths and its directory can be moved
    or copied (paths elsewhere, such as the data-bin, are left as they are)."""
    prefix = str(Path(root).resolve()) + os.sep
    if isinstance(value, dict):
        return {key: relative_paths(item, root) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(item, root) for item in value]
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and value.startswith(prefix):
        return value[len(prefix):]
    return value


@dataclasses.dataclass(frozen=True)
class FigureComparison:
    """One reference figure against the fresh run's: ``status`` is ``ok``, ``differs`` (beyond
    the tolerance), ``missing`` (the fresh run has no such figure) or ``new`` (only the fresh
    run has it; never a failure)."""

    name: str
    unit: str
    reference: Optional[dict]
    fresh: Optional[dict]
    difference: float
    standard_errors: float
    status: str

    @property
    def failed(self) -> bool:
        return self.status in ("differs", "missing")


def figures_of(summary: dict, source: str = "summary") -> Dict[str, dict]:
    """The ``"figures"`` section of a summary, refused with what to do when it has none (a
    summary written before figures were recorded)."""
    figures = summary.get(FIGURES)
    if not isinstance(figures, dict) or not figures:
        raise SystemExit(f"error: {source} has no {FIGURES!r} section: it was written before "
                         "runs recorded their figures; re-run it (make demo, scripts/study.py) "
                         "to get a summary that can be compared")
    return figures


def compare_figure(name: str, reference: dict, fresh: Optional[dict],
                   tolerance: float = TOLERANCE) -> FigureComparison:
    unit = reference.get("unit", "")
    if fresh is None or fresh.get("value") is None:
        return FigureComparison(name, unit, reference, fresh, math.nan, math.nan, "missing")
    if reference.get("value") is None:  # nothing was published to reproduce
        return FigureComparison(name, unit, reference, fresh, math.nan, math.nan, "new")
    difference = fresh["value"] - reference["value"]
    errors = [reference.get("se"), fresh.get("se")]
    if any(error is None for error in errors):  # an unknown error: only equality passes
        spread = 0.0
    else:
        spread = math.hypot(*errors)
    if spread == 0.0:
        close = math.isclose(fresh["value"], reference["value"], rel_tol=1e-9, abs_tol=1e-12)
        z = 0.0 if close else math.copysign(math.inf, difference)
    else:
        z = difference / spread
    status = "ok" if abs(z) <= tolerance else "differs"
    return FigureComparison(name, unit, reference, fresh, difference, z, status)


def compare(reference: dict, fresh: dict, tolerance: float = TOLERANCE,
            reference_name: str = "reference", fresh_name: str = "fresh run"
            ) -> List[FigureComparison]:
    """Every reference figure against the fresh summary's, then the fresh run's new ones."""
    if tolerance <= 0:
        raise SystemExit(f"error: --tolerance {tolerance}: give a positive number of standard "
                         "errors")
    reference_figures = figures_of(reference, reference_name)
    fresh_figures = figures_of(fresh, fresh_name)
    rows = [compare_figure(name, figure, fresh_figures.get(name), tolerance)
            for name, figure in reference_figures.items()]
    rows += [FigureComparison(name, figure.get("unit", ""), None, figure, math.nan, math.nan, "new")
             for name, figure in fresh_figures.items() if name not in reference_figures]
    return rows


def _shown(figure: Optional[dict]) -> str:
    if figure is None or figure.get("value") is None:
        return "-"
    if figure.get("se") == 0.0:
        return f"{figure['value']:g}"
    error = "?" if figure.get("se") is None else f"{figure['se']:.3f}"
    return f"{figure['value']:.3f} ± {error}"


def format_comparison(rows: List[FigureComparison], reference: dict, fresh: dict,
                      tolerance: float = TOLERANCE) -> str:
    """The comparison's table, the two provenances, and one line that says pass or fail."""
    table = ascii_table(
        ["figure", "unit", "reference", "fresh", "fresh - reference", "in SEs", "status"],
        [[row.name, row.unit, _shown(row.reference), _shown(row.fresh),
          "-" if not math.isfinite(row.difference) else f"{row.difference:+.3f}",
          "-" if math.isnan(row.standard_errors) else f"{row.standard_errors:+.1f}",
          row.status] for row in rows])
    lines = [table]
    for label, summary in (("reference", reference), ("fresh", fresh)):
        info = summary.get(PROVENANCE) or {}
        lines.append(f"{label}: commit {info.get('commit') or '?'}"
                     f"{' (with uncommitted changes)' if info.get('dirty') else ''}, "
                     f"torch {info.get('torch') or '?'}, {info.get('cpu') or '?'}, "
                     f"{info.get('threads') or '?'} thread(s) per run")
    ref_info, fresh_info = reference.get(PROVENANCE) or {}, fresh.get(PROVENANCE) or {}
    if ref_info.get("cpu") and fresh_info.get("cpu") and ref_info["cpu"] != fresh_info["cpu"]:
        lines.append("note: another CPU; single-seed figures take another training path there "
                     "(fairseq_ext.reporting.figures)")
    ref_corpus, fresh_corpus = ref_info.get("corpus") or {}, fresh_info.get("corpus") or {}
    if ref_corpus and fresh_corpus and ref_corpus != fresh_corpus:
        lines.append("note: another corpus build ("
                     + ", ".join(f"{key} {ref_corpus.get(key)} -> {fresh_corpus.get(key)}"
                                 for key in sorted(set(ref_corpus) | set(fresh_corpus))
                                 if ref_corpus.get(key) != fresh_corpus.get(key))
                     + "): the package mirror served other versions, so every figure of the "
                     "data moves with it")
    failed = [row for row in rows if row.failed]
    checked = sum(row.status != "new" for row in rows)
    if failed:
        lines.append(f"FAIL: {len(failed)} of {checked} figures differ by more than "
                     f"{tolerance:g} SE or are missing: "
                     + ", ".join(f"{row.name} ({row.status})" for row in failed))
    else:
        lines.append(f"PASS: all {checked} figures within {tolerance:g} SE of the reference")
    return "\n".join(lines)


def load(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such summary (a summary.json of make demo, a "
                         "study.json of scripts/study.py)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SystemExit(f"error: {path} is not JSON: {error}") from None


def compare_files(reference: Path, fresh: Path, tolerance: float = TOLERANCE,
                  printer=print) -> int:
    """Compare two summary files; the exit status (0 pass, 1 fail)."""
    reference_summary, fresh_summary = load(reference), load(fresh)
    rows = compare(reference_summary, fresh_summary, tolerance, str(reference), str(fresh))
    printer(f"== comparing {fresh} with the reference {reference}")
    printer(format_comparison(rows, reference_summary, fresh_summary, tolerance))
    return 1 if any(row.failed for row in rows) else 0


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compare REF.json`` and ``--tolerance`` for the commands that write summaries."""
    parser.add_argument("--compare", type=Path, default=None, metavar="REF.json",
                        help="when done, compare this run's figures with a reference summary "
                             "(e.g. the committed one) and exit 1 when one differs by more than "
                             "--tolerance standard errors or is missing")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help="standard errors of a difference beyond which a figure fails the "
                             "comparison (default: %(default)s)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext.reporting.figures",
        description="Compare a run summary's figures with a reference summary's.")
    parser.add_argument("reference", type=Path)
    parser.add_argument("fresh", type=Path)
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help="standard errors beyond which a figure fails (default: %(default)s)")
    args = parser.parse_args(argv)
    sys.exit(compare_files(args.reference, args.fresh, args.tolerance))


if __name__ == "__main__":
    main()
