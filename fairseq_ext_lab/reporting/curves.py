"""Plot valid loss against cumulative training FLOPs, wall time and training tokens, one line
per run, in one figure.

Reads the logs of fairseq runs trained with ``--criterion masked_lm_flops --log-format json``:
the stdout logs ``scripts/demo.py`` keeps (``runs/demo/<ts>/<name>/train.log``: each JSON
record after a logging prefix such as ``2026-01-01 12:00:00 | INFO | train_inner | {...}``) or
files written with fairseq's ``--log-file`` (bare JSON records). Records are told apart by
their keys, so both forms read the same:

* per-interval training records (``train_inner``) carry ``num_updates``, ``total_pflops`` and
  ``total_tokens`` (the criterion's running totals of training PFLOPs and tokens,
  :mod:`fairseq_ext.flops.training_metrics`) and ``wall`` (seconds since training began, kept
  across a resume);
* end-of-epoch summaries carry the same figures as ``train_num_updates``,
  ``train_total_pflops``, ``train_total_tokens`` and ``train_wall`` (their ``train_pflops`` is
  the epoch's *mean per update*, not the total, and is not used);
* validation records carry ``valid_loss`` (bits) and ``valid_num_updates`` but no FLOPs, tokens
  or wall time: each is placed at the figures of the training record at the same update or,
  failing that, the nearest earlier one (:func:`map_valid_to_train`).

Logs written before ``total_tokens`` was logged still plot: their tokens panel says so.

The command line is ``scripts/plot_curves.py``::

    python scripts/plot_curves.py runs/demo/<ts>/roberta-15pct/train.log \\
        runs/demo/<ts>/3ml-self-40pct/train.log --labels roberta,3ml-self --out curves.png

Labels default to the name of each log's parent directory; a run directory may be given in
place of its ``train.log``. Every recipe (shell and YAML) logs its JSON records to
``$SAVE_DIR/train.log`` (``--log-format json --log-file``), so ``plot_curves.py SAVE_DIR`` plots
any run. The PNG has three panels: valid loss vs PFLOPs, vs wall time and vs training tokens.
An existing ``--out`` file is replaced only with ``--force`` (checked before the logs are read),
and written whole or not at all (:mod:`fairseq_ext.training.output_files`).
"""
import argparse
import bisect
import dataclasses
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from fairseq_ext.training.output_files import OutputError, atomic_file, error_line, refuse_existing
from fairseq_ext_lab.reporting.log_records import parse_json_record


class CurveError(ValueError):
    """A log that cannot be plotted; the message says why."""


@dataclasses.dataclass(frozen=True)
class TrainPoint:
    updates: int
    pflops: float  # cumulative training PFLOPs after ``updates`` updates
    wall: float  # seconds since the start of training
    tokens: Optional[float] = None  # cumulative training tokens (None: not in the log)


@dataclasses.dataclass(frozen=True)
class ValidPoint:
    updates: int
    loss: float


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    updates: int
    pflops: float
    wall: float
    valid_loss: float
    train_updates: int  # the update of the training record it was placed at
    tokens: Optional[float] = None


@dataclasses.dataclass
class RunLog:
    path: Path
    train: List[TrainPoint]
    valid: List[ValidPoint]
    train_records_without_flops: int = 0


#: What ``--metric`` can plot: fairseq's valid loss, or one category of corrupted tokens as
#: logged by ``masked_lm_categories`` / ``masked_lm_flops``.
METRICS = ("loss", "loss_mask", "loss_replaced", "loss_unchanged")


def read_log(path: Path, metric: str = "loss") -> RunLog:
    """Training and validation points (``valid_<metric>``) of one log, in file order."""
    path = Path(path)
    if path.is_dir():
        path = path / "train.log"
    if not path.is_file():
        raise CurveError(f"no such log: {path}")
    run = RunLog(path, [], [])
    with open(path, errors="replace") as f:
        for line in f:
            record = parse_json_record(line)
            if record is None:
                continue
            if "valid_loss" in record and "valid_num_updates" in record:
                if f"valid_{metric}" not in record:
                    raise CurveError(f"{path}: validation records have no valid_{metric}: "
                                     f"train with --criterion masked_lm_categories or "
                                     f"masked_lm_flops for the per-category losses")
                run.valid.append(ValidPoint(int(float(record["valid_num_updates"])),
                                            float(record[f"valid_{metric}"])))
            elif "num_updates" in record:  # train_inner
                if "total_pflops" in record and "wall" in record:
                    run.train.append(TrainPoint(int(float(record["num_updates"])),
                                                float(record["total_pflops"]),
                                                float(record["wall"]),
                                                _optional_float(record, "total_tokens")))
                else:
                    run.train_records_without_flops += 1
            elif "train_num_updates" in record:  # end-of-epoch summary
                if "train_total_pflops" in record and "train_wall" in record:
                    run.train.append(TrainPoint(int(float(record["train_num_updates"])),
                                                float(record["train_total_pflops"]),
                                                float(record["train_wall"]),
                                                _optional_float(record, "train_total_tokens")))
                else:
                    run.train_records_without_flops += 1
    return run


