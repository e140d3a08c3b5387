"""Why does (or doesn't) a pre-trained checkpoint transfer? Its features, probes and a fixed
fine-tune, beside the same architecture at random initialisation (``scripts/diagnose_transfer.py``,
docs/transfer.md).

Given a fine-tunable checkpoint of any family (RoBERTa, a 3ML checkpoint or its exported
encoder, BERT-rab, SwishRNN-BERT, a ``bidirectional_lm``) and a fine-tuning data-bin in
fairseq's ``sentence_prediction`` layout (``scripts/prepare_downstream.sh``,
``scripts/prepare_glue.sh``), it reports for the checkpoint and for its random control
(:mod:`fairseq_ext.export.random_init`, a new draw per seed):

* **per layer** (the embedding output, each block's output, and the features the
  classification head reads, after a pre-LN model's final LayerNorm), over the dev texts'
  tokens: the residual stream's norm and each block's update norm ``||h_l - h_{l-1}||``;
  the **anisotropy**, the mean pairwise cosine of the token features; the **effective rank**
  of the token-feature matrix (Roy & Vetterli 2007: ``exp`` of the entropy of its normalised
  singular values; 1 when every token has the same direction); each block's **attention
  entropy** (bits, averaged over heads and real query positions, beside the uniform
  attention's); and a **frozen linear probe** on the mean-pooled features (logistic
  regression on standardised features, train -> dev);
* at the head's features: the frozen probe on the pooled token the head reads (``<s>`` for an
  encoder, the last token for a left-to-right LM) and on the mean over tokens;
* the **train and dev accuracy after a fixed fine-tune**, per seed, with the head on the token
  the family's head reads or on the mean over tokens: the one fine-tuning path of the demo, the
  studies and the transfer curve (:func:`fairseq_ext_lab.finetuning.fine_tune_checkpoint`),
  through the recipe the family's study fine-tunes it with (:data:`FAMILY_FINETUNE`: RoBERTa
  and 3ML ``recipes/3ml/finetune_glue.sh``, BERT-orig, BERT-rab and SwishRNN-BERT
  ``recipes/swishrnn/finetune_glue.sh``, ``bidirectional_lm`` ``recipes/bidirectional/
  finetune_glue.sh`` with its variant's attention), on the schedule of
  :data:`~fairseq_ext_lab.finetuning.DIAGNOSIS_PROTOCOL` (batch 16, 6% warmup, lr 3e-3 and 10
  epochs, the levers' choice); dev accuracy as the run logs it, train accuracy by
  ``fairseq-validate`` of the final model on the ``train`` split;
* the **weights**: each block's matrices' Frobenius norms and LayerNorm gains (RMS), the token
  embedding's row norms (all rows, and the most frequent pieces of the dev texts).

Every figure carries ± one standard error: the feature statistics over dev texts (the
jackknife, leaving one text out: the tokens of a text are not independent), the probes'
accuracy the binomial error over dev rows and their differences to the control paired over the
same rows, the fine-tunes' mean over seeds with the error over seeds and the difference paired
on the seed (the same batches, head draw and dropout draws for both). The majority class of the
training labels is printed beside the accuracies.

A collapsed model (the failure this tool looks for) shows a near-constant
residual stream: mean cosine near 1 and effective rank near 1 from some block on, a block
update far larger than the embedding, probes at the majority class, and a fine-tune that does
not fit its training set.

May import: see :mod:`fairseq_ext_lab`.
"""
import copy
import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    mean_over_seeds,
    paired_over_seeds,
)
from fairseq_ext_lab import finetuning
from fairseq_ext_lab.evaluation.feature_statistics import (
    accuracy_estimate,
    attention_entropy_bits,
    effective_rank,
    linear_probe,
    mean_over_groups,
    mean_pairwise_cosine,
    paired_accuracy_difference,
)
from fairseq_ext_lab.studies.catalog.bidirectional import BIDIRECTIONAL_FINETUNE, OWN_R_BIDIR
from fairseq_ext_lab.studies.catalog.swishrnn import SWISHRNN_FINETUNE
from fairseq_ext_lab.studies.catalog.three_ml import THREE_ML_FINETUNE

#: Pooling of the fine-tuned head and of the probes: the token the family's classification
#: head reads (``<s>`` for encoders, the last real token for left-to-right LMs), or the mean
#: over the real tokens.
POOLINGS = ("head", "mean")


# ----------------------------------------------------------------------------------------------
# The model and the data

@dataclasses.dataclass
class LoadedModel:
    """A fairseq model for the diagnosis and what it reads: ``head_reads_last`` for a
    left-to-right LM (its head reads the last real token); the checkpoint's family (a key of
    :data:`FAMILY_FINETUNE`, None for none of them) and its config (plain dicts)."""

    model: object
    checkpoint: Path
    head_reads_last: bool
    padding_idx: int
    family: Optional[str] = None
    config: Optional[dict] = None


