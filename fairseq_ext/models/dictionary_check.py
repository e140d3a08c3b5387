"""A checkpoint loaded with a data-bin whose dictionary is not the one it was trained on.

``fairseq-validate --path`` and ``fairseq-train --restore-file`` build the model from the
data-bin's ``dict.txt`` and then copy the checkpoint's weights into it; with another dictionary
torch stops with ``size mismatch for ...embed_tokens.weight: copying a param with shape
torch.Size([153, 64]) from checkpoint, the shape in current model is torch.Size([17, 64])``
for every vocabulary-sized tensor, deep in a traceback. fairseq-ext's models check first
(:class:`DictionaryCheckedLoading`, in ``load_state_dict``, the hook fairseq calls on every
load) and say in one line which dictionary and which sizes differ, and what to change.
fairseq's own ``roberta`` model (``roberta_*`` and ``bert_orig_*`` archs) keeps torch's message,
which names the sizes too.
"""
import os
from typing import Mapping, Optional

import torch
from fairseq.utils import split_paths

from fairseq_ext.cli.errors import UserInputError
from fairseq_ext.models.validation import run_config_of

#: The weight whose rows are the dictionary's symbols, in every fairseq-ext model.
EMBEDDING_SUFFIX = "embed_tokens.weight"


class DictionaryMismatchError(UserInputError, ValueError):
    """The checkpoint's vocabulary is not the data-bin's."""


def dictionary_file(model_args) -> Optional[str]:
    """``DATA/dict.txt`` of the run a model config belongs to (the first of ``a:b`` data
    shards, whose dictionary fairseq's tasks load), or ``None`` where it is not known."""
    data = getattr(run_config_of(model_args).task_cfg, "data", None)
    if not data:
        return None
    return os.path.join(split_paths(str(data))[0], "dict.txt")


def check_dictionary(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor],
                     dictionary_path: Optional[str] = None) -> None:
    """Raise :class:`DictionaryMismatchError` when an embedding of ``state_dict`` (a
    checkpoint's ``model``) has another number of rows than ``model``'s, which the data-bin's
    dictionary sized."""
    own = model.state_dict()
    for key, saved in state_dict.items():
        if not key.endswith(EMBEDDING_SUFFIX) or key not in own:
            continue
        saved_rows, own_rows = saved.shape[0], own[key].shape[0]
        if saved_rows != own_rows:
            where = f"the dictionary {dictionary_path}" if dictionary_path else "the data-bin's dictionary"
            raise DictionaryMismatchError(
                f"the checkpoint was trained with a dictionary of {saved_rows} symbols, but "
                f"{where} gives {own_rows} ({key}: {tuple(saved.shape)} in the checkpoint, "
                f"{tuple(own[key].shape)} here): run it on the data-bin it was trained on, or "
                "binarize this data with that data-bin's dict.txt (--srcdict of fairseq-preprocess "
                "and of scripts/prepare_corpus.sh)")


class DictionaryCheckedLoading:
    """Mixin (before the fairseq model class in the bases) whose ``load_state_dict`` first runs
    :func:`check_dictionary`; the model's ``args`` name the data-bin."""

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        check_dictionary(self, state_dict, dictionary_file(getattr(self, "args", None)))
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
