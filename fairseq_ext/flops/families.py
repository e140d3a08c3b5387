"""One FLOPs formula per model family, registered once.

A family is a fairseq model name (what ``ARCH_MODEL_NAME_REGISTRY`` maps an arch to); its
:class:`FlopsFamily` says, in one place, which stacks the model has (:meth:`spec_from_args`),
how many tokens each part runs on (:meth:`run_lengths`), the forward FLOPs of one sequence
(:meth:`forward_flops`) and the calculator's default baseline (:meth:`default_baseline`). The
calculator, ``--measure``, the criteria and the benchmarks all go through
:func:`flops_family`; nothing else tests a family's name.

A new family subclasses :class:`FlopsFamily` (or :class:`EncoderMaskedLm`) and decorates it
with :func:`register_flops_family`.
"""
import argparse
import dataclasses
from typing import Dict, List, Optional, Tuple, Type

from fairseq_ext.flops.formulas import (
    TRAINING_MULTIPLIER,
    corrupted_tokens,
    cross_block_flops,
    decoder_lm_forward_flops,
    prediction_head_flops,
    projection_flops,
    swishrnn_bert_block_flops,
    transformer_block_flops,
)


class NoFlopsFormula(ValueError):
    """The architecture has no FLOPs formula here."""


@dataclasses.dataclass(frozen=True)
class Stack:
    """A stack of blocks: count, hidden dim, FFN inner dim (SwishRNN: hidden dim ``d'``)."""

    layers: int
    dim: int
    ffn_dim: int


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the FLOP formulas need of a model: its family and its stacks."""

    family: str  # a key of FLOPS_FAMILIES
    encoder: Stack
    decoder: Optional[Stack] = None

    @property
    def encoder_only(self) -> bool:
        """A masked LM whose encoder runs on all ``L`` tokens (no 3ML decoder)."""
        return not flops_family(self.family).has_decoder


@dataclasses.dataclass(frozen=True)
class StackActivations:
    """What one stack's blocks keep for the backward pass of a micro-batch: ``layers`` blocks,
    each keeping ``block_bytes`` without recomputation, or only its input, ``input_bytes``
    (``s b h`` elements), when it is recomputed."""

    layers: int
    block_bytes: float
    input_bytes: float


class FlopsFamily:
    """The FLOPs formula of one model family (subclasses set :attr:`name`)."""

    #: the fairseq model name the family's archs are registered under
    name: str = ""
    #: whether the model has a decoder stack (``--decoder-*`` hyperparameters)
    has_decoder: bool = False

    def spec_from_args(self, args) -> ModelSpec:
        """The :class:`ModelSpec` of a configured model, from its real hyperparameters."""
        encoder = Stack(args.encoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim)
        decoder = None
        if self.has_decoder:
            decoder = Stack(args.decoder_layers, args.decoder_embed_dim,
                            args.decoder_ffn_embed_dim)
        return ModelSpec(self.name, encoder, decoder)

    def run_lengths(self, spec: ModelSpec, length: float,
                    mask_tokens: float) -> Tuple[float, float]:
        """``(encoder_length, decoder_length)``: the tokens the encoder and the decoder run on
        for a sequence of ``length`` tokens of which ``mask_tokens`` are ``<mask>``."""
        return length, 0.0

    def forward_flops(self, spec: ModelSpec, encoder_length: float, decoder_length: float,
                      mask_tokens: float, other_predicted_tokens: float, vocab_size: int) -> float:
        """Forward FLOPs of one sequence given the lengths each part really runs on and the
        predicted tokens: ``mask_tokens`` ``<mask>`` positions and ``other_predicted_tokens``
        others (for masked LMs, the replaced and unchanged corrupted tokens)."""
        raise NotImplementedError

    def parameters(self, spec: ModelSpec, vocab_size: int, positions: int) -> int:
        """The model's parameter count with ``vocab_size`` symbols and ``positions`` learned
        positions: weights and biases of every block, embeddings, norms and head (a few small
        tables are left out: BERT-rab's relative-bias buckets, the final norms of pre-LN
        stacks; under 0.2% at tiny size, 0.01% at base).
        The memory plan (:mod:`fairseq_ext.flops.memory_plan`) sizes weights and optimizer state
        with it; ``tests/test_memory_plan.py`` checks it against built models."""
        raise NotImplementedError

    def stack_activations(self, spec: ModelSpec, length: int, sequences: int, heads: int,
                          predicted_tokens: float,
                          bytes_per_element: int) -> List[StackActivations]:
        """Each stack's :class:`StackActivations` for one micro-batch of ``sequences`` rows of
        ``length`` tokens (``predicted_tokens`` of them predicted in all), on the lengths the
        family runs each stack on: :func:`block_activation_bytes` per block."""
        raise NotImplementedError

    def activation_bytes(self, spec: ModelSpec, length: int, sequences: int, heads: int,
                         predicted_tokens: float, vocab_size: int, bytes_per_element: int,
                         recompute: bool = False) -> float:
        """Activations kept for the backward pass of one micro-batch (Korthikanti et al. 2022,
        Sec. 4): every block of every stack (:meth:`stack_activations`) and the logits of the
        predicted tokens. With ``recompute`` (``--checkpoint-activations``: fairseq's
        ``checkpoint_wrapper`` around every layer, full activation recomputation), each block
        keeps only its input, ``s b h`` elements (Korthikanti's ``2 s b h L`` at 16-bit), and
        the backward pass holds one block's full activations at a time (the largest block's)
        while it recomputes them; the logits are outside the layers and stay."""
        stacks = self.stack_activations(spec, length, sequences, heads, predicted_tokens,
                                        bytes_per_element)
        if recompute:
            blocks = (sum(stack.layers * stack.input_bytes for stack in stacks)
                      + max(stack.block_bytes for stack in stacks))
        else:
            blocks = sum(stack.layers * stack.block_bytes for stack in stacks)
        return blocks + logits_bytes(predicted_tokens, vocab_size)

    def default_baseline(self, spec: ModelSpec) -> Tuple[str, ModelSpec, Dict]:
        """``(arch, spec, build_overrides)`` of the calculator's baseline when ``--vs`` is not
        given: fairseq's ``roberta`` with the same encoder (3ML's baseline, Table 3)."""
        baseline = ModelSpec("roberta", spec.encoder)
        return "roberta", baseline, roberta_overrides_for(baseline.encoder)


FLOPS_FAMILIES: Dict[str, FlopsFamily] = {}


def register_flops_family(cls: Type[FlopsFamily]) -> Type[FlopsFamily]:
    """Class decorator: register a family's formula under its :attr:`~FlopsFamily.name`."""
    if not cls.name or cls.name in FLOPS_FAMILIES:
        raise ValueError(f"FLOPs family {cls.name!r}: empty or registered twice")
    FLOPS_FAMILIES[cls.name] = cls()
    return cls