def load_model(checkpoint: Path, work_dir: Path) -> LoadedModel:
    """The checkpoint's model in eval mode on the CPU; a 3ML checkpoint is exported first
    (:func:`fairseq_ext.export.encoder.export`, its decoder dropped, as fine-tuning reads it)
    into ``work_dir``."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, FairseqLanguageModel

    from fairseq_ext.export.checkpoints import load_checkpoint, model_name, plain_config
    from fairseq_ext.export.encoder import THREE_ML_MODELS, export

    state = load_checkpoint(checkpoint)
    config = plain_config(state["cfg"])
    arch = model_name(config.get("model") or {})
    if ARCH_MODEL_REGISTRY.get(arch) in {MODEL_REGISTRY[m] for m in THREE_ML_MODELS}:
        exported = work_dir / "encoder.pt"
        torch.save(export(state, checkpoint), exported)
        checkpoint = exported
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    return LoadedModel(model, checkpoint, isinstance(model, FairseqLanguageModel),
                       task.source_dictionary.pad(), family_of_arch(arch), config)


@dataclasses.dataclass
class Split:
    """One split of a classification data-bin: token rows (``<s>`` first, as
    ``sentence_prediction`` builds them, cut at the model's length) and label indices."""

    tokens: List[np.ndarray]
    labels: np.ndarray


def read_split(data_bin: Path, split: str, max_positions: int,
               max_rows: Optional[int] = None) -> Split:
    """``split`` of a ``sentence_prediction`` data-bin: ``<s> input0 [</s> input1]`` (the
    binarized inputs end in ``</s>``), truncated to ``max_positions``, and its labels (the
    label dictionary's order, specials left out)."""
    from fairseq.data import Dictionary, data_utils

    def dataset(folder: str, dictionary):
        found = data_utils.load_indexed_dataset(str(data_bin / folder / split), dictionary)
        if found is None:
            raise FileNotFoundError(f"{data_bin / folder / split}.bin: not found; DATA must be "
                                    "a sentence_prediction data-bin (input0/, label/)")
        return found

    source = Dictionary.load(str(data_bin / "input0" / "dict.txt"))
    label_dict = Dictionary.load(str(data_bin / "label" / "dict.txt"))
    first = dataset("input0", source)
    second = dataset("input1", source) if (data_bin / "input1").is_dir() else None
    labels = dataset("label", label_dict)
    rows = len(first) if max_rows is None else min(len(first), max_rows)
    tokens, classes = [], []
    for i in range(rows):
        parts = [np.array([source.bos()]), first[i].numpy()]
        if second is not None:
            parts += [np.array([source.eos()]), second[i].numpy()]
        tokens.append(np.concatenate(parts)[:max_positions].astype(np.int64))
        classes.append(int(labels[i][0]) - label_dict.nspecial)
    return Split(tokens, np.array(classes))


def batches(split: Split, size: int, padding_idx: int):
    """``(tokens (B, T) long, lengths, row indices)`` batches of the rows in order,
    right-padded."""
    import torch

    order = np.arange(len(split.tokens))
    for start in range(0, len(order), size):
        rows = order[start:start + size]
        lengths = [len(split.tokens[i]) for i in rows]
        out = torch.full((len(rows), max(lengths)), padding_idx, dtype=torch.long)
        for j, i in enumerate(rows):
            out[j, :lengths[j]] = torch.from_numpy(split.tokens[i])
        yield out, lengths, rows


def forward_features(model, tokens):
    """``(features (B, T, C) the head reads, inner states [(T, B, C)] from the embedding output
    on)`` of a fairseq encoder (RoBERTa and its subclasses) or language model."""
    features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    return features, extra["inner_states"]


def pooled(features, tokens, padding_idx: int, pooling: str, head_reads_last: bool):
    """``(B, C)``: the features of the token the head reads, or their mean over real tokens."""
    import torch

    real = tokens.ne(padding_idx)
    if pooling == "mean":
        weights = real.unsqueeze(-1).type_as(features)
        return (features * weights).sum(1) / weights.sum(1).clamp(min=1)
    if head_reads_last:
        from fairseq_ext.modules.classification_heads import last_token_positions

        columns = last_token_positions(tokens, padding_idx)
    else:
        columns = torch.zeros(tokens.size(0), dtype=torch.long, device=tokens.device)
    return features[torch.arange(tokens.size(0), device=tokens.device), columns]


class AttentionRecorder:
    """Forward hooks on each block's ``self_attn`` that ask it for its per-head probabilities
    (``need_head_weights``) and keep them, ``(H, B, T, T)`` per block. fairseq's
    ``MultiheadAttention`` returns per-head weights only off its fused path (the fused one
    averages over heads), so the recorded modules take the other path while recorded
    (``skip_embed_dim_check``, the attribute that selects it; put back by :meth:`close`)."""

    def __init__(self, model):
        self.weights: List[object] = []
        self.handles = []
        self.paths = []
        for name, module in model.named_modules():
            if name.endswith("self_attn") and hasattr(module, "q_proj"):
                self.handles.append(module.register_forward_pre_hook(self._ask, with_kwargs=True))
                self.handles.append(module.register_forward_hook(self._keep))
                if hasattr(module, "skip_embed_dim_check"):
                    self.paths.append((module, module.skip_embed_dim_check))
                    module.skip_embed_dim_check = True

    @staticmethod
    def _ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": True, "need_head_weights": True}

    def _keep(self, module, args, output):
        self.weights.append(None if output[1] is None else output[1].detach().float().numpy())

    def close(self):
        for handle in self.handles:
            handle.remove()
        for module, value in self.paths:
            module.skip_embed_dim_check = value


@dataclasses.dataclass
class LayerFeatures:
    """Over a split: every layer's token features (real tokens of every text, row-major) with
    the text each comes from, the pooled features per text, and each block's attention
    entropy per text."""

    names: List[str]
    tokens: List[np.ndarray]  # per layer (N_tokens, C)
    text_of_token: np.ndarray
    mean_pooled: List[np.ndarray]  # per layer (texts, C)
    head_pooled: np.ndarray  # (texts, C) at the head's features
    attention_entropy: List[np.ndarray]  # per block (texts,)
    uniform_entropy: np.ndarray  # (texts,) log2 of each text's length


def collect_features(loaded: LoadedModel, split: Split, batch_size: int = 32) -> LayerFeatures:
    """:class:`LayerFeatures` of ``loaded`` on ``split`` (eval mode, no gradients)."""
    import torch

    per_layer, mean_pooled, head_rows, entropies, groups = [], [], [], [], []
    recorder = AttentionRecorder(loaded.model)
    try:
        with torch.no_grad():
            for tokens, lengths, rows in batches(split, batch_size, loaded.padding_idx):
                recorder.weights.clear()
                features, inner = forward_features(loaded.model, tokens)
                layers = [state.transpose(0, 1) for state in inner] + [features]
                real = tokens.ne(loaded.padding_idx)
                for index, layer in enumerate(layers):
                    if len(per_layer) <= index:
                        per_layer.append([])
                        mean_pooled.append([])
                    per_layer[index].append(layer[real].float().numpy())
                    mean_pooled[index].append(pooled(layer, tokens, loaded.padding_idx, "mean",
                                                     False).float().numpy())
                head_rows.append(pooled(features, tokens, loaded.padding_idx, "head",
                                        loaded.head_reads_last).float().numpy())
                for block, weights in enumerate(recorder.weights):
                    if len(entropies) <= block:
                        entropies.append([])
                    if weights is not None:
                        entropies[block].append(attention_entropy_bits(weights, lengths))
                groups.append(np.repeat(np.asarray(rows), lengths))
    finally:
        recorder.close()
    blocks = len(per_layer) - 2
    names = ["embeddings"] + [f"block {i + 1}" for i in range(blocks)] + ["head features"]
    lengths = np.array([len(t) for t in split.tokens], dtype=np.float64)
    return LayerFeatures(
        names, [np.concatenate(parts) for parts in per_layer], np.concatenate(groups),
        [np.concatenate(parts) for parts in mean_pooled], np.concatenate(head_rows),
        [np.concatenate(parts) if parts else np.array([]) for parts in entropies],
        np.log2(lengths))


# ----------------------------------------------------------------------------------------------
# The fixed fine-tune: each family through its study's recipe, by fairseq_ext_lab.finetuning

@dataclasses.dataclass(frozen=True)
class FamilyFinetune:
    """How the fixed fine-tune takes a family's checkpoints, as the family's study fine-tunes
    them: the study's ``protocol`` (its recipe, the variable that takes the checkpoint, the
    export of a 3ML one, its settings; the diagnosis's schedule replaces the study's), the
    recipe's ``POOLING`` for the token the family's head reads (``head_pooling``), the recipe
    variable that takes the checkpoint's position table (``positions_env``, the model field of
    that name in lower case; None: the recipe reads the arch off the checkpoint), and the
    attention each pre-training ``--variant`` fine-tunes with (``R_BIDIR``, Table 10 of the
    bidirectionality paper)."""

    protocol: finetuning.FinetuneProtocol
    head_pooling: str
    positions_env: Optional[str] = None
    attention_by_variant: Optional[Dict[str, str]] = None


_ENCODER = FamilyFinetune(THREE_ML_FINETUNE, "first")
_BERT = FamilyFinetune(SWISHRNN_FINETUNE, "first", "MAX_POSITIONS")
#: Each family the fixed fine-tune takes (:func:`family_of_arch`), with its study's protocol: a
#: 3ML checkpoint as its exported encoder (:func:`load_model`), as RoBERTa; BERT-orig, BERT-rab
#: and SwishRNN-BERT through ``recipes/swishrnn/finetune_glue.sh``; ``bidirectional_lm``
#: through ``recipes/bidirectional/finetune_glue.sh``, its head on the last token.
FAMILY_FINETUNE: Dict[str, FamilyFinetune] = {
    "roberta": _ENCODER, "3ml": _ENCODER, "bert_orig": _BERT, "bert_rab": _BERT,
    "swishrnn_bert": _BERT,
    "bidirectional_lm": FamilyFinetune(BIDIRECTIONAL_FINETUNE, "last", "MAX_TARGET_POSITIONS",
                                       OWN_R_BIDIR)}
#: Model settings the recipe or the run decides, never read off the checkpoint: dropout, the
#: head, the position table (:attr:`FamilyFinetune.positions_env`), the attention it fine-tunes
#: with, and how the computation is laid out (the same results on any).
RECIPE_MODEL_SETTINGS = frozenset({
    "dropout", "attention_dropout", "activation_dropout", "pooler_dropout",
    "classification_pooling", "layer_lr_decay", "load_checkpoint_heads", "max_positions",
    "max_target_positions", "r_bidir", "attention_impl", "checkpoint_activations",
    "offload_activations"})


class DiagnosisError(Exception):
    """What the diagnosis cannot do with the checkpoint, data-bin or settings it was given."""


def family_of_arch(arch: str) -> Optional[str]:
    """The key of :data:`FAMILY_FINETUNE` of a checkpoint of ``arch``: its fairseq model's
    name, ``3ml`` for both 3ML models, ``bert_orig`` for BERT-orig's archs; None for a model
    the table does not have."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    from fairseq_ext.export.encoder import THREE_ML_MODELS

    model = ARCH_MODEL_REGISTRY.get(arch)
    name = next((name for name, found in MODEL_REGISTRY.items() if found is model), None)
    if name in THREE_ML_MODELS:
        return "3ml"
    if name in ("roberta", "roberta_pooled") and arch.startswith("bert_orig_"):
        return "bert_orig"
    return name if name in FAMILY_FINETUNE else None


def recipe_pooling(family: str, pooling: str) -> str:
    """The recipe's ``POOLING`` for one of :data:`POOLINGS` of a checkpoint of ``family``."""
    return FAMILY_FINETUNE[family].head_pooling if pooling == "head" else "mean"


def checkpoint_model_flags(model_cfg: dict) -> List[str]:
    """The model flags that rebuild a checkpoint's model on its arch, as a study passes its
    model's pre-training flags: every flag of the model (its ``add_args``) whose value in
    ``model_cfg`` differs from the one the arch sets, but :data:`RECIPE_MODEL_SETTINGS`."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_ext.export.checkpoints import model_name

    arch = model_name(model_cfg)
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    defaults = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](defaults)
    flags = []
    for action in parser._actions:
        if action.dest in RECIPE_MODEL_SETTINGS or action.dest not in model_cfg:
            continue
        value, default = model_cfg[action.dest], getattr(defaults, action.dest, action.default)
        if value == default:
            continue
        if action.nargs == 0 and action.const is True and value is True:  # store_true
            flags.append(action.option_strings[0])
        elif action.nargs == 0 or value is None:
            raise DiagnosisError(f"the checkpoint's {action.dest} is {value!r} where its arch "
                                 f"{arch} sets {default!r}, which {action.option_strings[0]} "
                                 "cannot set back for the fine-tune; pass --no-finetune")
        else:
            flags += [action.option_strings[0], str(value)]
    return flags


def family_protocol(loaded: LoadedModel,
                    schedule: finetuning.FinetuneProtocol) -> finetuning.FinetuneProtocol:
    """The fixed fine-tune's protocol for ``loaded``: its family's (:data:`FAMILY_FINETUNE`)
    with the schedule (first lr, epochs, batch, warm-up share) of ``schedule``; a recipe that
    takes the arch from its settings gets the checkpoint's arch, position table, model flags
    (:func:`checkpoint_model_flags`) and, by its ``--variant``, the attention its study
    fine-tunes it with. A one-line :class:`DiagnosisError` for a family it does not take."""
    from fairseq_ext.export.checkpoints import model_name

    family = FAMILY_FINETUNE.get(loaded.family)
    if family is None:
        raise DiagnosisError(f"{loaded.checkpoint} is a {type(loaded.model).__name__}: the fixed "
                             f"fine-tune takes checkpoints of {', '.join(FAMILY_FINETUNE)}; "
                             "pass --no-finetune")
    protocol = family.protocol
    env, flags = dict(protocol.env), tuple(protocol.extra_args)
    model_cfg, task_cfg = ((loaded.config or {}).get(part) or {} for part in ("model", "task"))
    if family.positions_env is not None:
        positions = model_cfg.get(family.positions_env.lower()) or task_cfg.get(
            "tokens_per_sample")
        env.update({"ARCH": model_name(model_cfg), family.positions_env: str(positions)})
        flags = tuple(checkpoint_model_flags(model_cfg))
    if family.attention_by_variant is not None:
        variant = task_cfg.get("variant")
        if variant not in family.attention_by_variant or task_cfg.get("n_bidir") is not None:
            raise DiagnosisError(f"{loaded.checkpoint} was not pre-trained with one of --variant "
                                 f"{', '.join(family.attention_by_variant)} and its own n_bidir "
                                 "(the fine-tune's R_BIDIR is the variant's, as in its study); "
                                 "pass --no-finetune")
        env["R_BIDIR"] = family.attention_by_variant[variant]
    return dataclasses.replace(
        protocol, arms=(), env=env, extra_args=flags, model_env_keys=(), model_args=False,
        lrs=schedule.lrs[:1], epochs=schedule.epochs, batch=schedule.batch,
        warmup_share=schedule.warmup_share)


def finetune_task(data_bin: Path, task: Optional[str] = None) -> str:
    """The recipe's ``TASK`` (its classes and metric): ``task``, else the data-bin's name without
    ``-bin`` (``FortuneTopic-bin``); one of the downstream suite's tasks or GLUE's."""
    from fairseq_ext.corpus import downstream, glue

    name = task or data_bin.name.removesuffix("-bin")
    known = {each.upper(): each for each in (*downstream.TASKS, *glue.TASKS)}
    if name.upper() not in known:
        raise DiagnosisError(f"the fine-tune's TASK {name!r} (--task, else the data-bin's name "
                             f"without -bin) is not one of {', '.join(known.values())}: pass "
                             "--task NAME, or --no-finetune")
    return known[name.upper()]


def run_finetunes(loaded: LoadedModel, data_bin: Path, task: str, settings: "DiagnosisSettings",
                  seed: int, work: Path, random_init: bool = False,
                  printer=print) -> Dict[str, dict]:
    """The fixed fine-tune of ``loaded``'s checkpoint (``random_init``: of its random-init draw
    ``seed``, :func:`with_random`'s) with fine-tuning seed ``seed``, once per pooling, through
    :func:`fairseq_ext_lab.finetuning.fine_tune_checkpoint` with ``settings.finetune`` (its
    family's protocol, :func:`family_protocol`; runs under ``work``): ``{pooling: {"train",
    "dev"}}``, the final model's accuracies (%)."""
    out = {}
    arm = "random" if random_init else "pretrained"
    rows = finetuning.split_rows(data_bin, "train")
    for pooling in settings.poolings:
        result = finetuning.fine_tune_checkpoint(
            settings.finetune, loaded.checkpoint, data_bin, task, seed, work / "exports",
            work / f"{arm}-{pooling}-seed{seed}",
            env={"POOLING": recipe_pooling(loaded.family, pooling)},
            random_init=seed if random_init else None, score=("train",))
        if result["train_rows"] != rows:
            raise DiagnosisError(f"fairseq-validate scored {result['train_rows']} of the "
                                 f"{rows} train rows of {data_bin}")
        out[pooling] = {"train": result["train_accuracy"], "dev": result["accuracy"]}
        printer(f"  fine-tune ({pooling} pooling, seed {seed}): train "
                f"{out[pooling]['train']:.1f}%, dev {out[pooling]['dev']:.1f}%")
    return out