def _optional_float(record: dict, key: str) -> Optional[float]:
    return float(record[key]) if key in record else None


def map_valid_to_train(train: Sequence[TrainPoint],
                       valid: Sequence[ValidPoint]) -> List[CurvePoint]:
    """Place each validation point at the cumulative FLOPs and wall time of the training record
    at the same update, or else at the nearest earlier one. A validation point before any
    training record is dropped. Where several training records share an update (e.g. a log
    holding a run restarted from an earlier checkpoint), the last one in the log wins."""
    by_update = {}
    for point in train:
        by_update[point.updates] = point
    updates = sorted(by_update)
    curve = []
    for point in valid:
        i = bisect.bisect_right(updates, point.updates)
        if i == 0:
            continue
        match = by_update[updates[i - 1]]
        curve.append(CurvePoint(point.updates, match.pflops, match.wall, point.loss, match.updates,
                                match.tokens))
    return curve


def curve_of(run: RunLog) -> List[CurvePoint]:
    """The plotted points of a run, with a clear error when its log cannot give any."""
    if not run.train:
        if run.train_records_without_flops:
            raise CurveError(
                f"{run.path}: its training records have no total_pflops: train with "
                f"--criterion masked_lm_flops (and --log-format json)")
        raise CurveError(f"no JSON training records in {run.path}: train with "
                         f"`--log-format json --log-file {run.path}` (the recipes do this by "
                         f"default: $SAVE_DIR/train.log) and --criterion masked_lm_flops")
    if not run.valid:
        raise CurveError(f"{run.path}: no validation records (valid_loss): the run logged no "
                         f"validation (was --disable-validation set, or did it stop before "
                         f"the first validation?)")
    curve = map_valid_to_train(run.train, run.valid)
    if not curve:
        raise CurveError(f"{run.path}: no validation point at or after the first training "
                         f"record (update {min(p.updates for p in run.train)})")
    return curve


def wall_unit(max_seconds: float):
    """(divisor, label) to show wall time in seconds, minutes or hours."""
    if max_seconds >= 2 * 3600:
        return 3600.0, "hours"
    if max_seconds >= 2 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def figure(curves, labels, metric: str = "loss"):
    """The matplotlib figure: valid loss against PFLOPs, wall time and tokens, one line per
    curve in each panel."""
    # Importing fairseq's tasks (text_to_speech) sets the root logger to DEBUG, which would let
    # matplotlib print its setup and every font it considers; our plots log nothing below a
    # warning.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    divisor, unit = wall_unit(max(p.wall for curve in curves for p in curve))
    fig, (by_flops, by_wall, by_tokens) = plt.subplots(1, 3, figsize=(17, 4.8), sharey=True,
                                                       constrained_layout=True)
    without_tokens = []
    for curve, label in zip(curves, labels):
        style = dict(marker="o", markersize=3.5, linewidth=1.5, label=label)
        lines = by_flops.plot([p.pflops for p in curve], [p.valid_loss for p in curve], **style)
        style["color"] = lines[0].get_color()
        by_wall.plot([p.wall / divisor for p in curve], [p.valid_loss for p in curve], **style)
        with_tokens = [p for p in curve if p.tokens is not None]
        if with_tokens:
            by_tokens.plot([p.tokens / 1e6 for p in with_tokens],
                           [p.valid_loss for p in with_tokens], **style)
        else:
            without_tokens.append(label)
    by_flops.set_xlabel("cumulative training compute (PFLOPs)")
    name = "valid loss" if metric == "loss" else f"valid {metric}"
    by_flops.set_ylabel(f"{name} (bits)")
    by_flops.set_title(f"{name} vs training FLOPs")
    by_wall.set_xlabel(f"wall time ({unit})")
    by_wall.set_title(f"{name} vs wall time")
    by_tokens.set_xlabel("training tokens (millions)")
    by_tokens.set_title(f"{name} vs training tokens")
    if without_tokens:
        by_tokens.text(0.5, 0.5, "no total_tokens logged:\n" + "\n".join(without_tokens),
                       transform=by_tokens.transAxes, ha="center", va="center", fontsize=9)
    for ax in (by_flops, by_wall, by_tokens):
        ax.grid(True, alpha=0.3)
        if ax.get_lines():
            ax.legend()
        ax.set_xlim(left=0)
    return fig


