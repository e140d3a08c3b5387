"""Analytic training FLOPs (3ML paper, Appendix D, Eqs. 2-4): formulas, one registered formula per
model family, FLOP logging for criteria, and the calculator ``python -m fairseq_ext.flops``.

The paper's equations were lost in its text extraction; this reconstruction reproduces Table 3's
speedups within 0.015 (``tests/test_flops.py``). A multiply-add counts as 2 FLOPs, training as
3 x forward (what ``FlopCounterMode`` measures; absolute FLOPs are 1.5 x the paper's convention,
speedups the same), and ``speedup`` is the baseline's training FLOPs over the model's at equal
batch and updates. Modules: :mod:`.formulas` (building blocks), :mod:`.families` (the
registry), :mod:`.training_metrics` (``pflops`` / ``total_pflops`` for any criterion),
:mod:`.run_flops` (an update's FLOPs from fairseq-train's parsed arguments), :mod:`.measure`
(``FlopCounterMode``), :mod:`.cli`. The conventions and every family's formula: docs/flops.md.

May import: training, cli.
"""

from fairseq_ext.flops.cli import ROBERTA_VOCAB_SIZE, main, vocab_size_of
from fairseq_ext.flops.families import (
    FLOPS_FAMILIES,
    FlopsFamily,
    ModelSpec,
    NoFlopsFormula,
    Stack,
    exact_forward_flops,
    expected_forward_flops,
    flops_family,
    forward_flops,
    register_flops_family,
    spec_for_arch,
    spec_from_args,
    training_flops_of_rows,
    training_flops_per_sequence,
)
from fairseq_ext.flops.formulas import (
    TRAINING_MULTIPLIER,
    check_mask_prob,
    cross_attention_flops,
    cross_block_flops,
    decoder_lm_forward_flops,
    feed_forward_flops,
    format_flops,
    prediction_head_flops,
    projection_flops,
    self_attention_flops,
    swishrnn_bert_block_flops,
    swishrnn_flops,
    transformer_block_flops,
)
from fairseq_ext.flops.run_flops import (
    masked_lm_predicted_per_sequence,
    rows_per_update,
    training_args,
    update_training_flops,
)

__all__ = [
    "FLOPS_FAMILIES", "FlopsFamily", "ModelSpec", "NoFlopsFormula", "ROBERTA_VOCAB_SIZE", "Stack",
    "TRAINING_MULTIPLIER", "check_mask_prob", "cross_attention_flops", "cross_block_flops",
    "decoder_lm_forward_flops", "exact_forward_flops", "expected_forward_flops",
    "feed_forward_flops", "flops_family", "format_flops", "forward_flops", "main",
    "masked_lm_predicted_per_sequence", "prediction_head_flops", "projection_flops",
    "register_flops_family", "rows_per_update", "self_attention_flops", "spec_for_arch",
    "spec_from_args", "swishrnn_bert_block_flops", "swishrnn_flops", "training_args",
    "training_flops_of_rows", "training_flops_per_sequence", "transformer_block_flops",
    "update_training_flops", "vocab_size_of",
]
