"""What the hydra YAMLs (``recipes/config/**.yaml``) need from the plugin before fairseq reads them.

``common.user_dir`` must be a path, and a relative one only resolves from the repository root.
Every YAML therefore says ``user_dir: ${fairseq_ext.user_dir:}``, an OmegaConf resolver giving
the folder of the installed ``fairseq_ext``, registered by the hydra callback each YAML lists
(``hydra.callbacks.fairseq_ext._target_: fairseq_ext.training.hydra_config.RegisterResolvers``).
Hydra builds its callbacks after composing the config and before the job runs, where
fairseq-hydra-train resolves it. Building the callback imports the installed ``fairseq_ext``, so
``common.user_dir`` cannot name another copy (fairseq refuses a second package of the same
name): install that one. See docs/recipes.md.
"""
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

USER_DIR_RESOLVER = "fairseq_ext.user_dir"


def installed_user_dir() -> str:
    """The folder of the ``fairseq_ext`` package this process imports: what fairseq's
    ``--user-dir`` must name so that it imports this very package (not a second copy)."""
    return str(Path(__file__).parent.parent)  # not resolved: as the package's own __path__


def register_resolvers() -> None:
    """Register ``${fairseq_ext.user_dir:}`` (once; later calls do nothing)."""
    if not OmegaConf.has_resolver(USER_DIR_RESOLVER):
        OmegaConf.register_new_resolver(USER_DIR_RESOLVER, installed_user_dir)


class RegisterResolvers(Callback):
    """Hydra callback that registers the plugin's resolvers when hydra builds it."""

    def __init__(self) -> None:
        register_resolvers()
