"""fairseq-ext: a fairseq ``--user-dir`` plugin.

Importing this package (``--user-dir fairseq_ext``, or ``import fairseq_ext``) registers every
task, model, architecture, criterion and optimizer it defines, and lets fairseq checkpoints load
on torch >= 2.6 with safe unpickling kept on (:mod:`fairseq_ext.training.checkpoint_loading`). Under
fairseq's tools (fairseq-train, fairseq-validate, fairseq-hydra-train) the errors our checks
raise print as one line (:mod:`fairseq_ext.cli.errors`).

It first checks that fairseq is the patched build ``make install`` makes (the marker
``fairseq.__fairseq_ext_patch__``; :mod:`fairseq_ext.training.fairseq_patch`) and stops with one
line naming ``make install`` where it is not.
"""
import warnings

# fairscale 0.4.13 (the optional `sharding` extra, requirements-sharding.txt) decorates with
# torch.cuda.amp.custom_fwd/custom_bwd, which torch deprecates with a FutureWarning at import;
# fairseq imports fairscale when present. Where fairseq_ext is imported first (our scripts, `import
# fairseq_ext`), that known noise is not printed; nothing else is filtered.
warnings.filterwarnings("ignore", message=r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is "
                        r"deprecated", category=FutureWarning, module=r"fairscale\.")

from fairseq_ext.cli.errors import install_one_line_errors  # noqa: E402
from fairseq_ext.cli.programs import fairseq_program  # noqa: E402
from fairseq_ext.training.fairseq_patch import require_patched_fairseq  # noqa: E402

install_one_line_errors(fairseq_program())  # before anything can fail: one line under fairseq's tools
require_patched_fairseq()

from fairseq_ext import compat  # noqa: E402
from fairseq_ext.training.checkpoint_loading import allow_fairseq_checkpoint_globals  # noqa: E402

compat.install()  # the modules' old paths, for one release (fairseq_ext/compat)
allow_fairseq_checkpoint_globals()

#: Subpackages whose modules register fairseq components when imported.
REGISTERING_SUBPACKAGES = ("criterions", "models", "optim", "tasks")

from fairseq_ext import criterions, models, ops, optim, tasks  # noqa: E402,F401  (registration on import)
from fairseq_ext.training.fused_kernels import log_fused_kernels  # noqa: E402

log_fused_kernels()

__version__ = "0.1.0"
