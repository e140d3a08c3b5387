"""The attention mask of "generalized bidirectionality" (Artetxe et al., 2022, §2, §3.1,
Appendix A / Figure 3), for rows of packed documents.

Within a document (its masked tokens moved to the end, Figure 3 step 3), token ``i`` may attend
to token ``j`` iff ``j <= i`` or ``j < n_bidir`` (0-based; §2's ``j <= max(i, n_bidir)``), and
to every token of the earlier documents of its row (footnote 4) unless ``cross_document=False``
(``--no-cross-document-attention``). A batch gives its layout as two ``(B, T)`` tensors:
``doc_ids`` (the token's document in its row, ``0, 1, ...``, ``-1`` at padding) and
``bidir_lens`` (``n_bidir`` of the token's document). The rule is stated once, in
:func:`attention_rule`; :func:`layout_mask_mod` is it as a FlexAttention ``mask_mod``, and
:func:`may_attend` evaluates it on broadcast index grids: the boolean ``(B, 1, T, T)`` mask, once
per batch, which :func:`additive_attention_mask` turns into SDPA's float mask. A padding query
attends to itself only, so no softmax row is empty (which would give NaN in the backward pass).
Both attention paths: docs/bidirectional.md, "Attention paths (``--attention-impl``)".
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


def attention_rule(query_doc: Tensor, query_index: Tensor, query_bidir_len: Tensor,
                   key_doc: Tensor, key_index: Tensor, same_position: Tensor,
                   cross_document: bool = True) -> Tensor:
    """Whether a query may attend to a key (§2 and footnote 4), from their documents (``-1``:
    padding), their indices within their documents, the query's document's ``n_bidir`` and
    whether they are the same position: the one statement of the rule, elementwise on tensors
    that broadcast together (0-d ones under FlexAttention's ``vmap``).

    A key of the query's document is allowed iff ``key_index <= query_index`` or ``key_index <
    n_bidir`` (§2's "j <= max(i, n_bidir)" with 1-based indices: ``key_index < max(query_index
    + 1, n_bidir)``, one comparison of the full size); keys of earlier documents of the row are
    allowed when ``cross_document``; later documents and padding never are. A padding query
    attends to itself only (no empty row)."""
    allowed = (key_doc == query_doc) & (key_index < torch.maximum(query_index + 1,
                                                                  query_bidir_len))
    if cross_document:
        allowed = allowed | (key_doc < query_doc)
    allowed = allowed & (key_doc >= 0)
    return allowed | (same_position & (query_doc < 0))


def layout_mask_mod(doc_ids: Tensor, bidir_lens: Tensor, cross_document: bool = True,
                    index: Optional[Tensor] = None):
    """The rule (:func:`attention_rule`) as a FlexAttention ``mask_mod(b, h, q_idx, kv_idx)``
    over the ``(B, T)`` layout: row ``b``, query column ``q_idx``, key column ``kv_idx`` (the
    same for every head ``h``). Its arguments are index tensors that broadcast together: 0-d
    under :func:`torch.nn.attention.flex_attention.create_block_mask`, or grids, as
    :func:`may_attend` evaluates it."""
    check_layout(doc_ids, bidir_lens)
    if index is None:
        index = index_in_document(doc_ids)

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return attention_rule(doc_ids[b, q_idx], index[b, q_idx], bidir_lens[b, q_idx],
                              doc_ids[b, kv_idx], index[b, kv_idx], q_idx == kv_idx,
                              cross_document)

    return mask_mod


def may_attend(doc_ids: Tensor, bidir_lens: Tensor, cross_document: bool = True,
               index: Optional[Tensor] = None) -> Tensor:
    """The boolean "query may attend to key" mask ``(B, 1, T, T)`` (``[b, 0, i, j]``: query
    ``i``, key ``j``) of §2 and footnote 4, given the layout ``doc_ids`` / ``bidir_lens``
    ``(B, T)`` and, optionally, each token's ``index`` within its document (else derived from
    ``doc_ids``): :func:`attention_rule` on broadcast views of the layout, queries along
    dimension 2 and keys along dimension 3: what :func:`layout_mask_mod` gives on index grids
    (without its gathers), so the dense mask SDPA takes and FlexAttention's block mask follow
    the same rule."""
    check_layout(doc_ids, bidir_lens)
    if index is None:
        index = index_in_document(doc_ids)
    length = doc_ids.size(1)
    columns = torch.arange(length, device=doc_ids.device)

    def queries(x: Tensor) -> Tensor:
        return x[:, None, :, None]

    def keys(x: Tensor) -> Tensor:
        return x[:, None, None, :]

    return attention_rule(queries(doc_ids), queries(index), queries(bidir_lens), keys(doc_ids),
                          keys(index), columns[:, None] == columns[None, :], cross_document)


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
