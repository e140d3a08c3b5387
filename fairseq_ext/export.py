"""Export the encoder of a 3ML checkpoint as a standard fairseq RoBERTa checkpoint
(``scripts/export_encoder.py`` is the command line).

After pre-training, 3ML's decoder is dropped and only the encoder is fine-tuned (Liao et al.,
2022, §2.2 "Fine-tuning and Inference"). ::

    python scripts/export_encoder.py checkpoints/3ml/checkpoint_last.pt exports/3ml_encoder.pt
    python scripts/export_encoder.py --print-finetune-args exports/3ml_encoder.pt

Input: a checkpoint of ``3ml_self_*`` / ``3ml_cross_*`` written by ``fairseq-train`` (its
``cfg.model`` is an ``argparse.Namespace``) or ``fairseq-hydra-train`` (a dict).

Output: a checkpoint of fairseq's own ``roberta`` model that loads with
``checkpoint_utils.load_model_ensemble_and_task`` and with ``fairseq-train --restore-file OUT
--reset-optimizer --reset-dataloader --reset-meters`` (how fairseq's RoBERTa fine-tuning README
uses a pretrained model; ``recipes/3ml/finetune_glue.sh`` does this):

* ``cfg``: plain dicts and lists only, as ``fairseq-hydra-train`` writes it (a ``fairseq-train``
  checkpoint's ``argparse.Namespace`` model config becomes a dict with its ``_name``), so the
  export loads with torch's weights-only unpickling in stock fairseq, without the plugin.
* ``cfg.model``: arch ``roberta_base`` / ``roberta_large`` when the encoder has those sizes,
  otherwise ``roberta``, with every encoder dimension written out explicitly, and
  ``encoder_normalize_before`` / ``layernorm_embedding`` of the 3ML ``--normalization`` (pre-LN:
  True / False, as ``roberta_prenorm``). The 3ML-only fields (``decoder_*``,
  ``normalization``) are removed. ``cfg.task`` (``masked_lm``, with its data directory) is kept,
  as in any fairseq RoBERTa checkpoint.
* ``model``: the encoder, ``encoder.sentence_encoder.*``, unchanged; no ``mask_decoder.*``.
  RoBERTa's strict loading also needs an MLM head, ``encoder.lm_head.*``:

  - ``weight``: the token embedding (tied, as in RoBERTa);
  - ``bias`` and ``layer_norm``: from 3ML's head ``mask_decoder.lm_head`` (they live in
    encoder-dim / vocabulary space);
  - ``dense``: copied from ``mask_decoder.lm_head.dense`` when that is (encoder dim x encoder
    dim), i.e. the decoder dim equals the encoder dim; otherwise it maps decoder dim -> encoder
    dim and has no encoder-side counterpart, so it is **freshly initialised** (normal, std
    0.02, zero bias, as BERT initialises it; seeded, so exports are reproducible). The log says
    which. Fine-tuning (``sentence_prediction``) does not use the MLM head, so this does not
    affect GLUE; masked-LM scores of the export are only meaningful when the head was copied.
* No optimizer state, no criterion state, no meters, no best score; ``optimizer_history`` has
  one entry at 0 updates and ``extra_state`` only a training iterator at the start of epoch 1.
  fairseq needs both keys to read a checkpoint, and with these values it starts a fresh run
  even if the ``--reset-*`` flags are forgotten. ``export`` records where the weights came from.

OUT is never overwritten unless ``--force``; it is written to a temporary file in the same
directory and renamed, so an interrupted export leaves no partial file. Errors are one line on
stderr and exit status 2.

``--print-finetune-args EXPORT.pt`` prints the ``fairseq-train`` model flags that rebuild the
exported encoder (``--arch`` of a registered RoBERTa size with the same dimensions and
normalisation, or ``roberta`` / ``roberta_prenorm`` with explicit dimensions, then
``--max-positions``): on the command line ``--arch roberta_base`` cannot be made pre-LN, because
``--layernorm-embedding`` can only be switched on. The fine-tuning recipe reads them.
"""
import argparse
import copy
import logging
import os
import sys
import tempfile
from pathlib import Path