# ----------------------------------------------------------------------------------------------
# Weights

def weight_norms(model) -> Dict[str, Dict[str, float]]:
    """Per block: the Frobenius norm of each linear weight (``self_attn.q_proj``, ``fc1``, ...)
    and the RMS gain of each LayerNorm; ``embeddings``: the token embedding's mean row norm and
    the embedding and final LayerNorms' RMS gains."""
    import torch

    out: Dict[str, Dict[str, float]] = {}
    for name, parameter in model.named_parameters():
        if not name.endswith("weight") or "classification_heads" in name:
            continue
        parts = name.split(".")
        if "layers" in parts:
            at = parts.index("layers")
            group, key = f"block {int(parts[at + 1]) + 1}", ".".join(parts[at + 2:-1])
        else:
            group, key = "embeddings", ".".join(parts[-2:-1]) or name
        with torch.no_grad():
            if parameter.dim() == 1:  # a LayerNorm gain
                value = float(parameter.float().pow(2).mean().sqrt())
                key = f"{key} (rms gain)"
            elif key.endswith("embed_tokens"):
                value = float(parameter.float().norm(dim=1).mean())
                key = f"{key} (mean row norm)"
            else:
                value = float(parameter.float().norm())
        out.setdefault(group, {})[key] = value
    return out


