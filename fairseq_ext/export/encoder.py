"""Export the encoder of a 3ML checkpoint as a standard fairseq RoBERTa checkpoint, or as a hub
directory that loads with its tokenizer (``scripts/export_encoder.py`` is the command line).

After pre-training, 3ML's decoder is dropped and only the encoder is fine-tuned (Liao et al.,
2022, §2.2 "Fine-tuning and Inference"). The export is fairseq's own ``roberta`` model with the
encoder unchanged, plain-dict ``cfg`` (stock fairseq loads it without the plugin) and no training
state; RoBERTa's MLM head is assembled from 3ML's, its dense layer freshly initialised (seeded)
when the decoder dim differs from the encoder's. ``OUT`` ending in ``.pt`` is a checkpoint,
otherwise a hub directory (``model.pt``, ``dict.txt``, ``sentencepiece.bpe.model``);
``--keep-decoder`` keeps the whole 3ML model, ``--print-finetune-args`` prints the
``fairseq-train`` flags that rebuild the encoder. Outputs are written atomically and never
overwritten without ``--force``. Details and measurements: docs/three_ml.md ("Fine-tuning: the
decoder is dropped", "Infilling with the decoder kept") and docs/exports.md.
"""
import argparse
import logging
from pathlib import Path
from typing import Optional

from fairseq_ext.export.checkpoints import (
    HUB_DICT,
    HUB_MODEL,
    HUB_SENTENCEPIECE,
    ExportError,
    add_tokenizer_and_force_arguments,
    as_namespace,
    check_vocabulary,
    load_checkpoint,
    model_name,
    plain_config,
    run_export_command,
    tokenizer_files,
)
from fairseq_ext.models.sizes import ENCODER_SIZES
from fairseq_ext.training.output_files import atomic_directory, atomic_file, refuse_existing

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
STOCK_SIZES = {f"roberta_{size}": ENCODER_SIZES[size].as_args("encoder") for size in ("base", "large")}
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
    return fresh_run_state(cfg, model, last, {
        "source": str(source.resolve()), "source_arch": arch,
        "source_num_updates": source_updates, "arch": model_name(cfg["model"]),
        "lm_head_dense": "copied" if how.startswith("copied") else "initialised"})


def fresh_run_state(cfg: dict, model: dict, last_history: dict, export_info: dict) -> dict:
    """A checkpoint dict holding ``model`` and ``cfg`` only: no optimizer, criterion or meter
    state. fairseq needs ``optimizer_history`` and ``extra_state`` to read a checkpoint; with
    these values (0 updates, epoch 1 not started) it starts a fresh run from it."""
    return {
        "args": None,
        "cfg": cfg,
        "model": model,
        "criterion": None,
        "optimizer_history": [{
            "criterion_name": last_history.get("criterion_name", ""),
            "optimizer_name": last_history.get("optimizer_name", ""),
            "lr_scheduler_state": {"best": None},
            "num_updates": 0,
        }],
        "task_state": {},
        "extra_state": {"train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0,
                                           "shuffle": True}},
        "export": export_info,
    }


