"""Training throughput (tokens/s) of ``bidirectional_lm`` (generalized bidirectionality,
Artetxe et al., 2022) against fairseq's causal ``transformer_lm`` of the same size (issue 12,
"Performance": target ours / transformer_lm >= 0.9 on GPU at 125M).

* **Models**, built as ``fairseq-train`` builds them (:func:`fairseq_ext.model_building.build_arch`)
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
  (:class:`~fairseq_ext.benchmarks.three_ml.UpdateRunner`), timed with a wall clock (CUDA
  synchronised) in interleaved rounds (ours, baseline, ours with all logits, ours, ...); the
  median of ``--rounds`` rounds after ``--warmup`` gives ``tokens/s = B x T / median seconds``.

Example::

    .venv/bin/python scripts/bench_bidirectional.py --arch-size small --seq-len 512 \\
        --batch-size 4 --threads 1 --rounds 5
"""
import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.data import ListDataset, TokenBlockDataset

import fairseq_ext  # noqa: F401  (registers the archs and the criterion)
from fairseq_ext.benchmarks.common import (
    environment,
    interleaved_rounds,
    load_average,
    move_to,
    quartiles,
    timed,
)
from fairseq_ext.benchmarks.three_ml import DTYPES, UpdateRunner
from fairseq_ext.criterions.bidirectional_lm import BidirectionalLmLoss
from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset
from fairseq_ext.data.bidirectional_sampling import VARIANTS, ObjectiveSampler
from fairseq_ext.model_building import MaskedLmTaskStub, build_arch
from fairseq_ext.models.sizes import DECODER_LM_SIZES
from fairseq_ext.output_files import refused, write_text

#: The command line (scripts/bench_bidirectional.py).
PROG = "bench_bidirectional.py"
#: The contestants: ours as trained, fairseq's causal LM, and ours with logits at every position
#: (the same head cost as transformer_lm's, so that the ratio isolates the mask and positions).
MODELS = ("bidirectional_lm", "transformer_lm", "bidirectional_lm_all_logits")
ALL_LOGITS = "bidirectional_lm_all_logits"
ARCH_SIZES = ("125m", "small", "mini", "tiny")
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
                                          **DECODER_LM_SIZES[size].as_args(), **BASELINE_SETTINGS)
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


# --------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arch-size", choices=ARCH_SIZES, default="small",
                   help="bidir_lm_<size> against transformer_lm(_gpt) of the same size")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per packed row (T)")
    p.add_argument("--batch-size", type=int, default=4, help="rows per batch (B)")
    p.add_argument("--vocab-size", type=int, default=50265,
                   help="dictionary size, <mask> included (GPT-2 BPE: 50265)")
    p.add_argument("--variant", choices=sorted(VARIANTS), default="hyb_pre")
    p.add_argument("--min-doc-len", type=int, default=16)
    p.add_argument("--max-doc-len", type=int, default=None, help="default: --seq-len")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="bf16/fp16 run under torch.autocast (fp16 with a GradScaler)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    p.add_argument("--batches", type=int, default=2, help="distinct batches, cycled")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    p.add_argument("--quiet", action="store_true", help="no per-round progress on stderr")
    args = p.parse_args(argv)
    if args.max_doc_len is None:
        args.max_doc_len = args.seq_len
    if not 1 <= args.min_doc_len <= args.max_doc_len <= args.seq_len:
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
