"""Studies: each paper's claims as the paper states them, measured at CPU scale over several
seeds, with error bars (``scripts/study.py``, ``recipes/studies/<name>.sh``, docs/studies.md).

The command line: ``python -m fairseq_ext_lab.studies`` (``scripts/study.py``).

May import: see :mod:`fairseq_ext_lab`.
"""
import argparse
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from fairseq_ext.training.output_files import write_text
from fairseq_ext_lab import finetuning, recipe_runs
from fairseq_ext_lab.recipe_runs import PYTHON_DOCS_DATA, REPO_ROOT, WORKERS
from fairseq_ext_lab.reporting import figures
from fairseq_ext_lab.studies.kinds import kind_of
from fairseq_ext_lab.studies.plan import plan_study, with_lr
from fairseq_ext_lab.studies.power import design_rows, design_text
from fairseq_ext_lab.studies.render import (
    format_finetune,
    format_report,
    markdown_claims,
    markdown_finetune,
    plot_study,
    study_figures,
)
from fairseq_ext_lab.studies.runs import check_device, run_study, select_learning_rates
from fairseq_ext_lab.studies.spec import (
    DEVICES,
    EQUAL_TOKENS,
    STUDIES,
    STUDY_JSON,
    STUDY_PLOT,
    Study,
    check_study,
)
from fairseq_ext_lab.studies.verdicts import finetune_report

#: Pre-training's wall time while it runs (:func:`recipe_runs.wall_heartbeat`), until booked.
LIVE_WALL = "wall.live.json"


