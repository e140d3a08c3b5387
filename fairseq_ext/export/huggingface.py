"""Export fairseq checkpoints to Hugging Face ``transformers`` directories
(``scripts/export_hf.py`` is the command line; needs the ``hf`` extra). ::

    python scripts/export_hf.py exports/3ml_encoder.pt exports/3ml_hf
    python scripts/export_hf.py checkpoints/nxt_uni/checkpoint_last.pt exports/nxt_uni_hf

The input is a fairseq hub directory or a checkpoint file; the output ``OUT/`` holds a stock
``transformers`` class (``RobertaForMaskedLM``, ``RobertaPreLayerNormForMaskedLM``,
``XLMRobertaXLForMaskedLM`` or ``OPTForCausalLM``), a fast tokenizer and ``fairseq_export.json``.
Both models run on the same batch first, and nothing is written when their logits differ by more
than ``--max-logit-diff``. What maps onto what, what is refused and why, the tokenizer's
remaining differences and the measured logit differences: docs/exports.md, "Hugging Face
``transformers``".
"""
import argparse
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from fairseq_ext.export.checkpoints import (
    HUB_DICT,
    HUB_MODEL,
    HUB_SENTENCEPIECE,
    ExportError,
    add_tokenizer_and_force_arguments,
    check_vocabulary,
    load_checkpoint,
    model_name,
    run_export_command,
    tokenizer_files,
)
from fairseq_ext.training.output_files import atomic_directory, refuse_existing

logger = logging.getLogger(__name__)

EXPORT_INFO = "fairseq_export.json"
#: Mapping mistakes show as differences of 0.1 and more; float32 rounding stays far below.
DEFAULT_MAX_LOGIT_DIFF = 1e-3
#: fairseq activation -> the ``transformers`` activation (``ACT2FN``) with the same formula.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_accurate": "gelu_accurate",
               "gelu_fast": "gelu_accurate",  # fairseq's deprecated name of gelu_accurate
               "tanh": "tanh", "linear": "linear", "relu_squared": "relu2"}
MASK = "<mask>"
MADEUP_PREFIX = "madeupword"  # fairseq-preprocess pads dictionaries with madeupwordNNNN
#: sentencepiece piece types (sentencepiece_model.proto)
SPM_NORMAL, SPM_USER_DEFINED = 1, 4
SPM_UNIGRAM, SPM_BPE = 1, 2
PIECE_PREFIX = "\u2581"


@dataclass(frozen=True)
class Sources:
    """What an export reads: the checkpoint, the dictionary and the sentencepiece model."""

    checkpoint: Path
    dictionary: Path
    sentencepiece_model: Path


@dataclass
class Conversion:
    """A ``transformers`` model class, its config and state dict, and how the tokenizer wraps
    a text (``"roberta"``: ``<s> A </s>``; ``"causal"``: ``A </s>``)."""

    model_class: type
    config: object
    state_dict: dict
    tokenizer_template: str
    notes: list = field(default_factory=list)


# --- input ---------------------------------------------------------------------------------------

def resolve_sources(path: Path, state: dict, dictionary: Optional[Path] = None,
                    sentencepiece_model: Optional[Path] = None) -> Sources:
    """The files of an export of ``path``: a hub directory's own files, or for a checkpoint
    file those of its ``cfg.task.data`` (:func:`fairseq_ext.export.encoder.tokenizer_files`); the
    flags override either. Errors say which flag supplies a missing file."""
    if not path.is_dir():
        found = tokenizer_files(state, path, dictionary, sentencepiece_model)
        return Sources(path, *found)
    resolved = []
    for given, default, flag in ((dictionary, path / HUB_DICT, "--dict"),
                                 (sentencepiece_model, path / HUB_SENTENCEPIECE,
                                  "--sentencepiece-model")):
        chosen = given or default
        if not chosen.is_file():
            raise ExportError(f"{flag} {chosen}: no such file" if given else
                              f"{path}: no {default.name} in the hub directory; give it with "
                              f"{flag} PATH")
        resolved.append(chosen)
    return Sources(path / HUB_MODEL, *resolved)