from fairseq_ext.models.sizes import ENCODER_SIZES

logger = logging.getLogger(__name__)

THREE_ML_MODELS = ("3ml_self", "3ml_cross")
#: Fields of a 3ML model config that a RoBERTa config does not have.
THREE_ML_ONLY_FIELDS = ("decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim",
                        "decoder_attention_heads", "normalization")
ENCODER = "encoder.sentence_encoder."
HEAD = "mask_decoder.lm_head."
LM_HEAD = "encoder.lm_head."
#: RoBERTa arch names written into the exported cfg (loadable by stock fairseq): fairseq's
#: ``roberta_base`` and ``roberta_large`` have our table's base and large sizes.
STOCK_SIZES = {f"roberta_{size}": ENCODER_SIZES[size].as_args() for size in ("base", "large")}
#: Registered RoBERTa archs tried, in order, for ``--print-finetune-args`` (the last three are
#: fairseq-ext's, available with ``--user-dir fairseq_ext``).
FINETUNE_ARCHS = ("roberta_base", "roberta_large", "roberta_prenorm", "roberta_large_prenorm",
                  "roberta_small", "roberta_tiny")
#: Model fields that decide the encoder's parameter shapes and computation on the command line.
STRUCTURE_FIELDS = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
                    "encoder_attention_heads", "encoder_normalize_before", "layernorm_embedding")
DIM_FLAGS = {"encoder_layers": "--encoder-layers", "encoder_embed_dim": "--encoder-embed-dim",
             "encoder_ffn_embed_dim": "--encoder-ffn-embed-dim",
             "encoder_attention_heads": "--encoder-attention-heads"}
HEAD_INIT_STD = 0.02
HEAD_INIT_SEED = 0


class ExportError(Exception):
    """A problem with the user's input, reported as one line (exit status 2)."""


def load_checkpoint(path: Path) -> dict:
    """fairseq's ``load_checkpoint_to_cpu``, with one-line errors."""
    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    from fairseq_ext.checkpoint_loading import (
        CheckpointLoadError,
        checkpoint_error_advice,
        load_checkpoint_to_cpu,
    )

    try:
        state = load_checkpoint_to_cpu(path)
    except CheckpointLoadError as e:  # not a torch file, truncated, refused global, ...
        raise ExportError(f"{path}: cannot read it as a fairseq checkpoint: it "
                          f"{checkpoint_error_advice(path, e.__cause__)}")
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict) \
            or state.get("cfg") is None:
        raise ExportError(f"{path}: not a fairseq checkpoint (no 'model' and 'cfg')")
    return state


