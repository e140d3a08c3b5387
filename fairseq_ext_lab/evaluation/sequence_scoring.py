"""Scoring token sequences with a ``bidirectional_lm`` checkpoint (Artetxe et al. 2022, §3.2): the
building blocks of full-sequence infilling (Table 6, :mod:`.infill_rescore`) and zero-shot multiple
choice (Tables 7-8, :mod:`.multiple_choice`).

**Loading** (:func:`load_scoring_model`): the checkpoint's task is rebuilt from its saved config
with ``data`` pointed at the data-bin to score (its ``dict.txt``, plus the ``<mask>`` the task
adds, is the model's dictionary), the model built and its weights loaded, in eval mode. A file
that cannot be read is one line (:mod:`fairseq_ext.training.checkpoint_loading`); so is a checkpoint of
another task, or one whose embedding does not match the data-bin's dictionary. What the checkpoint
was trained on comes from its saved task config
(:meth:`~fairseq_ext.data.bidirectional_sampling.ObjectiveSampler.trained_capabilities`), and
:func:`require_capability` refuses, naming the option, a checkpoint never trained on next tokens
for full-sequence scoring (``msk_*``, footnote 5) and one never trained on ``<mask>`` tokens for
direct infilling (``nxt_*``).

**Full-sequence log-likelihood** (:func:`token_log_probs`, :func:`sequence_log_likelihoods`): a
sequence ``x_0 .. x_{n-1}`` (a document, ending with its ``</s>``) is scored causally
(``n_bidir = 0``, nothing masked, positions ``0 .. n-1``), as a document of its own:
``log p(x) = sum_{t=0}^{n-2} log p(x_{t+1} | x_<=t)``. As in training and in ``--eval-mode
full_doc_ppl``, the first token has no predecessor inside its document and is never scored. The
sequences of a call are right-padded into batches (``batch_size`` sequences each; one forward per
batch), and the output projection runs on the scored positions only, a few thousand rows at a
time, so memory stays bounded with large vocabularies.

**Direct infilling** (:func:`infill_logits`): the token at ``position`` becomes ``<mask>`` and
moves to the end of its document with its position (Figure 3, exactly as ``--eval-mode infill``
arranges it: :func:`~fairseq_ext.data.bidirectional_lm_dataset.arrange_document`), with
``n_bidir = round(R x n)`` (:func:`~fairseq_ext.data.bidirectional_eval_dataset.infill_layout`);
the result is the model's logits ``(V,)`` at that ``<mask>`` slot, one row per document.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Sequence

import numpy as np
import torch

#: Rows of the output projection computed at a time (bounds the logits' memory). Measured on 2
#: CPU threads over 4,064 rows: 1,024 runs the 8,002-piece vocabulary 2.2x faster than 4,096
#: (46 against 102 ms; the 131 MB logits of 4,096 rows are fresh pages from the allocator at
#: every call, 63K page faults) and the 50,265-piece one as fast (1.32 against 1.31 s); fewer
#: rows starve the matmul at the larger vocabulary (256: 1.58 s).
LOGIT_ROWS_PER_CHUNK = 1024
MASK_SYMBOL = "<mask>"


class ScoringError(ValueError):
    """Input or a checkpoint that cannot be scored; the message names the option and the fix."""


def dictionary_fingerprint(dictionary) -> str:
    """sha256 of the dictionary's symbols in index order (one per line): equal fingerprints mean
    equal token ids."""
    return hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()


def checkpoint_capabilities(task_cfg) -> FrozenSet[str]:
    """``"next"`` / ``"mask"`` / ``"bidir"``: what a checkpoint with saved task config
    ``task_cfg`` was trained on (Table 1 plus its ``--n-*`` overrides)."""
    from fairseq_ext.data.bidirectional_sampling import ObjectiveSampler

    return ObjectiveSampler.from_task_config(task_cfg).trained_capabilities()


@dataclass
class ScoringModel:
    """A ``bidirectional_lm`` checkpoint loaded for inference, and what it was trained on."""

    path: str
    flag: str  # the option that named it (--path, --proposer, --scorer), for messages
    model: torch.nn.Module
    task: object
    variant: str
    trained: FrozenSet[str]
    device: torch.device

    @property
    def dictionary(self):
        return self.task.source_dictionary

    @property
    def pad(self) -> int:
        return self.dictionary.pad()

    @property
    def eos(self) -> int:
        return self.dictionary.eos()

    @property
    def mask_idx(self) -> int:
        return self.task.mask_idx

    @property
    def special_ids(self) -> List[int]:
        """Ids never proposed nor predicted by infilling (the task's special tokens)."""
        return list(self.task.special_token_ids())

    @property
    def max_positions(self) -> int:
        return int(self.model.decoder.max_positions())

    @property
    def fingerprint(self) -> str:
        return dictionary_fingerprint(self.dictionary)

    def describe(self) -> str:
        return f"{self.flag} {self.path} (--variant {self.variant})"


def pick_device(cpu: bool = False) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() and not cpu else "cpu")