def load_fairseq_model(state: dict, sources: Sources):
    """``(model, task)`` of a loaded checkpoint, its task set up on ``sources.dictionary``
    (staged as ``dict.txt`` of a temporary data directory, which is all the masked_lm,
    language_modeling and bidirectional_lm tasks read)."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf, open_dict

    cfg = state["cfg"]
    if not OmegaConf.is_config(cfg):
        cfg = state["cfg"] = OmegaConf.create(cfg)
    with tempfile.TemporaryDirectory(prefix="hf_export_data.") as data:
        shutil.copyfile(sources.dictionary, Path(data) / "dict.txt")
        with open_dict(cfg):
            cfg.task.data = data
        [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(sources.checkpoint)], state=state)
    return model.eval(), task


# --- which stock class -------------------------------------------------------------------------

def classify(state: dict, path: Path) -> str:
    """``"roberta"`` or ``"bidirectional_lm"`` (checked against what can be exported), else
    :class:`ExportError` saying why not."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    cfg = state["cfg"]
    arch = model_name(cfg["model"]) if cfg.get("model") is not None else ""
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    if model_class is MODEL_REGISTRY["roberta"]:
        return "roberta"
    if model_class is MODEL_REGISTRY.get("bidirectional_lm"):
        check_causal_bidirectional_lm(cfg, path)
        return "bidirectional_lm"
    if model_class in (MODEL_REGISTRY.get("3ml_self"), MODEL_REGISTRY.get("3ml_cross")):
        raise ExportError(f"{path}: a 3ML checkpoint ('{arch}'), whose MLM head is in its "
                          "decoder; export its encoder first (scripts/export_encoder.py CKPT OUT, "
                          "without --keep-decoder) and convert OUT")
    what = f"model {model_class.__name__}" if model_class is not None else "an unknown arch"
    raise ExportError(f"{path}: arch '{arch}' ({what}) has no transformers export; exportable are "
                      "fairseq's roberta (roberta_*, scripts/export_encoder.py output) and "
                      "bidirectional_lm --variant nxt_uni")


def check_causal_bidirectional_lm(cfg, path: Path) -> None:
    """Refuse a bidirectional_lm checkpoint whose attention a causal LM cannot express."""
    from fairseq_ext.data.bidirectional_sampling import ObjectiveSampler
    from fairseq_ext.models.bidirectional_lm import R_BIDIR, model_r_bidir

    model_cfg = cfg["model"]
    get = model_cfg.get if hasattr(model_cfg, "get") else lambda k, d=None: getattr(model_cfg, k, d)
    r_bidir = model_r_bidir(get(R_BIDIR, None))
    if r_bidir > 0:
        raise ExportError(f"{path}: fine-tuned with --r-bidir {r_bidir}: it attends bidirectionally "
                          "over the first R x n tokens of each example, which a stock causal LM "
                          "class cannot express")
    task = cfg.get("task")
    if task is None or task.get("_name") != "bidirectional_lm":
        return  # e.g. --task language_modeling: a plain causal LM
    variant = str(task.get("variant"))
    trained = ObjectiveSampler.from_task_config(task).trained_capabilities()
    if trained != {"next"}:
        reasons = []
        if "bidir" in trained:
            reasons.append("a bidirectional prefix (tokens j < n_bidir are attended from every "
                           "position)")
        if "mask" in trained:
            reasons.append("masked tokens moved to the end of the document with their original "
                           "positions")
        raise ExportError(f"{path}: --variant {variant} trains {' and '.join(reasons)}, which a "
                          "stock causal LM class (strictly causal attention, positions from the "
                          "token order) cannot express; only nxt_uni exports (to OPTForCausalLM)")


# --- weights -------------------------------------------------------------------------------------

def hf_activation(name: str, what: str) -> str:
    if name not in ACTIVATIONS:
        raise ExportError(f"{what}: activation '{name}' has no transformers counterpart")
    return ACTIVATIONS[name]


def layer_norm_eps(modules) -> float:
    """The one epsilon of the LayerNorms ``modules`` (fairseq's 1e-5)."""
    eps = {float(m.eps) for m in modules if m is not None}
    if len(eps) != 1:
        raise ExportError(f"LayerNorms with different epsilons {sorted(eps)}")
    return eps.pop()


