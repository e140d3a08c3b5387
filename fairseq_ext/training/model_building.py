"""Build a registered architecture outside ``fairseq-train``, the way ``fairseq-train`` builds
it: the arch's defaults fill what the flags left unset, then the model's ``build_model`` runs
with a task; and synthetic masked-LM batches for it. Used by the FLOPs calculator
(``--measure``), the benchmarks and the tests."""
import argparse
import difflib

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from fairseq_ext.cli.errors import ConfigError


class MaskedLmTaskStub:
    """The parts of fairseq's ``masked_lm`` task that model construction and our criteria read:
    a dictionary of ``vocab_size`` symbols (``<mask>`` included, last, unless ``with_mask`` is
    False) and the masking settings in ``cfg``."""

    def __init__(self, vocab_size: int, mask_prob: float = 0.15, leave_unmasked_prob: float = 0.1,
                 random_token_prob: float = 0.1, with_mask: bool = True):
        dictionary = Dictionary()
        for i in range(vocab_size - len(dictionary) - int(with_mask)):
            dictionary.add_symbol(f"w{i}")
        self.mask_idx = dictionary.add_symbol("<mask>") if with_mask else None
        self.source_dictionary = self.target_dictionary = self.dictionary = dictionary
        self.cfg = argparse.Namespace(mask_prob=mask_prob, leave_unmasked_prob=leave_unmasked_prob,
                                      random_token_prob=random_token_prob)


def unknown_arch_message(arch: str) -> str:
    """Why ``arch`` cannot be built, with the registered names closest to it (fairseq-ext's
    archs are registered: importing any module of the package imports its root, which registers
    them)."""
    close = difflib.get_close_matches(arch, ARCH_MODEL_REGISTRY, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return (f"unknown arch '{arch}': registered neither by fairseq nor by fairseq-ext{hint} "
            "(README, 'Using the plugin', lists fairseq-ext's archs)")


def build_arch(arch: str, task, seq_len: int = 512, **overrides):
    """The model of ``fairseq-train --arch ARCH --tokens-per-sample SEQ_LEN`` with ``overrides``
    as further flags (``None`` values are left to the arch)."""
    if arch not in ARCH_CONFIG_REGISTRY:
        raise ConfigError(unknown_arch_message(arch))
    args = argparse.Namespace(arch=arch, max_positions=seq_len, tokens_per_sample=seq_len,
                              **{k: v for k, v in overrides.items() if v is not None})
    ARCH_CONFIG_REGISTRY[arch](args)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


def masked_lm_task(vocab_size: int, mask_prob: float, mask_fraction: float):
    """A :class:`MaskedLmTaskStub` whose corrupted tokens are ``mask_fraction`` ``<mask>``, the
    rest split evenly between random and unchanged."""
    other = (1.0 - mask_fraction) / 2
    return MaskedLmTaskStub(vocab_size, mask_prob, leave_unmasked_prob=other,
                            random_token_prob=other)


def corrupted_batch(task, batch_size: int, length: int, mask_prob: float, mask_fraction: float,
                    generator: torch.Generator):
    """Random tokens with exactly ``round(m L)`` corrupted positions per row: ``round(f m L)``
    of them ``<mask>``, half of the rest random tokens, the others unchanged. Returns
    ``(src, target, corrupted, n_mask)``, ``target`` padded where nothing is predicted."""
    pad, mask_idx = task.source_dictionary.pad(), task.mask_idx
    first_word = task.source_dictionary.nspecial
    tokens = torch.randint(first_word, mask_idx, (batch_size, length), generator=generator)
    src, target = tokens.clone(), torch.full_like(tokens, pad)
    corrupted = round(mask_prob * length)
    n_mask = round(mask_fraction * corrupted)
    n_random = (corrupted - n_mask) // 2
    for row in range(batch_size):
        chosen = torch.randperm(length, generator=generator)[:corrupted]
        target[row, chosen] = tokens[row, chosen]
        src[row, chosen[:n_mask]] = mask_idx
        src[row, chosen[n_mask:n_mask + n_random]] = torch.randint(
            first_word, mask_idx, (n_random,), generator=generator)
    return src, target, corrupted, n_mask