def frequent_piece_norm(model, split: Split, padding_idx: int, top: int = 100) -> float:
    """The mean norm of the token-embedding rows of the ``top`` commonest pieces of ``split``
    (specials left out): what the first block's input is made of, mostly."""
    import torch

    counts = np.bincount(np.concatenate(split.tokens))
    counts[: min(len(counts), 4)] = 0  # <s>, <pad>, </s>, <unk>
    ids = np.argsort(-counts)[:top]
    embedding = next(module for name, module in model.named_modules()
                     if name.endswith("embed_tokens"))
    with torch.no_grad():
        return float(embedding.weight[torch.from_numpy(ids)].float().norm(dim=1).mean())


# ----------------------------------------------------------------------------------------------
# The report

@dataclasses.dataclass(frozen=True)
class DiagnosisSettings:
    """``finetune``: the fixed fine-tune's schedule (first learning rate, epochs, batch, warm-up
    share; :func:`diagnose` puts it on the checkpoint family's protocol, :func:`family_protocol`,
    whose recipe the report records); ``task``: the recipe's ``TASK`` (None:
    :func:`finetune_task` reads it off the data-bin's name); ``max_rows``: the rows of each
    split the features and probes read (the fine-tune reads the whole data-bin, so it takes
    ``finetune_runs=False``)."""

    seeds: Tuple[int, ...] = (1, 2, 3)
    poolings: Tuple[str, ...] = POOLINGS
    finetune: finetuning.FinetuneProtocol = finetuning.DIAGNOSIS_PROTOCOL
    max_rows: Optional[int] = None
    finetune_runs: bool = True
    task: Optional[str] = None

    def problems(self) -> List[str]:
        """What is wrong with the settings, as one-line errors."""
        protocol = self.finetune
        problems = []
        if protocol.epochs < 1 or protocol.batch < 1 or finetuning.not_positive(protocol.lrs[:1]):
            problems.append(f"--epochs {protocol.epochs}, --batch {protocol.batch} and --lr "
                            f"{protocol.lrs[0]} must be positive")
        if self.max_rows is not None and self.finetune_runs:
            problems.append(f"--max-rows {self.max_rows} reads part of each split for the "
                            "features and probes, and the fine-tune reads the whole data-bin: "
                            "pass --no-finetune with it")
        return problems

    def as_json(self) -> dict:
        """The settings a report records: the fine-tune's protocol as its recipe and schedule."""
        out = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        protocol = self.finetune
        out["finetune"] = {"recipe": protocol.recipe, "lr": protocol.lrs[0],
                           "epochs": protocol.epochs, "batch": protocol.batch,
                           "warmup_share": protocol.warmup_share, "schedule": protocol.schedule}
        return out


