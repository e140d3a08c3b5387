"""Analytic training FLOPs of masked LMs (3ML paper, Appendix D) and a calculator CLI.

The paper's equations were lost in its text extraction; this reconstruction reproduces Table
3's speedups (1.34 / 1.47 / 1.37 at large/128, 1.22 / 1.28 at base/512, within 0.015; see
``tests/test_flops.py``). Conventions, as in the paper (after Pan et al., 2021, and Clark et
al., 2020):

* a multiply-add counts as 2 FLOPs (``torch.utils.flop_counter`` counts the same way);
* embedding lookups, biases, norms, activations, softmax and dropout are ignored;
* training = 3 x forward (backward ~ 2 x forward).

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
"""
import argparse
import dataclasses
import math
import sys
from typing import Optional

TRAINING_MULTIPLIER = 3  # forward + backward (~2 x forward)
ROBERTA_VOCAB_SIZE = 50265


# --- building blocks (forward FLOPs of one sequence) ------------------------------------------

def self_attention_flops(length: float, dim: int) -> float:
    """Multi-head self-attention on ``length`` tokens: ``2 (4 L D^2 + 2 L^2 D)``."""
    return 2 * (4 * length * dim ** 2 + 2 * length ** 2 * dim)


def feed_forward_flops(length: float, dim: int, ffn_dim: int) -> float:
    """Two-layer feed-forward block, ``D -> F -> D``: ``2 (2 L D F)``."""
    return 2 * (2 * length * dim * ffn_dim)


def cross_attention_flops(queries: float, keys: float, dim: int) -> float:
    """``Lq`` queries attending to ``Lk`` keys: ``2 (2 Lq D^2 + 2 Lk D^2 + 2 Lq Lk D)``."""
    return 2 * (2 * queries * dim ** 2 + 2 * keys * dim ** 2 + 2 * queries * keys * dim)


def transformer_block_flops(length: float, dim: int, ffn_dim: int) -> float:
    """A self-attention Transformer block (encoder layer)."""
    return self_attention_flops(length, dim) + feed_forward_flops(length, dim, ffn_dim)


def cross_block_flops(queries: float, keys: float, dim: int, ffn_dim: int) -> float:
    """A Transformer decoder block with self- and cross-attention, no causal mask (3ML-cross)."""
    return (self_attention_flops(queries, dim) + cross_attention_flops(queries, keys, dim)
            + feed_forward_flops(queries, dim, ffn_dim))


def swishrnn_flops(length: float, dim: int, hidden_dim: int) -> float:
    """SwishRNN layer: three ``d x d'`` matrices, ``2 (3 L d d')`` (recurrence ignored)."""
    return 2 * (3 * length * dim * hidden_dim)


def prediction_head_flops(tokens: float, input_dim: int, embed_dim: int, vocab_size: int) -> float:
    """MLM head on ``tokens`` positions: dense ``input_dim -> embed_dim``, then the tied
    projection to the vocabulary: ``2 n (D_in D_e + D_e V)``."""
    return 2 * tokens * (input_dim * embed_dim + embed_dim * vocab_size)


def projection_flops(tokens: float, in_dim: int, out_dim: int) -> float:
    """A linear projection of ``tokens`` vectors (0 when the dims agree: no layer)."""
    return 0.0 if in_dim == out_dim else 2 * tokens * in_dim * out_dim


