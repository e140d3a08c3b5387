"""Where fairseq's console scripts and the Python that runs the plugin's programs are: the folder
``FAIRSEQ_BIN`` names when it is set, else the folder of this interpreter. The recipes read the
same variable (``recipes/lib/common.sh``: ``fairseq_cmd``, ``recipe_python``), so a driver that
starts fairseq-train, fairseq-validate or ``python -m fairseq_ext...`` itself starts the programs
its recipes would (a site's wrapped fairseq, or the test suite's fork server of them,
``tests/cli_zygote.py``), with the plugin as their ``--user-dir`` (:data:`PLUGIN_DIR`).
"""
import os
import sys
from pathlib import Path

#: The environment variable the recipes and these helpers read.
FAIRSEQ_BIN_ENV = "FAIRSEQ_BIN"
#: The plugin's folder, the ``--user-dir`` such a driver passes to fairseq's console scripts.
PLUGIN_DIR = Path(__file__).resolve().parents[1]


def fairseq_bin() -> Path:
    """``$FAIRSEQ_BIN``, else the folder of the running interpreter (its console scripts)."""
    named = os.environ.get(FAIRSEQ_BIN_ENV)
    return Path(named) if named else Path(sys.executable).parent


def console_script(name: str) -> str:
    """The path of fairseq's console script ``name`` (``fairseq-validate``) in :func:`fairseq_bin`."""
    return str(fairseq_bin() / name)


def python_executable() -> str:
    """The Python of :func:`fairseq_bin` when it has one (``recipe_python`` of the recipes),
    else the running interpreter."""
    beside = fairseq_bin() / "python"
    return str(beside) if os.access(beside, os.X_OK) else sys.executable
