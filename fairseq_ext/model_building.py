"""Build a registered architecture outside ``fairseq-train``, the way ``fairseq-train`` builds
it: the arch's defaults fill what the flags left unset, then the model's ``build_model`` runs
with a task. Used by the FLOPs calculator (``--measure``), the benchmarks and the tests."""
import argparse

from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY


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


def build_arch(arch: str, task, seq_len: int = 512, **overrides):
    """The model of ``fairseq-train --arch ARCH --tokens-per-sample SEQ_LEN`` with ``overrides``
    as further flags (``None`` values are left to the arch)."""
    args = argparse.Namespace(arch=arch, max_positions=seq_len, tokens_per_sample=seq_len,
                              **{k: v for k, v in overrides.items() if v is not None})
    ARCH_CONFIG_REGISTRY[arch](args)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)
