"""Time per update of 3ML-self and 3ML-cross against RoBERTa, and the measured speedup.

The 3ML paper (Liao et al., 2022, §5.3, Table 3, App. D) defines speedup as "RoBERTa-15% FLOPs
divided by the model's FLOPs at equal batch and updates". This script measures the wall-clock
counterpart: the median time of one update (forward, backward, ``AdamW(fused=True)`` step) of
each model at the same batch size and sequence length, and reports
``speedup = time(RoBERTa, 15%) / time(model, mask rate)``.

* Models are built as ``fairseq-train`` builds them (``fairseq_ext.training.model_building.build_arch``)
  with fairseq's ``masked_lm`` task over a dictionary of ``--vocab-size`` symbols, ``<mask>``
  included (50265 like RoBERTa's).
* Batches are random token blocks (``<s>`` + ``seq_len - 1`` tokens, no padding, as
  ``--sample-break-mode none`` makes them) corrupted by fairseq's own ``MaskTokensDataset``
  (``mask_prob`` = the mask rate, 80/10/10 [MASK]/random/unchanged), built before timing.
* The loss is our ``masked_lm_categories`` criterion (fairseq's ``masked_lm`` loss plus
  per-category logging).
* Timing rounds are interleaved (A, B, C, A, B, C, ...) so that drift on a shared machine hits
  every model alike; each update is timed with a wall clock, with ``torch.cuda.synchronize()``
  on CUDA, and the median of the rounds after ``--warmup`` is reported.
* The encoder's effective length (mean kept tokens per sequence, and the padded width its
  attention runs on) is reported next to the speedup: it is where 3ML's gain comes from.
  ``--padded-encoder`` also times each 3ML model with its encoder on that padded grid (every
  row padded to the longest kept row, fairseq's own layers) instead of the packed tokens.
* **Guard**: each 3ML row's measured/analytic ratio is checked against ``--guard`` (0.95) and
  the verdict printed under the table, with the roofline: the machine's own matmul rate
  (a GEMM of the encoder's FFN shape, timed here) and the share of it each update achieves.
* **Outside matmuls**: after timing, ``--share-updates`` updates of each case are profiled and
  the share of the update spent outside the matmul kernels (``mm``/``addmm``/``bmm`` and the
  attention kernel: encoder, decoder and head matmuls) is printed beside the speedup. That is
  the bookkeeping a FLOP count does not see: softmax and loss, LayerNorm, GELU, dropout, the
  optimizer, 3ML's packing.

``--profile`` instead profiles a few updates of each model (torch.profiler) and reports the
share of the update spent in 3ML's packing/scatter bookkeeping: the ops called directly from
``fairseq_ext/models/three_ml.py`` and ``fairseq_ext/modules/token_selection.py`` (packing,
gathers, boolean-mask indexing, ``ensure_attendable``, ``.item()`` reads) and their backward,
in host time on CPU and kernel time on CUDA, and counts the ops that sync with the device.

The table sets the measured speedup beside the analytic one (App. D formulas,
:mod:`fairseq_ext.flops`, at the same arch, length, masking rate and vocabulary) and their
ratio. Adding a column is one entry in :data:`COLUMNS`: a header and a function of (row,
RoBERTa-15% row).

Examples::

    .venv/bin/python scripts/bench_3ml.py --size small --seq-len 128 --batch-size 16
    .venv/bin/python scripts/bench_3ml.py --size base --seq-len 512 --batch-size 32 \\
        --device cuda --dtype bf16 --mask-rates 0.15,0.4,0.5 --json bench-base-512.json
    .venv/bin/python scripts/bench_3ml.py --size small --profile --profile-rate 0.5
    # the bisected shape: 6 layers of 512, 256 tokens, batch 8, the demo's 8000 pieces
    .venv/bin/python scripts/bench_3ml.py --size base --encoder-layers 6 --encoder-embed-dim 512 \
        --seq-len 256 --batch-size 8 --vocab-size 8000 --dropout 0 --threads 2 \
        --mask-rates 0.4,0.5 --roberta-rates 0.15 --models roberta,3ml-self --padded-encoder
"""
import argparse
import dataclasses
import itertools
import json
import re
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.data import Dictionary, ListDataset, MaskTokensDataset, data_utils
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from fairseq_ext.criterions.masked_lm_categories import MaskedLmCategoriesLoss
from fairseq_ext.training.model_building import build_arch
from fairseq_ext.training.output_files import refused, write_text
from fairseq_ext_lab.benchmarks.common import (
    environment,
    interleaved_rounds,
    load_average,
    move_to,
    synchronize,
    timed,
)
from fairseq_ext_lab.benchmarks.device_reads import count_step, sized_as_on_cuda

