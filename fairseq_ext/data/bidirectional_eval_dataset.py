"""Evaluation data of "generalized bidirectionality" (Artetxe et al. 2022, §3.2, Tables 3-5).

Each document (:func:`~fairseq_ext.data.documents.read_documents`, as in training) is scored as a
sequence of its own (the paper's ``complete_doc``, footnotes 6-7), once per ``--r-bidir`` value R
(a *group*), with masking and ``n_bidir`` fixed by ``--eval-mode``: ``full_doc_ppl`` (Table 3)
predicts every next token with ``n_bidir = 0``; ``suffix_ppl`` (Table 4) the last ``n_suffix``
tokens (:func:`suffix_split`) from the rest, ``n_bidir = round(R * n_prefix)``; ``infill``
(Table 5) masks one token per row and moves it to the end, ``n_bidir = round(R * n)``, at
``--infill-positions`` positions per document drawn uniformly without replacement among its
non-special tokens (:func:`infill_positions`). Rounding is half up; documents too short for the
mode are skipped and counted (:attr:`BidirectionalEvalDataset.skipped`). The batch is
:func:`~fairseq_ext.data.bidirectional_lm_dataset.collate_rows`'s plus ``eval_group``,
``eval_document``, ``eval_position`` (-1 outside ``infill``) and ``eval_split``, which identify a
row across models. The modes and what they print: docs/bidirectional.md, "Evaluation".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.data.bidirectional_lm_dataset import (
    RowSizedDataset,
    arrange_document,
    collate_rows,
)

#: ``--eval-mode`` choices.
EVAL_MODES = ("full_doc_ppl", "suffix_ppl", "infill")
#: Modes scored once per ``--r-bidir`` value.
MODES_WITH_R = ("suffix_ppl", "infill")
#: R values of Tables 4 and 5.
PAPER_R_VALUES = "0,0.25,0.5,0.75,1"


def round_half_up(ratio: float, n: int) -> int:
    """``ratio x n`` rounded to the nearest integer, halves up, computed on the decimal the user
    typed (``0.7 x 45 = 31.5`` gives 32, where the binary product 31.499999999999996 would give
    31)."""
    return int(math.floor(Fraction(str(ratio)) * n + Fraction(1, 2)))


def parse_r_bidir(text: Optional[str]) -> List[float]:
    """``--r-bidir`` ("0.5" or "0,0.25,0.5,0.75,1") as floats in [0, 1]; errors name the flag."""
    if text is None or not str(text).strip():
        raise ConfigError(f"--r-bidir is empty: give one ratio in [0, 1] or a list, e.g. "
                          f"--r-bidir {PAPER_R_VALUES}")
    values = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            raise ConfigError(f"--r-bidir {text!r}: {part.strip()!r} is not a number; give ratios "
                              f"in [0, 1], e.g. --r-bidir {PAPER_R_VALUES}") from None
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ConfigError(f"--r-bidir {text!r}: {part.strip()} is outside [0, 1] (n_bidir = R x "
                              "the context length, so R = 0 is causal and R = 1 fully bidirectional)")
        values.append(value)
    if len(set(values)) != len(values):
        raise ConfigError(f"--r-bidir {text!r} repeats a value")
    return values


def r_label(value: float) -> str:
    """Metric-name label of an R value: ``r0``, ``r0.25``, ``r1``."""
    return f"r{value:g}"


@dataclass(frozen=True)
class DocumentLayout:
    """The fixed objective of one evaluated document: which positions are masked (sorted),
    ``n_bidir`` and ``n_predict`` (the loss window, counted from the end, as in training)."""

    masked: Tuple[int, ...]
    n_bidir: int
    n_predict: int


def suffix_split(n: int, fraction: float) -> Tuple[int, int]:
    """``(n_prefix, n_suffix)`` of a document of ``n >= 2`` tokens: ``n_suffix =
    round(fraction * n)``, at least 1 and at most ``n - 1`` (the paper's prefix is ``0.8 n``)."""
    n_suffix = min(max(round_half_up(fraction, n), 1), n - 1)
    return n - n_suffix, n_suffix


def full_doc_layout(n: int) -> DocumentLayout:
    return DocumentLayout(masked=(), n_bidir=0, n_predict=n)


def suffix_layout(n: int, fraction: float, r_bidir: float) -> DocumentLayout:
    n_prefix, n_suffix = suffix_split(n, fraction)
    # the last position has no target, so the window of n_suffix targets spans n_suffix + 1:
    # positions n_prefix - 1 .. n - 2, none of which sees its target (n_bidir <= n_prefix)
    return DocumentLayout(masked=(), n_bidir=round_half_up(r_bidir, n_prefix),
                          n_predict=n_suffix + 1)


def infill_positions(tokens: np.ndarray, document: int, eval_seed: int,
                     special_ids: Sequence[int], count: int = 1) -> List[int]:
    """The ``count`` masked positions of ``document`` (``--infill-positions``), in the order drawn:
    uniformly without replacement among its non-special tokens, each draw one
    ``integers(remaining)`` of ``default_rng((eval_seed, document))``, so the first ``k`` are
    the same for every ``count >= k``. Fewer if the document has fewer non-special tokens."""
    candidates = np.flatnonzero(~np.isin(tokens, np.asarray(special_ids)))
    rng = np.random.default_rng((eval_seed, document))
    chosen = []
    for _ in range(min(count, len(candidates))):
        pick = int(rng.integers(len(candidates)))
        chosen.append(int(candidates[pick]))
        candidates = np.delete(candidates, pick)
    return chosen


def infill_layout(n: int, position: int, r_bidir: float) -> DocumentLayout:
    return DocumentLayout(masked=(position,), n_bidir=round_half_up(r_bidir, n), n_predict=1)


def layout_item(tokens: np.ndarray, layout: DocumentLayout, mask_idx: int,
                pad_idx: int) -> Dict[str, torch.Tensor]:
    """One document (``int64`` tokens) arranged by ``layout`` (:func:`arrange_document`), as the
    row fields :func:`collate_rows` pads: ``source``, ``positions``, ``target``, ``doc_ids``
    (all 0: the row is this document) and ``bidir_lens``."""
    source, positions, target = arrange_document(
        tokens, np.asarray(layout.masked, dtype=np.int64), layout.n_predict, mask_idx, pad_idx)
    n = len(tokens)
    return {
        "source": torch.from_numpy(source),
        "positions": torch.from_numpy(positions),
        "target": torch.from_numpy(target),
        "doc_ids": torch.zeros(n, dtype=torch.long),
        "bidir_lens": torch.full((n,), layout.n_bidir, dtype=torch.long),
    }


class BidirectionalEvalDataset(RowSizedDataset):
    """Every scorable document of ``documents`` (``infill``: each of its masked positions) once
    per R value of the mode, one per row (module docstring).

    Args:
        documents: the documents (lines, long ones split); ``documents[i]`` a 1-D LongTensor.
        sizes: their lengths.
        mode: one of :data:`EVAL_MODES`.
        r_values: the ``--r-bidir`` values (ignored by ``full_doc_ppl``, which has one group).
        suffix_fraction: ``--suffix-fraction`` (``suffix_ppl``).
        eval_seed: ``--eval-seed`` (``infill`` positions).
        mask_idx, pad_idx: the dictionary's ``<mask>`` and ``<pad>``.
        special_ids: token ids never masked nor predicted by ``infill`` (the dictionary's
            specials, ``<mask>`` and its padding symbols).
        positions_per_document: ``--infill-positions`` (``infill``).
        split: the split's name, carried by every batch (``eval_split``).
        kept_documents: only these document indices are scored (``--eval-max-documents``);
            ``None``: all. A kept document's rows are those it has in the whole split's scoring
            (its positions are drawn from its own index).
    """

    def __init__(self, documents, sizes: Sequence[int], mode: str, r_values: Sequence[float],
                 suffix_fraction: float, eval_seed: int, mask_idx: int, pad_idx: int,
                 special_ids: Sequence[int], positions_per_document: int = 1,
                 split: str = "valid", kept_documents: Optional[Sequence[int]] = None):
        super().__init__()
        if mode not in EVAL_MODES:
            raise ConfigError(f"--eval-mode {mode!r} is not one of {', '.join(EVAL_MODES)}")
        if positions_per_document < 1:
            raise ConfigError(f"--infill-positions {positions_per_document} must be at least 1")
        self.documents = documents
        self.split = split
        self.mode = mode
        self.r_values = list(r_values) if mode in MODES_WITH_R else [0.0]
        self.suffix_fraction = suffix_fraction
        self.eval_seed = eval_seed
        self.mask_idx = mask_idx
        self.pad_idx = pad_idx
        self.special_ids = sorted(set(int(i) for i in special_ids))
        sizes = np.asarray(sizes, dtype=np.int64)
        kept = (np.arange(len(sizes), dtype=np.int64) if kept_documents is None
                else np.unique(np.asarray(kept_documents, dtype=np.int64)))
        if len(kept) and not 0 <= kept[0] <= kept[-1] < len(sizes):
            raise ValueError(f"kept_documents must index the {len(sizes)} documents")
        #: ``infill``: each scored document's masked positions, in the order drawn
        self.infill_positions: Dict[int, List[int]] = {}
        if mode == "infill":
            for document in kept.tolist():
                positions = infill_positions(np.asarray(documents[document]), document,
                                             eval_seed, self.special_ids, positions_per_document)
                if positions:
                    self.infill_positions[document] = positions
            scorable = np.fromiter(self.infill_positions, dtype=np.int64,
                                   count=len(self.infill_positions))
            row_document = np.repeat(scorable, [len(p) for p in self.infill_positions.values()])
            row_position = np.fromiter(
                (p for positions in self.infill_positions.values() for p in positions),
                dtype=np.int64, count=len(row_document))
        else:
            scorable = kept[sizes[kept] >= 2]
            row_document, row_position = scorable, np.full(len(scorable), -1, dtype=np.int64)
        #: documents considered (all, or the kept ones)
        self.considered = len(kept)
        #: documents left out because they are too short for the mode
        self.skipped = len(kept) - len(scorable)
        #: documents scored (each once per group)
        self.scored = len(scorable)
        #: rows per group: the documents, or for ``infill`` the masked positions
        self.rows_per_group = len(row_document)
        groups = len(self.r_values)
        self.item_document = np.repeat(row_document, groups)
        self.item_position = np.repeat(row_position, groups)
        self.item_group = np.tile(np.arange(groups), len(row_document))
        self._sizes = sizes[self.item_document]

    @property
    def group_labels(self) -> List[str]:
        """Metric-name label of each group (``r0.25``; ``full`` for ``full_doc_ppl``)."""
        if self.mode not in MODES_WITH_R:
            return ["full"]
        return [r_label(value) for value in self.r_values]

    def ordered_indices(self) -> np.ndarray:
        return np.argsort(self._sizes, kind="mergesort")

    def layout(self, index: int) -> DocumentLayout:
        """The fixed objective of item ``index`` (module docstring)."""
        group = int(self.item_group[index])
        n, r_bidir = int(self._sizes[index]), self.r_values[group]
        if self.mode == "full_doc_ppl":
            return full_doc_layout(n)
        if self.mode == "suffix_ppl":
            return suffix_layout(n, self.suffix_fraction, r_bidir)
        return infill_layout(n, int(self.item_position[index]), r_bidir)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        document = int(self.item_document[index])
        tokens = np.asarray(self.documents[document]).astype(np.int64)
        if (tokens == self.mask_idx).any():
            raise ValueError(f"document {document} contains the <mask> token itself; the batch "
                             "uses it to mark masked positions, so the data must not contain it")
        item = layout_item(tokens, self.layout(index), self.mask_idx, self.pad_idx)
        return {"id": index, "group": int(self.item_group[index]), "document": document,
                "position": int(self.item_position[index]), **item}

    def collater(self, samples: List[Dict]) -> Dict:
        """The training batch (one document per row) plus the rows' ``eval_group``,
        ``eval_document``, ``eval_position`` and the ``eval_split`` (module docstring)."""
        batch = collate_rows(samples, self.pad_idx)
        if batch:
            batch["eval_group"] = torch.LongTensor([s["group"] for s in samples])
            batch["eval_document"] = torch.LongTensor([s["document"] for s in samples])
            batch["eval_position"] = torch.LongTensor([s["position"] for s in samples])
            batch["eval_split"] = self.split
        return batch