def load_scoring_model(path, data, flag: str = "--path", device: Optional[torch.device] = None,
                       arg_overrides: Optional[dict] = None) -> ScoringModel:
    """Load the ``bidirectional_lm`` checkpoint ``path`` for scoring the data-bin ``data``
    (module docstring). Errors are :class:`ScoringError` s naming ``flag``."""
    from fairseq import tasks

    from fairseq_ext.training.checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu

    overrides = {"data": str(data), **(arg_overrides or {})}
    try:
        state = load_checkpoint_to_cpu(str(path), overrides)
    except CheckpointLoadError as error:
        raise ScoringError(f"{flag}: {error}") from None
    cfg = state.get("cfg")
    if cfg is None and state.get("args") is not None:
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        cfg = convert_namespace_to_omegaconf(state["args"])
    task_name = None if cfg is None else cfg.task.get("_name")
    if task_name != "bidirectional_lm":
        raise ScoringError(f"{flag} {path}: a checkpoint of --task {task_name}, not "
                           "bidirectional_lm; these scripts score bidirectional_lm checkpoints")
    try:
        trained = checkpoint_capabilities(cfg.task)
        task = tasks.setup_task(cfg.task, from_checkpoint=True)
    except (ValueError, FileNotFoundError) as error:
        raise ScoringError(f"{flag} {path}: {error}") from None
    model = task.build_model(cfg.model)
    try:
        model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    except RuntimeError as error:
        shape = state["model"].get("decoder.embed_tokens.weight")
        trained_symbols = "?" if shape is None else shape.shape[0]
        raise ScoringError(
            f"{flag} {path}: its weights do not fit the dictionary of {data} "
            f"({len(task.source_dictionary)} symbols with <mask>; the checkpoint has "
            f"{trained_symbols}): score it on the data-bin it was trained with "
            f"({type(error).__name__}: {str(error).splitlines()[0]})") from None
    device = device or torch.device("cpu")
    model = model.to(device).eval()
    return ScoringModel(path=str(path), flag=flag, model=model, task=task,
                        variant=str(cfg.task.variant), trained=trained, device=device)


def require_capability(scoring: ScoringModel, capability: str, use: str, instead: str) -> None:
    """Refuse ``use`` (e.g. "full-sequence scoring") on a checkpoint never trained for it;
    ``instead`` says what to do (a sentence)."""
    if capability in scoring.trained:
        return
    what = {"next": "to predict next tokens (the msk_* variants are not, footnote 5)",
            "mask": "on <mask> tokens (the nxt_* variants are not)"}[capability]
    raise ScoringError(f"{scoring.describe()}: this checkpoint was never trained {what}, so it "
                       f"cannot serve {use}; {instead}")


# --- full-sequence log-likelihood ------------------------------------------------------------

def causal_batch(sequences: Sequence[Sequence[int]], pad_idx: int, device: torch.device):
    """``(tokens, positions, doc_ids, bidir_lens)`` ``(B, T)`` of one document per row, attended
    causally (``n_bidir = 0``), right-padded (padding: document ``-1``): the model's own
    :func:`~fairseq_ext.modules.bidirectional_attention_mask.causal_layout`, given explicitly so
    that a checkpoint's ``--r-bidir`` cannot change it."""
    from fairseq.data import data_utils

    from fairseq_ext.modules.bidirectional_attention_mask import causal_layout

    tokens = data_utils.collate_tokens(
        [torch.as_tensor(np.asarray(seq, dtype=np.int64)) for seq in sequences], pad_idx)
    return tuple(t.to(device) for t in (tokens, *causal_layout(tokens, pad_idx)))


def check_lengths(scoring: ScoringModel, sequences, minimum: int, what: str) -> None:
    for index, seq in enumerate(sequences):
        if len(seq) < minimum:
            raise ScoringError(f"{what} {index} has {len(seq)} tokens; it needs at least {minimum}")
        if len(seq) > scoring.max_positions:
            raise ScoringError(f"{what} {index} has {len(seq)} tokens, more than the "
                               f"{scoring.max_positions} positions of {scoring.describe()}")


@torch.no_grad()
def output_log_probs_at(scoring: ScoringModel, features: torch.Tensor,
                        targets: torch.Tensor) -> torch.Tensor:
    """``log p(target)`` (float32, ``(N,)``) from decoder ``features`` ``(N, C)``: the output
    projection and log-softmax a chunk of rows at a time."""
    out = []
    for start in range(0, features.size(0), LOGIT_ROWS_PER_CHUNK):
        logits = scoring.model.decoder.output_layer(features[start:start + LOGIT_ROWS_PER_CHUNK])
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        out.append(log_probs.gather(1, targets[start:start + LOGIT_ROWS_PER_CHUNK, None])[:, 0])
    return torch.cat(out) if out else features.new_zeros(0, dtype=torch.float32)