def estimate_json(estimate: Estimate) -> dict:
    out = {"value": estimate.value, "se": estimate.standard_error}
    if estimate.degrees_of_freedom is not None:
        out["dof"] = estimate.degrees_of_freedom
    return out


def feature_report(features: LayerFeatures, train_features: LayerFeatures, train: Split,
                   dev: Split) -> List[dict]:
    """Per layer: norms, update norms, anisotropy, effective rank, attention entropy and the
    mean-pooled probe's dev accuracy (its correctness per row kept for pairing)."""
    rows = []
    previous = None
    for index, name in enumerate(features.names):
        tokens = features.tokens[index]
        groups = features.text_of_token
        row = {"layer": name,
               "norm": mean_over_groups(np.linalg.norm(tokens, axis=1), groups),
               "cosine": mean_pairwise_cosine(tokens, groups),
               "effective_rank": effective_rank(tokens, groups)}
        if previous is not None and name.startswith("block"):
            row["update_norm"] = mean_over_groups(np.linalg.norm(tokens - previous, axis=1),
                                                  groups)
        block = index - 1
        if name.startswith("block") and block < len(features.attention_entropy) \
                and len(features.attention_entropy[block]):
            row["attention_entropy"] = mean_over_groups(features.attention_entropy[block],
                                                        np.arange(len(dev.labels)))
            row["uniform_entropy"] = float(features.uniform_entropy.mean())
        row["_probe_correct"] = linear_probe(train_features.mean_pooled[index], train.labels,
                                             features.mean_pooled[index], dev.labels)
        row["probe_mean"] = accuracy_estimate(row["_probe_correct"])
        rows.append(row)
        previous = tokens if name.startswith(("embeddings", "block")) else previous
    return rows


