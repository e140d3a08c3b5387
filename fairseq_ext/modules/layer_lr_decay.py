"""Layer-wise learning-rate decay for fine-tuning (``--layer-lr-decay D``).

ELECTRA's fine-tuning setting (Clark et al. 2020, appendix A, Table 7: 0.8 for base, 0.9 for
large), which the 3ML paper names among those it did not use (Limitations). With ``L`` encoder
layers, a parameter at depth ``d`` learns at ``lr x D^(L + 1 - d)`` (BEiT's and data2vec's
scaling): the embeddings (token, position, their LayerNorm) are depth 0, layer ``i`` (0-based)
depth ``i + 1``, and everything above the last layer (a pre-LN final LayerNorm, the LM and
classification heads) depth ``L + 1``, at the full rate. The model tags each encoder parameter
as fairseq's data2vec does, ``p.optim_overrides = {"optimizer": {"lr_scale": s}}``; untagged
parameters learn at the full rate, and ``--optimizer fused_adamw`` honours the tags
(:mod:`fairseq_ext.optim.fused_adamw`). Usage and limits (``--fp16``, ``fully_sharded``):
docs/recipes.md.
"""
import logging
import re
from typing import Dict, Iterable, Tuple

import torch
from fairseq.utils import safe_getattr

from fairseq_ext.cli.errors import ConfigError

logger = logging.getLogger(__name__)

#: The default: every parameter at the schedule's rate.
NO_DECAY = 1.0
LAYER_INDEX = re.compile(r"\.layers\.(\d+)\.")
#: Name fragments of the input embeddings (fairseq's token and position tables, RoBERTa's
#: embedding LayerNorm and its older name).
EMBEDDING_NAMES = ("embed_tokens", "embed_positions", "layernorm_embedding", "emb_layer_norm")


def add_layer_lr_decay_args(parser) -> None:
    parser.add_argument("--layer-lr-decay", type=float, metavar="D",
                        help="fine-tuning: a parameter at depth d of L layers learns at lr x "
                             f"D^(L+1-d) (ELECTRA's; with --optimizer fused_adamw); default {NO_DECAY} (off)")


def layer_lr_decay(args) -> float:
    """``--layer-lr-decay`` (default :data:`NO_DECAY`), checked: a one-line error where it is
    not in (0, 1]."""
    decay = safe_getattr(args, "layer_lr_decay", None)
    decay = NO_DECAY if decay is None else float(decay)
    if not 0.0 < decay <= 1.0:
        raise ConfigError(f"--layer-lr-decay must be in (0, 1] (1 turns it off; ELECTRA's "
                         f"base model used 0.8); got {decay}")
    return decay


def parameter_depths(names: Iterable[str]) -> Tuple[Dict[str, int], int]:
    """Each parameter name's depth (module docstring) and the number of layers ``L`` (the
    largest ``.layers.N.`` index plus one; 0 without layers)."""
    names = list(names)
    indices = {name: int(m.group(1)) for name in names if (m := LAYER_INDEX.search(name))}
    num_layers = max(indices.values(), default=-1) + 1
    depths = {}
    for name in names:
        if name in indices:
            depths[name] = indices[name] + 1
        elif any(fragment in name for fragment in EMBEDDING_NAMES):
            depths[name] = 0
        else:
            depths[name] = num_layers + 1
    return depths, num_layers


def layer_lr_scales(names: Iterable[str], decay: float) -> Dict[str, float]:
    """``D^(L + 1 - d)`` for each parameter name (module docstring)."""
    depths, num_layers = parameter_depths(names)
    return {name: decay ** (num_layers + 1 - depth) for name, depth in depths.items()}


def tag_lr_scales(module: torch.nn.Module, decay: float) -> Dict[str, float]:
    """Set ``optim_overrides`` lr scales on ``module``'s parameters (module docstring) and
    return them by name; nothing is tagged when ``decay`` is 1."""
    if decay == NO_DECAY:
        return {}
    named = dict(module.named_parameters())
    scales = layer_lr_scales(named, decay)
    for name, parameter in named.items():
        parameter.optim_overrides = {"optimizer": {"lr_scale": scales[name]}}
    return scales


class LayerLrDecayMixin:
    """For a :class:`~fairseq.models.roberta.RobertaModel` subclass: tags the parameters with
    ``--layer-lr-decay``'s scales when the model is built (module docstring)."""

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        decay = layer_lr_decay(args)
        scales = tag_lr_scales(self, decay)
        if scales:
            by_scale = sorted(set(scales.values()))
            logger.info("--layer-lr-decay %g: %d parameter tensors at lr x %s (the heads at x1); "
                        "honoured by --optimizer fused_adamw", decay, len(scales),
                        ", ".join(f"{s:.3g}" for s in by_scale))
