"""Checks of the run a fairseq-ext architecture is built in, made when fairseq reads the config.

Every arch registered by :func:`~fairseq_ext.models.sizes.register_sized_architecture` runs
:func:`check_run_config` before it fills its defaults (a criterion that divides a masked-LM loss
by every token, masking settings fairseq would reject with a bare ``AssertionError``, data
splits that cannot be read whole) and :func:`check_flex_trains` after. It sees the whole
``argparse.Namespace`` under ``fairseq-train``, the ``model`` node of the run's ``DictConfig``
under hydra (:func:`run_config_of`). What fairseq hands no plugin code, the running program and
fairseq-validate's ``--criterion`` (which it ignores: :func:`warn_if_validate_ignores_criterion`),
is read from ``sys.argv`` (:func:`~fairseq_ext.cli.programs.fairseq_program`). The errors and
warnings: docs/troubleshooting.md.
"""
import argparse
import dataclasses
import logging
import sys
from typing import Any, List, Optional, Sequence

import torch
from fairseq.utils import safe_getattr, split_paths
from omegaconf import OmegaConf

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.cli.programs import FAIRSEQ_PROGRAMS, fairseq_program  # noqa: F401
from fairseq_ext.data.data_bin import check_data_bin, check_split, check_splits
from fairseq_ext.modules.block_sparse_attention import flex_unsupported_reason

logger = logging.getLogger(__name__)

