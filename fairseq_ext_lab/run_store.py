"""The resumable run store the studies and their fine-tuning stage share: a run is finished
when its :data:`RESULT` exists, written last and atomically (:func:`write_result`); a finished
run is read back, never redone. The pre-training learning-rate selection runs train at
:data:`SELECTION_SEED`, none of a study's seeds.

May import: see :mod:`fairseq_ext_lab` (nothing of its other modules).
"""
import json
from pathlib import Path

from fairseq_ext.training.output_files import write_text

#: The file that marks a run finished (training and evaluation done), written last, atomically.
RESULT = "result.json"
#: The seed of the pre-training learning-rate selection runs (none of a study's). Fine-tuning
#: chooses its rate per pre-training seed from the study's own runs, scored on the suite's
#: selection split (:mod:`fairseq_ext_lab.finetuning`).
SELECTION_SEED = 101


def write_result(run_dir: Path, result: dict) -> None:
    """Mark the run in ``run_dir`` finished: its :data:`RESULT`, atomically, never over an
    earlier one."""
    write_text(run_dir / RESULT, json.dumps(result, indent=2, default=str), force=False)