def plot(curves, labels, out: Path, metric: str = "loss", force: bool = False) -> None:
    """Save the :func:`figure` of ``curves`` to ``out`` (its format from the file name's
    extension, PNG without one); an existing ``out`` is replaced only with ``force``."""
    fig = figure(curves, labels, metric)  # first: it quiets matplotlib's loggers, then imports it
    import matplotlib.pyplot as plt

    try:
        with atomic_file(out, force, binary=True) as handle:
            fig.savefig(handle, dpi=120, format=Path(out).suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)


def plot_bands(bands, out: Path, title: str, ylabel: str, force: bool = True,
               reference: Optional[tuple] = None) -> None:
    """One line per model with a shaded ±1 SE band: ``bands`` is ``{label: [(pflops, Estimate of
    the loss), ...]}`` (the mean over seeds and its standard error at each point, as
    :mod:`fairseq_ext_lab.studies` makes them), against training PFLOPs. ``out`` is
    replaced (``force``) since the band is recomputed from the runs each time. ``reference``:
    ``(label, loss)`` of a trivial baseline, drawn as a dashed horizontal line."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), constrained_layout=True)
    try:
        for label, points in bands.items():
            x = [pflops for pflops, _ in points]
            mean = [estimate.value for _, estimate in points]
            error = [0.0 if estimate.standard_error != estimate.standard_error
                     else estimate.standard_error for _, estimate in points]
            lines = ax.plot(x, mean, marker="o", markersize=3.5, linewidth=1.5, label=label)
            ax.fill_between(x, [m - e for m, e in zip(mean, error)],
                            [m + e for m, e in zip(mean, error)], alpha=0.25,
                            color=lines[0].get_color(), linewidth=0)
        if reference is not None:
            ax.axhline(reference[1], color="grey", linestyle="--", linewidth=1,
                       label=reference[0])
        ax.set_xlabel("cumulative training compute (PFLOPs)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend()
        with atomic_file(out, force, binary=True) as handle:
            fig.savefig(handle, dpi=120, format="png")
    finally:
        plt.close(fig)


def default_label(path: Path) -> str:
    path = Path(path)
    return path.name if path.is_dir() else path.resolve().parent.name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="plot_curves.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, metavar="RUN_LOG",
                        help="fairseq json stdout log or --log-file of a run (or its run dir, "
                             "for RUN_DIR/train.log)")
    parser.add_argument("--labels", default=None,
                        help="comma-separated legend labels, one per log (default: the name "
                             "of each log's parent directory)")
    parser.add_argument("--out", type=Path, default=Path("curves.png"), help="PNG to write")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--metric", choices=METRICS, default="loss",
                        help="the validation loss to plot: overall, or of [MASK], replaced or "
                             "unchanged tokens only (default: loss)")
    args = parser.parse_args(argv)
    try:
        refuse_existing([args.out], args.force)
        if args.labels is not None:
            labels = [label.strip() for label in args.labels.split(",")]
            if len(labels) != len(args.logs):
                raise CurveError(f"--labels has {len(labels)} labels for {len(args.logs)} logs")
        else:
            labels = [default_label(path) for path in args.logs]
        curves = [curve_of(read_log(path, args.metric)) for path in args.logs]
        plot(curves, labels, args.out, args.metric, args.force)
    except (CurveError, OutputError) as error:
        print(error_line(parser.prog, error), file=sys.stderr)
        return 2
    for label, curve in zip(labels, curves):
        last = curve[-1]
        tokens = f", {last.tokens:.4g} tokens" if last.tokens is not None else ""
        print(f"{label}: {len(curve)} valid points; last: valid {args.metric} {last.valid_loss:g} at "
              f"update {last.updates}, {last.pflops:.4g} PFLOPs{tokens}, {last.wall:g} s")
    print(f"wrote {args.out}")
    return 0
