"""Which of fairseq's command-line tools is running: the plugin asks, to print its errors as that
tool's one-line error (:mod:`.errors`) and for what fairseq hands no plugin code
(:mod:`fairseq_ext.models.validation`).
"""
import sys
from pathlib import Path
from typing import Optional, Sequence

#: fairseq's console scripts fairseq-ext asks about, and the ``fairseq_cli`` module behind each.
FAIRSEQ_PROGRAMS = {"fairseq-train": "train.py", "fairseq-hydra-train": "hydra_train.py",
                    "fairseq-validate": "validate.py"}


def fairseq_program(argv: Optional[Sequence[str]] = None) -> Optional[str]:
    """The console script running (a key of :data:`FAIRSEQ_PROGRAMS`; ``python -m
    fairseq_cli.validate`` is ``fairseq-validate``), or ``None`` in any other program. Reads
    ``sys.argv`` unless given ``argv``: the one place fairseq-ext reads the command line, for
    what fairseq hands no plugin code (fairseq-validate's ``--criterion``; whether the model
    is built to be trained)."""
    argv = sys.argv if argv is None else argv
    if not argv:
        return None
    program = Path(argv[0])
    for name, module in FAIRSEQ_PROGRAMS.items():
        if program.name == name or (program.name == module
                                    and program.parent.name == "fairseq_cli"):
            return name
    return None