def report_study(study: Study, results: Dict[str, dict], data: Path, runs_dir: Path,
                 wall_seconds: float, selection: Optional[Dict[str, dict]] = None,
                 provenance: Optional[dict] = None,
                 finetune_raw: Optional[dict] = None) -> Tuple[dict, str]:
    """The report's figures and text; writes ``study.json`` and ``curves.png`` (replacing the
    previous report of this runs directory: both are recomputed from the runs' results).
    ``wall_seconds``: the study's wall time over every invocation that trained."""
    report = kind_of(study).report(study, results, data)
    report.update({"study": study.name, "title": study.title, "seeds": list(study.seeds),
                   "notes": study.notes, "wall_seconds": wall_seconds, "budget": study.budget,
                   "device": study.device,
                   "minutes": study.minutes,
                   "lr_selection": selection or {},
                   "runs": {key: {k: v for k, v in result.items() if k != "curve"}
                            for key, result in results.items()},
                   "curves": {key: result["curve"] for key, result in results.items()}})
    if finetune_raw is not None:
        report["finetune"] = finetune_report(study, finetune_raw)
    report[figures.FIGURES] = study_figures(study, report)
    report[figures.PROVENANCE] = provenance or figures.provenance(REPO_ROOT, threads=1)
    text = format_report(study, report)
    if finetune_raw is not None:
        text += "\n" + format_finetune(report["finetune"], len(study.seeds))
    # paths relative to the runs directory (then the checkout): it can be moved or copied
    report = figures.relative_paths(figures.relative_paths(report, runs_dir), REPO_ROOT)
    write_text(runs_dir / STUDY_JSON, json.dumps(report, indent=2, default=str), force=True)
    plot = plot_study(study, results, runs_dir / STUDY_PLOT, report)
    if plot is not None:
        text += f"\nvalid loss against training PFLOPs, ±1 SE over seeds: {plot}"
    return report, text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="scripts/study.py", description=__doc__.split("\n\n")[0],
        epilog="studies: " + "; ".join(f"{s.name}: {s.title}" for s in STUDIES.values()))
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--data", type=Path, default=PYTHON_DOCS_DATA,
                        help="a data-bin (default: the Python docs, scripts/prepare_corpus.sh "
                             "--source python-docs, on which the committed studies were made)")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the runs go (default runs/studies/<study>); run the same "
                             "command again to resume: finished runs are read back")
    parser.add_argument("--updates", type=int, default=None,
                        help="the baseline's updates instead of the study's (the other models "
                             "get the same FLOPs), e.g. for a quick check in another --runs-dir")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="the seeds to run instead of the study's")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help="runs at a time, one torch thread each (default: %(default)s; a "
                             "study on the GPU runs one at a time)")
    parser.add_argument("--device", choices=DEVICES, default=None,
                        help="where the runs train and are scored (default: the study's own: "
                             + ", ".join(f"{s.name} {s.device}" for s in STUDIES.values()
                                         if s.device != "cpu") + ", the others cpu)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the scored interval checkpoints (default: the last only)")
    parser.add_argument("--downstream", type=Path, default=None, metavar="SUITE_DIR",
                        help="fine-tune every pre-trained checkpoint on the downstream suite in "
                             "SUITE_DIR (scripts/prepare_downstream.sh DATA_BIN SUITE_DIR) and "
                             "report the papers' fine-tuning claims (studies with a fine-tuning "
                             "protocol: " + ", ".join(s.name for s in STUDIES.values()
                                                       if s.finetune) + ")")
    parser.add_argument("--finetune-tasks", nargs="+", default=None, metavar="TASK",
                        help="with --downstream: fine-tune on these tasks of the suite only (a "
                             "trial: the report's average is over them)")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: re-render study.json, curves.png and the report "
                             "from the finished runs in --runs-dir (an unfinished run is an "
                             "error naming it)")
    parser.add_argument("--minutes", type=int, default=None,
                        help="the study's time budget in minutes, over every invocation on "
                             "--runs-dir (default: the study's own, Study.minutes; 0: none); no "
                             "run starts past it, and the finished ones are kept")
    parser.add_argument("--power", type=Path, default=None, metavar="REF.json",
                        help="train nothing: print each claim's minimum detectable effect at "
                             "the study's seeds, planned from the per-seed spread of a "
                             "reference study.json, beside the paper's effect")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the claims as docs/studies.md's Paper vs ours rows")
    figures.add_compare_arguments(parser)
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    if args.device is not None:
        study = dataclasses.replace(study, device=args.device)
    check_device(study.device)  # before the data: say what is missing first
    if args.compare is not None:  # read now: a wrong path is told before the training
        figures.figures_of(figures.load(args.compare), str(args.compare))
    if args.power is not None:
        seeds = len(args.seeds or study.seeds)
        reference = json.loads(args.power.read_text())
        print(design_text(study.name, design_rows(
            [*study.claims, *study.finetune_claims], reference, seeds), str(args.power)))
        return
    data = args.data.resolve()
    if not (data / "dict.txt").is_file():
        raise SystemExit(f"error: --data {data} has no dict.txt: run scripts/prepare_corpus.sh "
                         "--source python-docs first (the studies' default corpus), or point "
                         "--data at a fairseq data-bin")
    if args.updates is not None and args.updates < 1:
        parser.error(f"--updates {args.updates}: give a positive number of updates")
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: give at least 1")
    if args.minutes is not None:
        if args.minutes < 0:
            parser.error(f"--minutes {args.minutes}: give a number of minutes, or 0 for none")
        study = dataclasses.replace(study, minutes=args.minutes)
    downstream = None
    if args.downstream is not None:
        if study.finetune is None:
            parser.error(f"--downstream: study {study.name} has no fine-tuning protocol (those "
                         "that have: " + ", ".join(s.name for s in STUDIES.values() if s.finetune)
                         + ")")
        downstream = args.downstream.resolve()
        tasks, _ = finetuning.load_suite(downstream)  # a wrong folder is told before training
        unknown = sorted(set(args.finetune_tasks or ()) - {task.name for task in tasks})
        if unknown:
            parser.error(f"--finetune-tasks {' '.join(unknown)}: not in {downstream} (its tasks: "
                         + ", ".join(task.name for task in tasks) + ")")
    elif args.finetune_tasks is not None:
        parser.error("--finetune-tasks needs --downstream SUITE_DIR")
    runs_dir = (args.runs_dir or REPO_ROOT / "runs" / "studies" / study.name).resolve()
    run(study, data, runs_dir, args.updates, args.seeds, args.workers, args.keep_checkpoints,
        downstream=downstream, report_only=args.report_only, finetune_tasks=args.finetune_tasks)
    if args.markdown:
        report = json.loads((runs_dir / STUDY_JSON).read_text())
        print(markdown_claims(report))
        if report.get("finetune"):
            print()
            print(markdown_finetune(report))
    if args.compare is not None:
        sys.exit(figures.compare_files(args.compare, runs_dir / STUDY_JSON, args.tolerance,
                                        spread=args.spread))


