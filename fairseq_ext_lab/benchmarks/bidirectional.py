"""Training throughput (tokens/s) of ``bidirectional_lm`` (generalized bidirectionality,
Artetxe et al., 2022) against fairseq's causal ``transformer_lm`` of the same size (target: ours /
transformer_lm >= 0.9 on GPU at 125M).

* **Models**, built as ``fairseq-train`` builds them (:func:`fairseq_ext.training.model_building.build_arch`)
  over one dictionary of ``--vocab-size`` symbols, ``<mask>`` included:

  - ours: ``bidir_lm_<size>`` (pre-LN, GELU, dropout 0.1, learned positions, tied embeddings);
  - baseline: fairseq's ``transformer_lm`` model, arch ``transformer_lm_gpt`` (12 x 768, 12
    heads, FFN 3072 at 125M; the same layers, dims, heads and FFN as ours at the other sizes: the
    bare ``transformer_lm`` arch fills nothing outside hydra, ``transformer_lm_gpt`` runs fairseq's
    ``base_lm_architecture``); both with pre-LN, GELU, dropout and attention dropout 0.1, learned
    positions and tied embeddings, so the two differ only in the attention mask (ours:
    a per-batch ``(B, 1, T, T)`` mask through ``scaled_dot_product_attention``; fairseq's: its
    causal future mask) and in the positions (ours: each token's index in its original document;
    fairseq's: ``0 .. T-1`` along the row). Their parameter counts are equal (checked).

* **Batch**: documents of random lengths (log-uniform in ``[--min-doc-len, --max-doc-len]``, each
  ending in ``</s>``) packed into rows of exactly ``--seq-len`` tokens (the last document of a row
  is shortened to fill it), then put through the real pipeline: fairseq's ``TokenBlockDataset``
  (``complete``, as the ``bidirectional_lm`` task packs) and our
  :class:`~fairseq_ext.data.bidirectional_lm_dataset.BidirectionalLMDataset` with ``--variant``'s
  sampler (default ``hyb_pre``: ``n_mask ~ B(n, 0.15)`` masks moved to the end of each document,
  a bidirectional prefix ``n_bidir ~ U(1, n)``, ``n_predict = max(n - n_bidir, n_mask)``, 10% plain
  LM documents). The baseline gets the same rows before reordering, with next-token targets.

* **Loss**: ours, the ``bidirectional_lm`` criterion (logits at the predicted positions only, as
  in training); the baseline, fairseq's ``cross_entropy`` (log-softmax at every position, as
  ``fairseq-train --task language_modeling`` does). That difference is part of what is measured:
  it is what the two trainings run.

* **Same head**: the predicted positions are about half the tokens under ``hyb_pre``, and at
  small sizes the vocabulary projection dominates an update, so ours is also timed with logits at
  every position (``bidirectional_lm_all_logits``, same loss): its ratio to the baseline isolates
  the cost of the mask and positions.

* **Update**: ``zero_grad`` + forward + backward + ``AdamW(fused=True)`` step
  (:class:`~fairseq_ext_lab.benchmarks.three_ml.UpdateRunner`), timed with a wall clock (CUDA
  synchronised) in interleaved rounds (ours, baseline, ours with all logits, ours, ...); the
  median of ``--rounds`` rounds after ``--warmup`` gives ``tokens/s = B x T / median seconds``.

Example::

    .venv/bin/python scripts/bench_bidirectional.py --arch-size small --seq-len 512 \\
        --batch-size 4 --threads 1 --rounds 5

``--part calls``: what one attention call costs the host, FlexAttention with a
batch's BlockMask against SDPA with the dense mask, at each ``--seq-lens`` T, one row and one
head of 16 (no gradient), where the compute vanishes; and the BlockMask's build, once per batch.

``--part flex``: FlexAttention against SDPA's dense mask
(:mod:`fairseq_ext.modules.block_sparse_attention`), the same model and batches on both paths, at
each ``--seq-lens`` T (default 512, 1024, 2048), each figure a ratio (SDPA time / FlexAttention
time) beside the share of the dense scores the BlockMask skips (``skipped``; the attention's
gain is bounded by ``1 / (1 - skipped)``):

* **evaluation rows**: the batches ``fairseq-validate --task bidirectional_lm --eval-mode M
  --tokens-per-sample T --max-tokens N`` scores (one document per row, documents longer than T
  cut into pieces), from the ``valid`` split of ``--data`` (the embedded corpus's data-bin), or
  without ``--data`` from a synthetic data-bin of documents of log-uniform lengths in
  ``[--min-doc-len, --max-doc-len]`` (default 64-1024) with ``--synthetic-tokens`` tokens;
* **training rows**: ``--batch-size`` packed rows of T tokens, documents as in the throughput
  part (``--variant``'s layouts, default ``hyb_pre``; cross-document attention, footnote 4).

Timed, in interleaved rounds (median), each summed over all of a T's batches:

* ``attention``: one layer's attention alone, ``(T, B, C)`` projections in, ``(T, B, C)`` out,
  the model's heads, on evaluation rows and on training rows (forward);
* ``validate``: the whole ``fairseq-validate`` forward: the ``bidirectional_lm`` criterion on
  every evaluation batch under ``torch.no_grad`` (mask building, embeddings, layers, predicted
  logits, loss); its bound is Amdahl's, ``1 / (1 - a + a (1 - skipped))`` with ``a`` the
  attention's measured share of the SDPA forward; also timed with ``--attention-impl auto``
  (the default: per batch, FlexAttention where it pays off), printed below the table;
* ``train step`` (CUDA only: FlexAttention has no CPU backward): one update of the model on the
  training rows (forward, backward, AdamW), both paths with attention dropout 0 (FlexAttention
  has none).

Example (the CPU figures of ``docs/benchmarks.md``)::

    .venv/bin/python scripts/bench_bidirectional.py --part flex --arch-size small \\
        --data data-bin/python-docs-spm8000 --threads 2
"""
import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.data import ListDataset, TokenBlockDataset