#: The command line (scripts/bench_3ml.py).
PROG = "bench_3ml.py"
MODELS = ("roberta", "3ml-self", "3ml-cross")
BASELINE_RATE = 0.15

#: ``--size`` -> the fairseq architecture of each model. RoBERTa-large is the pre-LN variant
#: (24hBERT, like 3ML-large); base is fairseq's ``roberta_base`` (post-LN).
SIZES: Dict[str, Dict[str, str]] = {
    "base": {"roberta": "roberta_base", "3ml-self": "3ml_self_base", "3ml-cross": "3ml_cross_base"},
    "large": {"roberta": "roberta_large_prenorm", "3ml-self": "3ml_self_large",
              "3ml-cross": "3ml_cross_large"},
    "small": {"roberta": "roberta_small", "3ml-self": "3ml_self_small",
              "3ml-cross": "3ml_cross_small"},
    "tiny": {"roberta": "roberta_tiny", "3ml-self": "3ml_self_tiny", "3ml-cross": "3ml_cross_tiny"},
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# --------------------------------------------------------------------------- setup


def build_task(vocab_size: int, seq_len: int, seed: int) -> MaskedLMTask:
    """fairseq's ``masked_lm`` task over a synthetic dictionary of ``vocab_size`` symbols
    (fairseq's 4 specials, filler words, and the ``<mask>`` the task adds)."""
    dictionary = Dictionary()
    while len(dictionary) < vocab_size - 1:
        dictionary.add_symbol(f"w{len(dictionary)}")
    task = MaskedLMTask(MaskedLMConfig(data="", tokens_per_sample=seq_len, seed=seed), dictionary)
    assert len(task.source_dictionary) == vocab_size
    return task


def arch_overrides(encoder_layers: Optional[int] = None, encoder_embed_dim: Optional[int] = None,
                   dropout: Optional[float] = None) -> Dict[str, object]:
    """Flags over the size's arch: the encoder's depth and width (FFN 4x, heads of 64; the 3ML
    decoder follows from the width as its arch says) and the dropout (hidden and attention)."""
    overrides: Dict[str, object] = {}
    if encoder_layers is not None:
        overrides["encoder_layers"] = encoder_layers
    if encoder_embed_dim is not None:
        overrides.update(encoder_embed_dim=encoder_embed_dim,
                         encoder_ffn_embed_dim=4 * encoder_embed_dim,
                         encoder_attention_heads=max(1, encoder_embed_dim // 64))
    if dropout is not None:
        overrides.update(dropout=dropout, attention_dropout=dropout)
    return overrides


def build_model(arch: str, task: MaskedLMTask, seq_len: int, seed: int,
                overrides: Optional[Dict[str, object]] = None,
                padded_encoder: bool = False) -> torch.nn.Module:
    """The model as ``fairseq-train --arch ARCH --tokens-per-sample SEQ_LEN`` builds it, with
    ``overrides`` as further flags; ``padded_encoder`` runs a 3ML encoder on the padded grid
    (fairseq's own layers) instead of the packed tokens."""
    torch.manual_seed(seed)
    model = build_arch(arch, task, seq_len, **(overrides or {}))
    if padded_encoder:
        model.encoder.runs_packed = False
    return model


def corrupted_batches(task: MaskedLMTask, mask_rate: float, seq_len: int, batch_size: int,
                      n_batches: int, seed: int) -> List[dict]:
    """``n_batches`` fairseq ``masked_lm`` samples of random tokens corrupted at ``mask_rate``.

    The same token blocks (same seed) are used at every rate; only the corruption differs.
    """
    d = task.source_dictionary
    generator = torch.Generator().manual_seed(seed)
    n = batch_size * n_batches
    blocks = [
        torch.cat([torch.tensor([d.bos()]),
                   torch.randint(d.nspecial, task.mask_idx, (seq_len - 1,), generator=generator)])
        for _ in range(n)
    ]
    src_dataset, target_dataset = MaskTokensDataset.apply_mask(
        ListDataset(blocks, sizes=np.full(n, seq_len)), d, pad_idx=d.pad(), mask_idx=task.mask_idx,
        seed=seed, mask_prob=mask_rate, leave_unmasked_prob=task.cfg.leave_unmasked_prob,
        random_token_prob=task.cfg.random_token_prob)
    batches = []
    for first in range(0, n, batch_size):
        indices = range(first, first + batch_size)
        src = data_utils.collate_tokens([src_dataset[i] for i in indices], d.pad())
        target = data_utils.collate_tokens([target_dataset[i] for i in indices], d.pad())
        batches.append({
            "net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(dim=1)},
            "target": target,
            "ntokens": int(src.ne(d.pad()).sum()),
            "nsentences": batch_size,
        })
    return batches


@dataclasses.dataclass
class Lengths:
    """Sequence lengths one model's layers run on, averaged over the batches of one rate."""

    encoder: float  # mean tokens per sequence the encoder sees (3ML: kept tokens)
    encoder_padded: float  # mean padded width of the encoder batch (its real sequence length)
    decoder_padded: Optional[float]  # the 3ML decoder's padded width; None for RoBERTa
    predicted: float  # mean corrupted (predicted) tokens per sequence


def sequence_lengths(model: str, batches: Sequence[dict], pad: int, mask_idx: int) -> Lengths:
    """What ``ThreeMLModel.masked_lm_logits`` computes: the encoder keeps the real tokens that
    are not ``<mask>``, packed to the longest kept row; 3ML-self's decoder runs on the full
    length, 3ML-cross's on the longest row of [MASK]s. RoBERTa runs on everything."""
    encoder, encoder_padded, decoder_padded, predicted = [], [], [], []
    for sample in batches:
        src = sample["net_input"]["src_tokens"]
        real, is_mask = src.ne(pad), src.eq(mask_idx)
        kept = (real if model == "roberta" else real & ~is_mask).sum(dim=1).float()
        encoder.append(kept.mean().item())
        encoder_padded.append(kept.max().item())
        if model == "3ml-self":
            decoder_padded.append(src.size(1))
        elif model == "3ml-cross":
            decoder_padded.append(is_mask.sum(dim=1).max().item())
        predicted.append(sample["target"].ne(pad).sum(dim=1).float().mean().item())
    return Lengths(statistics.fmean(encoder), statistics.fmean(encoder_padded),
                   statistics.fmean(decoder_padded) if decoder_padded else None,
                   statistics.fmean(predicted))


class UpdateRunner:
    """One model with its optimizer: :meth:`update` is one training update on a sample."""

    def __init__(self, model: torch.nn.Module, criterion, device: torch.device,
                 dtype: torch.dtype):
        self.model = model.to(device).train()
        self.criterion = criterion
        self.device = device
        self.optimizer = torch.optim.AdamW(  # Table 4's Adam settings
            self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01,
            fused=True)
        self.autocast = (nullcontext() if dtype is torch.float32
                         else torch.autocast(device_type=device.type, dtype=dtype))
        self.scaler = torch.amp.GradScaler(device.type) if dtype is torch.float16 else None

    def update(self, sample: dict) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            loss, sample_size, _ = self.criterion(self.model, sample)
        loss = loss / sample_size  # fairseq normalises the gradient by the sample size
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()


# --------------------------------------------------------------------------- measurement


@dataclasses.dataclass(frozen=True)
class Case:
    model: str  # one of MODELS
    mask_rate: float
    padded: bool = False  # a 3ML encoder on the padded grid (--padded-encoder)

    @property
    def runner_key(self):
        return self.model, self.padded


@dataclasses.dataclass
class Result:
    model: str
    arch: str
    mask_rate: float
    seq_len: int
    vocab_size: int
    ms: float  # median ms per update
    ms_p25: float
    ms_p75: float
    lengths: Lengths
    times_ms: List[float]
    overrides: Dict[str, object] = dataclasses.field(default_factory=dict)
    batch_size: int = 1
    padded: bool = False
    outside_matmuls: Optional[float] = None  # share of the update outside matmul kernels
    ops: Optional[float] = None  # aten ops dispatched per update
    reads: Optional[float] = None  # device-to-host reads per update, sized as on CUDA

    @property
    def label(self) -> str:
        return self.model + (" (padded enc)" if self.padded else "")

    def to_json(self, baseline: "Result") -> dict:
        record = dataclasses.asdict(self)
        record.update(label=self.label, speedup=baseline.ms / self.ms,
                      analytic_speedup=analytic_speedup(self, baseline),
                      measured_over_analytic=measured_over_analytic(self, baseline),
                      achieved_flops_per_s=achieved_flops(self))
        return record


def timed_update(runner: UpdateRunner, sample: dict) -> float:
    """Wall-clock seconds of one update, device work included."""
    return timed(lambda: runner.update(sample), runner.device)


def interleaved_timings(runners: Dict[tuple, UpdateRunner], cases: Sequence[Case],
                        batches: Dict[float, List[dict]], warmup: int, iters: int,
                        progress: bool = True) -> Dict[Case, List[float]]:
    """Seconds per update of every case, rounds interleaved: each round times one update of
    every case in turn, each case walking through its rate's batches; the first ``warmup``
    rounds are dropped."""
    def next_update(case: Case):
        rate_batches, step = batches[case.mask_rate], itertools.count()
        return lambda: timed_update(runners[case.runner_key],
                                    rate_batches[next(step) % len(rate_batches)])

    return interleaved_rounds({case: next_update(case) for case in cases}, warmup, iters,
                              progress)


def summarize(case: Case, arch: str, seq_len: int, vocab_size: int, seconds: List[float],
              lengths: Lengths, overrides: Optional[Dict[str, object]] = None,
              batch_size: int = 1) -> Result:
    ms = [1000.0 * s for s in seconds]
    quartiles = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    return Result(case.model, arch, case.mask_rate, seq_len, vocab_size, statistics.median(ms),
                  quartiles[0], quartiles[2], lengths, ms, dict(overrides or {}), batch_size,
                  case.padded)


# --------------------------------------------------------------------------- table


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: its header and its cell, a function of (row, RoBERTa-15% row)."""

    header: str
    cell: Callable[[Result, Result], str]


def _optional(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


#: The printed table. The analytic (App. D FLOPs) speedup is to be one more entry here, e.g.
#: ``Column("analytic", lambda row, base: f"{analytic_speedup(row, base):.2f}")``.
COLUMNS: List[Column] = [
    Column("model", lambda row, base: row.label),
    Column("mask", lambda row, base: f"{row.mask_rate:.0%}"),
    Column("ms/update", lambda row, base: f"{row.ms:.1f}"),
    Column("IQR ms", lambda row, base: f"{row.ms_p25:.1f}-{row.ms_p75:.1f}"),
    Column("speedup", lambda row, base: f"{base.ms / row.ms:.2f}"),
    Column("analytic", lambda row, base: f"{analytic_speedup(row, base):.2f}"),
    Column("measured/analytic", lambda row, base: f"{measured_over_analytic(row, base):.3f}"),
    Column("outside matmuls", lambda row, base: _optional(row.outside_matmuls, ".1%")),
    Column("ops/update", lambda row, base: _optional(row.ops, ".0f")),
    Column("reads/update", lambda row, base: _optional(row.reads, "g")),
    Column("GFLOP/s", lambda row, base: f"{achieved_flops(row) / 1e9:.0f}"),
    Column("enc len", lambda row, base: f"{row.lengths.encoder:.1f}"),
    Column("enc padded", lambda row, base: f"{row.lengths.encoder_padded:.1f}"),
    Column("dec padded", lambda row, base: _optional(row.lengths.decoder_padded, ".1f")),
    Column("predicted", lambda row, base: f"{row.lengths.predicted:.1f}"),
]


def analytic_training_flops(result: Result) -> float:
    """App. D training FLOPs per sequence of a result's arch, length, rate and vocabulary."""
    from fairseq_ext import flops

    spec = flops.spec_for_arch(result.arch, **{k: v for k, v in result.overrides.items()
                                               if k.startswith("encoder_")})
    return flops.training_flops_per_sequence(spec, result.seq_len, result.mask_rate,
                                             result.vocab_size)


def analytic_speedup(row: Result, base: Result) -> float:
    return analytic_training_flops(base) / analytic_training_flops(row)


def measured_over_analytic(row: Result, base: Result) -> float:
    return base.ms / row.ms / analytic_speedup(row, base)


def achieved_flops(row: Result) -> float:
    """App. D training FLOPs per second of one update (the batch's sequences)."""
    return analytic_training_flops(row) * row.batch_size / (row.ms / 1000.0)


def format_table(results: Sequence[Result], baseline: Result,
                 columns: Sequence[Column] = COLUMNS) -> str:
    """A Markdown table (pastes into docs/benchmarks.md), one row per result."""
    rows = [[column.header for column in columns]]
    rows += [[column.cell(result, baseline) for column in columns] for result in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["| " + " | ".join(cell.rjust(w) for cell, w in zip(row, widths)) + " |"
             for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)


# --------------------------------------------------------------------------- profile

#: Files whose directly called ops are 3ML's bookkeeping (everything but the layers and head).
GLUE_FILES = ("fairseq_ext/models/three_ml.py", "fairseq_ext/modules/token_selection.py")
#: Glue ops that are arithmetic a RoBERTa does as well (adding positions, zeroing padding).
ARITHMETIC_OPS = {"aten::add", "aten::mul", "aten::rsub", "aten::sub", "aten::type_as"}
#: Ops that wait for the device on CUDA (a data-dependent size or a scalar read back).
SYNC_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select"}
_PY_FRAME = re.compile(r"^(?P<file>.+\.py)\((?P<line>\d+)\): (?P<func>.+)$")


@dataclasses.dataclass
class ProfileShare:
    model: str
    mask_rate: float
    step_ms: float  # wall ms per update while profiling (profiler overhead included)
    glue_forward_ms: float
    glue_backward_ms: float
    bookkeeping_ms: float  # glue forward + backward, arithmetic left out
    glue_syncs: float  # per update: ops that wait for the device on CUDA, from the glue
    other_syncs: float  # ... from the rest of the model and the loss (optimizer left out)
    top_ops: Dict[str, float]  # glue op (forward, or "backward: Node") -> ms per update

    @property
    def glue_share(self) -> float:
        return (self.glue_forward_ms + self.glue_backward_ms) / self.step_ms

    @property
    def bookkeeping_share(self) -> float:
        return self.bookkeeping_ms / self.step_ms


def _is_node(event) -> bool:
    return event.name.startswith("autograd::engine::evaluate_function")


def _is_glue_frame(event) -> bool:
    match = _PY_FRAME.match(event.name)
    return bool(match) and match.group("file").replace("\\", "/").endswith(GLUE_FILES)


def _origin(event, stop_at_aten: bool):
    """Where an op was called from: the nearest enclosing Python frame (``"python"``) or
    autograd node (``"backward"``), or, with ``stop_at_aten``, an enclosing aten op
    (``"nested"``). Returns ``(kind, event)``, ``(None, None)`` when there is none."""
    parent = event.cpu_parent
    while parent is not None:
        if stop_at_aten and parent.name.startswith("aten::"):
            return "nested", parent
        if _is_node(parent):
            return "backward", parent
        if _PY_FRAME.match(parent.name):
            return "python", parent
        parent = parent.cpu_parent
    return None, None


def _in_optimizer(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("Optimizer.step", "aten::_fused_adam")) or (
                "torch/optim/" in parent.name):
            return True
        parent = parent.cpu_parent
    return False


def _event_ms(event, device_type: str) -> float:
    """An event's inclusive time: host time on CPU, its kernels' time on CUDA."""
    if device_type == "cuda":
        return getattr(event, "device_time_total", 0.0) / 1000.0
    return event.cpu_time_total / 1000.0


def attribute_glue(events, updates: int, model: str, mask_rate: float, step_ms: float,
                   device_type: str = "cpu") -> ProfileShare:
    """Split a profile's time into 3ML glue and the rest.

    Forward: the top-level aten ops whose calling Python frame is in :data:`GLUE_FILES`
    (inclusive time). Backward: the autograd nodes those ops created, matched by sequence
    number (the node numbered ``s`` is created by the last top-level forward op recorded with
    ``s``; ops that create no node only peek at the counter). Host syncs are attributed the
    same way; the optimizer's are left out (fused AdamW reads its step count on the host on
    CPU only). On CUDA the times are those of the kernels the ops launched, against the wall
    time per update; the stalls the syncs cause are not in them (only counted).
    """
    forward_ops = []  # (op, calling frame), in call order
    for event in events:
        if event.name.startswith("aten::"):
            kind, frame = _origin(event, stop_at_aten=True)
            if kind == "python":
                forward_ops.append((event, frame))
    forward_ops.sort(key=lambda pair: pair[0].time_range.start)
    creator = {op.sequence_nr: (op, frame) for op, frame in forward_ops if op.sequence_nr >= 0}

    def glue_node(node) -> bool:
        forward = creator.get(node.sequence_nr)
        return forward is not None and _is_glue_frame(forward[1])

    top: Dict[str, float] = {}
    glue_forward = glue_backward = bookkeeping = 0.0
    for op, frame in forward_ops:
        if _is_glue_frame(frame):
            ms = _event_ms(op, device_type)
            glue_forward += ms
            bookkeeping += 0.0 if op.name in ARITHMETIC_OPS else ms
            top[op.name] = top.get(op.name, 0.0) + ms
    for node in events:
        if not _is_node(node) or (node.cpu_parent is not None and _is_node(node.cpu_parent)):
            continue
        if glue_node(node):
            ms = _event_ms(node, device_type)
            glue_backward += ms
            bookkeeping += 0.0 if creator[node.sequence_nr][0].name in ARITHMETIC_OPS else ms
            name = "backward: " + node.name.split(": ", 1)[-1]
            top[name] = top.get(name, 0.0) + ms
    glue_syncs = other_syncs = 0
    for event in events:
        if event.name not in SYNC_OPS or _in_optimizer(event):
            continue
        kind, where = _origin(event, stop_at_aten=False)
        from_glue = ((kind == "python" and _is_glue_frame(where))
                     or (kind == "backward" and glue_node(where)))
        if from_glue:
            glue_syncs += 1
        else:
            other_syncs += 1
    return ProfileShare(
        model, mask_rate, step_ms, glue_forward / updates, glue_backward / updates,
        bookkeeping / updates, glue_syncs / updates, other_syncs / updates,
        {name: ms / updates for name, ms in sorted(top.items(), key=lambda kv: -kv[1])})


def profiled_updates(runner: UpdateRunner, batches: List[dict], updates: int,
                     with_stack: bool = False):
    """``updates`` updates under ``torch.profiler`` (CUDA kernels too on a GPU): their events
    and the wall ms per update while profiling."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if runner.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, with_stack=with_stack) as prof:
        synchronize(runner.device)
        start = time.perf_counter()
        for i in range(updates):
            runner.update(batches[i % len(batches)])
        synchronize(runner.device)
        step_ms = 1000.0 * (time.perf_counter() - start) / updates
    return prof.events(), step_ms


def profile_updates(runner: UpdateRunner, batches: List[dict], case: Case, warmup: int,
                    updates: int) -> ProfileShare:
    for i in range(warmup):
        runner.update(batches[i % len(batches)])
    events, step_ms = profiled_updates(runner, batches, updates, with_stack=True)
    return attribute_glue(events, updates, case.model, case.mask_rate, step_ms,
                          runner.device.type)


def format_profile(shares: Sequence[ProfileShare], top: int = 6) -> str:
    lines = ["| model | mask | ms/update (profiled) | glue fwd ms | glue bwd ms | glue share "
             "| bookkeeping share | device syncs/update: glue + rest |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in shares:
        lines.append(
            f"| {s.model} | {s.mask_rate:.0%} | {s.step_ms:.1f} | {s.glue_forward_ms:.2f} | "
            f"{s.glue_backward_ms:.2f} | {s.glue_share:.2%} | {s.bookkeeping_share:.2%} | "
            f"{s.glue_syncs:.0f} + {s.other_syncs:.0f} |")
    for s in shares:
        if s.top_ops:
            ops = ", ".join(f"{name} {ms:.2f}" for name, ms in list(s.top_ops.items())[:top])
            lines.append(f"\n{s.model} {s.mask_rate:.0%}, largest glue ops (ms/update): {ops}")
    return "\n".join(lines)


# --------------------------------------------------------------- outside matmuls, roofline

#: The matmul kernels of an update: the linear layers' GEMMs (forward and both backward
#: products) and the attention kernel (its Q K^T and P V products, with the softmax between
#: them); the encoder's, the decoder's and the head's alike.
MATMUL_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward",
})


def outside_matmul_share(events, step_ms: float, updates: int,
                         device_type: str = "cpu") -> float:
    """Share of an update's wall time outside :data:`MATMUL_OPS`: ``1 - matmul time / step``,
    the matmul time being the ops' own (self) time, host time on CPU and kernel time on
    CUDA."""
    matmul_ms = 0.0
    for event in events:
        if event.name in MATMUL_OPS:
            us = (getattr(event, "self_device_time_total", 0.0) if device_type == "cuda"
                  else event.self_cpu_time_total)
            matmul_ms += us / 1000.0
    return max(0.0, 1.0 - matmul_ms / updates / step_ms)


def profile_outside_matmuls(runner: UpdateRunner, batches: List[dict], updates: int) -> float:
    """:func:`outside_matmul_share` of ``updates`` profiled updates (after the timing rounds:
    the runner is warm)."""
    events, step_ms = profiled_updates(runner, batches, updates)
    return outside_matmul_share(events, step_ms, updates, runner.device.type)


def count_ops_and_reads(runner: UpdateRunner, sample: dict) -> Tuple[float, float]:
    """Aten ops dispatched and device-to-host reads of one update (model, loss, backward,
    optimizer), the model sized as on CUDA
    (:mod:`~fairseq_ext_lab.benchmarks.device_reads`)."""
    with sized_as_on_cuda(runner.model):
        counts = count_step(lambda: runner.update(sample))
    return float(counts.ops), float(counts.total_reads)


def gemm_rate(rows: int, dim: int, device: torch.device, dtype: torch.dtype,
              reps: int = 10) -> float:
    """FLOP/s of this machine's ``(rows x dim) @ (dim x 4 dim)`` matmul (the FFN's first GEMM
    at the benchmark's shape), median of ``reps``: the roofline of an update whose FLOPs are
    all in such GEMMs."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, dim, generator=generator).to(device, dtype)
    b = torch.randn(dim, 4 * dim, generator=generator).to(device, dtype)
    seconds = [timed(lambda: torch.mm(a, b), device) for _ in range(reps + 2)][2:]
    return 2.0 * rows * dim * 4 * dim / statistics.median(seconds)


def guard_lines(results: Sequence[Result], baseline: Result, threshold: float,
                peak_flops: Optional[float]) -> List[str]:
    """The verdict on each 3ML row's measured/analytic ratio, and the roofline."""
    lines = []
    for row in results:
        if row.model == "roberta":
            continue
        ratio = measured_over_analytic(row, baseline)
        verdict = ">= {:.2f} ok" if ratio >= threshold else "< {:.2f} BELOW"
        lines.append(f"guard: {row.label} {row.mask_rate:.0%}: measured/analytic {ratio:.3f} "
                     + verdict.format(threshold))
    if peak_flops:
        achieved = ", ".join(f"{row.label} {row.mask_rate:.0%} {achieved_flops(row) / peak_flops:.0%}"
                             for row in results)
        lines.append(f"roofline: this machine's FFN-shaped GEMM runs at {peak_flops / 1e9:.0f} "
                     f"GFLOP/s; share of it each update achieves (App. D FLOPs / time): "
                     f"{achieved}")
    return lines


# --------------------------------------------------------------------------- main


def parse_rates(text: str) -> List[float]:
    rates = [float(x) for x in text.split(",") if x.strip()]
    for rate in rates:
        if not 0.0 < rate < 1.0:
            raise argparse.ArgumentTypeError(f"mask rates must be in (0, 1); got {rate}")
    return rates


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--encoder-layers", type=int, default=None,
                   help="encoder layers instead of the size's (every model)")
    p.add_argument("--encoder-embed-dim", type=int, default=None,
                   help="encoder width instead of the size's: FFN 4x, heads of 64, the 3ML "
                        "decoder as its arch derives it")
    p.add_argument("--dropout", type=float, default=None,
                   help="dropout and attention dropout instead of the arch's")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=50265,
                   help="dictionary size, <mask> included (RoBERTa's BPE: 50265)")
    p.add_argument("--mask-rates", type=parse_rates, default=parse_rates("0.15,0.3,0.4,0.5,0.6"),
                   help="comma-separated mask rates (--mask-prob) of the 3ML models")
    p.add_argument("--roberta-rates", type=parse_rates, default=None,
                   help="mask rates RoBERTa is timed at (default: --mask-rates); 15%% is always "
                        "timed, it is the speedup's reference")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {','.join(MODELS)} (roberta is required)")
    p.add_argument("--padded-encoder", action="store_true",
                   help="also time each 3ML model with its encoder on the padded grid (every "
                        "row padded to the longest kept row) instead of the packed tokens")
    p.add_argument("--guard", type=float, default=0.95,
                   help="measured/analytic ratio each 3ML row is checked against")
    p.add_argument("--share-updates", type=int, default=2,
                   help="profiled updates per case for the share outside matmuls (0: skip)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="bf16/fp16 run under torch.autocast (fp16 with a GradScaler)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    p.add_argument("--iters", type=int, default=10, help="timed rounds (median reported)")
    p.add_argument("--batches", type=int, default=4,
                   help="distinct corrupted batches per mask rate, cycled")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    p.add_argument("--profile", action="store_true",
                   help="profile the bookkeeping share instead of timing (see module docs)")
    p.add_argument("--profile-rate", type=float, default=0.5)
    p.add_argument("--profile-updates", type=int, default=3)
    p.add_argument("--quiet", action="store_true", help="no per-round progress on stderr")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(args.models) - set(MODELS)
    if unknown or "roberta" not in args.models:
        p.error(f"--models must name roberta and any of {MODELS}; got {args.models}")
    if args.roberta_rates is None:
        args.roberta_rates = list(args.mask_rates)
    if not 0.0 < args.profile_rate < 1.0:
        p.error(f"--profile-rate must be in (0, 1); got {args.profile_rate}")
    if args.warmup < 0 or args.iters < 1 or args.batches < 1 or args.profile_updates < 1 \
            or args.share_updates < 0:
        p.error("--warmup and --share-updates must be >= 0; --iters, --batches and "
                "--profile-updates >= 1")
    for flag in ("encoder_layers", "encoder_embed_dim"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1; got {value}")
    if args.encoder_embed_dim is not None and args.encoder_embed_dim % 64 \
            and args.encoder_embed_dim > 64:
        p.error(f"--encoder-embed-dim {args.encoder_embed_dim}: heads are 64 wide, so the "
                "width must be a multiple of 64 (or at most 64)")
    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout must be in [0, 1); got {args.dropout}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if refused(PROG, [args.json], args.force):  # before anything is built or timed
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    task = build_task(args.vocab_size, args.seq_len, args.seed)
    d = task.source_dictionary
    # Outside hydra, MaskedLmConfig().tpu is the unresolved (truthy) string "${common.tpu}",
    # which would put the criterion on its TPU path (logits at every position).
    criterion = MaskedLmCategoriesLoss(MaskedLmConfig(tpu=False), task)
    archs = SIZES[args.size]
    overrides = arch_overrides(args.encoder_layers, args.encoder_embed_dim, args.dropout)
    variants = [(m, False) for m in args.models] + [
        (m, True) for m in args.models if args.padded_encoder and m != "roberta"]
    runners = {(m, padded): UpdateRunner(
                   build_model(archs[m], task, args.seq_len, args.seed, overrides, padded),
                   criterion, device, dtype)
               for m, padded in variants}

    if args.profile:
        rate = args.profile_rate
        batches = [move_to(b, device) for b in corrupted_batches(
            task, rate, args.seq_len, args.batch_size, args.batches, args.seed)]
        shares = [profile_updates(runners[m, False], batches, Case(m, rate),
                                  max(args.warmup, 1), args.profile_updates)
                  for m in args.models]
        print(format_profile(shares))
        if args.json:
            write_text(args.json, json.dumps({
                "command": sys.argv, "environment": environment(device),
                "profile": [dict(dataclasses.asdict(s), glue_share=s.glue_share,
                                 bookkeeping_share=s.bookkeeping_share) for s in shares],
            }, indent=2), args.force)
        return 0

    cases = []
    for rate in sorted(set(args.mask_rates) | set(args.roberta_rates) | {BASELINE_RATE}):
        for model in args.models:
            wanted = args.roberta_rates if model == "roberta" else args.mask_rates
            if rate in wanted or (model == "roberta" and rate == BASELINE_RATE):
                cases.append(Case(model, rate))
                if (model, True) in runners:
                    cases.append(Case(model, rate, padded=True))
    rates = sorted({case.mask_rate for case in cases})
    load_before = load_average()
    batches = {rate: [move_to(b, device) for b in corrupted_batches(
        task, rate, args.seq_len, args.batch_size, args.batches, args.seed)] for rate in rates}
    times = interleaved_timings(runners, cases, batches, args.warmup, args.iters,
                                progress=not args.quiet)
    results = [summarize(case, archs[case.model], args.seq_len, args.vocab_size, times[case],
                         sequence_lengths(case.model, batches[case.mask_rate], d.pad(),
                                          task.mask_idx), overrides, args.batch_size)
               for case in cases]
    if args.share_updates:
        for case, result in zip(cases, results):
            result.outside_matmuls = profile_outside_matmuls(
                runners[case.runner_key], batches[case.mask_rate], args.share_updates)
    for case, result in zip(cases, results):
        result.ops, result.reads = count_ops_and_reads(runners[case.runner_key],
                                                       batches[case.mask_rate][0])
    results.sort(key=lambda r: (MODELS.index(r.model), r.padded, r.mask_rate))
    baseline = next(r for r in results if r.model == "roberta" and r.mask_rate == BASELINE_RATE)
    encoder_dim = runners["roberta", False].model.args.encoder_embed_dim
    peak = gemm_rate(args.batch_size * args.seq_len, encoder_dim, device, dtype)

    env = environment(device)
    env["load_average_before"] = load_before
    shape = args.size + "".join(f", {k.replace('_', '-')} {v}" for k, v in overrides.items())
    print(f"{shape}, seq len {args.seq_len}, batch {args.batch_size}, vocab {args.vocab_size}, "
          f"{args.dtype} on {env['device']} ({env['threads']} threads), torch {env['torch']}; "
          f"median of {args.iters} interleaved rounds after {args.warmup} warm-up; "
          f"load average {load_before} before, {env['load_average']} after")
    print(format_table(results, baseline))
    guards = guard_lines(results, baseline, args.guard, peak)
    print("\n".join(guards))
    if args.json:
        write_text(args.json, json.dumps({
            "command": sys.argv, "args": {k: (str(v) if isinstance(v, Path) else v)
                                          for k, v in vars(args).items()},
            "environment": env, "gemm_flops_per_s": peak, "guard": guards,
            "results": [r.to_json(baseline) for r in results],
        }, indent=2), args.force)
    return 0
