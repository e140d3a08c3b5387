"""Batches corrupted by fairseq's own MaskTokensDataset, for tests that need real masking
statistics (3ML's static sizes, the read counter, the masking bounds)."""
import numpy as np
import torch
from fairseq.data import ListDataset, MaskTokensDataset, data_utils


def fairseq_masked_batch(task, rows: int, length: int, seed: int, shorter_every: int = 2,
                         shorter_by: int = 2):
    """``(src, target)``: ``rows`` rows of random words, every ``shorter_every``-th row
    ``shorter_by`` tokens shorter (so the batch has padding), masked by ``MaskTokensDataset``
    at the task's ``mask_prob``, ``leave_unmasked_prob`` and ``random_token_prob``."""
    d = task.source_dictionary
    g = torch.Generator().manual_seed(seed)
    lengths = [length - shorter_by * (i % shorter_every) for i in range(rows)]
    blocks = [torch.randint(d.nspecial, task.mask_idx, (n,), generator=g) for n in lengths]
    src, tgt = MaskTokensDataset.apply_mask(
        ListDataset(blocks, sizes=np.array(lengths)), d, pad_idx=d.pad(),
        mask_idx=task.mask_idx, seed=seed, mask_prob=task.cfg.mask_prob,
        leave_unmasked_prob=task.cfg.leave_unmasked_prob,
        random_token_prob=task.cfg.random_token_prob)
    return (data_utils.collate_tokens([src[i] for i in range(rows)], d.pad()),
            data_utils.collate_tokens([tgt[i] for i in range(rows)], d.pad()))


def as_sample(src, target, pad: int) -> dict:
    """A fairseq masked_lm sample of the batch."""
    return {"net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(1)},
            "target": target, "ntokens": int(src.ne(pad).sum()), "nsentences": src.size(0)}