from fairseq_ext.criterions.bidirectional_lm import BidirectionalLmLoss
from fairseq_ext.data.bidirectional_eval_dataset import EVAL_MODES
from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset
from fairseq_ext.data.bidirectional_sampling import VARIANTS, ObjectiveSampler
from fairseq_ext.models.sizes import DECODER_LM_SIZES
from fairseq_ext.modules.bidirectional_attention_mask import additive_attention_mask, may_attend
from fairseq_ext.modules.block_sparse_attention import (
    BLOCK_SIZE,
    document_block_mask,
    flex_attention_available,
)
from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch
from fairseq_ext.training.output_files import refused, write_text
from fairseq_ext_lab.benchmarks.common import (
    environment,
    interleaved_rounds,
    load_average,
    move_to,
    quartiles,
    timed,
)
from fairseq_ext_lab.benchmarks.three_ml import DTYPES, UpdateRunner

#: The command line (scripts/bench_bidirectional.py).
PROG = "bench_bidirectional.py"
#: The contestants: ours as trained, fairseq's causal LM, and ours with logits at every position
#: (the same head cost as transformer_lm's, so that the ratio isolates the mask and positions).
MODELS = ("bidirectional_lm", "transformer_lm", "bidirectional_lm_all_logits")
ALL_LOGITS = "bidirectional_lm_all_logits"
ARCH_SIZES = ("125m", "small", "mini", "tiny")
#: --part: training throughput against transformer_lm; FlexAttention against SDPA; the
#: per-call host cost of each path.
PARTS = ("throughput", "flex", "calls")
#: The two attention paths of --part flex, as --attention-impl names them.
PATHS = ("sdpa", "flex")
#: What makes fairseq's transformer_lm the same network as bidir_lm_* but for mask and positions.
BASELINE_SETTINGS = dict(decoder_learned_pos=True, share_decoder_input_output_embed=True,
                         decoder_normalize_before=True, activation_fn="gelu", dropout=0.1,
                         attention_dropout=0.1)


def archs(size: str) -> Dict[str, str]:
    """``--arch-size`` -> the fairseq arch of each model."""
    return {"bidirectional_lm": f"bidir_lm_{size}", "transformer_lm": "transformer_lm_gpt",
            ALL_LOGITS: f"bidir_lm_{size}"}


def build_models(size: str, task, seq_len: int, seed: int) -> Dict[str, torch.nn.Module]:
    """Both models at ``size``, from the same seed (module doc)."""
    models = {}
    torch.manual_seed(seed)
    models["bidirectional_lm"] = build_arch(archs(size)["bidirectional_lm"], task, seq_len)
    torch.manual_seed(seed)
    models["transformer_lm"] = build_arch(archs(size)["transformer_lm"], task, seq_len,
                                          **DECODER_LM_SIZES[size].as_args("decoder"), **BASELINE_SETTINGS)
    torch.manual_seed(seed)
    models[ALL_LOGITS] = build_arch(archs(size)[ALL_LOGITS], task, seq_len)
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    if len(set(counts.values())) != 1:
        raise AssertionError(f"the two models should have equal parameter counts: {counts}")
    return models


class AllLogitsBidirectionalLmLoss(BidirectionalLmLoss):
    """Our criterion with logits at every position (padding's and unpredicted positions' targets
    are ignored, so the loss is the same): the head costs what transformer_lm's does."""

    def predicted_positions(self, target: torch.Tensor):
        return None, target.ne(self.padding_idx).int().sum()


# --------------------------------------------------------------------------- batches


