"""Select a subset of each row's tokens and pack them to the left (3ML's shorter sequences).

3ML (Liao et al., 2022, §2.2) runs its encoder on the unmasked tokens only and its cross
decoder on the [MASK] slots only. Both need, per row, the columns of the selected tokens in
their original order, packed to the left and padded to the longest row of the batch, so the
layers really run on the shorter length.
"""
from typing import Tuple

import torch


def pack_selected(selected: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Column indices of the selected entries of each row, left-packed in original order.

    Args:
        selected: ``(B, T)`` bool.

    Returns:
        ``(index, valid)``, both ``(B, W)`` with ``W = max(1, max selected per row)``:
        ``index[b, j]`` is the column of row ``b``'s ``j``-th selected entry, and ``valid[b, j]``
        says whether that slot holds one (slots past the row's count point at arbitrary
        columns and must be masked). ``W`` is at least 1 so that downstream layers never see
        an empty sequence.
    """
    counts = selected.sum(dim=1)
    width = max(int(counts.max()) if selected.numel() else 0, 1)
    # A stable sort on "not selected" moves the selected columns to the front, in order.
    order = torch.sort((~selected).to(torch.uint8), dim=1, stable=True).indices[:, :width]
    valid = torch.arange(order.size(1), device=selected.device).unsqueeze(0) < counts.unsqueeze(1)
    return order, valid


def ensure_attendable(padding_mask: torch.Tensor) -> torch.Tensor:
    """Unmask slot 0 of rows whose slots are all padding.

    Attention over a row with every key masked gives NaN (softmax over nothing), and a NaN in
    an unused row still poisons the backward pass. Such rows occur when every token of a
    sequence is [MASK] (no encoder input) or none is (no decoder query). Their outputs are
    never read; this only keeps them finite. No device-to-host synchronisation.
    """
    empty_rows = padding_mask.all(dim=1, keepdim=True)
    first_slot = torch.zeros_like(padding_mask)
    first_slot[:, 0] = True
    return padding_mask & ~(empty_rows & first_slot)
