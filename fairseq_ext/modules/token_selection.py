"""Select a subset of each row's tokens and pack them to the left (3ML's shorter sequences).

3ML (Liao et al., 2022, §2.2) runs its encoder on the unmasked tokens only and its cross
decoder on the [MASK] slots only: per row, the selected columns in their original order, packed
to the left and padded to the batch's longest row (:func:`pack_selected`); the encoder's linear
layers run on the selected tokens alone, only attention on the padded grid
(:class:`PackedTokens`). Sizes are **exact** (:func:`pack_selected`, :func:`pack_tokens`: read
from the device, a host sync on a GPU) or **static** (``width=`` / :func:`pack_tokens_bounded`:
bounds from :class:`~fairseq_ext.data.masking_capacity.MaskingCapacity`, so every shape depends
on the batch's shape alone and ``torch.compile`` compiles once). Static padding slots point at
*distinct* unselected positions, so every scatter and gather stays one-to-one; a selected token
beyond the capacity is left out (``PackedTokens.dropped`` counts them). See
docs/training_step.md.
"""
import dataclasses
from typing import Optional, Tuple

import torch


def selected_first(selected: torch.Tensor) -> torch.Tensor:
    """The positions along the last dimension, the selected ones first, each group in its
    original order (a stable sort on "not selected"): a permutation, so its first ``k``
    entries are distinct whatever ``k``."""
    return torch.sort((~selected).to(torch.uint8), dim=-1, stable=True).indices