def packed_documents(rng: np.random.Generator, n_rows: int, seq_len: int, min_doc_len: int,
                     max_doc_len: int, first_word: int, end_word: int, eos: int) -> List[List[np.ndarray]]:
    """``n_rows`` rows, each a list of documents (random tokens ending in ``eos``) whose lengths
    sum to exactly ``seq_len``: lengths log-uniform in ``[min_doc_len, max_doc_len]``, the last
    document of a row shortened to fill it."""
    rows = []
    for _ in range(n_rows):
        documents, used = [], 0
        while used < seq_len:
            n = int(round(np.exp(rng.uniform(np.log(min_doc_len), np.log(max_doc_len)))))
            n = min(max(n, 1), seq_len - used)
            tokens = rng.integers(first_word, end_word, size=n)
            tokens[-1] = eos
            documents.append(tokens)
            used += n
        rows.append(documents)
    return rows


def build_batches(task, sampler: ObjectiveSampler, n_batches: int, batch_size: int, seq_len: int,
                  min_doc_len: int, max_doc_len: int, seed: int) -> Dict[str, List[dict]]:
    """``n_batches`` batches of each model on the same packed rows (module doc): ours through
    ``TokenBlockDataset(complete)`` + ``BidirectionalLMDataset``, the baseline's the rows as they
    are with next-token targets (``<pad>`` after each row's last token)."""
    d = task.source_dictionary
    rng = np.random.default_rng(seed)
    rows = packed_documents(rng, n_batches * batch_size, seq_len, min_doc_len, max_doc_len,
                            d.nspecial, task.mask_idx, d.eos())
    documents = [torch.from_numpy(doc.astype(np.int64)) for row in rows for doc in row]
    sizes = np.array([len(doc) for doc in documents])
    blocks = TokenBlockDataset(ListDataset(documents, sizes), sizes, seq_len, pad=d.pad(),
                               eos=d.eos(), break_mode="complete", document_sep_len=1)
    if len(blocks) != len(rows):
        raise AssertionError(f"complete mode made {len(blocks)} rows of {len(rows)}")
    dataset = BidirectionalLMDataset(blocks, sizes, sampler, mask_idx=task.mask_idx,
                                     pad_idx=d.pad(), seed=seed, shuffle=False)
    ours, baseline = [], []
    for first in range(0, len(rows), batch_size):
        indices = range(first, first + batch_size)
        ours.append(dataset.collater([dataset[i] for i in indices]))
        tokens = torch.stack([blocks[i] for i in indices])
        target = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], d.pad())], dim=1)
        baseline.append({
            "id": torch.tensor(list(indices)), "nsentences": batch_size,
            "ntokens": int(target.ne(d.pad()).sum()),
            "net_input": {"src_tokens": tokens,
                          "src_lengths": torch.full((batch_size,), seq_len, dtype=torch.long)},
            "target": target,
        })
    return {"bidirectional_lm": ours, "transformer_lm": baseline, ALL_LOGITS: ours}


def layout_summary(batches: List[dict], pad: int) -> Dict[str, float]:
    """Mean documents per row and predicted tokens per row of our batches."""
    docs = [float((b["net_input"]["doc_ids"].amax(dim=1) + 1).float().mean()) for b in batches]
    predicted = [float(b["target"].ne(pad).sum(dim=1).float().mean()) for b in batches]
    return {"documents_per_row": float(np.mean(docs)), "predicted_per_row": float(np.mean(predicted))}


# --------------------------------------------------------------------------- --part flex


def synthetic_data_bin(directory: Path, vocab_size: int, total_tokens: int, min_doc_len: int,
                       max_doc_len: int, seed: int) -> Path:
    """A data-bin in ``directory`` whose ``valid`` split holds documents of log-uniform lengths in
    ``[min_doc_len, max_doc_len]`` (random words, each line ending in ``</s>``) adding up to about
    ``total_tokens``, each followed by an empty line (fairseq's document separator), and a
    dictionary of ``vocab_size`` symbols (the task adds ``<mask>``)."""
    from fairseq.data import Dictionary, indexed_dataset

    dictionary = Dictionary()
    for i in range(vocab_size - len(dictionary) - 1):
        dictionary.add_symbol(f"w{i}")
    directory.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(directory / "dict.txt"))
    rng = np.random.default_rng(seed)
    builder = indexed_dataset.make_builder(str(directory / "valid.bin"), impl="mmap",
                                           vocab_size=len(dictionary))
    written = 0
    while written < total_tokens:
        n = int(round(np.exp(rng.uniform(np.log(min_doc_len), np.log(max_doc_len)))))
        words = rng.integers(dictionary.nspecial, len(dictionary), size=n - 1)
        builder.add_item(torch.tensor([*words, dictionary.eos()], dtype=torch.int32))
        builder.add_item(torch.tensor([dictionary.eos()], dtype=torch.int32))
        written += n
    builder.finalize(str(directory / "valid.idx"))
    return directory


