"""Checkpoint exports: what a pre-trained checkpoint becomes for use outside fairseq-train.

- :mod:`~fairseq_ext.export.encoder` (``scripts/export_encoder.py``): a 3ML checkpoint's
  encoder as a plain fairseq RoBERTa checkpoint (Liao et al. §2.2: the decoder is dropped), or a
  hub directory that ``RobertaModel.from_pretrained`` loads with its tokenizer;
- :mod:`~fairseq_ext.export.huggingface` (``scripts/export_hf.py``): RoBERTa and
  ``bidirectional_lm`` checkpoints as transformers directories, checked logit for logit;
- :mod:`~fairseq_ext.export.checkpoints`: what both share: reading checkpoints and their
  tokenizer files with one-line errors, the hub directory's file names, the command lines'
  error handling (outputs are written atomically through :mod:`fairseq_ext.training.output_files`).

May import: models, data, training, compat, cli (and fairseq, transformers). Nothing below the
experiments imports it.

``fairseq_ext.export`` was the module of the encoder export before it became this package; its
old attributes (``from fairseq_ext.export import finetune_args``) still resolve, from
:mod:`~fairseq_ext.export.encoder`, with a :class:`DeprecationWarning`, until fairseq-ext 0.2.
"""
import importlib

from fairseq_ext.compat import warn_moved

#: Submodules of this package (not deprecated attributes).
SUBMODULES = ("checkpoints", "encoder", "huggingface")


def __getattr__(name: str):
    """The old module's attributes, from the encoder export, with a DeprecationWarning."""
    if name.startswith("__") or name in SUBMODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    encoder = importlib.import_module("fairseq_ext.export.encoder")
    if not hasattr(encoder, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_moved(f"fairseq_ext.export.{name}", f"fairseq_ext.export.encoder.{name}")
    value = getattr(encoder, name)
    globals()[name] = value  # warned once: later reads find it here
    return value