#: fairseq's masked-LM task, the one fairseq-ext's models are pre-trained with.
MASKED_LM_TASK = "masked_lm"
#: Criteria that normalise a masked-LM loss by every token rather than the predicted ones.
ALL_TOKEN_CRITERIA = frozenset({"cross_entropy"})
#: Generalized bidirectionality's task and its criterion (loss over the predicted tokens).
BIDIRECTIONAL_LM_TASK = "bidirectional_lm"
#: Criteria with the same masked-LM loss (fairseq's, and ours with more metrics).
MASKED_LM_CRITERIA = ("masked_lm_categories", "masked_lm_flops", "masked_lm")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What an arch function can see of its run: the task's and criterion's names and the
    config holding the task's fields (``mask_prob`` ...); ``None`` where it cannot see them
    (e.g. a model built outside fairseq's CLIs)."""

    task: Optional[str] = None
    criterion: Optional[str] = None
    task_cfg: Any = None


def _name(node) -> Optional[str]:
    """The registered name of a task/criterion config: a string, or its ``_name``."""
    if node is None or isinstance(node, str):
        return node
    if isinstance(node, dict):  # fairseq-validate --model-overrides "{'criterion': {...}}"
        return node.get("_name")
    return safe_getattr(node, "_name", None)


def run_config_of(model_cfg) -> RunConfig:
    """The :class:`RunConfig` around a model config: a ``fairseq-train`` Namespace carries every
    flag itself; a hydra ``model`` node's parent is the whole run config."""
    if isinstance(model_cfg, argparse.Namespace):
        return RunConfig(_name(getattr(model_cfg, "task", None)),
                         _name(getattr(model_cfg, "criterion", None)), model_cfg)
    if OmegaConf.is_config(model_cfg):
        root = model_cfg._get_parent()
        if root is not None and OmegaConf.is_dict(root) and "task" in root:
            task = root.get("task")
            return RunConfig(_name(task), _name(root.get("criterion")), task)
    return RunConfig()


def check_masking(task_cfg) -> None:
    """Raise ``ValueError`` naming the flag when the masking settings of ``task_cfg`` (fairseq's
    ``masked_lm`` task config, or a Namespace with its fields) are out of range: ``--mask-prob``
    outside (0, 1), ``--leave-unmasked-prob`` + ``--random-token-prob`` above 1,
    ``--mask-multiple-length`` below 1, ``--mask-stdev`` negative. Fields that are absent are
    not checked."""
    mask_prob = safe_getattr(task_cfg, "mask_prob", None)
    if mask_prob is not None and not 0.0 < mask_prob < 1.0:
        raise ConfigError(f"--mask-prob must be in (0, 1); got {mask_prob}")
    leave = safe_getattr(task_cfg, "leave_unmasked_prob", 0.0) or 0.0
    rand = safe_getattr(task_cfg, "random_token_prob", 0.0) or 0.0
    if not (0.0 <= leave <= 1.0 and 0.0 <= rand <= 1.0 and leave + rand <= 1.0):
        raise ConfigError(
            "--leave-unmasked-prob and --random-token-prob must be in [0, 1] and sum to at most "
            f"1 (the rest of the corrupted tokens become <mask>); got {leave} + {rand}"
        )
    span = safe_getattr(task_cfg, "mask_multiple_length", None)
    if span is not None and span < 1:
        raise ConfigError(f"--mask-multiple-length must be at least 1; got {span}")
    stdev = safe_getattr(task_cfg, "mask_stdev", None)
    if stdev is not None and stdev < 0:
        raise ConfigError(f"--mask-stdev must be at least 0; got {stdev}")


def check_attention_heads(model_cfg) -> None:
    """Each attention's width must split evenly over its heads, or be refused here, when the
    config is read: fairseq's ``MultiheadAttention`` would stop the run with a bare
    ``AssertionError: embed_dim must be divisible by num_heads`` while the model is built.
    Checks the encoder's and the decoder's (3ML's, the decoder LMs') where the arch has them."""
    for side in ("encoder", "decoder"):
        dim = safe_getattr(model_cfg, f"{side}_embed_dim", None)
        heads = safe_getattr(model_cfg, f"{side}_attention_heads", None)
        if isinstance(dim, int) and isinstance(heads, int) and (heads < 1 or dim % heads):
            raise ConfigError(f"--{side}-embed-dim ({dim}) must be divisible by "
                              f"--{side}-attention-heads ({heads}): change one of the two")


def trains_on_cpu(model_cfg) -> bool:
    """Whether the run trains on the CPU: ``--cpu`` (``common.cpu`` under hydra) or no CUDA
    device, as fairseq-train decides."""
    cpu = safe_getattr(model_cfg, "cpu", None)
    if cpu is None and OmegaConf.is_config(model_cfg):
        root = model_cfg._get_parent()
        common = root.get("common") if root is not None and "common" in root else None
        cpu = safe_getattr(common, "cpu", None)
    return bool(cpu) or not torch.cuda.is_available()


def check_flex_trains(model_cfg, program: Optional[str] = None) -> None:
    """Under a training program (``program``, default :func:`fairseq_training_program`; not
    under fairseq-validate), refuse ``--attention-impl flex`` where FlexAttention cannot train:
    on the CPU (:func:`trains_on_cpu`) or with attention dropout. Run after the arch's defaults
    (the default attention dropout counts)."""
    program = fairseq_training_program() if program is None else program
    if program is None or safe_getattr(model_cfg, "attention_impl", None) != "flex":
        return
    device = torch.device("cpu" if trains_on_cpu(model_cfg) else "cuda")
    dropout = safe_getattr(model_cfg, "attention_dropout", 0.0) or 0.0
    reason = flex_unsupported_reason(device, needs_grad=True, attention_dropout=dropout)
    if reason is not None:
        raise ConfigError(f"--attention-impl flex cannot train here ({program} on "
                          f"{device.type.upper()}): {reason}. Use --attention-impl auto "
                          "(FlexAttention where it runs: on CUDA without attention dropout, "
                          "and for evaluation) or sdpa")


def check_criterion(arch: str, task: Optional[str], criterion: Optional[str]) -> None:
    """Refuse a criterion that normalises a masked-LM (or generalized-bidirectionality) loss
    by every token."""
    if task == BIDIRECTIONAL_LM_TASK and criterion in ALL_TOKEN_CRITERIA:
        raise ConfigError(
            f"--arch {arch} with --task {task} and --criterion {criterion} (fairseq-train's "
            f"default when --criterion is not given): {criterion} divides the loss by every "
            "token, while most variants predict only some of them. Add --criterion "
            "bidirectional_lm (loss over the predicted tokens, loss_mask/loss_next, training "
            "FLOPs); in a hydra config, criterion: bidirectional_lm"
        )
    if task == MASKED_LM_TASK and criterion in ALL_TOKEN_CRITERIA:
        raise ConfigError(
            f"--arch {arch} with --task {task} and --criterion {criterion} (fairseq-train's "
            f"default when --criterion is not given): {criterion} divides the masked-LM loss "
            "by every token instead of the predicted ones, so loss and ppl come out several "
            "times too low. Add --criterion masked_lm_categories (the masked-LM loss with "
            "per-category loss/ppl; masked_lm_flops also logs training FLOPs, fairseq's "
            "masked_lm is the plain loss); in a hydra config, criterion: masked_lm_categories"
        )


def check_run_config(model_cfg, arch: str) -> None:
    """The checks of this module for the run ``model_cfg`` belongs to (see the module doc):
    masking settings, and the criterion; under ``fairseq-validate``, which scores with the
    checkpoint's criterion, warnings instead (:func:`check_validate_criterion`)."""
    run = run_config_of(model_cfg)
    arguments = fairseq_validate_arguments()
    if run.task == MASKED_LM_TASK:
        check_masking(run.task_cfg)
        check_data_splits(model_cfg, run, fairseq_validate=arguments is not None)
    if arguments is not None:
        saved = run.criterion
        if (isinstance(model_cfg, argparse.Namespace) and criterion_flag(arguments) is not None
                and not isinstance(model_cfg.criterion, dict)):
            # fairseq-validate copies its flags into a fairseq-train checkpoint's Namespace: its
            # `criterion` is now --criterion's value (unless --model-overrides set the criterion)
            saved = None
        check_validate_criterion(run.task, saved)
        return
    check_criterion(arch, run.task, run.criterion)


def check_data_splits(model_cfg, run: RunConfig, fairseq_validate: bool = False) -> None:
    """The data the run will read must be readable whole: fairseq's ``masked_lm`` task loads
    it before any other plugin code runs, names a missing ``dict.txt`` at the end of a
    traceback, crashes in ``np.memmap`` on an empty split and deep in training on a truncated
    one. Under fairseq's tools DATA must be a data-bin
    (:func:`~fairseq_ext.data.data_bin.check_data_bin`: it is what the user just typed). Each
    split is checked whole (:func:`~fairseq_ext.data.data_bin.check_split`): the validation
    splits, and under ``fairseq-train`` / ``fairseq-hydra-train`` the training split (with the
    ``train1``, ``train2`` ... fairseq combines with it) of every path of a sharded DATA. Under
    ``fairseq-train`` and ``fairseq-validate`` the Namespace holds ``--valid-subset`` /
    ``--train-subset`` / ``--disable-validation``; under hydra the run's ``dataset`` node does
    (``fairseq_validate``: it scores ``--valid-subset`` whatever the checkpoint's
    ``--disable-validation`` was). Only splits that exist are looked at, so a model loaded
    elsewhere (the hub, exports) from its saved config is never refused."""
    dataset = model_cfg
    if not isinstance(model_cfg, argparse.Namespace):
        root = model_cfg._get_parent() if OmegaConf.is_config(model_cfg) else None
        dataset = root.get("dataset") if root is not None and "dataset" in root else None
    data = safe_getattr(run.task_cfg, "data", None)
    if not data or dataset is None:
        return
    paths = split_paths(str(data))
    if fairseq_program() is not None:  # DATA is what the user just typed: it must be a data-bin
        check_data_bin(paths[0])
    if not safe_getattr(dataset, "disable_validation", False) or fairseq_validate:
        for split in (safe_getattr(dataset, "valid_subset", None) or "").split(","):
            if split:
                check_split(paths[0], split, validation=True)
    train_split = safe_getattr(dataset, "train_subset", None)
    if train_split and not fairseq_validate and fairseq_training_program() is not None:
        for path in paths:
            check_splits(path, train_split, combine=True)


# --- fairseq-validate --criterion ---------------------------------------------------------------

#: The ones that train.
TRAINING_PROGRAMS = ("fairseq-train", "fairseq-hydra-train")


def fairseq_validate_arguments(argv: Optional[Sequence[str]] = None) -> Optional[List[str]]:
    """The arguments of the running ``fairseq-validate`` (``python -m fairseq_cli.validate``
    included), or ``None`` in any other program (:func:`fairseq_program`)."""
    argv = sys.argv if argv is None else argv
    if fairseq_program(argv) != "fairseq-validate":
        return None
    return list(argv[1:])


def fairseq_training_program(argv: Optional[Sequence[str]] = None) -> Optional[str]:
    """``fairseq-train`` or ``fairseq-hydra-train`` when one of them is running (the model is
    built to be trained), else ``None`` (:func:`fairseq_program`)."""
    program = fairseq_program(argv)
    return program if program in TRAINING_PROGRAMS else None


def criterion_flag(arguments: Sequence[str]) -> Optional[str]:
    """The value of the last ``--criterion X`` / ``--criterion=X`` in ``arguments``."""
    value = None
    for i, word in enumerate(arguments):
        if word == "--criterion" and i + 1 < len(arguments):
            value = arguments[i + 1]
        elif word.startswith("--criterion="):
            value = word.split("=", 1)[1]
    return value


def criterion_override(name: str) -> str:
    """The fairseq-validate flag that replaces the checkpoint's criterion with ``name``."""
    return f"--model-overrides \"{{'criterion': {{'_name': '{name}'}}}}\""


_warned = set()


def check_validate_criterion(task: Optional[str], saved: Optional[str]) -> None:
    """Under ``fairseq-validate``: warn about an ignored ``--criterion``, and about a checkpoint
    whose criterion (``saved``, ``None`` if not known) scores a masked LM over every token."""
    warn_if_validate_ignores_criterion(saved)
    if task == MASKED_LM_TASK and saved in ALL_TOKEN_CRITERIA and ("all-tokens", saved) not in _warned:
        _warned.add(("all-tokens", saved))
        logger.warning(
            "this checkpoint was trained with --criterion %s, which divides the masked-LM loss "
            "by every token: the loss and ppl fairseq-validate prints are far too low, and it "
            "cannot score it with another criterion. Train with --criterion "
            "masked_lm_categories", saved)


def warn_if_validate_ignores_criterion(saved: Optional[str]) -> None:
    """Under ``fairseq-validate --criterion X``: warn that X is ignored for ``saved``, the
    checkpoint's criterion (``None``: not known here), and say how to score with X where
    fairseq-validate can (between criteria with the same config fields). Once per
    (X, saved)."""
    arguments = fairseq_validate_arguments()
    flag = criterion_flag(arguments) if arguments is not None else None
    if flag is None or flag == saved or (flag, saved) in _warned:
        return
    _warned.add((flag, saved))
    if saved is None:
        logger.warning(
            "fairseq-validate ignores --criterion %s: it scores with the criterion saved in the "
            "checkpoint (the 'criterion' of the config it logs). To score with %s, add %s (works "
            "between %s)", flag, flag, criterion_override(flag), ", ".join(MASKED_LM_CRITERIA))
        return
    if {flag, saved} <= set(MASKED_LM_CRITERIA):
        how = (f"; the loss is the same, only the extra metrics differ. To score with {flag}, "
               f"add {criterion_override(flag)}")
    else:
        how = f"; fairseq-validate cannot score it with {flag}"
    logger.warning("fairseq-validate ignores --criterion %s: it scores with the criterion saved "
                   "in the checkpoint, %s%s", flag, saved, how)
