"""FlexAttention for the attention mask of generalized bidirectionality (Artetxe et al., 2022,
§2, §3.1 footnote 4): the same rule as the dense mask SDPA takes, with the empty blocks skipped.

The ``mask_mod`` is :func:`~fairseq_ext.modules.bidirectional_attention_mask.layout_mask_mod`,
the one statement of the rule that the dense mask and the block flags here also evaluate. The
``B`` rows of a batch are packed end to end into one sequence ``(1, H, L, d)``, each row padded
to a multiple of :data:`BLOCK_SIZE` and the whole to :func:`packed_blocks` blocks, so that few
lengths compile; padding queries attend to themselves only (no empty softmax row), and their
outputs are dropped. :func:`compiled_flex_attention` compiles once per process and shape.
FlexAttention computes no attention dropout and has no CPU backward, so it runs on CUDA and on
CPU without gradients (:func:`flex_unsupported_reason`); ``--attention-impl auto`` takes it only
where the BlockMask skips at least :data:`MIN_SKIPPED` of the scores (:func:`flex_pays_off`).
Which path runs where, and the measured CPU and H200 speeds: docs/bidirectional.md, "Attention
paths (``--attention-impl``)", and docs/benchmarks.md.
"""
import dataclasses
import functools
import math
from typing import Callable, Optional

import torch
from torch import Tensor

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.modules.bidirectional_attention_mask import (
    check_layout,
    index_in_document,
    layout_mask_mod,
    may_attend,
)

#: ``--attention-impl`` choices: ``auto`` picks per batch (:func:`choose_attention_impl`).
ATTENTION_IMPLS = ("auto", "sdpa", "flex")
#: Queries and keys per block of the BlockMask (FlexAttention's default).
BLOCK_SIZE = 128
#: Distinct compiled shapes allowed for ``flex_attention`` (torch's default is 8).
RECOMPILE_LIMIT = 64
#: ``auto``: the least share of the dense scores a batch's BlockMask must skip for FlexAttention
#: to be taken, by device type and dtype (the measured break-even is about 80% in fp32 and 87% in
#: bf16 on CPU, 73-84% in bf16 on an H200: docs/bidirectional.md, "Attention paths"; fp32 on CUDA
#: is not measured and takes the bf16 threshold).
MIN_SKIPPED = {
    "cpu": {torch.float32: 0.8, torch.bfloat16: 0.9, torch.float16: 0.9},
    "cuda": {torch.float32: 0.85, torch.bfloat16: 0.85, torch.float16: 0.85},
}


def flex_attention_available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``, torch >=
    2.5)."""
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def compiled_flex_attention() -> Callable:
    """``torch.compile(flex_attention)``, made on first use and kept for the process, with
    dynamo's recompile limit raised to at least :data:`RECOMPILE_LIMIT` once, here (a config
    patched around every call would cost each call a config snapshot and guard check), so that
    a run with many packed lengths keeps the compiled kernel. Static shapes: in torch 2.13 the
    CPU kernel compiled with a symbolic length or batch size fails to build."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    config = torch._dynamo.config  # recompile_limit, called cache_size_limit before torch 2.6
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
    return torch.compile(flex_attention, dynamic=False)


def run_flex_attention(q: Tensor, k: Tensor, v: Tensor, block_mask, scale: float) -> Tensor:
    """The compiled ``flex_attention`` (:func:`compiled_flex_attention`)."""
    return compiled_flex_attention()(q, k, v, block_mask=block_mask, scale=scale)


def flex_unsupported_reason(device: torch.device, needs_grad: bool,
                            attention_dropout: float) -> Optional[str]:
    """Why FlexAttention cannot run a call on ``device`` (``needs_grad``: the call's outputs
    need gradients; ``attention_dropout``: the dropout probability on attention weights in
    effect), or ``None`` when it can."""
    if not flex_attention_available():
        return f"torch {torch.__version__} has no FlexAttention (torch >= 2.5 has)"
    if attention_dropout > 0:
        return (f"FlexAttention computes no attention dropout, and this call trains with "
                f"--attention-dropout {attention_dropout:g}")
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        if needs_grad:
            return (f"FlexAttention has no CPU backward in torch {torch.__version__} "
                    "(training on CPU needs gradients)")
        return None
    return f"FlexAttention runs on CUDA, and on CPU without gradients; not on {device.type}"


