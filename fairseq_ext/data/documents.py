"""What a *document* is in a fairseq data-bin, for the ``bidirectional_lm`` task (Artetxe et
al. 2022 apply their objective "to each document separately", §3.1, and score "each document as
a separate sequence", §3.2).

fairseq's binarizer ends every line with ``</s>``, so an empty line is a lone ``</s>``.
``--document-format blank_line_separated`` (the default; the layout ``scripts/prepare_corpus.sh``
writes) reads the data-bin as fairseq's ``--sample-break-mode complete_doc`` does: consecutive
non-empty lines form a document, every line's ``</s>`` kept as a token, and empty lines end it;
``lines`` makes every line a document. A document longer than ``--tokens-per-sample`` is cut
into pieces of at most that many tokens, each a document of its own (a long line first into
near-equal pieces, :func:`split_lengths`; then lines packed greedily, as ``complete_doc``
blocks); nothing is truncated. A data-bin that looks like the other layout gets one warning per
split naming the flag (:func:`format_mismatch`). Why, and the embedded corpus's figures:
docs/bidirectional.md, "Choices where the paper is silent".
"""
from __future__ import annotations

import logging
from typing import List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset, TokenBlockDataset

from fairseq_ext.cli.errors import ConfigError, UserInputError

logger = logging.getLogger(__name__)

BLANK_LINE_SEPARATED = "blank_line_separated"
LINES = "lines"
#: ``--document-format`` choices, the default first.
DOCUMENT_FORMATS = (BLANK_LINE_SEPARATED, LINES)
#: Size of an empty line in a data-bin: its ``</s>`` alone (fairseq's ``document_sep_len``).
EMPTY_LINE_SIZE = 1
#: The smallest ``--tokens-per-sample`` that never leaves a 1-token piece of a long line (which
#: ``complete_doc`` would take for an empty line).
SMALLEST_BLANK_LINE_BLOCK = 3


class DocumentFormatError(UserInputError, ValueError):
    """Lines that make no document under the chosen format; the message says what to change."""


