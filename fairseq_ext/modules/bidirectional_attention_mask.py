"""The attention mask of "generalized bidirectionality" (Artetxe et al., 2022, §2, §3.1,
Appendix A / Figure 3), for rows of packed documents.

Within a document (after its masked tokens were moved to the end, Figure 3 step 3), the
``i``-th token may attend to the ``j``-th "if and only if ``j <= max(i, n_bidir)``" (§2, with
1-based indices): with 0-based indices within the document, iff ``j <= i`` or ``j < n_bidir``.
The first ``n_bidir`` tokens attend to each other bidirectionally, the rest causally.

Documents are packed into rows (§3.1, ``--sample-break-mode complete``), and the procedure is
applied "to each document separately": footnote 4, "a given token cannot attend to tokens in
future documents even when ``n_bidir = n``, but all tokens can attend to tokens in previous
documents" (all of their tokens). ``cross_document=False`` (``--no-cross-document-attention``)
confines each token to its own document instead. Padding is never attended.

A batch describes its layout with two ``(B, T)`` tensors: ``doc_ids`` (which document of its row
a token belongs to, ``0, 1, ...``, ``-1`` at padding; the documents of a row contiguous and in
order) and ``bidir_lens`` (``n_bidir`` of the token's document). A token's index within its
document is its column minus the column where its document starts.

:func:`may_attend` builds the boolean ``(B, 1, T, T)`` mask with tensor operations only (no
Python loop over positions), once per batch, to be shared by every layer;
:func:`additive_attention_mask` turns it into the float mask
``torch.nn.functional.scaled_dot_product_attention`` adds to its logits. A padding query attends
to itself only, so no softmax row is empty (an empty row gives NaN, which a backward pass would
spread even though padding outputs are never read).
"""
from typing import Optional

import torch
from torch import Tensor


def check_layout(doc_ids: Tensor, bidir_lens: Tensor) -> None:
    """Shape checks (no device-to-host synchronisation): two ``(B, T)`` integer tensors."""
    if doc_ids.dim() != 2 or doc_ids.shape != bidir_lens.shape:
        raise ValueError(f"doc_ids and bidir_lens must both be (batch, length); got "
                         f"{tuple(doc_ids.shape)} and {tuple(bidir_lens.shape)}")
    if doc_ids.is_floating_point() or bidir_lens.is_floating_point():
        raise ValueError("doc_ids and bidir_lens must be integer tensors")


def index_in_document(doc_ids: Tensor) -> Tensor:
    """Each token's 0-based index within its document, ``(B, T)`` (0 at padding).

    The documents of a row are contiguous, so the index is the column minus the column where
    the token's document starts (the last column up to here whose document differs from the
    one before it); ``cummax`` carries that start along the row."""
    batch, length = doc_ids.shape
    columns = torch.arange(length, device=doc_ids.device).expand(batch, length)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    start_column = torch.where(starts, columns, torch.zeros_like(columns)).cummax(dim=1).values
    return torch.where(doc_ids >= 0, columns - start_column, torch.zeros_like(columns))


def may_attend(doc_ids: Tensor, bidir_lens: Tensor, cross_document: bool = True,
               index: Optional[Tensor] = None) -> Tensor:
    """The boolean "query may attend to key" mask ``(B, 1, T, T)`` (``[b, 0, i, j]``: query
    ``i``, key ``j``) of §2 and footnote 4, given the layout ``doc_ids`` / ``bidir_lens``
    ``(B, T)`` and, optionally, each token's ``index`` within its document (else derived from
    ``doc_ids``).

    Key ``j`` is allowed for query ``i`` of the same document iff ``index_j <= index_i`` or
    ``index_j < n_bidir``; keys of earlier documents of the row are allowed when
    ``cross_document``; later documents and padding never are. A padding query attends to
    itself only.
    """
    check_layout(doc_ids, bidir_lens)
    if index is None:
        index = index_in_document(doc_ids)
    query_doc, key_doc = doc_ids.unsqueeze(2), doc_ids.unsqueeze(1)  # (B, T, 1), (B, 1, T)
    query_index, key_index = index.unsqueeze(2), index.unsqueeze(1)
    key_real = key_doc >= 0
    same_document = (query_doc == key_doc) & key_real
    within = (key_index <= query_index) | (key_index < bidir_lens.unsqueeze(2))
    allowed = same_document & within
    if cross_document:
        allowed = allowed | (key_real & (key_doc < query_doc))
    length = doc_ids.size(1)
    diagonal = torch.eye(length, dtype=torch.bool, device=doc_ids.device)
    allowed = allowed | (diagonal & (query_doc < 0))  # padding: itself only
    return allowed.unsqueeze(1)


def additive_attention_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """The float mask SDPA adds to its logits: 0 where ``allowed``, ``-inf`` elsewhere (every
    row of a :func:`may_attend` mask has an allowed key, so no row is all ``-inf``)."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, float("-inf"))


def causal_layout(tokens: Tensor, padding_idx: int):
    """``(positions, doc_ids, bidir_lens)`` of a plain causal LM over each row: one document
    per row, positions ``0 .. len - 1`` counting non-padding tokens (left or right padding),
    no bidirectional prefix; padding gets position 0 and document ``-1``."""
    real = tokens.ne(padding_idx)
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0).masked_fill(~real, 0)
    doc_ids = real.long() - 1  # 0 for tokens, -1 for padding
    return positions, doc_ids, torch.zeros_like(doc_ids)