def plain(model_cfg):
    """A model config as a dict or Namespace (an OmegaConf node becomes a dict)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(model_cfg):
        return OmegaConf.to_container(model_cfg, resolve=True, enum_to_str=True)
    return model_cfg


def plain_config(cfg):
    """The checkpoint's cfg as plain dicts and lists, as ``fairseq-hydra-train`` writes it: an
    ``argparse.Namespace`` (``fairseq-train``'s model config) becomes a dict holding its
    ``_name``, so the export needs no non-builtin class to unpickle."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return _without_namespaces(copy.deepcopy(cfg))


def _without_namespaces(value):
    if isinstance(value, argparse.Namespace):
        fields = _without_namespaces(vars(value))
        fields.setdefault("_name", fields.get("arch"))
        return fields
    if isinstance(value, dict):
        return {k: _without_namespaces(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_namespaces(v) for v in value)
    return value


def model_name(model_cfg) -> str:
    """The arch (``_name`` / ``arch``) of a model config, Namespace or dict."""
    model_cfg = plain(model_cfg)
    get = model_cfg.get if isinstance(model_cfg, dict) else lambda k: getattr(model_cfg, k, None)
    return get("_name") or get("arch") or ""


def as_namespace(model_cfg) -> argparse.Namespace:
    model_cfg = plain(model_cfg)
    return argparse.Namespace(**(model_cfg if isinstance(model_cfg, dict) else vars(model_cfg)))


def three_ml_arch_of(state: dict, path: Path) -> str:
    """The 3ML arch of a checkpoint, or :class:`ExportError` saying what it is instead."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    cfg = state["cfg"]
    model_cfg = cfg.get("model") if hasattr(cfg, "get") else None
    arch = model_name(model_cfg) if model_cfg is not None else ""
    three_ml = {MODEL_REGISTRY[m] for m in THREE_ML_MODELS}
    if ARCH_MODEL_REGISTRY.get(arch) not in three_ml:
        registered = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
        what = f"a '{arch}' checkpoint" if arch else "a checkpoint without a model arch"
        if registered is not None:
            what += f" (model {registered.__name__})"
        raise ExportError(f"{path}: not a 3ML checkpoint: {what}; expected one of the "
                          f"{' / '.join(m + '_*' for m in THREE_ML_MODELS)} archs")
    needed = [ENCODER + "embed_tokens.weight", ENCODER + "embed_positions.weight",
              ENCODER + "layers.0.fc1.weight"] + [HEAD + k for k in (
                  "bias", "dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias")]
    missing = [k for k in needed if k not in state["model"]]
    if missing:
        raise ExportError(f"{path}: 3ML arch '{arch}' but its weights lack {', '.join(missing)}")
    return arch


def encoder_fields(model_cfg, weights: dict, path: Path) -> dict:
    """The RoBERTa encoder fields of a 3ML model config (arch defaults filled in), checked
    against the weights' shapes."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = as_namespace(model_cfg)
    try:
        ARCH_CONFIG_REGISTRY[model_name(model_cfg)](args)  # fills what the checkpoint left out
    except ValueError as e:  # the arch's checks of its training run (models/validation.py)
        raise ExportError(f"{path}: {e}")
    fields = {k: getattr(args, k) for k in STRUCTURE_FIELDS}

    embed = weights[ENCODER + "embed_tokens.weight"]
    layers = {int(k[len(ENCODER + "layers."):].split(".")[0]) for k in weights
              if k.startswith(ENCODER + "layers.")}
    seen = {
        "encoder_embed_dim": embed.size(1),
        "encoder_layers": len(layers),
        "encoder_ffn_embed_dim": weights[ENCODER + "layers.0.fc1.weight"].size(0),
        "encoder_normalize_before": ENCODER + "layer_norm.weight" in weights,
        "layernorm_embedding": ENCODER + "layernorm_embedding.weight" in weights,
    }
    # 3ML needs learned positions: max_positions + padding_idx + 1 rows, and fairseq's
    # dictionaries put padding at index 1.
    seen["max_positions"] = weights[ENCODER + "embed_positions.weight"].size(0) - 2
    fields["max_positions"] = getattr(args, "max_positions", None) or seen["max_positions"]
    for key, value in seen.items():
        if fields[key] != value:
            raise ExportError(f"{path}: its config says {key}={fields[key]} but its weights "
                              f"have {value}")
    return fields


def roberta_arch(fields: dict) -> str:
    """``roberta_base`` / ``roberta_large`` for those sizes, else ``roberta``."""
    for arch, size in STOCK_SIZES.items():
        if all(fields[k] == v for k, v in size.items()):
            return arch
    return "roberta"


def roberta_model_config(model_cfg, fields: dict):
    """The exported ``cfg.model`` (a dict): the 3ML config without its decoder fields, as
    RoBERTa."""
    arch = roberta_arch(fields)
    out = dict(model_cfg)
    for key in THREE_ML_ONLY_FIELDS:
        out.pop(key, None)
    out.update(fields)
    out["untie_weights_roberta"] = False  # 3ML ties the head to the token embedding
    out["_name"] = arch
    if "arch" in out:
        out["arch"] = arch
    return out


def mlm_head(weights: dict, encoder_dim: int):
    """``encoder.lm_head.*`` for RoBERTa, and how ``dense`` was obtained."""
    import torch

    embed = weights[ENCODER + "embed_tokens.weight"]
    head = {
        LM_HEAD + "weight": embed,  # same tensor: tied, stored once
        LM_HEAD + "bias": weights[HEAD + "bias"],
        LM_HEAD + "layer_norm.weight": weights[HEAD + "layer_norm.weight"],
        LM_HEAD + "layer_norm.bias": weights[HEAD + "layer_norm.bias"],
    }
    dense_w, dense_b = weights[HEAD + "dense.weight"], weights[HEAD + "dense.bias"]
    if tuple(dense_w.shape) == (encoder_dim, encoder_dim):
        head[LM_HEAD + "dense.weight"], head[LM_HEAD + "dense.bias"] = dense_w, dense_b
        how = "copied from mask_decoder.lm_head.dense (decoder dim == encoder dim)"
    else:
        generator = torch.Generator().manual_seed(HEAD_INIT_SEED)
        head[LM_HEAD + "dense.weight"] = torch.empty(
            encoder_dim, encoder_dim, dtype=dense_w.dtype).normal_(0.0, HEAD_INIT_STD,
                                                                   generator=generator)
        head[LM_HEAD + "dense.bias"] = torch.zeros(encoder_dim, dtype=dense_b.dtype)
        how = (f"freshly initialised (normal, std {HEAD_INIT_STD}, zero bias): 3ML's "
               f"dense maps decoder dim {dense_w.size(1)} -> encoder dim {encoder_dim}; "
               f"fine-tuning does not use the MLM head")
    return head, how


def export(state: dict, source: Path) -> dict:
    """The RoBERTa checkpoint (a dict for ``torch.save``) of a loaded 3ML checkpoint."""
    arch = three_ml_arch_of(state, source)
    cfg = plain_config(state["cfg"])
    weights = state["model"]
    fields = encoder_fields(cfg["model"], weights, source)
    cfg["model"] = roberta_model_config(cfg["model"], fields)

    model = {k: v for k, v in weights.items() if k.startswith(ENCODER)}
    head, how = mlm_head(weights, fields["encoder_embed_dim"])
    model.update(head)
    dropped = {k: v for k, v in weights.items() if k not in model and not k.startswith(LM_HEAD)}
    kept_storage = {v.untyped_storage().data_ptr() for v in model.values()}
    dropped_parameters = sum(v.numel() for v in dropped.values()
                             if v.untyped_storage().data_ptr() not in kept_storage)

    history = state.get("optimizer_history") or [{}]
    last = history[-1]
    source_updates = int(last.get("num_updates", 0) or 0)
    logger.info("%s: %s, %d updates", source, arch, source_updates)
    logger.info("encoder kept: %d tensors, %.2fM parameters; dropped %d tensors (%.2fM "
                "parameters: %s)", len(model) - len(head),
                sum(v.numel() for k, v in model.items() if k.startswith(ENCODER)) / 1e6,
                len(dropped), dropped_parameters / 1e6,
                ", ".join(sorted({k.split(".")[0] for k in dropped})) or "none")
    logger.info("encoder.lm_head: weight = token embedding, bias and layer_norm from "
                "mask_decoder.lm_head; dense %s", how)
    return {
        "args": None,
        "cfg": cfg,
        "model": model,
        "criterion": None,
        "optimizer_history": [{
            "criterion_name": last.get("criterion_name", ""),
            "optimizer_name": last.get("optimizer_name", ""),
            "lr_scheduler_state": {"best": None},
            "num_updates": 0,
        }],
        "task_state": {},
        "extra_state": {"train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0,
                                           "shuffle": True}},
        "export": {"source": str(source.resolve()), "source_arch": arch,
                   "source_num_updates": source_updates, "arch": model_name(cfg["model"]),
                   "lm_head_dense": "copied" if how.startswith("copied") else "initialised"},
    }


def finetune_args(state: dict, path: Path) -> list:
    """``fairseq-train`` flags (``--arch`` ... ``--max-positions N``) that rebuild the encoder of
    an exported (RoBERTa) checkpoint."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    cfg = state["cfg"]
    arch = model_name(cfg["model"])
    if ARCH_MODEL_REGISTRY.get(arch) in {MODEL_REGISTRY[m] for m in THREE_ML_MODELS}:
        raise ExportError(f"{path}: a 3ML checkpoint ({arch}); export its encoder first: "
                          f"scripts/export_encoder.py {path} ENCODER.pt")
    if ARCH_MODEL_REGISTRY.get(arch) is not MODEL_REGISTRY["roberta"]:
        raise ExportError(f"{path}: not a RoBERTa checkpoint (arch '{arch}')")
    args = as_namespace(cfg["model"])
    ARCH_CONFIG_REGISTRY[arch](args)
    want = {k: getattr(args, k) for k in STRUCTURE_FIELDS + ("activation_fn",)}
    flags = None
    for candidate in FINETUNE_ARCHS:
        if candidate not in ARCH_CONFIG_REGISTRY:
            continue
        default = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[candidate](default)
        if all(getattr(default, k) == want[k] for k in STRUCTURE_FIELDS):
            flags = ["--arch", candidate]
            break
    if flags is None:  # explicit dimensions on the arch with the right normalisation
        default = argparse.Namespace()
        base = "roberta_prenorm" if want["encoder_normalize_before"] else "roberta"
        ARCH_CONFIG_REGISTRY[base](default)
        if default.layernorm_embedding != want["layernorm_embedding"]:
            raise ExportError(f"{path}: encoder_normalize_before={want['encoder_normalize_before']}"
                              f" with layernorm_embedding={want['layernorm_embedding']} has no "
                              "command-line arch")
        flags = ["--arch", base]
        for key, flag in DIM_FLAGS.items():
            flags += [flag, str(want[key])]
    if want["activation_fn"] != "gelu":
        flags += ["--activation-fn", want["activation_fn"]]
    return flags + ["--max-positions", str(args.max_positions)]


def write_atomically(obj, out: Path, force: bool) -> None:
    """``torch.save`` to a temporary file beside ``out``, then rename it onto ``out``."""
    import torch

    if out.exists() and not force:
        raise ExportError(f"{out} exists; pass --force to overwrite it")
    if out.is_dir():
        raise ExportError(f"{out} is a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- the command line (scripts/export_encoder.py) -----------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="export_encoder.py",
        description="Write a standard fairseq RoBERTa checkpoint (encoder only) from a 3ML "
                    "checkpoint, for fine-tuning.")
    parser.add_argument("input", type=Path, help="3ML checkpoint (fairseq-train or "
                        "fairseq-hydra-train); with --print-finetune-args, an exported one")
    parser.add_argument("output", type=Path, nargs="?", help="RoBERTa checkpoint to write")
    parser.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")
    parser.add_argument("--print-finetune-args", action="store_true",
                        help="print the fairseq-train model flags (--arch ... --max-positions N) "
                             "that rebuild the encoder of an exported checkpoint, and exit")
    args = parser.parse_args(argv)
    if args.print_finetune_args == (args.output is not None):
        parser.error("give INPUT OUTPUT, or --print-finetune-args EXPORTED")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S", level=logging.INFO, stream=sys.stderr)
    logger.setLevel(logging.INFO)
    try:
        if args.print_finetune_args:
            print(" ".join(finetune_args(load_checkpoint(args.input), args.input)))
            return 0
        if not args.input.is_file():
            raise ExportError(f"{args.input}: no such file")
        if args.output.exists() and not args.force:  # before the (slow) load
            raise ExportError(f"{args.output} exists; pass --force to overwrite it")
        exported = export(load_checkpoint(args.input), args.input)
        write_atomically(exported, args.output, args.force)
        logger.info("wrote %s: fairseq roberta, arch %s", args.output, exported["export"]["arch"])
        logger.info("fine-tune with: fairseq-train DATA --user-dir fairseq_ext --restore-file %s "
                    "--reset-optimizer --reset-dataloader --reset-meters %s ... "
                    "(or recipes/3ml/finetune_glue.sh)", args.output,
                    " ".join(finetune_args(exported, args.output)))
    except ExportError as e:
        print(f"export_encoder.py: error: {e}", file=sys.stderr)
        return 2
    return 0