def split_lengths(size: int, max_length: int) -> List[int]:
    """Lengths of the ``ceil(size / max_length)`` near-equal pieces a line of ``size`` tokens is
    cut into (the first ones one token longer where it does not divide evenly)."""
    pieces = -(-size // max_length)
    base, longer = divmod(size, pieces)
    return [base + 1] * longer + [base] * (pieces - longer)


class LongLineSplitDataset(FairseqDataset):
    """The lines of ``dataset`` with each line longer than ``max_length`` tokens cut into
    near-equal pieces (:func:`split_lengths`), one item per piece, in order."""

    def __init__(self, dataset, sizes: Sequence[int], max_length: int):
        super().__init__()
        if max_length < 1:
            raise ValueError(f"max_length must be positive, found {max_length}")
        self.dataset = dataset
        sizes = np.asarray(sizes, dtype=np.int64)
        pieces = np.maximum(-(-sizes // max_length), 1)
        self.line = np.repeat(np.arange(len(sizes)), pieces)
        piece_in_line = np.arange(len(self.line)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        # as split_lengths: the first (size % pieces) pieces of a line have base + 1 tokens
        line_sizes, line_pieces = sizes[self.line], pieces[self.line]
        base, longer = line_sizes // line_pieces, line_sizes % line_pieces
        self.start = piece_in_line * base + np.minimum(piece_in_line, longer)
        self._sizes = base + (piece_in_line < longer)

    @property
    def sizes(self) -> np.ndarray:
        return self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def __getitem__(self, index: int) -> torch.Tensor:
        start = int(self.start[index])
        return self.dataset[int(self.line[index])][start:start + int(self._sizes[index])]

    def num_tokens(self, index: int) -> int:
        return int(self._sizes[index])

    def size(self, index: int) -> int:
        return int(self._sizes[index])


def split_long_lines(dataset, sizes: Sequence[int], max_length: int):
    """``dataset`` itself when no line exceeds ``max_length``, else a
    :class:`LongLineSplitDataset` of it. Either way the result has ``.sizes``."""
    sizes = np.asarray(sizes)
    if len(sizes) == 0 or int(sizes.max()) <= max_length:
        return dataset
    return LongLineSplitDataset(dataset, sizes, max_length)


def check_document_format(document_format: str, max_length: int) -> None:
    """Refuse, naming the flag, a format this module does not know or a ``--tokens-per-sample``
    too small for it."""
    if document_format not in DOCUMENT_FORMATS:
        raise ConfigError(f"--document-format {document_format!r} is not one of "
                          f"{', '.join(DOCUMENT_FORMATS)}")
    if document_format == BLANK_LINE_SEPARATED and max_length < SMALLEST_BLANK_LINE_BLOCK:
        raise ConfigError(
            f"--tokens-per-sample {max_length} with --document-format {BLANK_LINE_SEPARATED}: must"
            f" be at least {SMALLEST_BLANK_LINE_BLOCK}, or a cut long line could leave a 1-token "
            "piece, which reads as an empty line (a document boundary)")


def read_documents(lines, sizes: Sequence[int], document_format: str, max_length: int,
                   pad: int, eos: int):
    """The documents of ``lines`` (a data-bin split; ``sizes`` its line lengths) under
    ``document_format``, each at most ``max_length`` tokens (module docstring): a dataset whose
    items are the documents, with ``.sizes``. Raises :class:`DocumentFormatError` if there is
    none (a split of empty lines only)."""
    check_document_format(document_format, max_length)
    pieces = split_long_lines(lines, sizes, max_length)
    if document_format == LINES:
        return pieces
    piece_sizes = np.asarray(pieces.sizes, dtype=np.int64)
    if not (piece_sizes > EMPTY_LINE_SIZE).any():
        raise DocumentFormatError(
            f"no document: every one of the {len(piece_sizes)} lines is empty (a lone </s>), and "
            f"--document-format {BLANK_LINE_SEPARATED} reads empty lines as document boundaries")
    return TokenBlockDataset(pieces, piece_sizes, max_length, pad=pad, eos=eos,
                             break_mode="complete_doc", document_sep_len=EMPTY_LINE_SIZE)


def spread_indices(length: int, count: int) -> np.ndarray:
    """``count`` indices of ``range(length)`` spread evenly over it (``floor(i * length /
    count)``, ``i < count``), or all of them when ``count`` is 0 or at least ``length``: a fixed
    subset that samples every part of a split whose documents are stored source by source."""
    if count <= 0 or count >= length:
        return np.arange(length, dtype=np.int64)
    return (np.arange(count, dtype=np.int64) * length) // count


def whole_document_count(sizes: Sequence[int], document_format: str) -> int:
    """How many documents the lines of ``sizes`` hold before long ones are cut."""
    sizes = np.asarray(sizes)
    if document_format == LINES:
        return len(sizes)
    text = sizes > EMPTY_LINE_SIZE
    starts = text & ~np.concatenate([[False], text[:-1]])
    return int(starts.sum())


def format_mismatch(sizes: Sequence[int], document_format: str) -> Optional[str]:
    """Why the lines of ``sizes`` do not look like ``document_format``, with the option to
    change; ``None`` when they do. Under ``lines``, any empty line (a 1-token document says
    nothing, so it is a separator or an accident; a share-based rule would miss our own
    data-bins, 13 empty lines in 2,975 in the embedded corpus's valid split); under
    ``blank_line_separated``, several lines without one empty line (the whole split would be
    read as one document)."""
    sizes = np.asarray(sizes)
    empty = int((sizes == EMPTY_LINE_SIZE).sum())
    if document_format == LINES:
        if empty:
            return (f"{empty} of its {len(sizes)} lines are empty (a lone </s>), which "
                    f"--document-format {LINES} reads as 1-token documents. If empty lines "
                    f"separate documents of several lines, use --document-format "
                    f"{BLANK_LINE_SEPARATED}")
        return None
    if len(sizes) > 1 and empty == 0:
        return (f"none of its {len(sizes)} lines is empty, so --document-format "
                f"{BLANK_LINE_SEPARATED} reads them all as one document ({int(sizes.sum())} "
                f"tokens, cut into pieces of --tokens-per-sample). If every line is a document, "
                f"use --document-format {LINES}")
    return None


_WARNED = set()


def warn_if_format_mismatch(name: str, sizes: Sequence[int], document_format: str) -> None:
    """Log :func:`format_mismatch` for the split ``name`` as a warning, once per process."""
    if (name, document_format) in _WARNED:
        return
    reason = format_mismatch(sizes, document_format)
    if reason is not None:
        _WARNED.add((name, document_format))
        logger.warning("%s: %s", name, reason)