def choose_attention_impl(requested: str, device: torch.device, needs_grad: bool,
                          attention_dropout: float, length: int) -> str:
    """The path, ``"sdpa"`` or ``"flex"``, of a call with rows of ``length`` tokens.

    ``sdpa`` always; ``flex`` where FlexAttention can run (:func:`flex_unsupported_reason`),
    else a ``ValueError`` naming the flag; ``auto``: ``flex`` where it can run and the rows span
    more than one block (a single block has nothing to skip), else ``sdpa``."""
    if requested not in ATTENTION_IMPLS:
        raise ConfigError(f"--attention-impl {requested!r}: choose one of "
                          f"{', '.join(ATTENTION_IMPLS)}")
    if requested == "sdpa":
        return "sdpa"
    reason = flex_unsupported_reason(device, needs_grad, attention_dropout)
    if requested == "flex":
        if reason is not None:
            raise ConfigError(f"--attention-impl flex cannot run here: {reason}. Use "
                              "--attention-impl auto (FlexAttention where it runs, SDPA "
                              "elsewhere) or sdpa")
        return "flex"
    return "flex" if reason is None and length > BLOCK_SIZE else "sdpa"


def flex_pays_off(blocks, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``auto`` takes FlexAttention for a batch it can run (docs/bidirectional.md,
    "Attention paths"): where ``blocks`` (a :class:`LayoutBlocks` or :class:`DocumentBlockMask`) skip at
    least :data:`MIN_SKIPPED` of the scores for ``device``'s type and ``dtype``."""
    return blocks.skipped_fraction() >= min_skipped(device, dtype)


def min_skipped(device: torch.device, dtype: torch.dtype) -> float:
    """The share of the scores a BlockMask must skip for ``auto`` to take FlexAttention on
    ``device`` in ``dtype`` (:data:`MIN_SKIPPED`; CPU's where the device type has no row)."""
    return MIN_SKIPPED.get(device.type, MIN_SKIPPED["cpu"]).get(dtype, 0.9)


def padded_length(length: int, block_size: int = BLOCK_SIZE) -> int:
    """``length`` rounded up to a whole number of blocks (at least one)."""
    return max(1, math.ceil(length / block_size)) * block_size


def packed_blocks(blocks: int) -> int:
    """The packed sequence's blocks for ``blocks`` blocks of rows: the next of 1, 2, 3, 4, 6, 8,
    12, 16, 24, ... (the powers of two and three quarters of each from 4 on)."""
    power = 1
    while power < blocks:
        power *= 2
    three_quarters = power * 3 // 4
    return three_quarters if power >= 4 and three_quarters >= blocks else power


def packed_kv_blocks(flags: Tensor, total_blocks: int, extra: Optional[Tensor] = None):
    """``(counts (1, 1, N), indices (1, 1, N, N))`` int32, FlexAttention's per-query-block key
    lists, from ``flags`` ``(B, n, n)`` (row ``b``'s query block ``i`` computes key block
    ``j``): rows packed end to end into ``N = total_blocks >= B n`` blocks, so block ``(b, i)``
    becomes ``b n + i`` and no block of one row meets another row; the blocks after ``B n``
    (padding) list their own block where ``extra`` (bool) says so. Listed blocks come first,
    in increasing order."""
    batch, blocks, _ = flags.shape
    packed = flags.new_zeros(batch, blocks, batch, blocks)
    rows = torch.arange(batch, device=flags.device)
    packed[rows, :, rows, :] = flags
    packed = packed.view(batch * blocks, batch * blocks)
    if total_blocks > batch * blocks:
        grown = flags.new_zeros(total_blocks, total_blocks)
        grown[:batch * blocks, :batch * blocks] = packed
        if extra is not None:
            tail = torch.arange(batch * blocks, total_blocks, device=flags.device)
            grown[tail, tail] = extra
        packed = grown
    counts = packed.sum(dim=-1, dtype=torch.int32)
    indices = torch.argsort(packed.to(torch.int8), dim=-1, descending=True, stable=True)
    return counts[None, None], indices.to(torch.int32)[None, None]


@dataclasses.dataclass
class DocumentBlockMask:
    """A batch's FlexAttention ``BlockMask`` over the packed layout (module doc), built once
    per batch by :func:`document_block_mask` and shared by every layer; :meth:`attend` runs one
    layer's attention with it."""

    block_mask: object  # torch.nn.attention.flex_attention.BlockMask
    batch: int
    length: int
    #: each row's length in the packed sequence (a whole number of blocks)
    padded_length: int
    #: the packed sequence's length (``>= batch x padded_length``, whole blocks)
    packed_length: int
    #: per row, query block, key block: computed at all (partial or full)
    computed_blocks: Tensor

    def skipped_fraction(self) -> float:
        """The share of the dense ``B x T_pad x T_pad`` scores of the rows that the BlockMask
        skips (blocks neither partial nor full), the bound on FlexAttention's gain over dense
        SDPA."""
        return 1.0 - float(self.computed_blocks.float().mean())

    def attend(self, q: Tensor, k: Tensor, v: Tensor, num_heads: int, scale: float) -> Tensor:
        """``softmax(q k^T scale + mask) v`` for ``q``, ``k``, ``v`` ``(T, B, C)`` (fairseq's
        layout, ``C = num_heads x d``) -> ``(T, B, C)``."""
        length, batch, channels = q.shape
        if (length, batch) != (self.length, self.batch):
            raise ValueError(f"the block mask was built for {self.batch} rows of {self.length} "
                             f"tokens; got {batch} rows of {length}")
        head_dim, padded = channels // num_heads, self.padded_length
        tail = self.packed_length - batch * padded

        def pack(x: Tensor) -> Tensor:  # (T, B, C) -> (1, H, L, d), one copy
            x = x.view(length, batch, num_heads, head_dim).permute(2, 1, 0, 3)
            if padded == length and tail == 0:
                return x.reshape(1, num_heads, batch * length, head_dim)
            rows = torch.cat([x, x.new_zeros(num_heads, batch, padded - length, head_dim)], dim=2)
            return torch.cat([rows.reshape(num_heads, batch * padded, head_dim),
                              x.new_zeros(num_heads, tail, head_dim)], dim=1).unsqueeze(0)

        out = run_flex_attention(pack(q), pack(k), pack(v), self.block_mask, scale)
        out = out[0, :, :batch * padded].view(num_heads, batch, padded, head_dim)[:, :, :length]
        return out.permute(2, 1, 0, 3).reshape(length, batch, channels)


@dataclasses.dataclass
class LayoutBlocks:
    """A batch's layout padded to whole blocks, its dense mask there, and which blocks compute
    anything (:func:`layout_blocks`): enough to decide whether FlexAttention pays off
    (:meth:`skipped_fraction`) and then to build either path's mask without evaluating the rule
    again (:meth:`block_mask`, :meth:`dense_mask`)."""

    doc_ids: Tensor  # (B, T_pad)
    bidir_lens: Tensor
    index: Tensor
    cross_document: bool
    length: int
    block_size: int
    #: (B, 1, T_pad, T_pad) bool: may_attend on the padded layout
    allowed: Tensor
    #: (B, n, n) per row, query block, key block: computed at all (partial or full), full
    computed: Tensor
    full: Tensor

    def skipped_fraction(self) -> float:
        """As :meth:`DocumentBlockMask.skipped_fraction`."""
        return 1.0 - float(self.computed.float().mean())

    def dense_mask(self) -> Tensor:
        """:func:`may_attend` of the unpadded layout, ``(B, 1, T, T)`` (a view)."""
        return self.allowed[:, :, :self.length, :self.length]

    def block_mask(self) -> DocumentBlockMask:
        """The :class:`DocumentBlockMask` (:func:`document_block_mask`)."""
        from torch.nn.attention.flex_attention import BlockMask

        batch, padded = self.doc_ids.shape
        block_size, device = self.block_size, self.doc_ids.device
        blocks = padded // block_size
        total_blocks = packed_blocks(batch * blocks)
        total = total_blocks * block_size
        # padding blocks after the rows: their queries attend to themselves (partial diagonal)
        diagonal = torch.ones(total_blocks - batch * blocks, dtype=torch.bool, device=device)
        kv_counts, kv_indices = packed_kv_blocks(self.computed & ~self.full, total_blocks,
                                                 diagonal)
        full_counts, full_indices = packed_kv_blocks(self.full, total_blocks)
        # the same rule over the packed sequence (row 0 of a 1 x L layout; indices within
        # documents computed per row), padded to `total`, for pairs of one row
        tail = total - batch * padded
        row_mask = layout_mask_mod(
            torch.nn.functional.pad(self.doc_ids.reshape(1, -1), (0, tail), value=-1),
            torch.nn.functional.pad(self.bidir_lens.reshape(1, -1), (0, tail), value=0),
            self.cross_document,
            torch.nn.functional.pad(self.index.reshape(1, -1), (0, tail), value=0))
        row_of = (torch.arange(total, device=device) // padded).clamp(max=batch)

        def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return (row_of[q_idx] == row_of[kv_idx]) & row_mask(b, h, q_idx, kv_idx)

        block_mask = BlockMask.from_kv_blocks(kv_counts, kv_indices, full_counts, full_indices,
                                              BLOCK_SIZE=block_size, mask_mod=mask_mod,
                                              seq_lengths=(total, total))
        return DocumentBlockMask(block_mask, batch, self.length, padded, total, self.computed)


def layout_blocks(doc_ids: Tensor, bidir_lens: Tensor, cross_document: bool = True,
                  block_size: int = BLOCK_SIZE) -> LayoutBlocks:
    """The :class:`LayoutBlocks` of the layout ``doc_ids`` / ``bidir_lens`` ``(B, T)`` (the
    batch fields, ``-1`` / ``0`` at padding): each row padded to ``T_pad`` (padding columns),
    :func:`may_attend` on that, and its block flags."""
    check_layout(doc_ids, bidir_lens)
    batch, length = doc_ids.shape
    padded = padded_length(length, block_size)
    blocks = padded // block_size
    doc_ids = torch.nn.functional.pad(doc_ids, (0, padded - length), value=-1)
    bidir_lens = torch.nn.functional.pad(bidir_lens, (0, padded - length), value=0)
    index = index_in_document(doc_ids)
    with torch.no_grad():
        allowed = may_attend(doc_ids, bidir_lens, cross_document, index)
        tiles = allowed.view(batch, blocks, block_size, blocks, block_size)
        computed = tiles.amax(dim=(2, 4))  # any pair allowed (one pass; any() takes one dim)
        full = tiles.amin(dim=(2, 4))  # every pair allowed
    return LayoutBlocks(doc_ids, bidir_lens, index, cross_document, length, block_size, allowed,
                        computed, full)


def document_block_mask(doc_ids: Tensor, bidir_lens: Tensor, cross_document: bool = True,
                        block_size: int = BLOCK_SIZE) -> DocumentBlockMask:
    """The :class:`DocumentBlockMask` of the layout ``doc_ids`` / ``bidir_lens`` ``(B, T)``
    (the batch fields, ``-1`` / ``0`` at padding): each row padded to ``T_pad`` (padding
    columns), the block flags from :func:`may_attend` on that padded layout
    (:func:`layout_blocks`), the rows packed end to end and padded to whole
    :func:`packed_blocks`, and the ``mask_mod`` the same rule on the packed layout, restricted
    to pairs of one row."""
    return layout_blocks(doc_ids, bidir_lens, cross_document, block_size).block_mask()