def run(study: Study, data: Path, runs_dir: Path, updates: Optional[int] = None,
        seeds: Optional[Sequence[int]] = None, workers: int = WORKERS,
        keep_checkpoints: bool = False, printer: Callable[[str], None] = print,
        downstream: Optional[Path] = None, report_only: bool = False,
        finetune_tasks: Optional[Sequence[str]] = None) -> None:
    """Plan, run (resuming), fine-tune on the ``downstream`` suite when given, report (a failure
    raises). The study trains on ``study.device`` (``dataclasses.replace`` it to move it).
    ``report_only`` (``--report-only``): train nothing; the report is computed from the
    finished runs alone (:func:`report_study`, a function of the runs' results), so it is the
    one the run that finished them wrote. ``finetune_tasks``: fine-tune on those tasks of the
    suite only."""
    check_study(study)
    check_device(study.device)
    start = time.time()
    if report_only and not runs_dir.is_dir():
        raise SystemExit(f"error: --report-only: {runs_dir} does not exist: give the --runs-dir "
                         "of a study that ran")
    # the checkout the runs start from; a GPU study's device too (--report-only: the one of the
    # invocation that wrote the report, which trained them)
    provenance = figures.provenance(REPO_ROOT, threads=1 if study.device == "cpu" else None,
                                    device=study.device)
    if report_only and (runs_dir / STUDY_JSON).is_file():
        provenance = json.loads((runs_dir / STUDY_JSON).read_text()).get(figures.PROVENANCE,
                                                                        provenance)
    seeds = tuple(seeds or study.seeds)
    study = dataclasses.replace(study, seeds=seeds)
    if study.device == "cuda" and workers != 1:  # the runs would share the GPU and its clock
        printer(f"== one run at a time on the GPU (not {workers})")
        workers = 1
    plan = plan_study(study, data, updates, seeds)
    budget = "equal training tokens" if study.budget == EQUAL_TOKENS else "equal training FLOPs"
    printer(f"== study {study.name}: {len(plan)} runs, {workers} at a time, into {runs_dir}; "
            f"{budget}: " + ", ".join(
                f"{p.model.name} {p.updates} updates" for p in plan if p.seed == seeds[0]))
    runs_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_wall_seconds(runs_dir)
    spent = earlier + finetuning.stage_wall_seconds(runs_dir)
    budget = None
    if study.minutes > 0 and not report_only:
        budget = study.minutes * 60 - spent
        printer(f"== time budget: {study.minutes} min (Study.minutes; --minutes to change), "
                f"{spent / 60:.1f} min spent by earlier invocations on {runs_dir}")
    over = (f"error: study {study.name} is over its time budget of {study.minutes} min "
            "(Study.minutes, docs/studies.md): no run starts past it, and the finished runs "
            "are kept; to finish, run the same command with --minutes M for a larger budget "
            "(finished runs are read back, never retrained)")
    # pre-training's wall time stays on disk while it runs, should this invocation be killed
    heartbeat = (contextlib.nullcontext() if report_only else
                 recipe_runs.wall_heartbeat(runs_dir / LIVE_WALL, earlier))
    with recipe_runs.time_budget(budget, over):
        with heartbeat:
            selection, selected_now = select_learning_rates(study, data, runs_dir, plan, workers,
                                                            printer, train=not report_only)
            if selection:
                plan = [dataclasses.replace(
                    planned, model=with_lr(planned.model, selection[planned.model.name]["lr"]))
                    for planned in plan]
            results, trained = run_study(study, data, runs_dir, plan, workers, keep_checkpoints,
                                         train=not report_only)
        this_time = time.time() - start
        # the study's wall time: every invocation that trained something, summed over resumes
        total = earlier + (this_time if trained or selected_now else 0.0)
        finetune_raw = None
        if downstream is not None:
            checkpoints = {(model.name, seed): Path(results[f"{model.name}/seed{seed}"]["run_dir"])
                           / "checkpoints" / "checkpoint_last.pt"
                           for model in study.models for seed in seeds}
            # on the GPU, several at a time: accuracy does not read the clock
            finetune_workers = finetuning.GPU_WORKERS if study.device == "cuda" else workers
            finetune_raw = finetuning.run_stage(study.finetune, {m.name: m for m in study.models},
                                                seeds, checkpoints, downstream, runs_dir,
                                                finetune_workers, printer,
                                                only=finetune_tasks, train=not report_only,
                                                device=study.device)
    _report, text = report_study(study, results, data, runs_dir, total, selection, provenance,
                                 finetune_raw)
    (runs_dir / LIVE_WALL).unlink(missing_ok=True)  # booked in study.json
    printer(text)
    printer(f"figures: {runs_dir / STUDY_JSON}")
    printer(f"study wall time: {total / 60:.1f} min of pre-training over the invocations that "
            f"trained (this one {this_time / 60:.1f} min; finished runs read back cost nothing)"
            + ("" if finetune_raw is None else
               f"; fine-tuning {finetune_raw['wall_seconds'] / 60:.1f} min")
            + (f"; budget {study.minutes} min" if study.minutes > 0 else ""))


def earlier_wall_seconds(runs_dir: Path) -> float:
    """The wall time earlier invocations spent pre-training into this runs directory
    (``study.json``'s ``wall_seconds``; 0 without one), a killed or failed one's included
    (:func:`recipe_runs.spent_seconds`)."""
    path = runs_dir / STUDY_JSON
    booked = float(json.loads(path.read_text()).get("wall_seconds") or 0.0) if path.is_file() \
        else 0.0
    return recipe_runs.spent_seconds(runs_dir / LIVE_WALL, booked)
