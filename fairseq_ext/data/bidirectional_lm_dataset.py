"""The data of "generalized bidirectionality" (Artetxe et al. 2022, §2, Table 1, §3.1 and
Appendix A / Figure 3): rows of packed documents, the objective applied to each document alone.

Documents are the items :func:`fairseq_ext.data.documents.read_documents` makes of a data-bin
split (``--document-format``), packed into rows of at most ``--tokens-per-sample`` tokens
(``--sample-break-mode complete``, §3.1 footnote 3). Per document ``x_0 .. x_{n-1}``, with
``n_mask``, ``n_bidir`` and ``n_predict`` drawn by
:class:`~fairseq_ext.data.bidirectional_sampling.ObjectiveSampler` (Table 1), Figure 3
(:func:`arrange_document`): each output is the next token (``<pad>`` for the last token);
``n_mask`` positions get input ``<mask>`` and their own token as output and move to the end
with their position ids; only the last ``n_predict`` outputs are kept. A ``<mask>`` input always
marks a masked token, so a block holding a literal ``<mask>`` is refused. Item ``index`` of epoch
``epoch`` draws from ``numpy.random.default_rng((seed, epoch, index))``, whatever was read before
it. The batch: :func:`collate_rows`. Choices where the paper is silent: docs/bidirectional.md.
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
    each document on its own (module docstring; the batch: :func:`collate_rows`).

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
        """Right-pad the items into the batch of :func:`collate_rows`."""
        return collate_rows(samples, self.pad_idx, self.pad_to_multiple)


def collate_rows(samples: List[Dict], pad_idx: int, pad_to_multiple: int = 1) -> Dict:
    """Right-pad items (``id``, ``source``, ``positions``, ``doc_ids``, ``bidir_lens``,
    ``target``) into a batch, its length ``T`` a multiple of ``pad_to_multiple``
    (``--required-seq-len-multiple``: fewer shapes for ``--torch-compile``); ``{}`` for no items::

        id           (B,)   block indices
        nsentences   int    rows (blocks) in the batch
        ntokens      int    real (non-pad) tokens, as fairseq's LM datasets count them
        net_input:
          src_tokens    (B, T)  reordered inputs (masked tokens as <mask>, at the document's end)
          src_lengths   (B,)    real tokens per row
          src_positions (B, T)  each token's 0-based index in its document before reordering
          doc_ids       (B, T)  the token's document within its row, 0, 1, ...
          bidir_lens    (B, T)  n_bidir of the token's document
        target       (B, T)  outputs at the last n_predict positions of each document, else <pad>

    Tensors are ``long``, padded with :data:`FIELD_PADDING`."""
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
