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
not failed. ``python -m fairseq_ext_lab.reporting.figures REFERENCE FRESH`` compares two files;
``scripts/demo.py --compare`` and ``scripts/study.py --compare`` compare their own run with a
reference when they finish.

What the tolerance can promise: a fixed seed on one machine repeats its figures exactly (one torch
thread, the same data: the runs are deterministic), so there any difference is a change in the
code or the recipe. On another CPU, another torch, another corpus build or another seed
(:data:`PATH_KEYS` of the provenance), float rounding or the data differ from the first update
and the training takes another path, which the standard errors of a single-seed figure (over
sequences) do not cover. There each figure's error adds ``2 x sd^2``, ``sd`` the figure's
standard deviation over pre-training seeds in a spread file beside the reference
(:data:`SPREAD_NAME`, written by :func:`seed_spread`: ``python -m fairseq_ext_lab.reporting.figures
--seed-spread S1 S2 S3 --out DIR/seed_spread.json``). A study's figures, whose errors are over
seeds, carry to another machine as they are.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_ext.reporting.uncertainty import Estimate
from fairseq_ext_lab.reporting.text_tables import ascii_table

FIGURES, PROVENANCE = "figures", "provenance"
#: A figure fails the comparison beyond this many standard errors of its difference.
TOLERANCE = 3.0
#: The file beside a reference summary that holds its figures' spread over pre-training seeds.
SPREAD_NAME = "seed_spread.json"
#: What a single run's training path depends on besides the code: where two summaries differ in
#: one of these, their runs took different paths (a summary without a seed trained seed 1).
PATH_KEYS = ("cpu", "torch", "threads", "corpus", "seed")
_PATH_DEFAULTS = {"seed": 1}


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
    seed_sd: Optional[float] = None  # the spread over seeds added to the error, if any

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


def training_path_changes(reference: dict, fresh: dict) -> List[str]:
    """The :data:`PATH_KEYS` in which two summaries' provenances differ (empty: the fresh run
    retraced the reference's training path, and its figures must repeat)."""
    ref_info, fresh_info = reference.get(PROVENANCE) or {}, fresh.get(PROVENANCE) or {}
    return [key for key in PATH_KEYS
            if ref_info.get(key, _PATH_DEFAULTS.get(key)) != fresh_info.get(
                key, _PATH_DEFAULTS.get(key))]


def seed_spread(summaries: List[dict], sources: List[str]) -> dict:
    """Each figure's standard deviation over runs that differ only in their pre-training seed
    (``n - 1`` in the denominator), for the figures every summary has and that are not counts;
    with the summaries' seeds and commits. Refused for fewer than two summaries or repeated
    seeds."""
    if len(summaries) < 2:
        raise SystemExit("error: --seed-spread needs the summaries of two or more seeds")
    seeds = [(summary.get(PROVENANCE) or {}).get("seed", _PATH_DEFAULTS["seed"])
             for summary in summaries]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"error: --seed-spread: the summaries' seeds {seeds} repeat; give one "
                         "summary per pre-training seed (scripts/demo.py --seed N)")
    all_figures = [figures_of(summary, source) for summary, source in zip(summaries, sources)]
    spread = {}
    for name, first in all_figures[0].items():
        values = [figures.get(name, {}).get("value") for figures in all_figures]
        if first.get("se") == 0.0 or any(value is None for value in values):
            continue
        spread[name] = {"sd": statistics.stdev(values), "runs": len(values), "values": values,
                        "unit": first.get("unit", "")}
    return {FIGURES: spread,
            "sources": [{"summary": source, "seed": seed,
                         "commit": (summary.get(PROVENANCE) or {}).get("commit")}
                        for summary, source, seed in zip(summaries, sources, seeds)]}


def compare_figure(name: str, reference: dict, fresh: Optional[dict],
                   tolerance: float = TOLERANCE,
                   seed_sd: Optional[float] = None) -> FigureComparison:
    """One figure; ``seed_sd`` (the runs took different training paths) adds ``2 seed_sd^2``
    to the variance of the difference."""
    unit = reference.get("unit", "")
    if fresh is None or fresh.get("value") is None:
        return FigureComparison(name, unit, reference, fresh, math.nan, math.nan, "missing")
    if reference.get("value") is None:  # nothing was published to reproduce
        return FigureComparison(name, unit, reference, fresh, math.nan, math.nan, "new")
    difference = fresh["value"] - reference["value"]
    errors = [reference.get("se"), fresh.get("se")]
    if any(error is None for error in errors) or reference.get("se") == 0.0:
        spread = 0.0  # an unknown error, or a count: only equality passes
        seed_sd = None
    else:
        spread = math.hypot(*errors, *([math.sqrt(2) * seed_sd] if seed_sd else []))
    if spread == 0.0:
        close = math.isclose(fresh["value"], reference["value"], rel_tol=1e-9, abs_tol=1e-12)
        z = 0.0 if close else math.copysign(math.inf, difference)
    else:
        z = difference / spread
    status = "ok" if abs(z) <= tolerance else "differs"
    return FigureComparison(name, unit, reference, fresh, difference, z, status, seed_sd)