def full_model_export(state: dict, source: Path) -> dict:
    """A 3ML or RoBERTa checkpoint as it is (3ML: encoder *and* decoder), without its training
    state: for a hub directory whose model keeps every weight (``--keep-decoder``, the 3ML
    paper's infilling with the decoder kept; or a RoBERTa run)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    cfg = plain_config(state["cfg"])
    arch = model_name(cfg.get("model") or {})
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    three_ml = {MODEL_REGISTRY[m] for m in THREE_ML_MODELS}
    if model_class in three_ml:
        three_ml_arch_of(state, source)  # its checks of the weights
    elif model_class is not MODEL_REGISTRY["roberta"]:
        raise ExportError(f"{source}: a '{arch}' checkpoint; hub directories are written for "
                          f"3ML ({' / '.join(m + '_*' for m in THREE_ML_MODELS)}) and RoBERTa "
                          "checkpoints")
    else:
        cfg["model"] = stock_roberta_config(cfg["model"], state["model"], source)
    last = (state.get("optimizer_history") or [{}])[-1]
    return fresh_run_state(cfg, dict(state["model"]), last, {
        "source": str(source.resolve()), "source_arch": arch,
        "source_num_updates": int(last.get("num_updates", 0) or 0), "arch": arch,
        "decoder_kept": model_class in three_ml})


def stock_roberta_config(model_cfg, weights: dict, source: Path) -> dict:
    """A RoBERTa model config that stock fairseq builds without the plugin: every field of its
    arch (e.g. fairseq-ext's ``roberta_tiny``) written out, under a stock arch name
    (:func:`roberta_arch`)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    arch = model_name(model_cfg)
    args = as_namespace(model_cfg)
    ARCH_CONFIG_REGISTRY[arch](args)
    fields = encoder_fields(model_cfg, weights, source)
    out = dict(vars(args), **fields)
    out["_name"] = roberta_arch(fields)
    if "arch" in out:
        out["arch"] = out["_name"]
    return out


# --- hub directories -----------------------------------------------------------------------------


def with_sentencepiece(exported: dict) -> dict:
    """``cfg.bpe`` of a hub directory's model: sentencepiece, with the directory's model file.
    (fairseq's ``RobertaModel.from_pretrained`` passes ``bpe="gpt2"`` as an override, but an
    override only replaces a ``bpe`` config that is unset: a set one keeps its ``_name`` and
    gets ``sentencepiece_model`` pointed at the directory's file.)"""
    cfg = exported["cfg"]
    cfg["bpe"] = {"_name": "sentencepiece", "sentencepiece_model": HUB_SENTENCEPIECE,
                  "sentencepiece_enable_sampling": False, "sentencepiece_alpha": None}
    cfg["tokenizer"] = None
    if isinstance(cfg.get("task"), dict):
        cfg["task"]["data"] = "."  # from_pretrained sets the directory itself
    return exported


def write_hub_directory(exported: dict, out: Path, dictionary: Path, sentencepiece_model: Path,
                        force: bool) -> None:
    """Write ``out/`` (:data:`HUB_MODEL`, :data:`HUB_DICT`, :data:`HUB_SENTENCEPIECE`) through
    a temporary directory beside it, renamed into place
    (:func:`fairseq_ext.training.output_files.atomic_directory`): an interrupted export leaves ``out``
    as it was. An existing ``out`` is replaced only with ``force``."""
    import shutil

    import torch

    with atomic_directory(out, force) as tmp:
        torch.save(exported, tmp / HUB_MODEL)
        shutil.copyfile(dictionary, tmp / HUB_DICT)
        shutil.copyfile(sentencepiece_model, tmp / HUB_SENTENCEPIECE)


def finetune_args(state: dict, path: Path, pooling: str = "first",
                  layer_lr_decay: Optional[float] = None) -> list:
    """``fairseq-train`` flags (``--arch`` ... ``--max-positions N``) that rebuild the encoder of
    an exported (RoBERTa) checkpoint; with ``pooling="mean"`` or a ``layer_lr_decay``, on
    ``roberta_pooled`` (or its pre-LN twin) with ``--classification-pooling`` (and
    ``--layer-lr-decay``) (:mod:`fairseq_ext.models.roberta_pooled`)."""
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
    plugin_model = pooling != "first" or layer_lr_decay is not None
    for candidate in FINETUNE_ARCHS if not plugin_model else ():
        if candidate not in ARCH_CONFIG_REGISTRY:
            continue
        default = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[candidate](default)
        if all(getattr(default, k) == want[k] for k in STRUCTURE_FIELDS):
            flags = ["--arch", candidate]
            break
    if flags is None:  # explicit dimensions on the arch with the right normalisation
        # pre-LN without an embedding LayerNorm: roberta_prenorm; pre-LN with one: roberta
        # with --encoder-normalize-before (the flags can only switch these on); post-LN: roberta
        pre_ln, embedding_ln = want["encoder_normalize_before"], want["layernorm_embedding"]
        if not pre_ln and not embedding_ln:
            raise ExportError(f"{path}: post-LN without an embedding LayerNorm "
                              "(layernorm_embedding=False) has no command-line arch")
        base = "roberta_prenorm" if pre_ln and not embedding_ln else "roberta"
        if plugin_model:
            base = base.replace("roberta", "roberta_pooled")
        flags = ["--arch", base] + (["--encoder-normalize-before"] if pre_ln and embedding_ln
                                    else [])
        for key, flag in DIM_FLAGS.items():
            flags += [flag, str(want[key])]
        if plugin_model:
            flags += ["--classification-pooling", pooling]
        if layer_lr_decay is not None:
            flags += ["--layer-lr-decay", f"{layer_lr_decay:g}"]
    if want["activation_fn"] != "gelu":
        flags += ["--activation-fn", want["activation_fn"]]
    return flags + ["--max-positions", str(args.max_positions)]


# --- the command line (scripts/export_encoder.py) -----------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="export_encoder.py",
        description="Export a 3ML checkpoint's encoder as a standard fairseq RoBERTa checkpoint "
                    "(OUTPUT.pt, for fine-tuning), or as a hub directory (OUTPUT/: model.pt, "
                    "dict.txt, sentencepiece.bpe.model) that RobertaModel.from_pretrained(OUTPUT) "
                    "loads with its tokenizer.")
    parser.add_argument("input", type=Path, help="3ML checkpoint (fairseq-train or "
                        "fairseq-hydra-train); for a hub directory also a RoBERTa one; with "
                        "--print-finetune-args, an exported one")
    parser.add_argument("output", type=Path, nargs="?",
                        help="a .pt file: the RoBERTa checkpoint; anything else: the hub "
                             "directory to write")
    parser.add_argument("--keep-decoder", action="store_true",
                        help="hub directory only: keep 3ML's decoder, so fill_mask appends the "
                             "[MASK]s after the encoder as in pre-training (load it with "
                             "fairseq_ext's ThreeMLModel.from_pretrained)")
    add_tokenizer_and_force_arguments(
        parser, scope="hub directory only: ",
        dict_default="the one in the checkpoint's data-bin",
        sentencepiece_default="spm.model in the checkpoint's data-bin")
    parser.add_argument("--print-finetune-args", action="store_true",
                        help="print the fairseq-train model flags (--arch ... --max-positions N) "
                             "that rebuild the encoder of an exported checkpoint, and exit")
    parser.add_argument("--pooling", choices=("first", "mean"), default="first",
                        help="with --print-finetune-args: the classification head's pooling "
                             "(mean: --arch roberta_pooled ... --classification-pooling mean; "
                             "default %(default)s)")
    parser.add_argument("--layer-lr-decay", type=float, metavar="D",
                        help="with --print-finetune-args: fine-tune with layer-wise lr decay D "
                             "(on roberta_pooled: --layer-lr-decay D)")
    args = parser.parse_args(argv)
    if args.layer_lr_decay is not None and not args.print_finetune_args:
        parser.error("--layer-lr-decay is for --print-finetune-args")
    if args.print_finetune_args == (args.output is not None):
        parser.error("give INPUT OUTPUT, or --print-finetune-args EXPORTED")
    if args.pooling != "first" and not args.print_finetune_args:
        parser.error("--pooling is for --print-finetune-args")
    args.hub = args.output is not None and args.output.suffix != ".pt"
    if not args.hub:
        for flag, value in (("--keep-decoder", args.keep_decoder), ("--dict", args.dict),
                            ("--sentencepiece-model", args.sentencepiece_model)):
            if value:
                parser.error(f"{flag} is for a hub directory: give an OUTPUT that does not end "
                             "in .pt")
    return args