def diagnose_model(loaded: LoadedModel, train: Split, dev: Split) -> dict:
    """Every figure of one model (the pre-trained one, or one random draw)."""
    dev_features = collect_features(loaded, dev)
    train_features = collect_features(loaded, train)
    head_correct = linear_probe(train_features.head_pooled, train.labels,
                                dev_features.head_pooled, dev.labels)
    return {"layers": feature_report(dev_features, train_features, train, dev),
            "_probe_head_correct": head_correct,
            "probe_head": accuracy_estimate(head_correct),
            "weights": weight_norms(loaded.model),
            "frequent_piece_norm": frequent_piece_norm(loaded.model, dev, loaded.padding_idx)}


def with_random(loaded: LoadedModel, seed: int) -> LoadedModel:
    """``loaded`` with the weights of its random control, draw ``seed``
    (:func:`fairseq_ext.export.random_init.fresh_weights`)."""
    from fairseq_ext.export.random_init import fresh_weights

    model = copy.deepcopy(loaded.model)
    model.load_state_dict(fresh_weights(loaded.checkpoint, seed))
    return dataclasses.replace(loaded, model=model.eval())


def diagnose(checkpoint: Path, data_bin: Path, settings: DiagnosisSettings = DiagnosisSettings(),
             printer=print) -> dict:
    """The whole report (module docstring) of ``checkpoint`` on ``data_bin``: the pre-trained
    model, its random control (the features of draw ``seeds[0]``; one draw per fine-tuning
    seed), the paired differences."""
    if settings.problems():
        raise DiagnosisError(settings.problems()[0])
    if settings.finetune_runs:
        settings = dataclasses.replace(settings, task=finetune_task(data_bin, settings.task))
    with tempfile.TemporaryDirectory() as work:
        loaded = load_model(checkpoint, Path(work))
        if settings.finetune_runs:  # the family's protocol, with the settings' schedule
            settings = dataclasses.replace(settings,
                                           finetune=family_protocol(loaded, settings.finetune))
        max_positions = int(loaded.model.max_positions() if callable(
            getattr(loaded.model, "max_positions", None)) else 512)
        train = read_split(data_bin, "train", max_positions, settings.max_rows)
        dev = read_split(data_bin, "valid", max_positions, settings.max_rows)
        printer(f"diagnosing {checkpoint} on {data_bin}: {len(train.labels)} train and "
                f"{len(dev.labels)} dev texts")
        pretrained = diagnose_model(loaded, train, dev)
        control = diagnose_model(with_random(loaded, settings.seeds[0]), train, dev)
        finetunes = {"pretrained": {}, "random": {}}
        if settings.finetune_runs:
            runs = Path(work) / "finetune"
            for seed in settings.seeds:
                printer(f"fine-tuning the pre-trained model, seed {seed}")
                finetunes["pretrained"][seed] = run_finetunes(
                    loaded, data_bin, settings.task, settings, seed, runs, printer=printer)
                printer(f"fine-tuning its random control, draw {seed}")
                finetunes["random"][seed] = run_finetunes(
                    loaded, data_bin, settings.task, settings, seed, runs, random_init=True,
                    printer=printer)
    majority = np.bincount(train.labels).argmax()
    return summarise(pretrained, control, finetunes, settings, {
        "checkpoint": str(checkpoint), "data": str(data_bin), "train_rows": len(train.labels),
        "dev_rows": len(dev.labels),
        "majority": estimate_json(accuracy_estimate(dev.labels == majority))})