def embedding_scale(module) -> float:
    return float(getattr(module, "embed_scale", 1.0) or 1.0)


#: The three layouts of fairseq's RoBERTa encoder and the class computing each: ``(class name,
#: encoder prefix, the per-layer LayerNorm names of fairseq's self_attn_layer_norm and
#: final_layer_norm, the final LayerNorm's name or None)``, keyed by (pre-LN, embedding LayerNorm).
ROBERTA_LAYOUTS = {
    # post-LN: the LayerNorm after each residual sum
    (False, True): ("RobertaForMaskedLM", "roberta.",
                    ("attention.output.LayerNorm", "output.LayerNorm"), None),
    # pre-LN after an embedding LayerNorm: the LayerNorm before each sublayer
    (True, True): ("RobertaPreLayerNormForMaskedLM", "roberta_prelayernorm.",
                   ("attention.LayerNorm", "intermediate.LayerNorm"), "LayerNorm"),
    # pre-LN on the raw embeddings (fairseq's XLM-R XL, which transformers ported as this class)
    (True, False): ("XLMRobertaXLForMaskedLM", "roberta.",
                    ("attention.self_attn_layer_norm", "LayerNorm"), "encoder.LayerNorm"),
}


def convert_roberta(model, path: Path) -> Conversion:
    """fairseq ``RobertaModel`` -> ``RobertaForMaskedLM`` (post-LN),
    ``RobertaPreLayerNormForMaskedLM`` (pre-LN with an embedding LayerNorm) or
    ``XLMRobertaXLForMaskedLM`` (pre-LN without one: 3ML's pre-LN encoders)."""
    import torch
    import transformers
    from fairseq.modules import LearnedPositionalEmbedding

    encoder = model.encoder.sentence_encoder
    head = model.encoder.lm_head
    args = model.args
    pre_ln = encoder.layer_norm is not None
    embedding_ln = encoder.layernorm_embedding is not None
    if not pre_ln and not embedding_ln:
        raise ExportError(f"{path}: a post-LN encoder without an embedding LayerNorm; "
                          "transformers' RobertaForMaskedLM normalises the embeddings")
    if args.activation_fn != "gelu":
        raise ExportError(f"{path}: --activation-fn {args.activation_fn}: transformers' RoBERTa LM "
                          "head always applies GELU, fairseq's applies the encoder's activation")
    if not isinstance(encoder.embed_positions, LearnedPositionalEmbedding):
        raise ExportError(f"{path}: {type(encoder.embed_positions).__name__} positions; "
                          "transformers' RoBERTa learns its positions")
    class_name, prefix, (attn_ln, ffn_ln), final_ln = ROBERTA_LAYOUTS[pre_ln, embedding_ln]
    model_class = getattr(transformers, class_name)
    layers = list(encoder.layers)
    d = encoder.embed_tokens.embedding_dim
    norms = [encoder.layernorm_embedding, encoder.layer_norm, head.layer_norm]
    for layer in layers:
        norms += [layer.self_attn_layer_norm, layer.final_layer_norm]
    scale = embedding_scale(encoder)
    config = model_class.config_class(
        vocab_size=encoder.embed_tokens.num_embeddings, hidden_size=d,
        num_hidden_layers=len(layers), num_attention_heads=layers[0].self_attn.num_heads,
        intermediate_size=layers[0].fc1.out_features, hidden_act="gelu",
        hidden_dropout_prob=float(args.dropout),
        attention_probs_dropout_prob=float(args.attention_dropout),
        max_position_embeddings=encoder.embed_positions.weight.size(0), type_vocab_size=1,
        layer_norm_eps=layer_norm_eps(norms), pad_token_id=encoder.padding_idx,
        bos_token_id=0, eos_token_id=2,
        tie_word_embeddings=head.weight is encoder.embed_tokens.weight and scale == 1.0)

    sd = model.state_dict()  # detached; build_hf_model's load_state_dict copies them
    src = "encoder.sentence_encoder."
    out = {
        prefix + "embeddings.word_embeddings.weight": sd[src + "embed_tokens.weight"] * scale,
        prefix + "embeddings.position_embeddings.weight": sd[src + "embed_positions.weight"],
        prefix + "embeddings.token_type_embeddings.weight": torch.zeros(1, d),
    }
    if embedding_ln:
        out[prefix + "embeddings.LayerNorm.weight"] = sd[src + "layernorm_embedding.weight"]
        out[prefix + "embeddings.LayerNorm.bias"] = sd[src + "layernorm_embedding.bias"]
    names = {"self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
             "self_attn.v_proj": "attention.self.value",
             "self_attn.out_proj": "attention.output.dense",
             "fc1": "intermediate.dense", "fc2": "output.dense",
             "self_attn_layer_norm": attn_ln, "final_layer_norm": ffn_ln}
    for i in range(len(layers)):
        fs, hf = f"{src}layers.{i}.", f"{prefix}encoder.layer.{i}."
        for fairseq_name, hf_name in names.items():
            for p in ("weight", "bias"):
                out[f"{hf}{hf_name}.{p}"] = sd[f"{fs}{fairseq_name}.{p}"]
    if final_ln is not None:
        out[f"{prefix}{final_ln}.weight"] = sd[src + "layer_norm.weight"]
        out[f"{prefix}{final_ln}.bias"] = sd[src + "layer_norm.bias"]
    for name in ("dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias"):
        out[f"lm_head.{name}"] = sd[f"encoder.lm_head.{name}"]
    out["lm_head.decoder.weight"] = sd["encoder.lm_head.weight"]
    out["lm_head.decoder.bias"] = sd["encoder.lm_head.bias"]
    return Conversion(model_class, config, out, "roberta")