def flops_family(name: str) -> FlopsFamily:
    try:
        return FLOPS_FAMILIES[name]
    except KeyError:
        raise NoFlopsFormula(
            f"no FLOPs formula for model '{name}'; formulas exist for the models "
            f"{', '.join(FLOPS_FAMILIES)}") from None


def roberta_overrides_for(encoder: Stack) -> Dict:
    """Arch overrides that give a RoBERTa-style encoder the sizes of ``encoder``."""
    return {"encoder_layers": encoder.layers, "encoder_embed_dim": encoder.dim,
            "encoder_ffn_embed_dim": encoder.ffn_dim,
            "encoder_attention_heads": max(1, encoder.dim // 64)}


# --- the families -----------------------------------------------------------------------------

class EncoderMaskedLm(FlopsFamily):
    """A masked LM encoder on all ``L`` tokens and RoBERTa's head on the corrupted tokens
    (3ML paper, App. D, Eq. 2): ``N`` blocks + ``2 m L (D^2 + D V)``."""

    @staticmethod
    def block_flops(length: float, dim: int, ffn_dim: int) -> float:
        return transformer_block_flops(length, dim, ffn_dim)

    #: the FFN's kind, for the block's parameters and activations
    ffn = "mlp"

    def forward_flops(self, spec, encoder_length, decoder_length, mask_tokens,
                      other_predicted_tokens, vocab_size):
        enc = spec.encoder
        return (enc.layers * self.block_flops(encoder_length, enc.dim, enc.ffn_dim)
                + prediction_head_flops(mask_tokens + other_predicted_tokens, enc.dim, enc.dim,
                                        vocab_size))

    def parameters(self, spec, vocab_size, positions):
        enc = spec.encoder
        return (embedding_parameters(vocab_size, positions, enc.dim)
                + enc.layers * block_parameters(enc.dim, enc.ffn_dim, self.ffn)
                + lm_head_parameters(enc.dim, enc.dim, vocab_size))

    def stack_activations(self, spec, length, sequences, heads, predicted_tokens,
                          bytes_per_element):
        enc = spec.encoder
        return [stack_activations_of(enc, length, sequences, heads, bytes_per_element,
                                     self.ffn)]


@register_flops_family
class RobertaFlops(EncoderMaskedLm):
    """fairseq's ``roberta`` (and ``bert_orig_*``, its archs with Lei et al.'s sizes)."""

    name = "roberta"


@register_flops_family
class BertRabFlops(EncoderMaskedLm):
    """BERT-rab counts as RoBERTa: its T5 relative attention bias is an addition to the
    attention logits, ignored like biases."""

    name = "bert_rab"


@register_flops_family
class SwishRnnBertFlops(EncoderMaskedLm):
    """SwishRNN-BERT (Lei et al.): ``N`` blocks of self-attention + SwishRNN (``2 (3 L d d')``,
    ``--encoder-ffn-embed-dim`` is ``d'``) and RoBERTa's head."""

    name = "swishrnn_bert"
    ffn = "swishrnn"

    @staticmethod
    def block_flops(length, dim, ffn_dim):
        return swishrnn_bert_block_flops(length, dim, ffn_dim)

    def default_baseline(self, spec):
        """BERT-rab of the same size with a ``4 d`` FFN: the paper's comparison."""
        encoder = Stack(spec.encoder.layers, spec.encoder.dim, 4 * spec.encoder.dim)
        baseline = ModelSpec("bert_rab", encoder)
        return "bert_rab", baseline, roberta_overrides_for(encoder)


class ThreeMLFlops(FlopsFamily):
    """3ML (App. D): the encoder runs on ``L_e = L - n_mask`` kept tokens, a projection maps
    them to the decoder dim (when the dims differ), and the head maps decoder dim -> encoder
    dim before the tied vocabulary projection."""

    has_decoder = True

    def decoder_flops(self, spec, encoder_length, decoder_length) -> float:
        raise NotImplementedError

    def head_flops(self, spec, mask_tokens, other_predicted_tokens, vocab_size) -> float:
        return prediction_head_flops(mask_tokens + other_predicted_tokens, spec.decoder.dim,
                                     spec.encoder.dim, vocab_size)

    def forward_flops(self, spec, encoder_length, decoder_length, mask_tokens,
                      other_predicted_tokens, vocab_size):
        enc = spec.encoder
        return (enc.layers * transformer_block_flops(encoder_length, enc.dim, enc.ffn_dim)
                + projection_flops(encoder_length, enc.dim, spec.decoder.dim)
                + self.decoder_flops(spec, encoder_length, decoder_length)
                + self.head_flops(spec, mask_tokens, other_predicted_tokens, vocab_size))

    #: whether the decoder blocks also cross-attend to the encoder output
    cross_attention = False

    def parameters(self, spec, vocab_size, positions):
        enc, dec = spec.encoder, spec.decoder
        projection = 0 if enc.dim == dec.dim else enc.dim * dec.dim + dec.dim
        decoder_block = block_parameters(dec.dim, dec.ffn_dim) + (
            attention_parameters(dec.dim) + 2 * dec.dim if self.cross_attention else 0)
        return (embedding_parameters(vocab_size, positions, enc.dim)
                + enc.layers * block_parameters(enc.dim, enc.ffn_dim) + projection
                + dec.dim * (1 + positions + 2) + 2 * dec.dim  # [MASK], positions, norm
                + dec.layers * decoder_block + lm_head_parameters(dec.dim, enc.dim, vocab_size))

    def stack_activations(self, spec, length, sequences, heads, predicted_tokens,
                          bytes_per_element):
        """The encoder on its kept tokens and the decoder on its queries (:meth:`run_lengths`
        at the batch's [MASK] share, taken as 0.8 of the predicted tokens as in 80/10/10);
        the decoder's heads as the encoder's (the sizes' ratio of dims to heads is the same)."""
        enc, dec = spec.encoder, spec.decoder
        mask_tokens = 0.8 * predicted_tokens / sequences
        encoder_length, decoder_length = self.run_lengths(spec, length, mask_tokens)
        decoder_heads = max(1, heads * dec.dim // enc.dim)
        return [stack_activations_of(enc, encoder_length, sequences, heads, bytes_per_element),
                stack_activations_of(dec, decoder_length, sequences, decoder_heads,
                                     bytes_per_element)]


@register_flops_family
class ThreeMLSelfFlops(ThreeMLFlops):
    """3ML-self (Eq. 3): decoder self-attention blocks on all ``L`` positions."""

    name = "3ml_self"

    def run_lengths(self, spec, length, mask_tokens):
        return length - mask_tokens, length

    def decoder_flops(self, spec, encoder_length, decoder_length):
        dec = spec.decoder
        return dec.layers * transformer_block_flops(decoder_length, dec.dim, dec.ffn_dim)


@register_flops_family
class ThreeMLCrossFlops(ThreeMLFlops):
    """3ML-cross (Eq. 4): decoder blocks with ``L_d = n_mask`` queries (self-attention among
    them, cross-attention to the ``L_e`` encoder outputs). The head runs on the ``L_d``
    [MASK]s with ``D_d D_e`` and, in the paper's Eq. 4, on the replaced/unchanged tokens with
    ``D_e D_e``; our implementation sends those through the projected, ``D_d``-wide features
    and the same head, which costs ``2 n_other D_e (D_e - D_d)`` fewer FLOPs (under 0.1% at
    base size). We count the paper's Eq. 4."""

    name = "3ml_cross"
    cross_attention = True

    def run_lengths(self, spec, length, mask_tokens):
        return length - mask_tokens, mask_tokens

    def decoder_flops(self, spec, encoder_length, decoder_length):
        dec = spec.decoder
        return dec.layers * cross_block_flops(decoder_length, encoder_length, dec.dim, dec.ffn_dim)

    def head_flops(self, spec, mask_tokens, other_predicted_tokens, vocab_size):
        enc_dim = spec.encoder.dim
        return (prediction_head_flops(mask_tokens, spec.decoder.dim, enc_dim, vocab_size)
                + prediction_head_flops(other_predicted_tokens, enc_dim, enc_dim, vocab_size))


@register_flops_family
class BidirectionalLmFlops(FlopsFamily):
    """Generalized bidirectionality (Artetxe et al., 2022): a decoder-only LM. ``N`` blocks on
    the packed length ``L`` (self-attention counted on the full ``L x L`` map, which SDPA
    computes whatever the mask lets through) and the tied output projection ``2 n D V`` on the
    ``n`` predicted tokens only (the ``bidirectional_lm`` criterion computes logits only there);
    no dense layer in the head. The one stack is the model's ``--decoder-*`` (held as the
    spec's ``encoder``). Per token with every token predicted (NxtUni) this is the forward
    count of Narayanan et al. (2021), blocks ``24 l h^2 + 4 s l h`` and head ``2 h V``; their
    training count, ``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` (4 x the blocks: activation
    recomputation; 3 x the head), reproduces Table 2's "cost" column (Artetxe et al., 2022,
    estimate it "following Artetxe et al. (2021)"); we count training as 3 x forward.

    The calculator's ``--mask-prob`` is the share of predicted tokens here (``<mask>`` and
    next-token targets go through the same head)."""

    name = "bidirectional_lm"

    def spec_from_args(self, args) -> ModelSpec:
        return ModelSpec(self.name, Stack(args.decoder_layers, args.decoder_embed_dim,
                                          args.decoder_ffn_embed_dim))

    def parameters(self, spec, vocab_size, positions):
        """Embeddings (the output projection is tied to them), blocks, final norm."""
        stack = spec.encoder
        return (vocab_size * stack.dim + (positions + 2) * stack.dim
                + stack.layers * block_parameters(stack.dim, stack.ffn_dim) + 2 * stack.dim)

    def stack_activations(self, spec, length, sequences, heads, predicted_tokens,
                          bytes_per_element):
        return [stack_activations_of(spec.encoder, length, sequences, heads,
                                     bytes_per_element)]

    def forward_flops(self, spec, encoder_length, decoder_length, mask_tokens,
                      other_predicted_tokens, vocab_size):
        stack = spec.encoder
        return decoder_lm_forward_flops(encoder_length, stack.dim, stack.ffn_dim, stack.layers,
                                        vocab_size, mask_tokens + other_predicted_tokens)

    def default_baseline(self, spec):
        """The same model (``--arch bidirectional_lm`` with these sizes): set its predicted
        share with ``--vs-mask-prob``."""
        stack = spec.encoder
        return "bidirectional_lm", spec, {
            "decoder_layers": stack.layers, "decoder_embed_dim": stack.dim,
            "decoder_ffn_embed_dim": stack.ffn_dim,
            "decoder_attention_heads": max(1, stack.dim // 64)}


# --- parameters and activations of the building blocks ------------------------------------------

def attention_parameters(dim: int) -> int:
    """Q, K, V and output projections with their biases."""
    return 4 * dim * dim + 4 * dim


def block_parameters(dim: int, ffn_dim: int, ffn: str = "mlp") -> int:
    """A Transformer block: attention, two layer norms, and its FFN: ``mlp`` (``D -> F -> D``
    with biases) or ``swishrnn`` (Lei et al.: ``W1, W2`` without bias, ``W3`` with one, and
    ``alpha, beta, b_c, b_sigma`` of size ``d'``)."""
    feed_forward = (2 * dim * ffn_dim + ffn_dim + dim if ffn == "mlp"
                    else 3 * dim * ffn_dim + 4 * ffn_dim + dim)
    return attention_parameters(dim) + feed_forward + 4 * dim


def embedding_parameters(vocab_size: int, positions: int, dim: int) -> int:
    """Token and learned positions (fairseq's ``positions + padding_idx + 1`` rows) and the
    embedding layer norm of a RoBERTa-style encoder."""
    return vocab_size * dim + (positions + 2) * dim + 2 * dim


def lm_head_parameters(input_dim: int, embed_dim: int, vocab_size: int) -> int:
    """RoBERTa's MLM head: dense ``input_dim -> embed_dim``, layer norm, the output bias (the
    projection is tied to the token embedding)."""
    return input_dim * embed_dim + embed_dim + 2 * embed_dim + vocab_size


def block_activation_bytes(length: float, sequences: int, dim: int, ffn_dim: int, heads: int,
                           bytes_per_element: int = 2, ffn: str = "mlp") -> float:
    """Activations a Transformer block keeps for its backward pass (no recomputation, no tensor
    parallelism): Korthikanti et al. (2022, "Reducing Activation Recomputation in Large
    Transformer Models", Sec. 4.1), ``s b h (34 + 5 a s / h)`` bytes at 16-bit, with the FFN
    written out for any width ``F``: attention ``11 s b h + 5 a s^2 b``, MLP ``s b (3 h + 4 F)``
    (19 s b h at F = 4h), two layer norms ``4 s b h``. A SwishRNN FFN (our adaptation) keeps its
    input, ``X1``, ``X2``, the states ``C``, GeLU's output and their product: ``s b (3 h + 10 F)``.
    Each term is 2-byte elements and 1-byte dropout masks; ``bytes_per_element`` 4 (fp32)
    doubles it (masks included, a slight over-estimate)."""
    s, b, h = length, sequences, dim
    attention = 11 * s * b * h + 5 * heads * s * s * b
    feed_forward = s * b * (3 * h + (4 if ffn == "mlp" else 10) * ffn_dim)
    return (attention + feed_forward + 4 * s * b * h) * bytes_per_element / 2


def stack_activations_of(stack: Stack, length: float, sequences: int, heads: int,
                         bytes_per_element: int, ffn: str = "mlp") -> StackActivations:
    """:class:`StackActivations` of ``stack`` run on ``length`` tokens of ``sequences`` rows: a
    block's :func:`block_activation_bytes`, and its input, ``s b h`` elements."""
    return StackActivations(
        stack.layers,
        block_activation_bytes(length, sequences, stack.dim, stack.ffn_dim, heads,
                               bytes_per_element, ffn),
        length * sequences * stack.dim * bytes_per_element)


def logits_bytes(predicted_tokens: float, vocab_size: int) -> float:
    """fp32 logits of the predicted tokens and their log-softmax, kept for the loss's backward."""
    return 2 * 4 * predicted_tokens * vocab_size


# --- specs and whole-model FLOPs ----------------------------------------------------------------

def spec_from_args(args) -> ModelSpec:
    """The :class:`ModelSpec` of a built or configured model, from its real hyperparameters
    (``args.arch`` resolved through fairseq's registries, so nothing is hard-coded per name)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    arch = getattr(args, "arch", None) or getattr(args, "_name", None)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if model_name not in FLOPS_FAMILIES:
        raise NoFlopsFormula(
            f"no FLOPs formula for arch '{arch}' (model '{model_name}'); formulas exist for "
            f"the models {', '.join(FLOPS_FAMILIES)}")
    return flops_family(model_name).spec_from_args(args)


def spec_for_arch(arch: str, **overrides) -> ModelSpec:
    """Apply a registered architecture's defaults (after ``overrides``, as fairseq does)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    if arch not in ARCH_CONFIG_REGISTRY:
        from fairseq_ext.training.model_building import unknown_arch_message

        raise NoFlopsFormula(unknown_arch_message(arch))
    args = argparse.Namespace(arch=arch, **{k: v for k, v in overrides.items() if v is not None})
    ARCH_CONFIG_REGISTRY[arch](args)
    return spec_from_args(args)


def forward_flops(spec: ModelSpec, encoder_length: float, decoder_length: float,
                  mask_tokens: float, other_predicted_tokens: float, vocab_size: int) -> float:
    """Forward FLOPs of one sequence given the lengths each part really runs on
    (:meth:`FlopsFamily.forward_flops` of the spec's family)."""
    return flops_family(spec.family).forward_flops(
        spec, encoder_length, decoder_length, mask_tokens, other_predicted_tokens, vocab_size)


def exact_forward_flops(spec: ModelSpec, length: float, mask_tokens: float,
                        other_predicted_tokens: float, vocab_size: int) -> float:
    """Forward FLOPs of one sequence of ``length`` tokens with ``mask_tokens`` ``<mask>``s and
    ``other_predicted_tokens`` other predicted tokens, each part on the lengths its family's
    :meth:`~FlopsFamily.run_lengths` gives."""
    family = flops_family(spec.family)
    encoder_length, decoder_length = family.run_lengths(spec, length, mask_tokens)
    return family.forward_flops(spec, encoder_length, decoder_length, mask_tokens,
                                other_predicted_tokens, vocab_size)


def training_flops_of_rows(spec: ModelSpec, sequences: float, length: float,
                           mask_per_sequence: float, other_per_sequence: float, vocab_size: int,
                           run_lengths: Optional[Tuple[float, float]] = None) -> float:
    """Training FLOPs (:data:`TRAINING_MULTIPLIER` x forward) of ``sequences`` rows of
    ``length`` tokens, each with ``mask_per_sequence`` ``<mask>`` and ``other_per_sequence``
    other predicted tokens; each part on ``run_lengths`` ``(encoder, decoder)`` when given,
    else on the family's :meth:`~FlopsFamily.run_lengths`. The criteria count their batches
    with it (:class:`~fairseq_ext.flops.training_metrics.TrainingFlops`) and a run's planned
    updates too (:func:`~fairseq_ext.flops.run_flops.update_training_flops`)."""
    if run_lengths is None:
        per_sequence = exact_forward_flops(spec, length, mask_per_sequence, other_per_sequence,
                                           vocab_size)
    else:
        per_sequence = forward_flops(spec, *run_lengths, mask_per_sequence, other_per_sequence,
                                     vocab_size)
    return TRAINING_MULTIPLIER * per_sequence * sequences


def expected_forward_flops(spec: ModelSpec, length: int, mask_prob: float, vocab_size: int,
                           mask_fraction: float = 0.8) -> float:
    """Forward FLOPs of one sequence of ``length`` tokens at masking rate ``mask_prob``, of
    which ``mask_fraction`` become [MASK] (App. D, Eqs. 2-4, per sequence)."""
    mask_tokens, other_tokens = corrupted_tokens(length, mask_prob, mask_fraction)
    return exact_forward_flops(spec, length, mask_tokens, other_tokens, vocab_size)


def training_flops_per_sequence(spec: ModelSpec, length: int, mask_prob: float, vocab_size: int,
                                mask_fraction: float = 0.8) -> float:
    """Training FLOPs (:data:`TRAINING_MULTIPLIER` x forward) of one sequence."""
    return TRAINING_MULTIPLIER * expected_forward_flops(spec, length, mask_prob, vocab_size,
                                                        mask_fraction)