def summarise(pretrained: dict, control: dict, finetunes: dict, settings: DiagnosisSettings,
              about: dict) -> dict:
    """The JSON report: every estimate as ``{"value", "se"}``, differences pretrained minus
    random, paired on the dev rows (probes) or on the seed (fine-tunes)."""
    def plain(row):
        return {key: estimate_json(value) if isinstance(value, Estimate) else value
                for key, value in row.items() if not key.startswith("_")}

    layers = []
    for mine, theirs in zip(pretrained["layers"], control["layers"]):
        layers.append({"layer": mine["layer"], "pretrained": plain(mine),
                       "random": plain(theirs),
                       "probe_mean_difference": estimate_json(paired_accuracy_difference(
                           mine["_probe_correct"], theirs["_probe_correct"]))})
    report = {
        **about, "settings": settings.as_json(), "layers": layers,
        "probe_head": {"pretrained": estimate_json(pretrained["probe_head"]),
                       "random": estimate_json(control["probe_head"]),
                       "difference": estimate_json(paired_accuracy_difference(
                           pretrained["_probe_head_correct"], control["_probe_head_correct"]))},
        "weights": {"pretrained": pretrained["weights"], "random": control["weights"]},
        "frequent_piece_norm": {"pretrained": pretrained["frequent_piece_norm"],
                                "random": control["frequent_piece_norm"]},
        "finetune": {}}
    seeds = sorted(finetunes["pretrained"])
    for pooling in settings.poolings if seeds else ():
        entry = {}
        for split in ("train", "dev"):
            mine = [finetunes["pretrained"][s][pooling][split] for s in seeds]
            theirs = [finetunes["random"][s][pooling][split] for s in seeds]
            entry[split] = {"pretrained": estimate_json(mean_over_seeds(mine)),
                            "random": estimate_json(mean_over_seeds(theirs)),
                            "difference": estimate_json(paired_over_seeds(mine, theirs)),
                            "per_seed": {"pretrained": mine, "random": theirs}}
        report["finetune"][pooling] = entry
    return report


def shown(entry: Optional[dict], digits: int = 2, signed: bool = False) -> str:
    if entry is None or entry.get("value") is None or not math.isfinite(entry["value"]):
        return "-"
    sign = "+" if signed else ""
    error = entry.get("se")
    text = f"{entry['value']:{sign}.{digits}f}"
    return text if error is None or not math.isfinite(error) else f"{text} ± {error:.{digits}f}"


