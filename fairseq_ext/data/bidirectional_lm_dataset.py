"""The data of "generalized bidirectionality" (Artetxe et al. 2022, "On the Role of
Bidirectionality in Language Model Pre-Training", §2, Table 1, §3.1 and Appendix A / Figure 3).

**Documents.** The items of the dataset under the token blocks, as
:func:`fairseq_ext.data.documents.read_documents` makes them from a data-bin split: by default
runs of non-empty lines separated by empty lines (fairseq's ``complete_doc`` reading,
``--document-format blank_line_separated``), or one line each (``--document-format lines``),
every line's ``</s>`` included, a document longer than ``--tokens-per-sample`` cut into pieces that
are documents of their own. ``--sample-break-mode complete`` packs whole documents into blocks of
at most ``--tokens-per-sample`` tokens (§3.1, footnote 3); ``eos`` puts one per block.

**The objective of a document** ``x_0 .. x_{n-1}`` (0-based here; ``x_{n-1}`` is ``</s>``, or the
last token of a piece), Figure 3 (:func:`arrange_document`):

1. every position's output is the next token of the document; the last token has no next token
   inside its document (documents are processed on their own, §3.1), so its output is
   ``<pad>``: no loss. A document thus gives at most ``n - 1`` next-token targets, and its first
   token is never a next-token target.
2. ``n_mask`` positions, drawn uniformly without replacement, get input ``<mask>`` and output
   the original token (a masked ``</s>`` too).
3. the masked (input, output, position) triples move to the end of the document in their
   original order; every token keeps its original position id.
4. only the last ``n_predict`` positions keep their output (the others become ``<pad>``); the
   model lets position ``i`` attend to ``j`` of its document iff ``j <= i`` or ``j < n_bidir``
   (§2), and to every token of the earlier documents of its row (footnote 4) unless
   ``--no-cross-document-attention``.

``n_mask``, ``n_bidir`` and ``n_predict`` are drawn per document by
:class:`~fairseq_ext.data.bidirectional_sampling.ObjectiveSampler` (Table 1). A ``<mask>`` input
is always a masked token, and a masked token in the loss window has its original token as
target, so the model tells masked-token targets from next-token targets by
``src_tokens == <mask>`` at positions whose target is not ``<pad>``; a block containing a
literal ``<mask>`` is refused.

**Randomness** is a function of ``(seed, epoch, index)``: item ``index`` of epoch ``epoch``
draws from ``numpy.random.default_rng((seed, epoch, index))``, so a batch is the same whatever
was read before it (resuming, other workers) and differs across epochs. (fairseq's
``data_utils.numpy_seed(seed, epoch, index)``, which ``MaskTokensDataset`` uses, folds the triple
into ``hash(...) % 1e6``: at most a million streams, and in fact far fewer: the 2,000,000
indices of epoch 1 under seed 1 get 47,978 distinct seeds, so blocks share their draws ~40-fold;
``SeedSequence`` hashes the whole triple. It also leaves numpy's global state alone.)

**The batch** (:meth:`BidirectionalLMDataset.collater`, right-padded, ``T`` = longest row)::

    id           (B,)   block indices
    nsentences   int    rows (blocks) in the batch
    ntokens      int    real (non-pad) tokens in the batch, as fairseq's LM datasets count them
    net_input:
      src_tokens    (B, T) long  reordered inputs (masked tokens as <mask>, at the document's end); pad: <pad>
      src_lengths   (B,)   long  real tokens per row
      src_positions (B, T) long  each token's 0-based index in its document before reordering; pad: 0
      doc_ids       (B, T) long  the token's document within its row, 0, 1, ...; pad: -1
      bidir_lens    (B, T) long  n_bidir of the token's document; pad: 0
    target       (B, T) long  outputs at the last n_predict positions of each document, <pad> elsewhere
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset, TokenBlockDataset, data_utils

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.data.bidirectional_sampling import DocumentObjective, ObjectiveSampler

#: Padding value of each (B, T) field of the batch; ``None``: the dictionary's ``<pad>``.
FIELD_PADDING = {"src_tokens": None, "src_positions": 0, "doc_ids": -1, "bidir_lens": 0,
                 "target": None}


def arrange_document(tokens: np.ndarray, masked: np.ndarray, n_predict: int, mask_idx: int,
                     pad_idx: int):
    """Figure 3 for one document: ``(source, positions, target)``, each of ``len(tokens)``.

    ``masked`` holds the 0-based positions to mask (sorted, distinct). ``source`` has the
    unmasked tokens in their order, then one ``<mask>`` per masked token; ``positions`` each
    token's original index; ``target`` the next token (``pad_idx`` for the last token) or, for a
    masked token, the original one, kept at the last ``n_predict`` positions only."""
    n = len(tokens)
    is_masked = np.zeros(n, dtype=bool)
    is_masked[masked] = True
    next_token = np.empty_like(tokens)
    next_token[:-1], next_token[-1] = tokens[1:], pad_idx
    output = np.where(is_masked, tokens, next_token)
    source_input = np.where(is_masked, mask_idx, tokens)
    order = np.concatenate([np.flatnonzero(~is_masked), np.flatnonzero(is_masked)])
    target = output[order]
    target[: n - n_predict] = pad_idx
    return source_input[order], order, target


class RowSizedDataset(FairseqDataset):
    """fairseq's size plumbing over ``self._sizes`` (one row per item, its length in tokens),
    shared by the training and evaluation datasets of generalized bidirectionality."""

    _sizes: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def num_tokens(self, index: int) -> int:
        return int(self._sizes[index])

    def num_tokens_vec(self, indices):
        return self._sizes[indices]

    def size(self, index: int) -> int:
        return int(self._sizes[index])


class BidirectionalLMDataset(RowSizedDataset):
    """Rows of packed documents with the objective of generalized bidirectionality applied to
    each document on its own (module docstring: documents, objective, randomness, batch).

    Args:
        blocks: a ``TokenBlockDataset`` (``complete``, ``complete_doc`` or ``eos`` mode) over
            ``documents``, whose items are the documents.
        document_sizes: the sizes of ``documents`` (``blocks.dataset``).
        sampler: draws each document's ``n_mask``, ``n_bidir``, ``n_predict``.
        mask_idx, pad_idx: the dictionary's ``<mask>`` and ``<pad>``.
        seed: ``--seed``; randomness is a function of ``(seed, epoch, index)``.
        shuffle: ``ordered_indices`` shuffles (with ``seed``) before sorting by size.
    """

    def __init__(self, blocks: TokenBlockDataset, document_sizes: Sequence[int],
                 sampler: ObjectiveSampler, mask_idx: int, pad_idx: int, seed: int = 1,
                 shuffle: bool = True, pad_to_multiple: int = 1):
        super().__init__()
        self.pad_to_multiple = pad_to_multiple
        self.blocks = blocks
        self.document_sizes = np.asarray(document_sizes, dtype=np.int64)
        self.sampler = sampler
        self.mask_idx = mask_idx
        self.pad_idx = pad_idx
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 1
        self._sizes = np.asarray(blocks.sizes, dtype=np.int64)

    # --- fairseq plumbing -----------------------------------------------------------------------

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return True  # only the draws change with the epoch, not the sizes

    def set_epoch(self, epoch: int, **unused) -> None:
        super().set_epoch(epoch)
        self.epoch = epoch

    def ordered_indices(self) -> np.ndarray:
        if self.shuffle:
            with data_utils.numpy_seed(self.seed):
                order = np.random.permutation(len(self))
        else:
            order = np.arange(len(self))
        return order[np.argsort(self._sizes[order], kind="mergesort")]

    @property
    def supports_prefetch(self) -> bool:
        return getattr(self.blocks, "supports_prefetch", False)

    def prefetch(self, indices) -> None:
        self.blocks.prefetch(indices)

    # --- items ----------------------------------------------------------------------------------

    def document_lengths(self, index: int) -> np.ndarray:
        """Lengths of the documents making up block ``index``, in order."""
        first, offset, last = (int(value) for value in self.blocks.block_to_dataset_index[index])
        lengths = self.document_sizes[first:last + 1]
        if offset != 0 or int(lengths.sum()) != int(self._sizes[index]):
            raise ConfigError(
                f"block {index} does not consist of whole documents (offset {offset}, documents "
                f"{first}..{last} of {int(lengths.sum())} tokens, block of {int(self._sizes[index])});"
                " use --sample-break-mode complete, complete_doc or eos")
        return lengths

    def item_rng(self, index: int) -> np.random.Generator:
        """The random stream of item ``index`` in the current epoch (module docstring)."""
        return np.random.default_rng((self.seed, self.epoch, index))

    def draw_objectives(self, index: int, lengths: Sequence[int]):
        """The draws of block ``index`` in the current epoch: per document its
        :class:`DocumentObjective` and sorted masked positions."""
        rng = self.item_rng(index)
        draws = []
        for n in lengths:
            objective = self.sampler.draw(int(n), rng)
            masked = np.sort(rng.choice(int(n), size=objective.n_mask, replace=False))
            draws.append((objective, masked))
        return draws

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        tokens = self.blocks[index].numpy()
        if (tokens == self.mask_idx).any():
            raise ValueError(f"block {index} contains the <mask> token itself; the batch uses it "
                             "to mark masked positions, so the data must not contain it")
        lengths = self.document_lengths(index)
        draws = self.draw_objectives(index, lengths)
        fields = {"source": [], "positions": [], "target": [], "doc_ids": [], "bidir_lens": []}
        start = 0
        for doc_id, (n, (objective, masked)) in enumerate(zip(lengths, draws)):
            source, positions, target = arrange_document(
                tokens[start:start + n], masked, objective.n_predict, self.mask_idx, self.pad_idx)
            fields["source"].append(source)
            fields["positions"].append(positions)
            fields["target"].append(target)
            fields["doc_ids"].append(np.full(n, doc_id))
            fields["bidir_lens"].append(np.full(n, objective.n_bidir))
            start += n
        item = {key: torch.from_numpy(np.concatenate(parts).astype(np.int64))
                for key, parts in fields.items()}
        item["id"] = index
        return item

    def objectives(self, index: int) -> List[DocumentObjective]:
        """The per-document draws of item ``index`` (for inspection and tests)."""
        return [objective for objective, _ in self.draw_objectives(index, self.document_lengths(index))]

    def collater(self, samples: List[Dict]) -> Dict:
        """Right-pad the items into the batch of the module docstring."""
        return collate_rows(samples, self.pad_idx, self.pad_to_multiple)


def collate_rows(samples: List[Dict], pad_idx: int, pad_to_multiple: int = 1) -> Dict:
    """Right-pad items (``id``, ``source``, ``positions``, ``doc_ids``, ``bidir_lens``,
    ``target``) into the batch of the module docstring, its length a multiple of
    ``pad_to_multiple`` (``--required-seq-len-multiple``: fewer shapes for
    ``--torch-compile``); ``{}`` for no items."""
    if not samples:
        return {}

    def pad(key, value):
        return data_utils.collate_tokens([s[key] for s in samples], value, left_pad=False,
                                         pad_to_multiple=pad_to_multiple)

    return {
        "id": torch.LongTensor([s["id"] for s in samples]),
        "nsentences": len(samples),
        "ntokens": sum(len(s["source"]) for s in samples),
        "net_input": {
            "src_tokens": pad("source", pad_idx),
            "src_lengths": torch.LongTensor([len(s["source"]) for s in samples]),
            "src_positions": pad("positions", FIELD_PADDING["src_positions"]),
            "doc_ids": pad("doc_ids", FIELD_PADDING["doc_ids"]),
            "bidir_lens": pad("bidir_lens", FIELD_PADDING["bidir_lens"]),
        },
        "target": pad("target", pad_idx),
    }
