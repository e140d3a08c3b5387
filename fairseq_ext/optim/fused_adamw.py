"""``--optimizer fused_adamw``: fairseq's Adam semantics on fused kernels.

fairseq's ``--optimizer adam`` is AdamW (decoupled weight decay, Loshchilov & Hutter) and uses
apex's ``FusedAdam`` on CUDA when apex is installed, else a per-parameter Python loop. This
optimizer keeps its flags (``--adam-betas``, ``--adam-eps``, ``--weight-decay``) and update rule,
and runs apex ``FusedAdam`` (through fairseq's wrapper) when apex is importable and the
parameters are on CUDA, otherwise ``torch.optim.AdamW(fused=True)`` (CUDA and CPU); the log says
which. Parameters tagged as fairseq's data2vec tags them, ``p.optim_overrides = {"optimizer":
{"lr_scale": s, "weight_decay_scale": w}}`` (``--layer-lr-decay``), get one parameter group per
pair of scales, each group's rate the schedule's times its ``lr_scale``; ``get_lr`` reports the
unscaled rate. See docs/install.md ("NVIDIA apex") and docs/recipes.md (``--layer-lr-decay``).
"""
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from fairseq.optim.fused_adam import get_fused_adam_class
from omegaconf import II

from fairseq_ext.training.fused_kernels import nvidia_apex_available

logger = logging.getLogger(__name__)


@dataclass
class FusedAdamWConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas for Adam optimizer"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon for Adam optimizer"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay"})
    lr: List[float] = II("optimization.lr")


def _parse_betas(betas):
    """``"(0.9, 0.98)"`` (fairseq's string form) or a sequence -> a validated pair of floats."""
    error = ValueError(f"--adam-betas must be two numbers in [0, 1), e.g. '(0.9, 0.98)'; got {betas!r}")
    pieces = betas.strip("()[] ").split(",") if isinstance(betas, str) else list(betas)
    try:
        values = tuple(float(b) for b in pieces if str(b).strip())
    except ValueError:
        raise error from None
    if len(values) != 2 or not all(0.0 <= b < 1.0 for b in values):
        raise error
    return values


LR_SCALE = "lr_scale"
WEIGHT_DECAY_SCALE = "weight_decay_scale"


def parameter_scales(parameter) -> Tuple[float, float]:
    """``(lr_scale, weight_decay_scale)`` of a parameter's ``optim_overrides`` (1 where
    absent)."""
    overrides = (getattr(parameter, "optim_overrides", None) or {}).get("optimizer", {})
    return float(overrides.get(LR_SCALE, 1.0)), float(overrides.get(WEIGHT_DECAY_SCALE, 1.0))


def scaled_parameter_groups(params: list, weight_decay: float) -> list:
    """``params`` as they are when none is tagged (or they are already groups); otherwise one
    group per ``(lr_scale, weight_decay_scale)``, in order of first appearance, each with its
    ``lr_scale`` and scaled ``weight_decay``."""
    if not params or isinstance(params[0], dict):
        return params
    groups: Dict[Tuple[float, float], list] = {}
    for parameter in params:
        groups.setdefault(parameter_scales(parameter), []).append(parameter)
    if list(groups) == [(1.0, 1.0)]:
        return params
    return [{"params": members, LR_SCALE: lr_scale,
             "weight_decay": weight_decay * decay_scale}
            for (lr_scale, decay_scale), members in groups.items()]


@register_optimizer("fused_adamw", dataclass=FusedAdamWConfig)
class FairseqFusedAdamW(FairseqOptimizer):
    """AdamW through apex ``FusedAdam`` or ``torch.optim.AdamW(fused=True)``."""

    def __init__(self, cfg: FusedAdamWConfig, params):
        super().__init__(cfg)
        params = scaled_parameter_groups(list(params), cfg.weight_decay)
        on_cuda = any(
            (p["params"][0] if isinstance(p, dict) else p).is_cuda for p in params
        )
        apex_adam = get_fused_adam_class() if (on_cuda and nvidia_apex_available()) else None
        if apex_adam is not None:
            self.implementation = "apex FusedAdam"
            self._optimizer = apex_adam(params, **self.optimizer_config)
        else:
            self.implementation = "torch.optim.AdamW(fused=True)"
            self._optimizer = torch.optim.AdamW(params, fused=True, **self.optimizer_config)
        logger.info(f"fused_adamw: using {self.implementation}")
        scales = [group[LR_SCALE] for group in self.param_groups if LR_SCALE in group]
        if scales:
            logger.info("fused_adamw: %d parameter groups at lr x %s (optim_overrides)",
                        len(scales), ", ".join(f"{s:.3g}" for s in scales))

    def get_lr(self):
        """The schedule's rate (a scaled group's rate divided by its ``lr_scale``)."""
        group = self.param_groups[0]
        return group["lr"] / group.get(LR_SCALE, 1.0)

    def set_lr(self, lr):
        """The schedule's rate ``lr``, times each group's ``lr_scale``."""
        for group in self.param_groups:
            group["lr"] = lr * group.get(LR_SCALE, 1.0)

    @property
    def optimizer_config(self):
        """Keyword arguments of the wrapped optimizer (fairseq resets ``lr`` from the schedule)."""
        return {
            "lr": self.cfg.lr[0],
            "betas": _parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
        }

    @property
    def supports_flat_params(self):
        return True