def export_hub_directory(args) -> dict:
    """``export_encoder.py INPUT DIR``: the hub directory of a 3ML (encoder, or with
    ``--keep-decoder`` the whole model) or RoBERTa checkpoint."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    state = load_checkpoint(args.input)
    arch = model_name(plain_config(state["cfg"]).get("model") or {})
    is_roberta = ARCH_MODEL_REGISTRY.get(arch) is MODEL_REGISTRY["roberta"]
    if is_roberta and args.keep_decoder:
        raise ExportError(f"{args.input}: --keep-decoder is for 3ML checkpoints; this is a "
                          f"RoBERTa one ('{arch}'), which has no decoder")
    exported = (full_model_export(state, args.input) if args.keep_decoder or is_roberta
                else export(state, args.input))
    dictionary, sentencepiece_model = tokenizer_files(state, args.input, args.dict,
                                                      args.sentencepiece_model)
    check_vocabulary(exported["model"], ENCODER + "embed_tokens.weight", dictionary)
    write_hub_directory(with_sentencepiece(exported), args.output, dictionary,
                        sentencepiece_model, args.force)
    loader = ("fairseq_ext.models.three_ml.ThreeMLModel" if exported["export"].get("decoder_kept")
              else "fairseq.models.roberta.RobertaModel")
    logger.info("wrote %s/ (%s, %s, %s from %s, %s): load it with %s.from_pretrained(%r)",
                args.output, HUB_MODEL, HUB_DICT, HUB_SENTENCEPIECE, sentencepiece_model,
                exported["export"]["arch"], loader, str(args.output))
    return exported


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        if args.print_finetune_args:
            print(" ".join(finetune_args(load_checkpoint(args.input), args.input,
                                         args.pooling, args.layer_lr_decay)))
            return 0
        if not args.input.is_file():
            raise ExportError(f"{args.input}: no such file")
        refuse_existing([args.output], args.force)  # before the (slow) load
        if args.hub:
            export_hub_directory(args)
            return 0
        exported = export(load_checkpoint(args.input), args.input)
        import torch

        with atomic_file(args.output, args.force, binary=True) as handle:
            torch.save(exported, handle)
        logger.info("wrote %s: fairseq roberta, arch %s", args.output, exported["export"]["arch"])
        logger.info("fine-tune with: fairseq-train DATA --user-dir fairseq_ext --restore-file %s "
                    "--reset-optimizer --reset-dataloader --reset-meters %s ... "
                    "(or recipes/3ml/finetune_glue.sh)", args.output,
                    " ".join(finetune_args(exported, args.output)))
        return 0

    return run_export_command("export_encoder.py", logger, run)
