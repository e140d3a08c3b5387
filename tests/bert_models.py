"""Building the BERT-family archs of Lei et al. in tests (test_bert_rab.py,
test_swishrnn_bert.py)."""
import torch

from fairseq_ext.training.model_building import MaskedLmTaskStub, build_arch


def build(arch, vocab_size=60, max_positions=64, **overrides):
    task = MaskedLmTaskStub(vocab_size)
    return build_arch(arch, task, max_positions, **overrides), task


def count(model):
    return sum(p.numel() for p in model.parameters())


def padded_input(lengths, dim, left=False, seed=1):
    torch.manual_seed(seed)
    length = max(lengths)
    x = torch.randn(length, len(lengths), dim)
    pad = torch.zeros(len(lengths), length, dtype=torch.bool)
    for row, n in enumerate(lengths):
        if left:
            pad[row, :length - n] = True
        else:
            pad[row, n:] = True
    return x, pad
