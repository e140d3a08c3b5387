"""Analytic training FLOPs (3ML paper, Appendix D): formulas, one registered formula per model
family, FLOP logging for criteria, and the calculator ``python -m fairseq_ext.flops``.

The paper's equations were lost in its text extraction; this reconstruction reproduces Table
3's speedups (1.34 / 1.47 / 1.37 at large/128, 1.22 / 1.28 at base/512, within 0.015; see
``tests/test_flops.py``). Modules: :mod:`~fairseq_ext.flops.formulas` (building blocks),
:mod:`~fairseq_ext.flops.families` (the registry), :mod:`~fairseq_ext.flops.training_metrics`
(``pflops`` / ``total_pflops`` for any criterion), :mod:`~fairseq_ext.flops.measure`
(``FlopCounterMode``), :mod:`~fairseq_ext.flops.cli`.

Conventions, as in the paper (after Pan et al., 2021, and Clark et al., 2020):

* a multiply-add counts as 2 FLOPs (``torch.utils.flop_counter`` counts the same way);
* embedding lookups, biases, norms, activations, softmax and dropout are ignored;
* training = 3 x forward (backward ~ 2 x forward: input and weight gradients). The paper says
  forward and backward "consume similar FLOPs" (2 x forward); we count 3 x, which is what
  ``torch.utils.flop_counter.FlopCounterMode`` measures. Speedups and equal-budget update
  counts are the same either way; absolute FLOPs are 1.5 x the paper's convention.

Per sequence of ``L`` tokens, hidden dim ``D``, FFN inner dim ``F``, vocabulary ``V``,
masking rate ``m``:

* self-attention on L tokens: ``2 (4 L D^2 + 2 L^2 D)`` (Q/K/V/output projections, the
  attention map and its application);
* feed-forward: ``2 (2 L D F)``;
* cross-attention, ``Lq`` queries over ``Lk`` keys: ``2 (2 Lq D^2 + 2 Lk D^2 + 2 Lq Lk D)``;
* prediction head, only the ``m L`` corrupted tokens: RoBERTa ``2 m L (D^2 + D V)``;
  3ML ``2 m L (D_d D_e + D_e V)`` (its dense layer maps decoder -> encoder dim, App. D);
* RoBERTa (Eq. 2): ``N`` blocks on ``L`` tokens + head;
* 3ML-self (Eq. 3): the encoder runs on ``L_e = L (1 - f m)`` tokens, ``f`` the fraction of
  corrupted tokens that become [MASK] (0.8 for 80/10/10; ``1 - leave_unmasked - random``);
  projection ``2 L_e D_e D_d``; decoder blocks on ``L`` tokens; 3ML head;
* 3ML-cross (Eq. 4): encoder on ``L_e``; projection; decoder blocks with ``L_d = f m L``
  queries (self-attention + cross-attention to ``L_e`` keys + FFN); head on the ``L_d``
  [MASK]s with ``D_d D_e``, and on the ``(1 - f) m L`` replaced/unchanged tokens with
  ``D_e D_e`` (the paper's Eq. 4; our implementation routes those through the projected,
  ``D_d``-wide features and the same head, which costs ``2 (1-f) m L D_e (D_e - D_d)`` fewer
  FLOPs: under 0.1% of the total at base size);
* SwishRNN block (Lei et al.): three ``d x d'`` matrices, ``W1``, ``W2`` (d -> d') and ``W3``
  (d' -> d): ``2 (3 L d d')``; the element-wise recurrence is ignored like activations. A
  SwishRNN-BERT block is self-attention + SwishRNN in place of the FFN;
* BERT-orig is fairseq's ``roberta``; BERT-rab counts as RoBERTa (its relative attention bias
  is an addition to the attention logits, ignored like biases); SwishRNN-BERT is ``N``
  SwishRNN-BERT blocks + the RoBERTa head (``--encoder-ffn-embed-dim`` is its ``d'``);
* decoder-only Transformer LM predicting ``n`` tokens: ``N`` blocks (self-attention counted on
  the full ``L x L`` map, as above) + output projection ``2 n D V``.

``speedup`` is the baseline's training FLOPs divided by the model's, at equal batch and
updates (Table 3: the baseline is RoBERTa at 15% masking).

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

__all__ = [
    "FLOPS_FAMILIES", "FlopsFamily", "ModelSpec", "NoFlopsFormula", "ROBERTA_VOCAB_SIZE", "Stack",
    "TRAINING_MULTIPLIER", "check_mask_prob", "cross_attention_flops", "cross_block_flops",
    "decoder_lm_forward_flops", "exact_forward_flops", "expected_forward_flops",
    "feed_forward_flops", "flops_family", "format_flops", "forward_flops", "main",
    "prediction_head_flops", "projection_flops", "register_flops_family",
    "self_attention_flops", "spec_for_arch", "spec_from_args", "swishrnn_bert_block_flops",
    "swishrnn_flops", "training_flops_per_sequence", "transformer_block_flops", "vocab_size_of",
]
