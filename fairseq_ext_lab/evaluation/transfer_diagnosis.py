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
* the **train and dev accuracy after a fixed fine-tune** (:class:`FinetuneSettings`: the whole
  model and a RoBERTa-style head, AdamW, linear warmup and decay), per seed, with the head on
  the first/last token or on the mean over tokens;
* the **weights**: each block's matrices' Frobenius norms and LayerNorm gains (RMS), the token
  embedding's row norms (all rows, and the most frequent pieces of the dev texts).

Every figure carries ± one standard error: the feature statistics over dev texts (the
jackknife, leaving one text out: the tokens of a text are not independent), the probes'
accuracy the binomial error over dev rows and their differences to the control paired over the
same rows, the fine-tunes' mean over seeds with the error over seeds and the difference paired
on the seed (the same batches, head draw and dropout draws for both). The majority class of the
training labels is printed beside the accuracies.

A collapsed model (the failure this tool was built to see, issue 55) shows a near-constant
residual stream: mean cosine near 1 and effective rank near 1 from some block on, a block
update far larger than the embedding, probes at the majority class, and a fine-tune that does
not fit its training set.

May import: see :mod:`fairseq_ext_lab.evaluation` (and :mod:`fairseq_ext.export`: the 3ML export
and the random control).
"""
import copy
import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_ext.reporting.uncertainty import (
    Estimate,
    binomial_standard_error,
    mean_over_seeds,
    paired_over_seeds,
)

#: Pooling of the fine-tuned head and of the probes: the token the family's classification
#: head reads (``<s>`` for encoders, the last real token for left-to-right LMs), or the mean
#: over the real tokens.
POOLINGS = ("head", "mean")


# ----------------------------------------------------------------------------------------------
# Statistics (pure numpy; each one checked against a hand computation in the tests)

def jackknife(statistic_without, groups: int, full: float) -> Estimate:
    """The leave-one-group-out jackknife: ``statistic_without(g)`` is the statistic with group
    ``g`` left out; SE ``sqrt((G - 1) / G * sum (theta_g - mean theta)^2)``."""
    if groups < 2:
        return Estimate(full, math.nan)
    values = np.array([statistic_without(g) for g in range(groups)], dtype=np.float64)
    spread = np.sum((values - values.mean()) ** 2)
    return Estimate(float(full), float(math.sqrt((groups - 1) / groups * spread)))


def _group_index(groups: np.ndarray) -> Tuple[np.ndarray, int]:
    _, index = np.unique(groups, return_inverse=True)
    return index, int(index.max()) + 1 if len(index) else 0


def mean_pairwise_cosine(vectors: np.ndarray, groups: np.ndarray) -> Estimate:
    """The mean cosine over all pairs ``i != j`` of the rows of ``vectors`` ``(N, C)``,
    ``(||sum u||^2 - N) / (N (N - 1))`` with ``u`` the unit rows, ± the jackknife over
    ``groups`` (a group id per row: the text it comes from). Zero rows count as cosine 0."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    units = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    index, count = _group_index(np.asarray(groups))
    sums = np.zeros((count, vectors.shape[1]))
    np.add.at(sums, index, units)
    sizes = np.bincount(index, minlength=count).astype(np.float64)
    squares = np.bincount(index, weights=np.sum(units * units, axis=1), minlength=count)
    total, n, total_sq = sums.sum(0), sizes.sum(), squares.sum()

    def value(vector_sum, rows, square_sum):
        return float((vector_sum @ vector_sum - square_sum) / (rows * (rows - 1)))

    return jackknife(lambda g: value(total - sums[g], n - sizes[g], total_sq - squares[g]),
                     count, value(total, n, total_sq))


def effective_rank_of_gram(gram: np.ndarray) -> float:
    """``exp(-sum p log p)``, ``p`` the singular values of ``X`` normalised to sum 1, from the
    Gram matrix ``X^T X`` (its eigenvalues are the squared singular values)."""
    eigenvalues = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    singular = np.sqrt(eigenvalues)
    total = singular.sum()
    if total <= 0:
        return 0.0
    p = singular[singular > 0] / total
    return float(math.exp(-np.sum(p * np.log(p))))


#: The jackknife of the effective rank leaves out one of at most this many blocks of
#: consecutive groups (a delete-a-block jackknife): one ``C x C`` Gram matrix per block.
RANK_JACKKNIFE_BLOCKS = 100


