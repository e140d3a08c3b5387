"""Checkpoint exports: what a pre-trained checkpoint becomes for use outside fairseq-train.

- :mod:`~fairseq_ext.export.encoder` (``scripts/export_encoder.py``): a 3ML checkpoint's
  encoder as a plain fairseq RoBERTa checkpoint (Liao et al. §2.2: the decoder is dropped), or a
  hub directory that ``RobertaModel.from_pretrained`` loads with its tokenizer;
- :mod:`~fairseq_ext.export.huggingface` (``scripts/export_hf.py``): RoBERTa and
  ``bidirectional_lm`` checkpoints as transformers directories, checked logit for logit;
- :mod:`~fairseq_ext.export.checkpoints`: what both share: reading checkpoints and their
  tokenizer files with one-line errors, the hub directory's file names, the command lines'
  error handling (outputs are written atomically through :mod:`fairseq_ext.training.output_files`).

May import: models, data, training, cli (and fairseq, transformers).
"""