# --- model descriptions -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Stack:
    """A stack of blocks: count, hidden dim, FFN inner dim (SwishRNN: hidden dim ``d'``)."""

    layers: int
    dim: int
    ffn_dim: int


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the FLOP formulas need of a model: its family and its stacks."""

    family: str  # one of SUPPORTED_FAMILIES
    encoder: Stack
    decoder: Optional[Stack] = None

    @property
    def encoder_only(self) -> bool:
        """A masked LM whose encoder runs on all ``L`` tokens (no 3ML decoder)."""
        return self.family in ENCODER_ONLY_FAMILIES


class NoFlopsFormula(ValueError):
    """The architecture has no FLOPs formula here."""


ENCODER_ONLY_FAMILIES = ("roberta", "bert_rab", "swishrnn_bert")
SUPPORTED_FAMILIES = ENCODER_ONLY_FAMILIES + ("3ml_self", "3ml_cross")


def spec_from_args(args) -> ModelSpec:
    """The :class:`ModelSpec` of a built or configured model, from its real hyperparameters
    (``args.arch`` resolved through fairseq's registries, so nothing is hard-coded per name)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    arch = getattr(args, "arch", None) or getattr(args, "_name", None)
    family = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if family not in SUPPORTED_FAMILIES:
        raise NoFlopsFormula(
            f"no FLOPs formula for arch '{arch}' (model '{family}'); formulas exist for the "
            f"models {', '.join(SUPPORTED_FAMILIES)}"
        )
    encoder = Stack(args.encoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim)
    decoder = None
    if family.startswith("3ml"):
        decoder = Stack(args.decoder_layers, args.decoder_embed_dim, args.decoder_ffn_embed_dim)
    return ModelSpec(family, encoder, decoder)


def spec_for_arch(arch: str, **overrides) -> ModelSpec:
    """Apply a registered architecture's defaults (after ``overrides``, as fairseq does)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_ext  # noqa: F401  (registers our architectures)

    if arch not in ARCH_CONFIG_REGISTRY:
        raise NoFlopsFormula(f"unknown arch '{arch}': not registered with fairseq")
    args = argparse.Namespace(arch=arch, **{k: v for k, v in overrides.items() if v is not None})
    ARCH_CONFIG_REGISTRY[arch](args)
    return spec_from_args(args)


# --- whole models -----------------------------------------------------------------------------

def forward_flops(spec: ModelSpec, encoder_length: float, decoder_length: float,
                  mask_tokens: float, other_corrupted_tokens: float, vocab_size: int,
                  full_length: Optional[float] = None) -> float:
    """Forward FLOPs of one sequence given the lengths each part really runs on.

    ``encoder_length``: tokens the encoder runs on (RoBERTa: all ``L``; 3ML: ``L_e``);
    ``decoder_length``: 3ML-self's decoder length (``L``) or 3ML-cross's queries (``L_d``);
    ``mask_tokens`` / ``other_corrupted_tokens``: predicted [MASK]s and predicted
    replaced+unchanged tokens (they differ only for 3ML-cross's head).
    """
    enc = spec.encoder
    block = swishrnn_bert_block_flops if spec.family == "swishrnn_bert" else transformer_block_flops
    encoder = enc.layers * block(encoder_length, enc.dim, enc.ffn_dim)
    corrupted = mask_tokens + other_corrupted_tokens
    if spec.encoder_only:
        return encoder + prediction_head_flops(corrupted, enc.dim, enc.dim, vocab_size)
    dec = spec.decoder
    projection = projection_flops(encoder_length, enc.dim, dec.dim)
    if spec.family == "3ml_self":
        decoder = dec.layers * transformer_block_flops(decoder_length, dec.dim, dec.ffn_dim)
        head = prediction_head_flops(corrupted, dec.dim, enc.dim, vocab_size)
    else:
        decoder = dec.layers * cross_block_flops(decoder_length, encoder_length, dec.dim, dec.ffn_dim)
        head = (prediction_head_flops(mask_tokens, dec.dim, enc.dim, vocab_size)
                + prediction_head_flops(other_corrupted_tokens, enc.dim, enc.dim, vocab_size))
    return encoder + projection + decoder + head


def expected_forward_flops(spec: ModelSpec, length: int, mask_prob: float, vocab_size: int,
                           mask_fraction: float = 0.8) -> float:
    """Forward FLOPs of one sequence of ``length`` tokens at masking rate ``mask_prob``, of
    which ``mask_fraction`` become [MASK] (App. D, Eqs. 2-4, per sequence)."""
    check_mask_prob(mask_prob)
    corrupted = mask_prob * length
    mask_tokens = mask_fraction * corrupted
    if spec.encoder_only:
        encoder_length, decoder_length = length, 0
    else:
        encoder_length = length - mask_tokens
        decoder_length = length if spec.family == "3ml_self" else mask_tokens
    return forward_flops(spec, encoder_length, decoder_length, mask_tokens,
                         corrupted - mask_tokens, vocab_size)


def training_flops_per_sequence(spec: ModelSpec, length: int, mask_prob: float, vocab_size: int,
                                mask_fraction: float = 0.8) -> float:
    """Training FLOPs (3 x forward) of one sequence."""
    return TRAINING_MULTIPLIER * expected_forward_flops(spec, length, mask_prob, vocab_size,
                                                        mask_fraction)


def decoder_lm_forward_flops(length: int, dim: int, ffn_dim: int, layers: int, vocab_size: int,
                             predicted_tokens: int) -> float:
    """Decoder-only Transformer LM: ``layers`` blocks on ``length`` tokens and the output
    projection ``2 n D V`` on the ``predicted_tokens`` it predicts."""
    return (layers * transformer_block_flops(length, dim, ffn_dim)
            + 2 * predicted_tokens * dim * vocab_size)


def swishrnn_bert_block_flops(length: int, dim: int, hidden_dim: int) -> float:
    """A SwishRNN-BERT block: self-attention, and a SwishRNN layer in place of the FFN."""
    return self_attention_flops(length, dim) + swishrnn_flops(length, dim, hidden_dim)


def check_mask_prob(mask_prob: float) -> None:
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(f"--mask-prob must be in (0, 1); got {mask_prob}")


def format_flops(flops: float) -> str:
    """``1.23e+15 (1.230 PFLOPs)``-style text."""
    return f"{flops:.3e} ({flops / 1e15:.4g} PFLOPs)"


# --- the calculator CLI -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext.flops",
        description="Analytic training FLOPs of fairseq masked LMs (3ML paper, Appendix D).",
    )
    parser.add_argument("--arch", required=True, help="registered arch, e.g. 3ml_self_base")
    for name in ("encoder-layers", "encoder-embed-dim", "encoder-ffn-embed-dim",
                 "decoder-layers", "decoder-embed-dim", "decoder-ffn-embed-dim"):
        parser.add_argument(f"--{name}", type=int, help=f"override the arch's --{name} (model A)")
    parser.add_argument("--tokens-per-sample", type=int, default=512, help="sequence length L")
    parser.add_argument("--mask-prob", type=float, default=0.15, help="masking rate of model A")
    parser.add_argument("--mask-fraction", type=float, default=0.8,
                        help="share of corrupted tokens that become [MASK] "
                             "(1 - leave-unmasked - random-token; default 0.8)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"vocabulary size V (default {ROBERTA_VOCAB_SIZE}, RoBERTa's BPE)")
    parser.add_argument("--data", default=None,
                        help="a data-bin: take V from its dict.txt (+ 4 specials + <mask>)")
    parser.add_argument("--vs", default=None,
                        help="baseline arch B (default: fairseq's roberta with A's encoder; "
                             "for swishrnn_bert, bert_rab of A's size with a 4d FFN)")
    parser.add_argument("--vs-mask-prob", type=float, default=0.15, help="masking rate of B")
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per update")
    parser.add_argument("--max-update", type=int, default=None, help="number of updates")
    parser.add_argument("--budget-of", default=None, metavar="B:UPDATES",
                        help="updates A gets for the FLOPs of B trained for UPDATES")
    parser.add_argument("--measure", action="store_true",
                        help="also count FLOPs of one forward+backward with FlopCounterMode")
    return parser


def vocab_size_of(args) -> int:
    if args.data is not None:
        import os

        from fairseq.data import Dictionary

        path = os.path.join(args.data, "dict.txt")
        if not os.path.exists(path):
            raise ValueError(f"--data {args.data}: no dict.txt there")
        return len(Dictionary.load(path)) + 1  # + <mask>, added by the masked_lm task
    return args.vocab_size or ROBERTA_VOCAB_SIZE


def parse_budget(text: str):
    arch, sep, updates = text.rpartition(":")
    if not sep or not arch:
        raise ValueError(f"--budget-of must be ARCH:UPDATES, e.g. roberta_base:125000; got {text!r}")
    try:
        value = float(updates)
    except ValueError:
        raise ValueError(f"--budget-of {text!r}: UPDATES must be a number") from None
    if not value > 0:
        raise ValueError(f"--budget-of {text!r}: UPDATES must be positive")
    return arch, value


def _encoder_of(spec: ModelSpec) -> dict:
    """Arch overrides that give fairseq's ``roberta`` the encoder of ``spec``."""
    heads = max(1, spec.encoder.dim // 64)
    return {"encoder_layers": spec.encoder.layers, "encoder_embed_dim": spec.encoder.dim,
            "encoder_ffn_embed_dim": spec.encoder.ffn_dim, "encoder_attention_heads": heads}


def default_baseline(spec: ModelSpec):
    """``(arch, spec, build_overrides)`` of the baseline when ``--vs`` is not given: for
    SwishRNN-BERT, BERT-rab of its size with a ``4 d`` FFN (the paper's comparison); otherwise
    fairseq's ``roberta`` with the same encoder (3ML's baseline, Table 3)."""
    if spec.family == "swishrnn_bert":
        encoder = Stack(spec.encoder.layers, spec.encoder.dim, 4 * spec.encoder.dim)
        baseline = ModelSpec("bert_rab", encoder)
        return "bert_rab", baseline, _encoder_of(baseline)
    baseline = ModelSpec("roberta", spec.encoder)
    return "roberta", baseline, _encoder_of(baseline)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ValueError, NoFlopsFormula) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run(args) -> int:
    check_mask_prob(args.mask_prob)
    check_mask_prob(args.vs_mask_prob)
    budget = parse_budget(args.budget_of) if args.budget_of else None
    if not 0.0 < args.mask_fraction <= 1.0:
        raise ValueError(f"--mask-fraction must be in (0, 1]; got {args.mask_fraction}")
    for name in ("batch_size", "max_update", "tokens_per_sample"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive; got {value}")
    overrides = {k: getattr(args, k) for k in (
        "encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
        "decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim")}
    vocab = vocab_size_of(args)
    length = args.tokens_per_sample
    spec_a = spec_for_arch(args.arch, **overrides)
    if args.vs:
        arch_b, spec_b = args.vs, spec_for_arch(args.vs)
    else:
        arch_b, spec_b, baseline_overrides = default_baseline(spec_a)
    models = [("A", args.arch, spec_a, args.mask_prob), ("B", arch_b, spec_b, args.vs_mask_prob)]
    per_sequence = {}
    for label, arch, spec, mask_prob in models:
        flops = training_flops_per_sequence(spec, length, mask_prob, vocab, args.mask_fraction)
        per_sequence[label] = flops
        print(f"{label}: {arch} ({spec.family}), L={length}, mask {mask_prob:.2f}, V={vocab}")
        print(f"   training FLOPs per sequence: {format_flops(flops)}")
        if args.batch_size:
            print(f"   per update (batch {args.batch_size}): {format_flops(flops * args.batch_size)}")
            if args.max_update:
                total = flops * args.batch_size * args.max_update
                print(f"   total ({args.max_update} updates): {format_flops(total)}")
    if budget:
        budget_arch, budget_updates = budget
        budget_spec = spec_for_arch(budget_arch)
        budget_flops = training_flops_per_sequence(budget_spec, length, args.vs_mask_prob, vocab,
                                                   args.mask_fraction)
        updates = budget_updates * budget_flops / per_sequence["A"]
        print(f"budget: {args.arch} gets {updates:.0f} updates for the FLOPs of {budget_arch} "
              f"(mask {args.vs_mask_prob:.2f}) trained for {budget_updates:.0f} updates")
        print(f"updates: {math.floor(updates)}")
    if args.measure:
        from fairseq_ext.flops_measure import measure_training_flops

        for label, arch, spec, mask_prob in models:
            if label == "A":
                build_arch, build_overrides = args.arch, overrides
            elif args.vs:
                build_arch, build_overrides = args.vs, {}
            else:
                build_arch, build_overrides = arch_b, baseline_overrides
            measured, analytic = measure_training_flops(
                build_arch, spec, length, mask_prob, vocab, args.mask_fraction, build_overrides)
            print(f"measure {label} ({arch}): measured {measured:.4e}, analytic {analytic:.4e} "
                  f"FLOPs per sequence, ratio {measured / analytic:.4f}")
    print(f"speedup: {per_sequence['B'] / per_sequence['A']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