def evaluation_batches(data: Path, seq_len: int, eval_mode: str, r_bidir: Optional[str],
                       max_tokens: int, max_batches: int, seed: int):
    """``(task, batches)``: the ``bidirectional_lm`` task with ``--eval-mode`` at
    ``--tokens-per-sample seq_len`` on ``data``, and the batches fairseq-validate scores from its
    ``valid`` split with ``--max-tokens max_tokens`` (the first ``max_batches``; 0: all)."""
    from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask

    cfg = BidirectionalLMConfig(data=str(data), seed=seed, tokens_per_sample=seq_len,
                                eval_mode=eval_mode, r_bidir=r_bidir)
    task = BidirectionalLMTask.setup_task(cfg)
    task.load_dataset("valid", combine=False)
    iterator = task.get_batch_iterator(task.dataset("valid"), max_tokens=max_tokens,
                                       max_positions=seq_len, seed=seed)
    batches = list(iterator.next_epoch_itr(shuffle=False))
    return task, batches[:max_batches] if max_batches else batches


def block_summary(layouts) -> Dict[str, float]:
    """Over ``(doc_ids, bidir_lens, cross_document)`` layouts: the share of the dense scores
    (whole blocks of every row, padding included) the BlockMasks skip, weighted by each batch's
    dense work."""
    computed = total = 0.0
    for doc_ids, bidir_lens, cross in layouts:
        blocks = document_block_mask(doc_ids, bidir_lens, cross).computed_blocks
        computed += float(blocks.sum())
        total += blocks.numel()
    return {"skipped": 1.0 - computed / total, "blocks": total}


def sdpa_attention(q, k, v, bias, num_heads: int, scale: float):
    """One layer's attention on the SDPA path, as MaskedSelfAttention runs it: ``(T, B, C)``
    projections, an additive ``(B, 1, T, T)`` mask -> ``(T, B, C)``."""
    length, batch, channels = q.shape
    head_dim = channels // num_heads

    def split(x):
        return x.view(length, batch, num_heads, head_dim).permute(1, 2, 0, 3)

    out = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v),
                                                           attn_mask=bias, scale=scale)
    return out.permute(2, 0, 1, 3).reshape(length, batch, channels)