def pack_selected(selected: torch.Tensor,
                  width: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Column indices of the selected entries of each row, left-packed in original order.

    Args:
        selected: ``(B, T)`` bool.
        width: a static width that no row's count exceeds (nothing read back); ``None``: the
            widest row's count, read from the device.

    Returns:
        ``(index, valid)``, both ``(B, W)`` with ``W = width`` or ``max(1, max selected per
        row)``: ``index[b, j]`` is the column of row ``b``'s ``j``-th selected entry, and
        ``valid[b, j]`` says whether that slot holds one (slots past the row's count point at
        the row's other columns, distinct, and must be masked). ``W`` is at least 1 so that
        downstream layers never see an empty sequence.
    """
    counts = selected.sum(dim=1)
    if width is None:
        width = int(counts.max()) if selected.numel() else 0
    width = max(min(width, selected.size(1)), 1)
    order = selected_first(selected)[:, :width]
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


def _flat_nonzero(mask: torch.Tensor, count: int) -> torch.Tensor:
    """Row-major flat indices of the ``count`` True entries of ``mask`` (``count`` known on
    the host, so no second device-to-host synchronisation where ``nonzero_static`` exists)."""
    try:
        return torch.nonzero_static(mask.flatten(), size=count).squeeze(1)
    except (NotImplementedError, RuntimeError):  # a device without nonzero_static
        return mask.flatten().nonzero().squeeze(1)


class _Place(torch.autograd.Function):
    """``values`` ``(N, ...)`` placed at the distinct rows ``index`` of a ``(rows, ...)``
    tensor filled with ``fill``. Its gradient is the gather :class:`_Take` (no accumulation:
    the rows are distinct)."""

    @staticmethod
    def forward(ctx, values, index, rows: int, fill):
        ctx.save_for_backward(index)
        out = values.new_full((rows, *values.shape[1:]), fill)
        return out.index_copy_(0, index, values)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None, None


class _Take(torch.autograd.Function):
    """Rows ``index`` (distinct) of ``values``; its gradient is :class:`_Place` with zeros."""

    @staticmethod
    def forward(ctx, values, index):
        ctx.save_for_backward(index)
        ctx.rows = values.size(0)
        return values.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        return out.index_copy_(0, index, grad), None


@dataclasses.dataclass
class PackedTokens:
    """The selected tokens of a ``(B, T)`` batch as one packed ``(N, ...)`` tensor, without
    padding, and the left-packed, padded ``(B, W)`` grid that attention runs on.

    Row-major order is shared by all three layouts: the ``j``-th selected token of the batch
    is ``source_index[j]`` in the flattened ``(B, T)`` input and ``grid_index[j]`` in the
    flattened ``(B, W)`` grid (``W`` as :func:`pack_selected` gives it). Linear layers run on
    the ``N`` packed tokens only; :meth:`to_grid` and :meth:`from_grid` move between the two
    for attention (the "unpadded" layout that FlashAttention's variable-length interface
    takes as ``cu_seqlens``; here attention itself still runs on the padded grid). Each move
    is one gather or one scatter of distinct rows, and so is its gradient.
    """

    source_index: torch.Tensor  # (N,) into the flattened (B, T) input
    grid_index: torch.Tensor  # (N,) into the flattened (B, W) grid
    counts: torch.Tensor  # (B,) selected tokens per row (those packed)
    valid: torch.Tensor  # (B, W) bool: which grid slots hold a token (as pack_selected's)
    batch: int
    length: int  # T
    width: int  # W = max(1, max(counts)), or the static width
    # Static sizes only: (N,) bool, which packed entries hold a token (the first counts.sum());
    # and the selected tokens left out for want of room (a 0-dim tensor).
    token_valid: Optional[torch.Tensor] = None
    dropped: Optional[torch.Tensor] = None

    @property
    def tokens(self) -> int:
        """Packed entries: the selected tokens, or (static sizes) the capacity."""
        return self.source_index.numel()

    def _valid_only(self, packed: torch.Tensor, fill) -> torch.Tensor:
        """``packed`` with its padding entries (static sizes) set to ``fill``."""
        if self.token_valid is None:
            return packed
        keep = self.token_valid.view(-1, *([1] * (packed.dim() - 1)))
        return torch.where(keep, packed, torch.as_tensor(fill, dtype=packed.dtype,
                                                         device=packed.device))

    def gather(self, source: torch.Tensor) -> torch.Tensor:
        """``(B, T, ...)`` -> the selected entries ``(N, ...)``, in row-major order."""
        return _Take.apply(source.flatten(0, 1), self.source_index)

    def to_source(self, packed: torch.Tensor, fill=0) -> torch.Tensor:
        """``(N, ...)`` -> ``(B, T, ...)``: each token back at its place, ``fill`` elsewhere."""
        out = _Place.apply(self._valid_only(packed, fill), self.source_index,
                           self.batch * self.length, fill)
        return out.view(self.batch, self.length, *packed.shape[1:])

    def to_grid(self, packed: torch.Tensor, fill=0, exact_padding: bool = True) -> torch.Tensor:
        """``(N, ...)`` -> the padded grid ``(B, W, ...)``, ``fill`` at padding.

        With static sizes, ``exact_padding=False`` leaves the padding entries' values (finite,
        never read as tokens) in their grid slots instead of ``fill``: one op fewer, for
        attention, which masks those slots as keys."""
        if exact_padding:
            packed = self._valid_only(packed, fill)
        out = _Place.apply(packed, self.grid_index, self.batch * self.width, fill)
        return out.view(self.batch, self.width, *packed.shape[1:])

    def from_grid(self, grid: torch.Tensor) -> torch.Tensor:
        """The padded grid ``(B, W, ...)`` -> the tokens it holds ``(N, ...)``."""
        return _Take.apply(grid.reshape(self.batch * self.width, *grid.shape[2:]), self.grid_index)


def pack_tokens_bounded(selected: torch.Tensor, width: int, capacity: int) -> PackedTokens:
    """:class:`PackedTokens` of the True entries of ``selected`` ``(B, T)`` with static sizes:
    at most ``width`` per row and ``capacity`` in all, nothing read from the device.

    The first ``width`` selected entries of each row, then the first ``capacity`` of those in
    row-major order, are packed; any other selected entry is left out and counted in
    ``dropped`` (a 0-dim tensor; zero when the sizes bound the counts). The ``capacity``
    entries past the packed tokens are padding: ``source_index`` points them at distinct
    unselected positions and ``grid_index`` at distinct padding slots of the grid."""
    batch, length = selected.shape
    width = max(min(width, length), 1)
    capacity = max(min(capacity, batch * width), 1)
    fits = selected & (selected.cumsum(dim=1) <= width)
    flat = fits.flatten()
    flat = flat & (flat.cumsum(dim=0) <= capacity)
    counts = flat.view(batch, length).sum(dim=1)
    grid_valid = torch.arange(width, device=selected.device).unsqueeze(0) < counts.unsqueeze(1)
    source_index = selected_first(flat)[:capacity]
    grid_index = selected_first(grid_valid.flatten())[:capacity]
    token_valid = torch.arange(capacity, device=selected.device) < counts.sum()
    dropped = selected.sum() - counts.sum()
    return PackedTokens(source_index, grid_index, counts, grid_valid, batch, length, width,
                        token_valid, dropped)


def pack_tokens(selected: torch.Tensor) -> PackedTokens:
    """:class:`PackedTokens` of the True entries of ``selected`` ``(B, T)``: one
    device-to-host read (the widest row and the total), as :func:`pack_selected` needs."""
    counts = selected.sum(dim=1)
    if selected.numel():
        width, total = torch.stack([counts.max(), counts.sum()]).tolist()
    else:
        width = total = 0
    width = max(width, 1)
    grid_valid = torch.arange(width, device=selected.device).unsqueeze(0) < counts.unsqueeze(1)
    return PackedTokens(_flat_nonzero(selected, total), _flat_nonzero(grid_valid, total), counts,
                        grid_valid, selected.size(0), selected.size(1), width)
