"""What a kind of evaluation supplies to the study runner (:class:`Kind`): how its runs train
and are evaluated, its report, its model table and figures, its curve's label.

May import: see :mod:`fairseq_ext_lab`.
"""
import dataclasses
from typing import Callable, List, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of evaluation (:attr:`~fairseq_ext_lab.studies.spec.Study.kind`)."""

    name: str
    #: ``(study, run, data, run_dir, updates, save_every, log_every, env, evaluate) -> row``:
    #: train one run through its recipe and evaluate it (``evaluate=False``: the curve only).
    train_and_evaluate: Callable[..., dict]
    #: ``(study, results, data) -> report``: model rows and claim rows.
    report: Callable[..., dict]
    #: ``(study, report) -> (header, rows)``: the models' table of the text report.
    model_table: Callable[..., Tuple[List[str], List[List[str]]]]
    #: ``report -> columns`` that ``--compare`` reads per model, and each column's unit.
    figure_columns: Callable[[dict], List[str]]
    figure_unit: Callable[[str], str]
    #: The curve plot's y label, and its reference line (``report -> (label, value)`` or None).
    curve_ylabel: str
    plot_reference: Callable[[dict], Optional[Tuple[str, float]]]
    #: What a learning-rate selection run is scored by.
    selection_metric: str