class AttentionCase:
    """One layer's attention alone on a list of layouts, on either path (random projections of
    the model's width; the masks built once, beforehand: they are built once per batch for all
    layers)."""

    def __init__(self, layouts, num_heads: int, channels: int, device: torch.device,
                 dtype: torch.dtype, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.num_heads, self.scale = num_heads, (channels // num_heads) ** -0.5
        self.inputs, self.masks = [], {"sdpa": [], "flex": []}
        for doc_ids, bidir_lens, cross in layouts:
            shape = (doc_ids.size(1), doc_ids.size(0), channels)
            self.inputs.append([torch.randn(shape, generator=generator).to(device, dtype)
                                for _ in range(3)])
            doc_ids, bidir_lens = doc_ids.to(device), bidir_lens.to(device)
            self.masks["sdpa"].append(additive_attention_mask(
                may_attend(doc_ids, bidir_lens, cross), dtype))
            self.masks["flex"].append(document_block_mask(doc_ids, bidir_lens, cross))

    def run(self, path: str) -> None:
        with torch.no_grad():
            for (q, k, v), mask in zip(self.inputs, self.masks[path]):
                if path == "flex":
                    mask.attend(q, k, v, self.num_heads, self.scale)
                else:
                    sdpa_attention(q, k, v, mask, self.num_heads, self.scale)


def batch_layouts(batches, cross_document: bool = True):
    """``(doc_ids, bidir_lens, cross_document)`` of each batch."""
    return [(b["net_input"]["doc_ids"], b["net_input"]["bidir_lens"], cross_document)
            for b in batches]


def validate_forward(model, criterion, batches, path: str) -> None:
    """fairseq-validate's computation on ``batches`` (the criterion under ``no_grad``, the model
    in eval mode) on ``path``."""
    model.decoder.attention_impl = path
    with torch.no_grad():
        for batch in batches:
            criterion(model, batch)


def length_summary(batches) -> Dict[str, float]:
    """Rows, real tokens, and the real length of rows (p10 / median / p90) of ``batches``."""
    lengths = np.concatenate([b["net_input"]["doc_ids"].ge(0).sum(dim=1).numpy()
                              for b in batches])
    p10, p50, p90 = np.percentile(lengths, [10, 50, 90])
    return {"rows": int(len(lengths)), "tokens": int(lengths.sum()), "p10": float(p10),
            "median": float(p50), "p90": float(p90),
            "padded_fraction": 1.0 - float(lengths.sum()) / sum(
                b["net_input"]["doc_ids"].numel() for b in batches)}


def amdahl_bound(attention_share: float, skipped: float) -> float:
    """The whole forward's bound when only its attention (``attention_share`` of it) shrinks
    to ``1 - skipped``."""
    return 1.0 / (1.0 - attention_share + attention_share * (1.0 - skipped))


def main_flex(args: argparse.Namespace) -> int:
    """``--part flex``: FlexAttention against SDPA (module doc)."""
    if not flex_attention_available():
        print(f"error: torch {torch.__version__} has no FlexAttention", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    size = DECODER_LM_SIZES[args.arch_size]
    cases, layouts_meta = {}, {}
    temporary = None
    data = args.data
    if data is None:
        temporary = tempfile.TemporaryDirectory(prefix="bench_flex_")
        data = synthetic_data_bin(Path(temporary.name), args.vocab_size, args.synthetic_tokens,
                                  args.min_doc_len, args.max_doc_len, args.seed)
    try:
        for seq_len in args.seq_lens:
            task, batches = evaluation_batches(data, seq_len, args.eval_mode, args.r_bidir,
                                               args.max_tokens, args.max_batches, args.seed)
            torch.manual_seed(args.seed)
            model = build_arch(f"bidir_lm_{args.arch_size}", task, seq_len, dropout=0.0,
                               attention_dropout=0.0).to(device=device, dtype=dtype).eval()
            criterion = BidirectionalLmLoss(MaskedLmConfig(tpu=False), task)
            batches = [move_to(b, device) for b in batches]
            stub = MaskedLmTaskStub(args.vocab_size)
            sampler = ObjectiveSampler.from_flags(args.variant)
            train = build_batches(stub, sampler, args.batches, args.batch_size, seq_len,
                                  args.min_doc_len, min(args.max_doc_len, seq_len),
                                  args.seed)["bidirectional_lm"]
            eval_cpu = [move_to(b, torch.device("cpu")) for b in batches]
            layouts = {"eval": batch_layouts(eval_cpu),
                       "train": batch_layouts(train, not args.no_cross_document_attention)}
            layouts_meta[seq_len] = {"eval": {**length_summary(eval_cpu),
                                              **block_summary(layouts["eval"])},
                                     "train": {**length_summary(train),
                                               **block_summary(layouts["train"])}}
            for name in ("eval", "train"):
                case = AttentionCase(layouts[name], size.heads, size.dim, device, dtype, args.seed)
                for path in PATHS:
                    cases[(seq_len, f"attention {name} rows", path)] = (
                        lambda c=case, p=path: timed(lambda: c.run(p), device))
            for path in (*PATHS, "auto"):  # auto: what fairseq-validate runs by default
                cases[(seq_len, "validate", path)] = (
                    lambda m=model, c=criterion, b=batches, p=path:
                    timed(lambda: validate_forward(m, c, b, p), device))
            if device.type == "cuda":
                train_model = build_arch(
                    f"bidir_lm_{args.arch_size}", stub, seq_len, attention_dropout=0.0,
                    no_cross_document_attention=args.no_cross_document_attention)
                runner = UpdateRunner(train_model, BidirectionalLmLoss(MaskedLmConfig(tpu=False),
                                                                       stub), device, dtype)
                train_device = [move_to(b, device) for b in train]
                for path in PATHS:
                    cases[(seq_len, "train step", path)] = (
                        lambda r=runner, b=train_device, p=path: timed(
                            lambda: train_steps(r, b, p), device))
        load_before = load_average()
        times = interleaved_rounds(cases, args.warmup, args.rounds, progress=not args.quiet)
    finally:
        if temporary is not None:
            temporary.cleanup()
    medians = {key: statistics.median(values) for key, values in times.items()}
    results = []
    for seq_len in args.seq_lens:
        layers = size.layers
        attention_ms = medians[(seq_len, "attention eval rows", "sdpa")]
        share = min(1.0, layers * attention_ms / medians[(seq_len, "validate", "sdpa")])
        for what in ("attention eval rows", "attention train rows", "validate", "train step"):
            if (seq_len, what, "sdpa") not in medians:
                continue
            rows_kind = "train" if "train" in what else "eval"
            skipped = layouts_meta[seq_len][rows_kind]["skipped"]
            bound = (amdahl_bound(share, skipped) if what == "validate"
                     else 1.0 / (1.0 - skipped))
            sdpa_s, flex_s = medians[(seq_len, what, "sdpa")], medians[(seq_len, what, "flex")]
            results.append({"seq_len": seq_len, "what": what, "sdpa_s": sdpa_s, "flex_s": flex_s,
                            "ratio": sdpa_s / flex_s, "skipped": skipped, "bound": bound,
                            "attention_share": share if what == "validate" else None,
                            "auto_s": medians.get((seq_len, what, "auto"))})
    env = environment(device)
    env["load_average_before"] = load_before
    source = (f"{args.data}" if args.data else
              f"synthetic documents of {args.min_doc_len}-{args.max_doc_len} tokens (log-uniform)")
    print(f"--part flex: bidir_lm_{args.arch_size} ({size.layers} x {size.dim}, {size.heads} "
          f"heads), {args.dtype} on {env['device']} ({env['threads']} threads), torch "
          f"{env['torch']}; median of {args.rounds} interleaved rounds after {args.warmup} "
          f"warm-up (compiles); load average {load_before} before, {env['load_average']} after")
    print(f"evaluation rows: --eval-mode {args.eval_mode}"
          + (f" --r-bidir {args.r_bidir}" if args.r_bidir else "")
          + f" --max-tokens {args.max_tokens} on {source}; training rows: {args.batches} x "
          f"{args.batch_size} packed rows, {args.variant}, documents of {args.min_doc_len}-"
          f"{args.max_doc_len} tokens"
          + (", no cross-document attention" if args.no_cross_document_attention else "")
          + f"; blocks of {BLOCK_SIZE}")
    for seq_len in args.seq_lens:
        meta = layouts_meta[seq_len]["eval"]
        print(f"T = {seq_len}: {meta['rows']} evaluation rows, lengths p10/median/p90 "
              f"{meta['p10']:.0f}/{meta['median']:.0f}/{meta['p90']:.0f}, "
              f"{100 * meta['padded_fraction']:.0f}% padding")
    print("| T | what | sdpa ms | flex ms | ratio sdpa/flex | blocks skipped | bound |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        note = (f" (attention {100 * r['attention_share']:.0f}% of the forward)"
                if r["attention_share"] is not None else "")
        print(f"| {r['seq_len']} | {r['what']}{note} | {1e3 * r['sdpa_s']:.1f} | "
              f"{1e3 * r['flex_s']:.1f} | {r['ratio']:.2f} | {100 * r['skipped']:.1f}% | "
              f"{r['bound']:.2f} |")
    for r in results:
        if r["auto_s"] is not None:
            print(f"T = {r['seq_len']}: validate with --attention-impl auto (fairseq-validate's "
                  f"default) {1e3 * r['auto_s']:.1f} ms, ratio sdpa/auto "
                  f"{r['sdpa_s'] / r['auto_s']:.2f}")
    if device.type != "cuda":
        print("train step: not timed (FlexAttention has no CPU backward; run with --device cuda)")
    if args.json:
        write_text(args.json, json.dumps({
            "command": sys.argv, "part": "flex",
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "environment": env, "layouts": {str(k): v for k, v in layouts_meta.items()},
            "results": results,
            "times_s": {"|".join(map(str, key)): value for key, value in times.items()},
        }, indent=2), args.force)
    return 0


def train_steps(runner: UpdateRunner, batches, path: str) -> None:
    runner.model.decoder.attention_impl = path
    for batch in batches:
        runner.update(batch)


# --------------------------------------------------------------------------- main


# --------------------------------------------------------------------------- --part calls

#: --part calls: one head of 16 and one row, so that what a call costs is the host's.
CALL_HEAD_DIM = 16


def call_costs(length: int, device: torch.device, dtype: torch.dtype, calls: int,
               warmup: int) -> Dict[str, float]:
    """Median ms per call at ``length`` tokens, one row, one head of :data:`CALL_HEAD_DIM`
    (no gradient; where the compute vanishes, the time is the host's): FlexAttention with a
    batch's BlockMask (built once, as the model does), SDPA with the dense mask, and building
    the BlockMask itself (once per batch, shared by the layers)."""
    generator = torch.Generator().manual_seed(0)
    doc_ids = torch.zeros(1, length, dtype=torch.long)
    doc_ids[0, length // 2:] = 1  # two documents
    bidir_lens = torch.full((1, length), 4, dtype=torch.long)
    doc_ids, bidir_lens = doc_ids.to(device), bidir_lens.to(device)
    q, k, v = (torch.randn(length, 1, CALL_HEAD_DIM, generator=generator).to(device, dtype)
               for _ in range(3))
    scale = CALL_HEAD_DIM ** -0.5
    with torch.no_grad():
        blocks = document_block_mask(doc_ids, bidir_lens)
        dense = additive_attention_mask(may_attend(doc_ids, bidir_lens, True), dtype)

        def flex():
            blocks.attend(q, k, v, 1, scale)

        def sdpa():
            sdpa_attention(q, k, v, dense, 1, scale)

        def build():
            document_block_mask(doc_ids, bidir_lens)

        costs = {}
        for name, call in (("flex", flex), ("sdpa", sdpa), ("block mask", build)):
            for _ in range(warmup):
                call()
            costs[name] = 1000 * statistics.median(timed(call, device) for _ in range(calls))
    return costs


def main_calls(args: argparse.Namespace) -> int:
    """``--part calls``: per-call host cost of FlexAttention and SDPA (module doc)."""
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    rows = []
    for length in args.seq_lens:
        costs = call_costs(length, device, dtype, max(args.rounds, 20), max(args.warmup, 3))
        rows.append({"T": length, **costs})
    env = environment(device)
    print(f"--part calls: one row, one head of {CALL_HEAD_DIM}, no gradient, {args.dtype} on "
          f"{env['device']} ({env['threads']} threads), torch {env['torch']}; median ms per call")
    print("| T | FlexAttention ms | SDPA (dense mask) ms | flex / SDPA | BlockMask build ms |")
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['T']} | {row['flex']:.3f} | {row['sdpa']:.3f} | "
              f"{row['flex'] / row['sdpa']:.2f} | {row['block mask']:.3f} |")
    if args.json:
        write_text(args.json, json.dumps({"command": sys.argv, "environment": env,
                                          "calls": rows}, indent=2), args.force)
    return 0


def comma_ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--part", choices=PARTS, default="throughput",
                   help="throughput: training tokens/s against transformer_lm; flex: "
                        "FlexAttention against SDPA's dense mask; calls: each path's "
                        "per-call host cost (module doc)")
    p.add_argument("--arch-size", choices=ARCH_SIZES, default="small",
                   help="bidir_lm_<size> against transformer_lm(_gpt) of the same size")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per packed row (T)")
    p.add_argument("--batch-size", type=int, default=4, help="rows per batch (B)")
    p.add_argument("--vocab-size", type=int, default=50265,
                   help="dictionary size, <mask> included (GPT-2 BPE: 50265)")
    p.add_argument("--variant", choices=sorted(VARIANTS), default="hyb_pre")
    p.add_argument("--min-doc-len", type=int, default=None,
                   help="default: 16 (throughput), 64 (flex)")
    p.add_argument("--max-doc-len", type=int, default=None,
                   help="default: --seq-len (throughput), 1024 (flex)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="bf16/fp16 run under torch.autocast (fp16 with a GradScaler); --part "
                        "flex: the model's dtype, autocast for its training step")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed rounds first (default: 2 throughput, 1 flex)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    p.add_argument("--batches", type=int, default=2, help="distinct batches, cycled")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=int, default=1)
    flex = p.add_argument_group("--part flex")
    flex.add_argument("--seq-lens", type=comma_ints, default=[512, 1024, 2048],
                      help="the T values, comma-separated (--tokens-per-sample of the "
                           "evaluation; tokens per training row)")
    flex.add_argument("--data", type=Path, default=None,
                      help="a data-bin whose valid split gives the evaluation rows (e.g. "
                           "data-bin/python-docs-spm8000); default: a synthetic one")
    flex.add_argument("--eval-mode", choices=EVAL_MODES, default="full_doc_ppl")
    flex.add_argument("--r-bidir", default=None,
                      help="--eval-mode suffix_ppl / infill: the R values (default 0)")
    flex.add_argument("--max-tokens", type=int, default=8192,
                      help="tokens per evaluation batch (fairseq-validate --max-tokens)")
    flex.add_argument("--max-batches", type=int, default=0,
                      help="evaluation batches per T (0: the whole split)")
    flex.add_argument("--synthetic-tokens", type=int, default=65536,
                      help="tokens of the synthetic evaluation split (without --data)")
    flex.add_argument("--no-cross-document-attention", action="store_true",
                      help="training rows: each token attends within its document only (the "
                           "task's flag; default: to earlier documents too, footnote 4)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    p.add_argument("--quiet", action="store_true", help="no per-round progress on stderr")
    args = p.parse_args(argv)
    flex_part = args.part == "flex"
    if args.min_doc_len is None:
        args.min_doc_len = 64 if flex_part else 16
    if args.max_doc_len is None:
        args.max_doc_len = 1024 if flex_part else args.seq_len
    if args.warmup is None:
        args.warmup = 1 if flex_part else 2
    if flex_part:
        if not args.seq_lens or min(args.seq_lens) < 2:
            p.error("--seq-lens: one or more lengths of at least 2, e.g. 512,1024,2048")
        if not 1 <= args.min_doc_len <= args.max_doc_len:
            p.error("need 1 <= --min-doc-len <= --max-doc-len")
        if args.data is not None and not (args.data / "dict.txt").is_file():
            p.error(f"--data {args.data}: no dict.txt there (a fairseq data-bin, e.g. from "
                    "scripts/prepare_corpus.sh)")
        if args.eval_mode != "full_doc_ppl" and args.r_bidir is None:
            args.r_bidir = "0"
        if args.max_tokens < max(args.seq_lens):
            p.error(f"--max-tokens {args.max_tokens} must hold a row of --seq-lens "
                    f"{max(args.seq_lens)}")
    elif not 1 <= args.min_doc_len <= args.max_doc_len <= args.seq_len:
        p.error("need 1 <= --min-doc-len <= --max-doc-len <= --seq-len")
    if args.warmup < 0 or args.rounds < 1 or args.batches < 1 or args.batch_size < 1:
        p.error("--warmup must be >= 0; --rounds, --batches and --batch-size >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if refused(PROG, [args.json], args.force):  # before anything is built or timed
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.part == "flex":
        return main_flex(args)
    if args.part == "calls":
        return main_calls(args)
    return main_throughput(args)


def main_throughput(args: argparse.Namespace) -> int:
    """``--part throughput``: training tokens/s, ours against transformer_lm (module doc)."""
    device = torch.device(args.device)
    task = MaskedLmTaskStub(args.vocab_size)
    pad = task.source_dictionary.pad()
    sampler = ObjectiveSampler.from_flags(args.variant)
    sampler.check_targets_stay_hidden(args.seq_len)
    models = build_models(args.arch_size, task, args.seq_len, args.seed)
    criteria = {"bidirectional_lm": BidirectionalLmLoss(MaskedLmConfig(tpu=False), task),
                "transformer_lm": CrossEntropyCriterion(task, sentence_avg=False),
                ALL_LOGITS: AllLogitsBidirectionalLmLoss(MaskedLmConfig(tpu=False), task)}
    runners = {name: UpdateRunner(models[name], criteria[name], device, DTYPES[args.dtype])
               for name in MODELS}
    batches = build_batches(task, sampler, args.batches, args.batch_size, args.seq_len,
                            args.min_doc_len, args.max_doc_len, args.seed)
    layout = layout_summary(batches["bidirectional_lm"], pad)
    batches = {name: [move_to(b, device) for b in bs] for name, bs in batches.items()}

    def next_update(name):
        runner, step = runners[name], itertools.count()
        return lambda: timed(lambda: runner.update(batches[name][next(step) % args.batches]),
                             device)

    load_before = load_average()
    times = interleaved_rounds({name: next_update(name) for name in MODELS}, args.warmup,
                               args.rounds, progress=not args.quiet)
    tokens = args.batch_size * args.seq_len
    results = {}
    for name in MODELS:
        p25, median, p75 = quartiles(times[name])
        results[name] = {"arch": archs(args.arch_size)[name], "median_s": median,
                         "p25_s": p25, "p75_s": p75, "tokens_per_s": tokens / median,
                         "times_s": times[name]}
    baseline_rate = results["transformer_lm"]["tokens_per_s"]
    ratio = results["bidirectional_lm"]["tokens_per_s"] / baseline_rate
    ratio_all_logits = results[ALL_LOGITS]["tokens_per_s"] / baseline_rate
    env = environment(device)
    env["load_average_before"] = load_before
    n_params = sum(p.numel() for p in models["bidirectional_lm"].parameters())
    print(f"{args.arch_size} ({n_params / 1e6:.1f}M parameters), seq len {args.seq_len}, batch "
          f"{args.batch_size}, vocab {args.vocab_size}, {args.variant}, {args.dtype} on "
          f"{env['device']} ({env['threads']} threads), torch {env['torch']}; median of "
          f"{args.rounds} interleaved rounds after {args.warmup} warm-up; load average "
          f"{load_before} before, {env['load_average']} after")
    print(f"batch: {layout['documents_per_row']:.1f} documents per row, "
          f"{layout['predicted_per_row']:.0f} of {args.seq_len} tokens predicted per row (ours; "
          f"transformer_lm: {args.seq_len - 1})")
    print("| model | arch | ms/update (p25-p75) | tokens/s |")
    print("|---|---|---:|---:|")
    for name in MODELS:
        r = results[name]
        print(f"| {name} | {r['arch']} | {1e3 * r['median_s']:.1f} ({1e3 * r['p25_s']:.1f}-"
              f"{1e3 * r['p75_s']:.1f}) | {r['tokens_per_s']:.0f} |")
    print(f"ratio bidirectional_lm / transformer_lm: {ratio:.3f}")
    print(f"ratio bidirectional_lm_all_logits / transformer_lm (same head cost: mask and "
          f"positions only): {ratio_all_logits:.3f}")
    if args.json:
        write_text(args.json, json.dumps({
            "command": sys.argv, "args": {k: (str(v) if isinstance(v, Path) else v)
                                          for k, v in vars(args).items()},
            "environment": env, "layout": layout, "results": results, "ratio": ratio,
            "ratio_all_logits": ratio_all_logits,
        }, indent=2), args.force)
    return 0