@torch.no_grad()
def token_log_probs(scoring: ScoringModel, sequences: Sequence[Sequence[int]],
                    batch_size: Optional[int] = None) -> List[np.ndarray]:
    """Per sequence, ``lp[t] = log p(x_{t+1} | x_<=t)`` for ``t = 0 .. n-2`` (float64 arrays of
    ``n - 1``), scored causally as a document of its own (module docstring); ``batch_size``
    sequences per forward (default: all in one)."""
    sequences = [list(map(int, seq)) for seq in sequences]
    if not sequences:
        return []
    check_lengths(scoring, sequences, 1, "sequence")
    step = batch_size or len(sequences)
    results: List[np.ndarray] = []
    for start in range(0, len(sequences), step):
        chunk = sequences[start:start + step]
        tokens, positions, doc_ids, bidir_lens = causal_batch(chunk, scoring.pad, scoring.device)
        lengths = torch.tensor([len(seq) for seq in chunk], device=scoring.device)
        columns = torch.arange(tokens.size(1), device=scoring.device)
        scored = columns[None, :] < (lengths[:, None] - 1)  # positions with a next token
        features, _ = scoring.model(tokens, src_positions=positions, doc_ids=doc_ids,
                                    bidir_lens=bidir_lens, features_only=True,
                                    masked_tokens=scored)
        next_tokens = torch.roll(tokens, shifts=-1, dims=1)[scored]
        flat = output_log_probs_at(scoring, features, next_tokens).double().cpu().numpy()
        offset = 0
        for seq in chunk:
            results.append(flat[offset:offset + len(seq) - 1])
            offset += len(seq) - 1
    return results


def sequence_log_likelihoods(scoring: ScoringModel, sequences: Sequence[Sequence[int]],
                             batch_size: Optional[int] = None) -> List[float]:
    """Full-sequence log-likelihood ``sum_t log p(x_{t+1} | x_<=t)`` of each sequence (nats)."""
    return [float(lp.sum()) for lp in token_log_probs(scoring, sequences, batch_size)]


# --- direct infilling ---------------------------------------------------------------------------

def infill_item(tokens: Sequence[int], position: int, r_bidir: float, mask_idx: int,
                pad_idx: int):
    """One document with ``position`` masked and moved to the end (Figure 3), ``n_bidir =
    round(R x n)``: the item ``--eval-mode infill`` makes of it
    (:func:`~fairseq_ext.data.bidirectional_eval_dataset.layout_item`)."""
    from fairseq_ext.data.bidirectional_eval_dataset import infill_layout, layout_item

    tokens = np.asarray(tokens, dtype=np.int64)
    return layout_item(tokens, infill_layout(len(tokens), int(position), r_bidir), mask_idx,
                       pad_idx)


@torch.no_grad()
def infill_logits(scoring: ScoringModel, documents: Sequence[Sequence[int]],
                  positions: Sequence[int], r_bidir: float,
                  batch_size: Optional[int] = None) -> torch.Tensor:
    """Logits ``(len(documents), V)`` (float32, CPU) at the ``<mask>`` slot of each document
    with ``positions[i]`` masked, ``n_bidir = round(R x n)`` (module docstring)."""
    documents = [list(map(int, doc)) for doc in documents]
    if len(documents) != len(positions):
        raise ValueError("one position per document")
    if not documents:
        return torch.zeros(0, len(scoring.dictionary))
    check_lengths(scoring, documents, 1, "document")
    for index, (doc, position) in enumerate(zip(documents, positions)):
        if not 0 <= position < len(doc):
            raise ScoringError(f"document {index}: position {position} outside its {len(doc)} tokens")
        if scoring.mask_idx in doc:
            raise ScoringError(f"document {index} contains {MASK_SYMBOL} itself")
    from fairseq_ext.data.bidirectional_lm_dataset import collate_rows

    step = batch_size or len(documents)
    out = []
    for start in range(0, len(documents), step):
        items = [dict(infill_item(doc, pos, r_bidir, scoring.mask_idx, scoring.pad), id=start + i)
                 for i, (doc, pos) in enumerate(zip(documents[start:start + step],
                                                    positions[start:start + step]))]
        net_input = {key: value.to(scoring.device)
                     for key, value in collate_rows(items, scoring.pad)["net_input"].items()}
        lengths = net_input["src_lengths"]
        columns = torch.arange(net_input["src_tokens"].size(1), device=scoring.device)
        slot = columns[None, :] == (lengths[:, None] - 1)  # the <mask>, moved to the end
        logits, _ = scoring.model(**net_input, masked_tokens=slot)
        out.append(logits.float().cpu())
    return torch.cat(out)
