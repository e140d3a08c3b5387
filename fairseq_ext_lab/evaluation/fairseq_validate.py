"""The stock ``fairseq-validate`` command the lab scores checkpoints with: the fine-tuning stage's
accuracies (:func:`fairseq_ext_lab.finetuning.validate_accuracy`) and the bidirectional tables
(:func:`fairseq_ext_lab.evaluation.bidirectional_report.run_validate`).
"""
from pathlib import Path
from typing import List

from fairseq_ext.training.fairseq_bin import PLUGIN_DIR, console_script


def validate_command(data: Path, checkpoint: Path, task: str, subset: str, batch_size: int,
                     cpu: bool, *extra: str) -> List[str]:
    """``fairseq-validate`` (:func:`~fairseq_ext.training.fairseq_bin.console_script`) of
    ``checkpoint`` on the ``subset`` split of the data-bin ``data`` under ``--task task``, the
    plugin as ``--user-dir``, JSON log records, ``extra`` flags, and ``--cpu`` when ``cpu``."""
    return [console_script("fairseq-validate"), str(data), "--user-dir", str(PLUGIN_DIR),
            "--task", task, "--path", str(checkpoint), "--valid-subset", subset,
            "--batch-size", str(batch_size), "--log-format", "json", *extra,
            *(["--cpu"] if cpu else [])]