def effective_rank(vectors: np.ndarray, groups: np.ndarray) -> Estimate:
    """The effective rank (Roy & Vetterli 2007) of ``vectors`` ``(N, C)`` as they are (not
    centred: a shared direction is what a collapse adds), ± the jackknife over ``groups``
    (over blocks of consecutive groups when there are more than
    :data:`RANK_JACKKNIFE_BLOCKS`)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    index, count = _group_index(np.asarray(groups))
    if count > RANK_JACKKNIFE_BLOCKS:
        index, count = index * RANK_JACKKNIFE_BLOCKS // count, RANK_JACKKNIFE_BLOCKS
    grams = np.zeros((count, vectors.shape[1], vectors.shape[1]))
    for g in range(count):
        rows = vectors[index == g]
        grams[g] = rows.T @ rows
    total = grams.sum(0)
    return jackknife(lambda g: effective_rank_of_gram(total - grams[g]), count,
                     effective_rank_of_gram(total))


def mean_over_groups(values: np.ndarray, groups: np.ndarray) -> Estimate:
    """The mean of per-row ``values`` (all rows weighted alike), ± the jackknife over
    ``groups``."""
    values = np.asarray(values, dtype=np.float64)
    index, count = _group_index(np.asarray(groups))
    sums = np.bincount(index, weights=values, minlength=count)
    sizes = np.bincount(index, minlength=count).astype(np.float64)
    return jackknife(lambda g: (sums.sum() - sums[g]) / (sizes.sum() - sizes[g]), count,
                     float(sums.sum() / sizes.sum()))


def attention_entropy_bits(weights: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """Per text, the attention entropy ``-sum_k p log2 p`` averaged over heads and the text's
    real query positions. ``weights`` ``(H, B, T, T)`` (fairseq's ``need_head_weights``), the
    first ``lengths[b]`` positions of row ``b`` real (right padding)."""
    out = np.zeros(len(lengths))
    for b, length in enumerate(lengths):
        p = np.asarray(weights[:, b, :length, :length], dtype=np.float64)
        logs = np.log2(np.where(p > 0, p, 1.0))
        out[b] = float(np.mean(-np.sum(p * logs, axis=-1)))
    return out


def accuracy_estimate(correct: np.ndarray) -> Estimate:
    """Accuracy (%) of 0/1 ``correct`` ± the binomial error over rows."""
    correct = np.asarray(correct, dtype=np.float64)
    return Estimate(100.0 * correct.mean(), 100.0 * binomial_standard_error(correct.sum(),
                                                                            len(correct)))


def paired_accuracy_difference(correct_a: np.ndarray, correct_b: np.ndarray) -> Estimate:
    """``acc_a - acc_b`` (points) on the same rows, ± ``sd(c_a - c_b) / sqrt(N)``."""
    d = np.asarray(correct_a, dtype=np.float64) - np.asarray(correct_b, dtype=np.float64)
    error = float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return Estimate(100.0 * float(d.mean()), 100.0 * error)


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray,
                 dev_y: np.ndarray) -> np.ndarray:
    """A frozen linear probe: logistic regression (scikit-learn, C = 1) on features
    standardised with the training rows' mean and SD; returns the 0/1 correctness per dev row.
    Features without variance on train are dropped (a collapsed layer probes at the majority)."""
    from sklearn.linear_model import LogisticRegression

    train_x, dev_x = np.asarray(train_x, np.float64), np.asarray(dev_x, np.float64)
    mean, sd = train_x.mean(0), train_x.std(0)
    # a feature varies only if it does beyond float32 rounding (a collapsed float32 layer still
    # differs in its last bits, which a standardised probe would fit)
    keep = sd > 1e-5 * np.maximum(1.0, np.abs(mean))
    if not keep.any() or len(set(np.asarray(train_y).tolist())) < 2:
        majority = np.bincount(np.asarray(train_y)).argmax()
        return (np.asarray(dev_y) == majority).astype(np.float64)
    scale = lambda x: (x[:, keep] - mean[keep]) / sd[keep]  # noqa: E731
    probe = LogisticRegression(C=1.0, max_iter=2000)
    probe.fit(scale(train_x), train_y)
    return (probe.predict(scale(dev_x)) == np.asarray(dev_y)).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# The model and the data

@dataclasses.dataclass
class LoadedModel:
    """A fairseq model for the diagnosis and what it reads: ``head_reads_last`` for a
    left-to-right LM (its head reads the last real token)."""

    model: object
    checkpoint: Path
    head_reads_last: bool
    padding_idx: int


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
    arch = model_name(plain_config(state["cfg"]).get("model") or {})
    if ARCH_MODEL_REGISTRY.get(arch) in {MODEL_REGISTRY[m] for m in THREE_ML_MODELS}:
        exported = work_dir / "encoder.pt"
        torch.save(export(state, checkpoint), exported)
        checkpoint = exported
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model = models[0].eval()
    return LoadedModel(model, checkpoint, isinstance(model, FairseqLanguageModel),
                       task.source_dictionary.pad())


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


def batches(split: Split, size: int, padding_idx: int, order: Optional[np.ndarray] = None):
    """``(tokens (B, T) long, lengths, row indices)`` batches, right-padded."""
    import torch

    order = np.arange(len(split.tokens)) if order is None else order
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
# The fixed fine-tune

@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """The diagnosis's fine-tune: every weight and a RoBERTa-style head (dropout, dense, tanh,
    dropout, output) on the pooled features; AdamW (0.9, 0.98), eps 1e-6, weight decay 0.1,
    ``warmup`` of the updates linear, then linear decay to 0; ``dropout`` in the model's
    residual and attention dropout (the recipes' 0.1)."""

    lr: float = 1e-3
    epochs: int = 5
    batch: int = 16
    warmup: float = 0.06
    dropout: float = 0.1
    weight_decay: float = 0.1


def set_dropout(model, p: float) -> None:
    """The model's residual and attention dropout (fairseq's ``dropout_module``s) to ``p``."""
    for name, module in model.named_modules():
        if name.endswith("dropout_module") and not name.endswith("activation_dropout_module"):
            module.p = p


def fine_tune(loaded: LoadedModel, train: Split, dev: Split, pooling: str, seed: int,
              settings: FinetuneSettings) -> Tuple[np.ndarray, np.ndarray]:
    """Fine-tune a copy of ``loaded.model`` on ``train``; returns the 0/1 correctness of the
    final model (eval mode) on every train row and every dev row. ``seed`` draws the head, the
    batch order and the dropout."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    model = copy.deepcopy(loaded.model)
    set_dropout(model, settings.dropout)
    classes = int(max(train.labels.max(), dev.labels.max())) + 1
    dim = int(forward_features(model.eval(), next(batches(train, 1, loaded.padding_idx))[0])[0]
              .size(-1))
    head = nn.Sequential(nn.Dropout(settings.dropout), nn.Linear(dim, dim), nn.Tanh(),
                         nn.Dropout(settings.dropout), nn.Linear(dim, classes))
    parameters = list(model.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=settings.lr, betas=(0.9, 0.98), eps=1e-6,
                                  weight_decay=settings.weight_decay)
    per_epoch = math.ceil(len(train.tokens) / settings.batch)
    total = settings.epochs * per_epoch
    warmup = max(1, int(total * settings.warmup + 0.5))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        (step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))))
    generator = np.random.default_rng(seed)
    labels = torch.from_numpy(train.labels)

    def logits(tokens):
        features, _ = forward_features(model, tokens)
        return head(pooled(features, tokens, loaded.padding_idx, pooling,
                           loaded.head_reads_last))

    for _ in range(settings.epochs):
        model.train()
        head.train()
        order = generator.permutation(len(train.tokens))
        for tokens, _, rows in batches(train, settings.batch, loaded.padding_idx, order):
            loss = nn.functional.cross_entropy(logits(tokens), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    head.eval()

    def correct(split: Split) -> np.ndarray:
        out = np.zeros(len(split.tokens))
        with torch.no_grad():
            for tokens, _, rows in batches(split, 64, loaded.padding_idx):
                out[rows] = (logits(tokens).argmax(-1).numpy() == split.labels[rows])
        return out

    return correct(train), correct(dev)


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
    seeds: Tuple[int, ...] = (1, 2, 3)
    poolings: Tuple[str, ...] = POOLINGS
    finetune: FinetuneSettings = FinetuneSettings()
    max_rows: Optional[int] = None
    finetune_runs: bool = True


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


def run_finetunes(loaded: LoadedModel, train: Split, dev: Split, settings: DiagnosisSettings,
                  seed: int, printer=print) -> Dict[str, dict]:
    out = {}
    for pooling in settings.poolings:
        train_correct, dev_correct = fine_tune(loaded, train, dev, pooling, seed,
                                               settings.finetune)
        out[pooling] = {"train": 100.0 * train_correct.mean(), "dev": 100.0 * dev_correct.mean()}
        printer(f"  fine-tune ({pooling} pooling, seed {seed}): train "
                f"{out[pooling]['train']:.1f}%, dev {out[pooling]['dev']:.1f}%")
    return out


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
    with tempfile.TemporaryDirectory() as work:
        loaded = load_model(checkpoint, Path(work))
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
            for seed in settings.seeds:
                printer(f"fine-tuning the pre-trained model, seed {seed}")
                finetunes["pretrained"][seed] = run_finetunes(loaded, train, dev, settings,
                                                              seed, printer)
                printer(f"fine-tuning its random control, draw {seed}")
                finetunes["random"][seed] = run_finetunes(with_random(loaded, seed), train, dev,
                                                          settings, seed, printer)
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
        **about, "settings": dataclasses.asdict(settings), "layers": layers,
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
        lines.append(f"fixed fine-tune ({settings['epochs']} epochs of batch {settings['batch']}"
                     f", lr {settings['lr']:g}, seeds {report['settings']['seeds']}): accuracy %")
        lines.append(ascii_table(["head", "pre-trained", "random init",
                                  "pre-trained - random, paired"], rows))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json

    from fairseq_ext.training.output_files import OutputError, error_line, write_text

    parser = argparse.ArgumentParser(
        prog="diagnose_transfer.py",
        description="Why a pre-trained checkpoint does or does not transfer: per-layer "
                    "anisotropy, effective rank, attention entropy and frozen probes, and a "
                    "fixed fine-tune, beside the same architecture at random initialisation "
                    "(docs/transfer.md).")
    parser.add_argument("checkpoint", type=Path, help="a checkpoint of any family (a 3ML "
                        "checkpoint is exported first, as fine-tuning reads it)")
    parser.add_argument("data", type=Path, help="a sentence_prediction data-bin (input0/, "
                        "label/), e.g. data-bin/python-docs-spm8000-downstream/FortuneTopic-bin")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                        help="fine-tuning seeds, each with its own random-init draw")
    parser.add_argument("--pooling", nargs="+", choices=POOLINGS, default=list(POOLINGS),
                        help="the fine-tuned head's input: the token the family's head reads, "
                             "and/or the mean over tokens")
    parser.add_argument("--epochs", type=int, default=FinetuneSettings.epochs)
    parser.add_argument("--lr", type=float, default=FinetuneSettings.lr)
    parser.add_argument("--batch", type=int, default=FinetuneSettings.batch)
    parser.add_argument("--no-finetune", action="store_true", help="features and probes only")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="read at most this many rows of each split")
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON")
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or not args.lr > 0:
        parser.error(f"--epochs {args.epochs}, --batch {args.batch} and --lr {args.lr} must be "
                     "positive")
    if not (args.data / "input0").is_dir() or not (args.data / "label").is_dir():
        parser.error(f"{args.data} is not a sentence_prediction data-bin (no input0/ and "
                     "label/): build one with scripts/prepare_downstream.sh or "
                     "scripts/prepare_glue.sh")
    if args.out is not None and args.out.exists() and not args.force:
        parser.error(f"--out {args.out} exists; choose another path or pass --force")
    settings = DiagnosisSettings(
        seeds=tuple(args.seeds), poolings=tuple(args.pooling), max_rows=args.max_rows,
        finetune=FinetuneSettings(lr=args.lr, epochs=args.epochs, batch=args.batch),
        finetune_runs=not args.no_finetune)
    try:
        report = diagnose(args.checkpoint, args.data, settings)
    except Exception as error:  # the checkpoint or the data-bin: one line, not a traceback
        from fairseq_ext.export.checkpoints import ExportError

        if isinstance(error, (ExportError, OutputError, FileNotFoundError)):
            print(error_line("diagnose_transfer.py", error))
            return 2
        raise
    print(format_report(report))
    if args.out is not None:
        write_text(args.out, json.dumps(report, indent=2), force=args.force)
        print(f"report: {args.out}")
    return 0