def format_report(report: dict) -> str:
    """The report as text tables: per layer (pre-trained / random), the probes, the
    fine-tunes."""
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    lines = [f"transfer diagnosis of {report['checkpoint']} on {report['data']} "
             f"({report['train_rows']} train / {report['dev_rows']} dev texts); every figure "
             "pre-trained / random init (same architecture, fresh draw); ± 1 SE (features: "
             "jackknife over dev texts; probes: over dev rows, differences paired on them; "
             "fine-tunes: over seeds, differences paired on the seed)"]
    rows = []
    for layer in report["layers"]:
        p, r = layer["pretrained"], layer["random"]
        entropy = (f"{shown(p.get('attention_entropy'))} / {shown(r.get('attention_entropy'))}"
                   f" (uniform {p['uniform_entropy']:.2f})" if "attention_entropy" in p else "-")
        rows.append([layer["layer"], f"{shown(p['norm'])} / {shown(r['norm'])}",
                     f"{shown(p.get('update_norm'))} / {shown(r.get('update_norm'))}",
                     f"{shown(p['cosine'], 3)} / {shown(r['cosine'], 3)}",
                     f"{shown(p['effective_rank'], 1)} / {shown(r['effective_rank'], 1)}",
                     entropy,
                     f"{shown(p['probe_mean'], 1)} / {shown(r['probe_mean'], 1)}",
                     shown(layer["probe_mean_difference"], 1, signed=True)])
    lines.append(ascii_table(["layer", "feature norm", "block update norm", "mean cosine",
                              "effective rank", "attention entropy (bits)",
                              "mean-pooled probe %", "probe: pre-trained - random"], rows))
    probe = report["probe_head"]
    lines.append(f"frozen probe on the head's token: pre-trained {shown(probe['pretrained'], 1)}"
                 f"%, random {shown(probe['random'], 1)}%, difference "
                 f"{shown(probe['difference'], 1, signed=True)} points; majority class "
                 f"{shown(report['majority'], 1)}%")
    norms = report["frequent_piece_norm"]
    lines.append(f"token-embedding norm of the 100 commonest dev pieces: pre-trained "
                 f"{norms['pretrained']:.3f}, random {norms['random']:.3f}")
    if report["finetune"]:
        settings = report["settings"]["finetune"]
        rows = []
        for pooling, entry in report["finetune"].items():
            for split in ("train", "dev"):
                e = entry[split]
                rows.append([f"{pooling} pooling, {split}", shown(e["pretrained"], 1),
                             shown(e["random"], 1), shown(e["difference"], 1, signed=True)])
        recipe = f"{settings['recipe']}, " if "recipe" in settings else ""
        lines.append(f"fixed fine-tune ({recipe}{settings['epochs']} epochs of batch "
                     f"{settings['batch']}, lr {settings['lr']}, seeds "
                     f"{list(report['settings']['seeds'])}): accuracy %")
        lines.append(ascii_table(["head", "pre-trained", "random init",
                                  "pre-trained - random, paired"], rows))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json

    from fairseq_ext.training.output_files import OutputError, error_line, write_text

    protocol = finetuning.DIAGNOSIS_PROTOCOL
    parser = argparse.ArgumentParser(
        prog="diagnose_transfer.py",
        description="Why a pre-trained checkpoint does or does not transfer: per-layer "
                    "anisotropy, effective rank, attention entropy and frozen probes, and a "
                    "fixed fine-tune, beside the same architecture at random initialisation "
                    "(docs/transfer.md). The fine-tune is the demo's and the studies' path: the "
                    "checkpoint family's recipe, as its study fine-tunes it (RoBERTa and 3ML: "
                    f"{protocol.recipe}; BERT-orig, BERT-rab and SwishRNN-BERT: "
                    f"{SWISHRNN_FINETUNE.recipe}; bidirectional_lm: "
                    f"{BIDIRECTIONAL_FINETUNE.recipe}) through fairseq_ext_lab.finetuning, with "
                    f"the schedule lr {protocol.lrs[0]}, {protocol.epochs} epochs of batch "
                    f"{protocol.batch} and {protocol.warmup_share:.0%} warm-up unless told; train "
                    "accuracy by fairseq-validate of the final model.")
    parser.add_argument("checkpoint", type=Path, help="a checkpoint of RoBERTa, 3ML (its "
                        "encoder exported first, as fine-tuning reads it), BERT-orig, BERT-rab, "
                        "SwishRNN-BERT or bidirectional_lm")
    parser.add_argument("data", type=Path, help="a sentence_prediction data-bin (input0/, "
                        "label/), e.g. data-bin/python-docs-spm8000-downstream/FortuneTopic-bin")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                        help="fine-tuning seeds, each with its own random-init draw")
    parser.add_argument("--pooling", nargs="+", choices=POOLINGS, default=list(POOLINGS),
                        help="the fine-tuned head's input: the token the family's head reads "
                             "(the recipe's POOLING=first for an encoder, last for "
                             "bidirectional_lm), and/or the mean over tokens (POOLING=mean)")
    parser.add_argument("--epochs", type=int, default=protocol.epochs,
                        help="passes over the training split (the recipe's TOTAL_UPDATES)")
    parser.add_argument("--lr", default=protocol.lrs[0], help="the recipe's LR")
    parser.add_argument("--batch", type=int, default=protocol.batch,
                        help="the recipe's BATCH_SIZE (BATCH)")
    parser.add_argument("--task", default=None,
                        help="the recipe's TASK (its classes and metric); default: DATA's name "
                             "without -bin, e.g. FortuneTopic")
    parser.add_argument("--no-finetune", action="store_true", help="features and probes only")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="read at most this many rows of each split (with --no-finetune)")
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON")
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    args = parser.parse_args(argv)
    settings = DiagnosisSettings(
        seeds=tuple(args.seeds), poolings=tuple(args.pooling), max_rows=args.max_rows,
        finetune=dataclasses.replace(protocol, lrs=(args.lr,), epochs=args.epochs,
                                     batch=args.batch),
        finetune_runs=not args.no_finetune, task=args.task)
    for problem in settings.problems():
        parser.error(problem)
    if not (args.data / "input0").is_dir() or not (args.data / "label").is_dir():
        parser.error(f"{args.data} is not a sentence_prediction data-bin (no input0/ and "
                     "label/): build one with scripts/prepare_downstream.sh or "
                     "scripts/prepare_glue.sh")
    if args.out is not None and args.out.exists() and not args.force:
        parser.error(f"--out {args.out} exists; choose another path or pass --force")
    if settings.finetune_runs:
        try:
            finetune_task(args.data, args.task)
        except DiagnosisError as error:
            parser.error(str(error))
    try:
        report = diagnose(args.checkpoint, args.data, settings)
    except Exception as error:  # the checkpoint or the data-bin: one line, not a traceback
        from fairseq_ext.export.checkpoints import ExportError

        if isinstance(error, (ExportError, OutputError, FileNotFoundError, DiagnosisError)):
            print(error_line("diagnose_transfer.py", error))
            return 2
        raise
    print(format_report(report))
    if args.out is not None:
        write_text(args.out, json.dumps(report, indent=2), force=args.force)
        print(f"report: {args.out}")
    return 0
