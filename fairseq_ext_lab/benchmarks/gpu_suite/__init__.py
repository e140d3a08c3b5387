"""The GPU suite (scripts/gpu_suite.sh), a package of its own: its docstring, set below, is the
text `scripts/gpu_suite.sh --help` prints, made from the stages' modules and the settings table
(settings.SETTINGS). The standard library only: it runs before fairseq is installed."""
from .driver import help_text

__doc__ = help_text()