def compare(reference: dict, fresh: dict, tolerance: float = TOLERANCE,
            reference_name: str = "reference", fresh_name: str = "fresh run",
            spread: Optional[dict] = None) -> List[FigureComparison]:
    """Every reference figure against the fresh summary's, then the fresh run's new ones; where
    the two took different training paths (:func:`training_path_changes`), each figure's error
    adds its spread over seeds from ``spread`` (:func:`seed_spread`)."""
    if tolerance <= 0:
        raise SystemExit(f"error: --tolerance {tolerance}: give a positive number of standard "
                         "errors")
    reference_figures = figures_of(reference, reference_name)
    fresh_figures = figures_of(fresh, fresh_name)
    seed_sds = ({name: entry["sd"] for name, entry in (spread.get(FIGURES) or {}).items()}
                if spread and training_path_changes(reference, fresh) else {})
    rows = [compare_figure(name, figure, fresh_figures.get(name), tolerance, seed_sds.get(name))
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
        ["figure", "unit", "reference", "fresh", "fresh - reference", "seed SD", "in SEs",
         "status"],
        [[row.name, row.unit, _shown(row.reference), _shown(row.fresh),
          "-" if not math.isfinite(row.difference) else f"{row.difference:+.3f}",
          "-" if row.seed_sd is None else f"{row.seed_sd:.3f}",
          "-" if math.isnan(row.standard_errors) else f"{row.standard_errors:+.1f}",
          row.status] for row in rows])
    lines = [table]
    changes = training_path_changes(reference, fresh)
    if changes:
        with_sd = [row for row in rows if row.seed_sd is not None]
        lines.append(
            f"note: the runs took different training paths ({', '.join(changes)} differ): "
            + (f"{len(with_sd)} figures add sqrt(2) x their SD over pre-training seeds to "
               "their error (the spread file); counts must still match"
               if with_sd else "no spread over seeds was given, so the errors over sequences "
               f"alone can fail here (a {SPREAD_NAME} beside the reference)"))
    for label, summary in (("reference", reference), ("fresh", fresh)):
        info = summary.get(PROVENANCE) or {}
        lines.append(f"{label}: commit {info.get('commit') or '?'}"
                     f"{' (with uncommitted changes)' if info.get('dirty') else ''}, "
                     f"torch {info.get('torch') or '?'}, {info.get('cpu') or '?'}, "
                     f"{info.get('threads') or '?'} thread(s) per run")
    ref_info, fresh_info = reference.get(PROVENANCE) or {}, fresh.get(PROVENANCE) or {}
    if ref_info.get("cpu") and fresh_info.get("cpu") and ref_info["cpu"] != fresh_info["cpu"]:
        lines.append("note: another CPU; single-seed figures take another training path there "
                     "(fairseq_ext_lab.reporting.figures)")
    ref_corpus, fresh_corpus = ref_info.get("corpus") or {}, fresh_info.get("corpus") or {}
    if ref_corpus and fresh_corpus and ref_corpus != fresh_corpus:
        lines.append("note: another corpus build ("
                     + ", ".join(f"{key} {ref_corpus.get(key)} -> {fresh_corpus.get(key)}"
                                 for key in sorted(set(ref_corpus) | set(fresh_corpus))
                                 if ref_corpus.get(key) != fresh_corpus.get(key))
                     + "): built by other corpus code or from another release of the "
                     "pinned package lists, so every figure of the data moves with it")
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
                  printer=print, spread: Optional[Path] = None) -> int:
    """Compare two summary files; the exit status (0 pass, 1 fail). ``spread``: a
    :func:`seed_spread` file (default: :data:`SPREAD_NAME` beside the reference, if there)."""
    reference_summary, fresh_summary = load(reference), load(fresh)
    if spread is None and (Path(reference).parent / SPREAD_NAME).is_file():
        spread = Path(reference).parent / SPREAD_NAME
    spread_data = load(spread) if spread is not None else None
    rows = compare(reference_summary, fresh_summary, tolerance, str(reference), str(fresh),
                   spread_data)
    printer(f"== comparing {fresh} with the reference {reference}"
            + (f" (seed spread: {spread})" if spread is not None else ""))
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
    parser.add_argument("--spread", type=Path, default=None, metavar="SPREAD.json",
                        help="the figures' spread over pre-training seeds, added to their errors "
                             "where the run took another training path than the reference's "
                             f"(default: {SPREAD_NAME} beside REF.json, if there)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext_lab.reporting.figures",
        description="Compare a run summary's figures with a reference summary's.")
    parser.add_argument("reference", type=Path, nargs="?")
    parser.add_argument("fresh", type=Path, nargs="?")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help="standard errors beyond which a figure fails (default: %(default)s)")
    parser.add_argument("--spread", type=Path, default=None,
                        help=f"a seed-spread file (default: {SPREAD_NAME} beside REFERENCE)")
    parser.add_argument("--seed-spread", type=Path, nargs="+", default=None, metavar="SUMMARY",
                        help="instead of comparing: write the figures' SD over these summaries "
                             "of one run per pre-training seed to --out")
    parser.add_argument("--out", type=Path, default=None, help="where --seed-spread writes")
    args = parser.parse_args(argv)
    if args.seed_spread is not None:
        if args.out is None or args.reference is not None:
            parser.error("--seed-spread SUMMARY... takes --out FILE and no REFERENCE/FRESH")
        if args.out.exists():
            parser.error(f"--out {args.out} exists: give a new path (nothing is overwritten)")
        result = seed_spread([load(path) for path in args.seed_spread],
                             [str(path) for path in args.seed_spread])
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{len(result[FIGURES])} figures' SD over {len(args.seed_spread)} seeds: {args.out}")
        return
    if args.reference is None or args.fresh is None:
        parser.error("give REFERENCE and FRESH summaries (or --seed-spread SUMMARY... --out F)")
    sys.exit(compare_files(args.reference, args.fresh, args.tolerance, spread=args.spread))


if __name__ == "__main__":
    main()