def convert_bidirectional_lm(model, path: Path) -> Conversion:
    """fairseq ``BidirectionalLanguageModel`` (NxtUni) -> ``OPTForCausalLM``."""
    from transformers import OPTConfig, OPTForCausalLM

    decoder = model.decoder
    args = model.args
    problems = []
    if decoder.layernorm_embedding is not None:
        problems.append("an embedding LayerNorm (OPT has none)")
    if decoder.layer_norm is None or not decoder.layers[0].normalize_before:
        problems.append("post-LN layers (OPT's do_layer_norm_before=False has no final LayerNorm)")
    if decoder.project_in_dim is not None or decoder.project_out_dim is not None:
        problems.append("input/output projections")
    if problems:
        raise ExportError(f"{path}: the decoder has {', '.join(problems)}, which OPTForCausalLM "
                          "cannot represent exactly")
    layers = list(decoder.layers)
    norms = [decoder.layer_norm] + [n for layer in layers
                                    for n in (layer.self_attn_layer_norm, layer.final_layer_norm)]
    eps = layer_norm_eps(norms)
    if eps != 1e-5:  # OPT's LayerNorms are torch's default
        raise ExportError(f"{path}: LayerNorm epsilon {eps}; OPTForCausalLM uses 1e-5")
    scale = embedding_scale(decoder)
    d = decoder.embed_tokens.embedding_dim
    config = OPTConfig(
        vocab_size=decoder.embed_tokens.num_embeddings, hidden_size=d,
        num_hidden_layers=len(layers), ffn_dim=layers[0].fc1.out_features,
        num_attention_heads=layers[0].self_attn.num_heads,
        max_position_embeddings=decoder.embed_positions.weight.size(0) - 2,
        do_layer_norm_before=True, word_embed_proj_dim=d,
        dropout=float(args.dropout), attention_dropout=float(args.attention_dropout),
        activation_function=hf_activation(args.activation_fn, str(path)),
        pad_token_id=decoder.padding_idx, bos_token_id=2, eos_token_id=2,
        enable_bias=True, layer_norm_elementwise_affine=True,
        tie_word_embeddings=scale == 1.0 and decoder.share_input_output_embed)
    sd = model.state_dict()
    out = {
        "model.decoder.embed_tokens.weight": sd["decoder.embed_tokens.weight"] * scale,
        "model.decoder.embed_positions.weight": sd["decoder.embed_positions.weight"],
        "model.decoder.final_layer_norm.weight": sd["decoder.layer_norm.weight"],
        "model.decoder.final_layer_norm.bias": sd["decoder.layer_norm.bias"],
        "lm_head.weight": sd["decoder.output_projection.weight"],
    }
    for i in range(len(layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.out_proj", "self_attn_layer_norm", "fc1", "fc2",
                     "final_layer_norm"):
            for p in ("weight", "bias"):
                out[f"model.decoder.layers.{i}.{name}.{p}"] = sd[f"decoder.layers.{i}.{name}.{p}"]
    notes = []
    if scale != 1.0:
        notes.append(f"input embedding = fairseq's x sqrt(d) = {scale:g} (OPT does not scale); "
                     "lm_head = fairseq's unscaled output projection")
    return Conversion(OPTForCausalLM, config, out, "causal", notes)


def build_hf_model(conversion: Conversion):
    """The ``transformers`` model with the converted weights (every parameter and persistent
    buffer given, none left over)."""
    model = conversion.model_class(conversion.config)
    expected = set(model.state_dict())
    given = set(conversion.state_dict)
    if expected != given:
        raise AssertionError(f"converted weights do not match {conversion.model_class.__name__}: "
                             f"missing {sorted(expected - given)}, extra {sorted(given - expected)}")
    model.load_state_dict(conversion.state_dict, strict=True)
    return model.eval()


# --- checking the logits ---------------------------------------------------------------------------

def check_batch(dictionary, max_positions: int, template: str, length: int = 32, seed: int = 0):
    """Random word ids ``(2, L)``, the second row right-padded to ``L // 2`` tokens, wrapped as
    the tokenizer wraps text (``<s> ... </s>`` or ``... </s>``), and its attention mask."""
    import torch

    length = min(length, max_positions)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (2, length), generator=generator)
    lengths = [length, max(2, length // 2)]
    for row, n in enumerate(lengths):
        tokens[row, n:] = dictionary.pad()
        tokens[row, n - 1] = dictionary.eos()
        if template == "roberta":
            tokens[row, 0] = dictionary.bos()
    return tokens, tokens.ne(dictionary.pad()).long()


def max_logit_difference(fairseq_model, hf_model, tokens, attention_mask) -> float:
    """The largest |fairseq logit - transformers logit| over the real tokens of ``tokens``."""
    import torch

    with torch.no_grad():
        ours = fairseq_model(tokens)[0]
        theirs = hf_model(input_ids=tokens, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    return float((ours[real] - theirs[real]).abs().max())


# --- tokenizer -------------------------------------------------------------------------------------

def load_sentencepiece_proto(path: Path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # protobuf's DecodeError
        raise ExportError(f"{path}: not a sentencepiece model ({e})")
    if not proto.pieces:
        raise ExportError(f"{path}: not a sentencepiece model (no pieces)")
    return proto


def special_symbols(dictionary) -> list:
    """The dictionary's symbols that text never produces through sentencepiece: fairseq's four
    specials, ``<mask>`` and the ``madeupword`` padding."""
    return [s for i, s in enumerate(dictionary.symbols)
            if i < dictionary.nspecial or s == MASK or s.startswith(MADEUP_PREFIX)]


def build_tokenizer(dictionary, sentencepiece_model: Path, template: str, max_length: int):
    """A ``PreTrainedTokenizerFast`` giving fairseq's ids (module doc), and a dict of
    vocabulary notes (``missing_pieces``: sentencepiece pieces ``dict.txt`` lacks)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers import processors as tk_processors
    from tokenizers.models import BPE, Unigram
    from transformers import PreTrainedTokenizerFast

    proto = load_sentencepiece_proto(sentencepiece_model)
    model_type = proto.trainer_spec.model_type
    if model_type not in (SPM_UNIGRAM, SPM_BPE):
        raise ExportError(f"{sentencepiece_model}: a sentencepiece model of type {model_type}; "
                          "only unigram and bpe models convert")
    if proto.trainer_spec.byte_fallback:
        raise ExportError(f"{sentencepiece_model}: byte_fallback models are not supported "
                          "(fairseq's dictionary has no byte pieces)")
    pieces = {p.piece: p for p in proto.pieces if p.type in (SPM_NORMAL, SPM_USER_DEFINED)}
    specials = special_symbols(dictionary)
    special_set = set(specials)
    unknown = [s for s in dictionary.symbols if s not in special_set and s not in pieces]
    if unknown:
        raise ExportError(f"{len(unknown)} symbols of the dictionary are not pieces of "
                          f"{sentencepiece_model} (e.g. {', '.join(map(repr, unknown[:5]))}): is it "
                          "the dictionary of that sentencepiece model? pass the right --dict / "
                          "--sentencepiece-model")
    missing = [p for p in pieces if p not in dictionary.indices]
    if missing:
        logger.warning("%d pieces of %s are not in the dictionary (fairseq reads them as <unk>; "
                       "the HF tokenizer segments such text into other pieces): %s", len(missing),
                       sentencepiece_model, " ".join(missing[:20]) + (" ..." if len(missing) > 20
                                                                     else ""))
    if model_type == SPM_UNIGRAM:
        normal_scores = [p.score for p in proto.pieces if p.type == SPM_NORMAL]
        floor = min(normal_scores)  # the specials' score: they are added tokens, never segmented
        vocab = [(s, pieces[s].score if s in pieces else floor) for s in dictionary.symbols]
        model = Unigram(vocab, unk_id=dictionary.unk(), byte_fallback=False)
    else:
        from transformers.tokenization_utils_base import generate_merges

        spm_order = {p.piece: i for i, p in enumerate(proto.pieces)}
        merges = [(a, b) for a, b in generate_merges(spm_order)
                  if a + b in dictionary.indices and a in dictionary.indices
                  and b in dictionary.indices]
        model = BPE({s: i for i, s in enumerate(dictionary.symbols)}, merges,
                    unk_token=dictionary.unk_word, fuse_unk=True, byte_fallback=False)
    tokenizer = Tokenizer(model)
    spec = proto.normalizer_spec
    steps = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=PIECE_PREFIX, prepend_scheme=prepend,
        split=proto.trainer_spec.split_by_whitespace)
    tokenizer.decoder = decoders.Metaspace(replacement=PIECE_PREFIX, prepend_scheme=prepend)
    bos, eos = dictionary.bos_word, dictionary.eos_word
    ids = [(bos, dictionary.bos()), (eos, dictionary.eos())]
    if template == "roberta":  # RobertaHubInterface.encode
        tokenizer.post_processor = tk_processors.TemplateProcessing(
            single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B:0 {eos}:0",
            special_tokens=ids)
    else:  # fairseq-preprocess: each line ends with </s>
        tokenizer.post_processor = tk_processors.TemplateProcessing(
            single=f"$A {eos}", pair=f"$A {eos} $B:0 {eos}:0", special_tokens=ids)
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False, lstrip=s == MASK)
                                  for s in specials])
    user_defined = [p.piece for p in proto.pieces
                    if p.type == SPM_USER_DEFINED and p.piece in dictionary.indices]
    if user_defined:  # sentencepiece matches them before segmenting
        tokenizer.add_tokens([AddedToken(s, normalized=False) for s in user_defined])
    names = {"bos_token": bos, "eos_token": eos, "unk_token": dictionary.unk_word,
             "pad_token": dictionary.pad_word}
    if template == "roberta":
        names.update(cls_token=bos, sep_token=eos)
    if MASK in dictionary.indices:
        names["mask_token"] = MASK
    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=max_length,
                                           **names)
    notes = {"sentencepiece_type": "unigram" if model_type == SPM_UNIGRAM else "bpe",
             "missing_pieces": missing}
    return hf_tokenizer, notes


# --- the export ------------------------------------------------------------------------------------

def export(path: Path, out: Path, dictionary: Optional[Path] = None,
           sentencepiece_model: Optional[Path] = None, force: bool = False,
           max_logit_diff: float = DEFAULT_MAX_LOGIT_DIFF) -> dict:
    """Export ``path`` (hub directory or checkpoint) to the ``transformers`` directory ``out``;
    returns what ``fairseq_export.json`` records."""
    refuse_existing([out], force)  # before the (slow) load
    checkpoint = path / HUB_MODEL if path.is_dir() else path
    if not checkpoint.is_file():
        raise ExportError(f"{checkpoint}: no such file" + (f" (a hub directory holds {HUB_MODEL})"
                                                           if path.is_dir() else ""))
    state = load_checkpoint(checkpoint)
    kind = classify(state, checkpoint)
    sources = resolve_sources(path, state, dictionary, sentencepiece_model)
    embedding = ("encoder.sentence_encoder.embed_tokens.weight" if kind == "roberta"
                 else "decoder.embed_tokens.weight")
    check_vocabulary(state["model"], embedding, sources.dictionary)
    fairseq_model, task = load_fairseq_model(state, sources)
    convert = convert_roberta if kind == "roberta" else convert_bidirectional_lm
    conversion = convert(fairseq_model, checkpoint)
    hf_model = build_hf_model(conversion)
    max_positions = int(fairseq_model.max_positions()) if kind == "roberta" \
        else conversion.config.max_position_embeddings
    tokens, attention_mask = check_batch(task.source_dictionary, max_positions,
                                         conversion.tokenizer_template)
    diff = max_logit_difference(fairseq_model, hf_model, tokens, attention_mask)
    logger.info("%s -> %s: max |logit difference| %.3g on a %s batch", checkpoint,
                conversion.model_class.__name__, diff, "x".join(map(str, tokens.shape)))
    if not diff <= max_logit_diff:
        raise ExportError(f"the converted model's logits differ from fairseq's by up to {diff:.3g} "
                          f"(> --max-logit-diff {max_logit_diff:g}); nothing written")
    tokenizer, vocabulary = build_tokenizer(task.source_dictionary, sources.sentencepiece_model,
                                            conversion.tokenizer_template, max_positions)
    info = {
        "source": str(checkpoint), "dictionary": str(sources.dictionary),
        "sentencepiece_model": str(sources.sentencepiece_model),
        "fairseq_arch": model_name(state["cfg"]["model"]),
        "transformers_class": conversion.model_class.__name__,
        "max_abs_logit_diff": diff, "notes": conversion.notes, **vocabulary,
    }
    for note in conversion.notes:
        logger.info("%s", note)
    write_directory(out, force, hf_model, tokenizer, info)
    return info


def write_directory(out: Path, force: bool, hf_model, tokenizer, info: dict) -> None:
    """Save into a temporary directory beside ``out``, renamed onto ``out`` when complete
    (:func:`fairseq_ext.training.output_files.atomic_directory`; an existing one only with ``force``)."""
    with atomic_directory(out, force) as tmp:
        hf_model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")


# --- the command line (scripts/export_hf.py) -----------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="export_hf.py",
        description="Write a Hugging Face transformers directory (safetensors, config, fast "
                    "tokenizer) from a fairseq RoBERTa checkpoint (RobertaForMaskedLM; pre-LN: "
                    "RobertaPreLayerNormForMaskedLM or XLMRobertaXLForMaskedLM) or a "
                    "bidirectional_lm nxt_uni checkpoint (OPTForCausalLM).")
    parser.add_argument("input", type=Path, help="a fairseq hub directory (model.pt, dict.txt, "
                        "sentencepiece.bpe.model) or a checkpoint file")
    parser.add_argument("output", type=Path, help="directory to write")
    add_tokenizer_and_force_arguments(
        parser, scope="", dict_default="INPUT/dict.txt, or dict.txt in the checkpoint's "
        "cfg.task.data", sentencepiece_default="INPUT/sentencepiece.bpe.model, or spm.model "
        "beside the data's dict.txt")
    parser.add_argument("--max-logit-diff", type=float, default=DEFAULT_MAX_LOGIT_DIFF,
                        help="refuse to write when fairseq's and the converted model's logits "
                             "differ by more (default: %(default)g)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        try:
            from transformers.utils import logging as transformers_logging
        except ImportError:
            raise ExportError("needs the hf extra: pip install -r requirements-hf.txt "
                              "-c constraints.txt (or pip install -e .[hf])")
        transformers_logging.disable_progress_bar()  # one shard: the bar says nothing
        info = export(args.input, args.output, args.dict, args.sentencepiece_model, args.force,
                      args.max_logit_diff)
        logger.info("wrote %s: %s (AutoModel / AutoTokenizer.from_pretrained(%r))", args.output,
                    info["transformers_class"], str(args.output))
        return 0

    return run_export_command("export_hf.py", logger, run)
