"""fairseq-ext: a fairseq ``--user-dir`` plugin for 3ML, generalized bidirectionality, SwishRNN
and FLOP-counting criteria.

Importing it registers every task (``tasks/``), model and architecture (``models/``), criterion
(``criterions/``) and optimizer (``optim/``) it defines, and lets fairseq checkpoints load on
torch >= 2.6 with safe unpickling kept on. It stops with one line naming ``make install`` when
fairseq is not the patched build (``patches/series``). The lab that measures the plugin is the
separate package ``fairseq_ext_lab``; nothing here imports it.
"""
import warnings

# fairscale (the optional `sharding` extra) warns at import that torch deprecates
# torch.cuda.amp.custom_fwd; that known noise is not printed, nothing else is filtered.
warnings.filterwarnings("ignore", message=r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is "
                        r"deprecated", category=FutureWarning, module=r"fairscale\.")

from fairseq_ext.cli.errors import install_one_line_errors  # noqa: E402
from fairseq_ext.cli.programs import fairseq_program  # noqa: E402
from fairseq_ext.training.fairseq_patch import require_patched_fairseq  # noqa: E402

install_one_line_errors(fairseq_program())  # our checks' errors print as one line under fairseq's tools
require_patched_fairseq()

from fairseq_ext.training.checkpoint_loading import allow_fairseq_checkpoint_globals  # noqa: E402

allow_fairseq_checkpoint_globals()

#: Subpackages whose modules register fairseq components when imported.
REGISTERING_SUBPACKAGES = ("criterions", "models", "optim", "tasks")

from fairseq_ext import criterions, models, ops, optim, tasks  # noqa: E402,F401  (registration on import)
from fairseq_ext.training.fused_kernels import log_fused_kernels  # noqa: E402

log_fused_kernels()

__version__ = "0.1.0"
