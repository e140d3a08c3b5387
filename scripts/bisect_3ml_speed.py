#!/usr/bin/env python
"""Time RoBERTa-15% against 3ML-self with the model code of another checkout (a bisect step).

``scripts/bench_3ml.py`` is the benchmark; it changes with the tree it lives in. To bisect a
speed change over old commits, the harness must stay the same while only the model code
varies: this script imports ``fairseq_ext`` from ``TREE`` (a ``git worktree`` of the commit)
and uses nothing from it but ``model_building.build_arch`` (present since 393cd51) and the
registered archs; the task, batches (fairseq's ``MaskTokensDataset``), criterion (fairseq's
stock ``masked_lm``), optimizer (``AdamW(fused=True)``) and interleaved timing are its own.
It prints one JSON line (and appends it to ``--json``).

Example (the shape of docs/benchmarks.md's guard: 6 encoder layers of 512, 256 tokens, batch 8,
8000 pieces)::

    git worktree add /tmp/at-393cd51 393cd51
    python scripts/bisect_3ml_speed.py /tmp/at-393cd51 --json bisect.jsonl
"""
import argparse
import json
import statistics
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree", help="checkout whose fairseq_ext models are timed")
    p.add_argument("--rates", default="0.4,0.5", help="3ML-self mask rates")
    p.add_argument("--encoder-layers", type=int, default=6)
    p.add_argument("--encoder-embed-dim", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="append the result line here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, args.tree)
    import numpy as np
    import torch
    from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
    from fairseq.data import Dictionary, ListDataset, MaskTokensDataset, data_utils
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    import fairseq_ext
    from fairseq_ext.training.model_building import build_arch

    torch.set_num_threads(args.threads)
    dictionary = Dictionary()
    while len(dictionary) < args.vocab_size - 1:
        dictionary.add_symbol(f"w{len(dictionary)}")
    task = MaskedLMTask(MaskedLMConfig(data="", tokens_per_sample=args.seq_len, seed=1), dictionary)
    criterion = MaskedLmLoss(MaskedLmConfig(tpu=False), task)
    dim = args.encoder_embed_dim
    overrides = dict(encoder_layers=args.encoder_layers, encoder_embed_dim=dim,
                     encoder_ffn_embed_dim=4 * dim, encoder_attention_heads=max(1, dim // 64),
                     dropout=0.0, attention_dropout=0.0)
    pad = dictionary.pad()

    def batches(rate, count=4):
        n = args.batch_size * count
        generator = torch.Generator().manual_seed(1)
        blocks = [torch.cat([torch.tensor([dictionary.bos()]), torch.randint(
            dictionary.nspecial, task.mask_idx, (args.seq_len - 1,), generator=generator)])
            for _ in range(n)]
        src, tgt = MaskTokensDataset.apply_mask(
            ListDataset(blocks, sizes=np.full(n, args.seq_len)), dictionary, pad_idx=pad,
            mask_idx=task.mask_idx, seed=1, mask_prob=rate, leave_unmasked_prob=0.1,
            random_token_prob=0.1)
        out = []
        for first in range(0, n, args.batch_size):
            rows = range(first, first + args.batch_size)
            tokens = data_utils.collate_tokens([src[i] for i in rows], pad)
            out.append({"net_input": {"src_tokens": tokens, "src_lengths": tokens.ne(pad).sum(1)},
                        "target": data_utils.collate_tokens([tgt[i] for i in rows], pad),
                        "ntokens": int(tokens.ne(pad).sum()), "nsentences": args.batch_size})
        return out

    def runner(arch):
        torch.manual_seed(1)
        model = build_arch(arch, task, args.seq_len, **overrides).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6,
                                      weight_decay=0.01, fused=True)

        def update(sample):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss, sample_size, _ = criterion(model, sample)
            (loss / sample_size).backward()
            optimizer.step()
            return time.perf_counter() - start
        return update

    rates = [float(x) for x in args.rates.split(",")]
    three_ml = runner("3ml_self_base")
    cases = [("roberta", 0.15, runner("roberta_base"))] + [("3ml-self", r, three_ml) for r in rates]
    data = {rate: batches(rate) for rate in {0.15, *rates}}
    times = {(model, rate): [] for model, rate, _ in cases}
    for round_index in range(args.warmup + args.iters):
        for model, rate, update in cases:
            seconds = update(data[rate][round_index % len(data[rate])])
            if round_index >= args.warmup:
                times[model, rate].append(seconds)
    median = {key: statistics.median(value) for key, value in times.items()}
    base = median["roberta", 0.15]
    record = {"tree": args.tree, "fairseq_ext": fairseq_ext.__file__,
              "roberta_ms": 1000 * base}
    for rate in rates:
        record[f"3ml_self_{rate}_ms"] = 1000 * median["3ml-self", rate]
        record[f"speedup_{rate}"] = base / median["3ml-self", rate]
    print(json.dumps(record))
    if args.json:
        with open(args.json, "a") as out:
            out.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
