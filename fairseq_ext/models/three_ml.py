"""3ML, "Mask More and Mask Later" (Liao et al., 2022): ``3ml_self_*`` and ``3ml_cross_*``.

A RoBERTa encoder that runs on the non-[MASK] tokens only, each at its original learned position
(``L_e = L (1 - 0.8 m)`` tokens, App. D, Eq. 3), and a small decoder that appends the [MASK]s
later (§2.2, Figure 2): 3ML-self over the whole re-assembled sequence, 3ML-cross over the [MASK]
slots with cross-attention to the encoder output. One prediction head tied to the encoder's
token embedding (App. D) gives Table 3's parameter counts. Trained with fairseq's stock
``masked_lm`` task: ``forward`` returns the logits of the corrupted positions as fairseq's
``roberta`` does, with one :class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun` in ``extra``
whatever the sizing. Details: docs/three_ml.md, "The model".
"""
import argparse
import contextlib
import functools
import logging
from typing import Optional, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import register_model
from fairseq.models.roberta.model import (
    RobertaEncoder,
    RobertaLMHead,
    RobertaModel,
)
from fairseq.models.roberta.model import (
    base_architecture as roberta_base_architecture,
)
from fairseq.modules import (
    FairseqDropout,
    LayerNorm,
    PositionalEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.data.masking_capacity import MaskingCapacity
from fairseq_ext.models.dictionary_check import DictionaryCheckedLoading
from fairseq_ext.models.masked_lm_run import MASKED_LM_RUN, MaskedLmRun
from fairseq_ext.models.sizes import (
    ENCODER_SIZES,
    StackSize,
    register_sized_architecture,
    set_stack_size,
)
from fairseq_ext.models.validation import check_attention_heads, check_masking
from fairseq_ext.modules.packed_encoder_layer import grid_encoder_layer, packed_layer_unsupported
from fairseq_ext.modules.positioned_encoder import (
    PositionedTransformerEncoder,
    embed_learned_positions,
)
from fairseq_ext.modules.token_selection import (
    PackedTokens,
    ensure_attendable,
    pack_selected,
    pack_tokens,
    pack_tokens_bounded,
    selected_first,
)

logger = logging.getLogger(__name__)

NORMALIZATIONS = ("pre-ln", "post-ln")
#: ``--static-sizes``: when the kept tokens, the [MASK] queries and the predicted tokens are
#: sized statically (:class:`~fairseq_ext.data.masking_capacity.MaskingCapacity`: no
#: device-to-host read, fixed shapes) rather than by their counts (exact, one read each).
STATIC_SIZES = ("auto", "always", "never")


def validate_three_ml_config(args, task) -> int:
    """Check a 3ML configuration before anything is built; return the ``<mask>`` index.

    Raises ``ValueError`` naming the flag to change: a dictionary without ``<mask>``,
    ``--mask-prob`` outside (0, 1), ``--leave-unmasked-prob`` + ``--random-token-prob`` above
    1, or a dimension not divisible by its number of attention heads.
    """
    dictionary = task.source_dictionary
    mask_idx = dictionary.index("<mask>")
    if mask_idx == dictionary.unk():
        raise ConfigError(
            "3ML needs a <mask> symbol in the dictionary; train with --task masked_lm (which "
            "adds it) or add '<mask>' to the dictionary"
        )
    check_masking(getattr(task, "cfg", None))
    if args.normalization not in NORMALIZATIONS:
        raise ConfigError(f"--normalization must be one of {NORMALIZATIONS}; got {args.normalization}")
    check_attention_heads(args)
    if args.decoder_layers < 1:
        raise ConfigError(f"--decoder-layers must be at least 1; got {args.decoder_layers}")
    return mask_idx


class ProjectingLMHead(RobertaLMHead):
    """RoBERTa's MLM head whose first dense layer maps ``input_dim`` -> ``embed_dim`` (App. D),
    so the vocabulary projection can stay tied to the encoder's token embedding."""

    def __init__(self, input_dim, embed_dim, output_dim, activation_fn, weight):
        super().__init__(embed_dim, output_dim, activation_fn, weight)
        self.dense = nn.Linear(input_dim, embed_dim)


class ThreeMLEncoder(RobertaEncoder):
    """fairseq's RoBERTa encoder, able to run on the kept tokens only.

    Parameter names are RoBERTa's (``sentence_encoder.*``), so the weights export as a plain
    RoBERTa encoder. The MLM head lives with the decoder (it maps decoder dim -> encoder dim),
    so the encoder has no ``lm_head`` of its own.
    """

    def __init__(self, args, dictionary):
        super().__init__(args, dictionary)
        # Checked once here, not on every step: layers the packed path does not mirror run
        # fairseq's own forward on the padded grid instead.
        unsupported = self.sentence_encoder.packed_unsupported()
        self.runs_packed = unsupported is None
        if unsupported is not None:
            logger.warning("3ML encoder pads its rows to the longest kept row: %s", unsupported)

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = PositionedTransformerEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder

    def build_lm_head(self, embed_dim, output_dim, activation_fn, weight):
        return None

    def encode_kept(self, src_tokens: torch.Tensor, keep: torch.Tensor,
                    positions: torch.Tensor) -> Tuple[torch.Tensor, PackedTokens]:
        """Run the encoder on the ``keep`` tokens of each row, each at its original position.

        Returns ``(out, packed)``: the kept tokens' outputs ``(N, C)`` in row-major order, and
        their :class:`PackedTokens` layout.
        """
        packed = pack_tokens(keep)
        return self.encode_packed(src_tokens, positions, packed), packed

    def encode_packed(self, src_tokens: torch.Tensor, positions: torch.Tensor,
                      packed: PackedTokens) -> torch.Tensor:
        """The encoder's outputs ``(N, C)`` of the tokens ``packed`` selects (exact or static
        sizes), each at its original position."""
        tokens, kept_positions = packed.gather(src_tokens), packed.gather(positions)
        if self.runs_packed:
            return self.sentence_encoder.forward_packed(tokens, kept_positions, packed)
        pad = self.sentence_encoder.padding_idx
        out = self.sentence_encoder.forward_positioned(
            packed.to_grid(tokens, pad), packed.to_grid(kept_positions, pad),
            ensure_attendable(~packed.valid))
        return packed.from_grid(out.transpose(0, 1))


class ThreeMLDecoderBase(nn.Module):
    """What both decoders share: projection to the decoder dim, the learned mask embedding
    (decoder space), the decoder's own learned positions, input norm/dropout, final norm and
    the MLM head mapping decoder dim -> encoder dim."""

    def __init__(self, args, padding_idx: int, vocab_size: int, embed_tokens_weight):
        super().__init__()
        encoder_dim, dim = args.encoder_embed_dim, args.decoder_embed_dim
        self.pre_ln = args.normalization == "pre-ln"
        self.padding_idx = padding_idx
        self.project = nn.Linear(encoder_dim, dim) if dim != encoder_dim else nn.Identity()
        self.mask_embedding = nn.Parameter(torch.empty(dim).normal_(mean=0.0, std=0.02))
        self.embed_positions = PositionalEmbedding(args.max_positions, dim, padding_idx, learned=True)
        # Post-LN blocks get a normalised input, like RoBERTa's embedding LayerNorm; pre-LN
        # blocks get a final LayerNorm instead, like roberta_prenorm.
        self.layernorm_embedding = None if self.pre_ln else LayerNorm(dim)
        self.layer_norm = LayerNorm(dim) if self.pre_ln else None
        self.dropout_module = FairseqDropout(args.dropout, module_name=type(self).__name__)
        self.lm_head = ProjectingLMHead(dim, encoder_dim, vocab_size, args.activation_fn,
                                        weight=embed_tokens_weight)

    @staticmethod
    def layer_args(args) -> argparse.Namespace:
        """The model's args with the encoder/decoder layer fields set to the decoder sizes.

        ``args`` is an ``argparse.Namespace`` under ``fairseq-train`` and a ``DictConfig`` under
        ``fairseq-hydra-train`` (``vars()`` of which holds none of the model's fields)."""
        fields = (OmegaConf.to_container(args, resolve=True) if OmegaConf.is_config(args)
                  else vars(args))
        layer_args = argparse.Namespace(**fields)
        pre_ln = args.normalization == "pre-ln"
        for side in ("encoder", "decoder"):  # fairseq's layers read their own side's fields
            setattr(layer_args, f"{side}_embed_dim", args.decoder_embed_dim)
            setattr(layer_args, f"{side}_ffn_embed_dim", args.decoder_ffn_embed_dim)
            setattr(layer_args, f"{side}_attention_heads", args.decoder_attention_heads)
            setattr(layer_args, f"{side}_normalize_before", pre_ln)
        return layer_args

    def prepare_input(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """Input norm (post-LN), dropout, zeroed padding; ``(B, L, C)`` -> ``(L, B, C)``."""
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        return x.transpose(0, 1)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm (pre-LN); ``(L, B, C)`` -> ``(B, L, C)``."""
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x.transpose(0, 1)


class ThreeMLSelfDecoder(ThreeMLDecoderBase):
    """3ML-self decoder: full-length self-attention over projected encoder states and [MASK]s."""

    def __init__(self, args, padding_idx, vocab_size, embed_tokens_weight):
        super().__init__(args, padding_idx, vocab_size, embed_tokens_weight)
        layer_args = self.layer_args(args)
        self.layers = nn.ModuleList(
            [TransformerEncoderLayer(layer_args) for _ in range(args.decoder_layers)]
        )
        self.apply(init_bert_params)
        # fairseq's layers, run through grid_encoder_layer (fewer ops) where it mirrors them
        self.runs_lean = all(packed_layer_unsupported(layer) is None for layer in self.layers)

    def forward(self, encoder_out, packed: PackedTokens, is_mask, src_tokens, predict):
        """Encoder outputs of the kept tokens ``(N, C_e)`` -> logits of the ``predict``
        positions (row-major)."""
        return self.lm_head(self.features(encoder_out, packed, is_mask, src_tokens), predict)

    def features(self, encoder_out, packed: PackedTokens, is_mask, src_tokens) -> torch.Tensor:
        """The decoder's output ``(B, T, C_d)`` at every position, before the head."""
        hidden = self.project(encoder_out)  # (N, C_d)
        # back to the original positions (zeros elsewhere)
        x = packed.to_source(hidden)
        x = torch.where(is_mask.unsqueeze(-1), self.mask_embedding.to(x.dtype), x)
        x = x + self.embed_positions(src_tokens)
        padding_mask = src_tokens.eq(self.padding_idx)
        x = self.prepare_input(x, padding_mask)
        if self.runs_lean:  # batch first, fairseq's layer computation with one QKV product
            x = x.transpose(0, 1)
            attend = ~ensure_attendable(padding_mask)[:, None, None, :]
            for layer in self.layers:
                x = grid_encoder_layer(layer, x, attend)
            return self.finish(x.transpose(0, 1))
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=padding_mask)
        return self.finish(x)


class ThreeMLCrossDecoder(ThreeMLDecoderBase):
    """3ML-cross decoder: the [MASK] slots attend to each other and to the encoder output."""

    def __init__(self, args, padding_idx, vocab_size, embed_tokens_weight):
        super().__init__(args, padding_idx, vocab_size, embed_tokens_weight)
        layer_args = self.layer_args(args)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayer(layer_args) for _ in range(args.decoder_layers)]
        )
        self.memory_positions = safe_getattr(args, "cross_memory_positions", "none")
        self.apply(init_bert_params)

    def forward(self, memory, encoder_padding_mask, is_mask, positions, predict,
                memory_positions=None):
        """Decoder features ``(n, C_d)`` of the predicted [MASK] positions (row-major), given
        the projected encoder output ``memory`` ``(L_e, B, C_d)``, and the padded number of
        queries the decoder ran on."""
        x, query_index, query_valid = self.features(memory, encoder_padding_mask, is_mask,
                                                    positions, memory_positions)
        return x[query_valid & predict.gather(1, query_index)], query_index.size(1)

    def features(self, memory, encoder_padding_mask, is_mask, positions, memory_positions=None,
                 width: Optional[int] = None):
        """``(x, query_index, query_valid)``: the decoder's output ``(B, W, C_d)`` at each
        row's [MASK] slots, packed to the left (``width`` static slots, or the most [MASK]s
        of a row), the columns of those slots and which hold a [MASK] (``(B, W)`` each)."""
        if self.memory_positions == "decoder":
            memory = memory + embed_learned_positions(self.embed_positions,
                                                      memory_positions).transpose(0, 1)
        query_index, query_valid = pack_selected(is_mask, width)
        query_positions = positions.gather(1, query_index).masked_fill(~query_valid, self.padding_idx)
        x = self.mask_embedding + embed_learned_positions(self.embed_positions, query_positions)
        query_padding = ensure_attendable(~query_valid)
        x = self.prepare_input(x, query_padding)
        for layer in self.layers:
            x, _, _ = layer(x, encoder_out=memory, encoder_padding_mask=encoder_padding_mask,
                            self_attn_padding_mask=query_padding)
        return self.finish(x), query_index, query_valid


class ThreeMLModel(DictionaryCheckedLoading, RobertaModel):
    """Shared by 3ML-self and 3ML-cross; subclasses set :attr:`variant`."""

    variant: str = ""
    #: ``forward`` takes ``masking_capacity`` (our criteria pass it to models that say so)
    accepts_masking_capacity = True

    def __init__(self, args, encoder: ThreeMLEncoder, mask_decoder: ThreeMLDecoderBase,
                 mask_idx: int):
        super().__init__(args, encoder)
        self.mask_decoder = mask_decoder
        self.mask_idx = mask_idx
        self.static_sizes = safe_getattr(args, "static_sizes", "auto")
        #: the task's masking, for criteria that pass no capacity (fairseq's ``masked_lm``):
        #: set by :meth:`build_model`; ``None`` (exact sizes) for a task that masks otherwise
        self.task_masking_capacity: Optional[MaskingCapacity] = None

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument("--decoder-layers", type=int, metavar="N",
                            help="3ML decoder blocks (Table 4: 2)")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N",
                            help="3ML decoder dim (Table 4: half the encoder dim)")
        parser.add_argument("--decoder-ffn-embed-dim", type=int, metavar="N",
                            help="3ML decoder FFN inner dim (Table 4: 4x the decoder dim)")
        parser.add_argument("--decoder-attention-heads", type=int, metavar="N",
                            help="3ML decoder heads (Table 4: head size 64)")
        parser.add_argument("--cross-memory-positions", choices=("decoder", "none"),
                            help="3ML-cross: add the decoder's position embedding of each kept "
                                 "token to the encoder output its cross-attention reads")
        parser.add_argument("--static-sizes", choices=STATIC_SIZES,
                            help="size kept tokens, [MASK] queries and predictions from the "
                                 "batch shape and masking settings (no device read, fixed "
                                 "shapes): auto (default) on CUDA and under torch.compile")
        parser.add_argument("--normalization", choices=NORMALIZATIONS,
                            help="pre-ln or post-ln, encoder and decoder (Table 4: pre-ln for "
                                 "large and 3ML-cross); sets --encoder-normalize-before, and "
                                 "--layernorm-embedding for post-ln")

    @classmethod
    def build_model(cls, args, task):
        three_ml_architecture(args)
        mask_idx = validate_three_ml_config(args, task)
        if not safe_getattr(args, "max_positions", None):
            args.max_positions = args.tokens_per_sample
        dictionary = task.source_dictionary
        encoder = ThreeMLEncoder(args, dictionary)
        decoder_cls = ThreeMLCrossDecoder if cls.variant == "cross" else ThreeMLSelfDecoder
        decoder = decoder_cls(args, dictionary.pad(), len(dictionary),
                              encoder.sentence_encoder.embed_tokens.weight)
        model = cls(args, encoder, decoder, mask_idx)
        model.task_masking_capacity = MaskingCapacity.from_task(getattr(task, "cfg", None))
        return model

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False,
                classification_head_name=None, masked_tokens=None,
                masking_capacity: Optional[MaskingCapacity] = None, **kwargs):
        """Masked-LM logits of the corrupted positions, or (``features_only`` /
        ``classification_head_name``) RoBERTa's encoder on the whole, unmasked input.

        ``masking_capacity`` (passed by our criteria; fairseq's models ignore it) says the
        batch was masked by the task's ``MaskTokensDataset``: with static sizes in use
        (:meth:`uses_static_sizes`), the logits are those of the run's ``prediction_index``
        (:meth:`static_masked_lm_logits`). A criterion that passes none (fairseq's own
        ``masked_lm``) gets the task's capacity (:attr:`task_masking_capacity`) for the
        encoder and decoder, and the logits of exactly the ``masked_tokens`` positions, in
        row-major order, as fairseq's RoBERTa returns them. Either way ``extra`` holds one
        :class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun`, the contract our criteria read."""
        if features_only or classification_head_name is not None:
            return super().forward(src_tokens, features_only, return_all_hiddens,
                                   classification_head_name, **kwargs)
        capacity = masking_capacity or self.task_masking_capacity
        if masked_tokens is not None and self.uses_static_sizes(src_tokens, capacity):
            return self.static_masked_lm_logits(src_tokens, masked_tokens, capacity,
                                                every_asked=masking_capacity is None)
        return self.masked_lm_logits(src_tokens, masked_tokens)

    def uses_static_sizes(self, src_tokens, capacity: Optional[MaskingCapacity]) -> bool:
        """Whether this batch is sized statically (``--static-sizes``): never without a
        capacity; with ``auto``, on CUDA and under ``torch.compile``."""
        if capacity is None or self.static_sizes == "never":
            return False
        return (self.static_sizes == "always" or src_tokens.is_cuda
                or torch.compiler.is_compiling())

    @contextlib.contextmanager
    def sized_as_on_cuda(self):
        """Within it, this model makes its size choices as on CUDA: ``--static-sizes auto``
        becomes static, as it is there (and under torch.compile), so that what runs on the CPU
        (the device reads a benchmark counts) is the GPU's; restored on exit. ``always`` and
        ``never`` stay as they are."""
        switched = self.static_sizes == "auto"
        if switched:
            self.static_sizes = "always"
        try:
            yield self
        finally:
            if switched:
                self.static_sizes = "auto"

    def static_masked_lm_logits(self, src_tokens, masked_tokens, capacity: MaskingCapacity,
                                every_asked: bool = False):
        """:meth:`masked_lm_logits` with static sizes: nothing is read from the device, and
        every shape follows from ``src_tokens.shape`` and ``capacity``.

        The logits ``(P, V)`` are those of the flat positions of the run's ``prediction_index``
        (``P`` = :meth:`~MaskingCapacity.predicted_total`): the asked positions
        (``masked_tokens`` minus padding) in row-major order, then unasked ones, whose targets
        are padding (ignored by the loss). The encoder runs on a static number of kept tokens
        (:func:`~fairseq_ext.modules.token_selection.pack_tokens_bounded`); a kept token beyond
        it (probability below 1e-9 a batch) is left out of the encoder, as if masked, and
        counted in ``kept_tokens_dropped``; asked positions beyond
        :meth:`~MaskingCapacity.predicted_total` (none where ``MaskTokensDataset`` masked the
        batch: that bound is exact) are not predicted and counted in ``predictions_dropped``.
        Otherwise the logits equal the exact path's, row for row.

        ``every_asked`` (for a criterion that indexes the targets with ``masked_tokens``
        itself, as fairseq's ``masked_lm`` does): the logits ``(N, V)`` of every
        ``masked_tokens`` position instead, padding included where asked, in row-major order,
        as fairseq's RoBERTa head selects them (``features[masked_tokens]``, the one
        data-dependent size, which ``torch.compile`` keeps inside the graph); the encoder and
        decoder keep their static sizes, and ``prediction_index`` is ``None``."""
        batch, length = src_tokens.shape
        pad = self.encoder.sentence_encoder.padding_idx
        real = src_tokens.ne(pad)
        is_mask = src_tokens.eq(self.mask_idx)
        positions = utils.make_positions(src_tokens, pad)
        packed = pack_tokens_bounded(real & ~is_mask, capacity.kept_per_row(batch, length),
                                     capacity.kept_total(batch, length))
        encoder_out = self.encoder.encode_packed(src_tokens, positions, packed)
        if self.variant == "self":
            features = self.mask_decoder.features(encoder_out, packed, is_mask, src_tokens)
            features = features.flatten(0, 1)
            decoder_length = length
        else:
            features = self._static_cross_features(encoder_out, packed, is_mask, positions,
                                                   capacity.masks_per_row(length))
            decoder_length = is_mask.sum(dim=1).max().clamp(min=1)
        if every_asked:
            logits = self.mask_decoder.lm_head(
                features[masked_tokens.expand_as(src_tokens).flatten()])
        else:
            asked = masked_tokens.expand_as(src_tokens) & real
            prediction_index = selected_first(asked.flatten())[
                :capacity.predicted_total(batch, length)]
            logits = self.mask_decoder.lm_head(features.index_select(0, prediction_index))
        if every_asked:
            prediction_index, predictions_dropped = None, packed.dropped.new_zeros(())
        else:  # asked positions beyond the predictions' capacity (none under fairseq's masking)
            predictions_dropped = (asked.sum() - prediction_index.numel()).clamp(min=0)
        run = MaskedLmRun(
            prediction_index=prediction_index, encoder_lengths=packed.counts,
            encoder_padded_length=packed.width,
            # the FLOP criteria count the kept tokens, as on the exact path (a 0-dim tensor)
            encoder_length=packed.counts.sum() / batch, decoder_padded_length=decoder_length,
            kept_tokens_dropped=packed.dropped, predictions_dropped=predictions_dropped)
        return logits, {"inner_states": None, MASKED_LM_RUN: run}

    def _static_cross_features(self, encoder_out, packed: PackedTokens, is_mask, positions,
                               mask_width: int) -> torch.Tensor:
        """3ML-cross features ``(B T, C_d)`` of every position, static sizes: the decoder's at
        the [MASK]s, the projected encoder output's at kept tokens (§2.2), zeros elsewhere."""
        batch, length = is_mask.shape
        projected = self.mask_decoder.project(encoder_out)  # (N, C_d)
        memory = packed.to_grid(projected, exact_padding=False).transpose(0, 1)
        kept_positions = packed.to_grid(packed.gather(positions), self.mask_decoder.padding_idx)
        mask_features, query_index, _ = self.mask_decoder.features(
            memory, ensure_attendable(~packed.valid), is_mask, positions, kept_positions,
            width=mask_width)
        # each row's [MASK] slots back at their columns; the padding slots land on the row's
        # other columns (distinct), which the where() below does not take
        columns = query_index + torch.arange(batch, device=is_mask.device).unsqueeze(1) * length
        at_masks = mask_features.new_zeros(batch * length, mask_features.size(-1)).index_copy(
            0, columns.flatten(), mask_features.flatten(0, 1))
        at_kept = packed.to_source(projected).flatten(0, 1).to(at_masks.dtype)
        return torch.where(is_mask.flatten().unsqueeze(1), at_masks, at_kept)

    def masked_lm_logits(self, src_tokens, masked_tokens=None):
        """Logits for the positions ``masked_tokens``, shaped as fairseq's ``roberta`` returns
        them: ``(N, V)`` in row-major order for a mask (one that broadcasts to the batch
        included), ``(B, T, V)`` for ``None`` (every position, zero logits at padding); and
        the :class:`~fairseq_ext.models.masked_lm_run.MaskedLmRun` (no ``prediction_index``,
        nothing dropped)."""
        pad = self.encoder.sentence_encoder.padding_idx
        predict, expand_to = self._positions_to_predict(src_tokens, masked_tokens, pad)
        is_mask = src_tokens.eq(self.mask_idx)
        keep = src_tokens.ne(pad) & ~is_mask
        positions = utils.make_positions(src_tokens, pad)
        encoder_out, packed = self.encoder.encode_kept(src_tokens, keep, positions)
        if self.variant == "self":
            logits = self.mask_decoder(encoder_out, packed, is_mask, src_tokens, predict)
            decoder_length = src_tokens.size(1)
        else:
            logits, decoder_length = self._cross_logits(encoder_out, packed, is_mask, positions,
                                                        predict)
        if expand_to is not None:  # the rare calls that ask for padding positions too
            full = logits.new_zeros(int(expand_to.sum()), logits.size(-1))
            full[predict[expand_to]] = logits
            logits = full
        if masked_tokens is None:  # RoBERTa's (B, T, V), e.g. for the hub's fill_mask
            logits = logits.view(*src_tokens.shape, logits.size(-1))
        nothing_dropped = packed.counts.new_zeros(())
        run = MaskedLmRun(
            prediction_index=None, encoder_lengths=packed.counts,
            encoder_padded_length=packed.width,
            encoder_length=(packed.tokens / packed.batch if self.encoder.runs_packed
                            else packed.width),
            decoder_padded_length=decoder_length, kept_tokens_dropped=nothing_dropped,
            predictions_dropped=nothing_dropped)
        return logits, {"inner_states": None, MASKED_LM_RUN: run}

    def _cross_logits(self, encoder_out, packed: PackedTokens, is_mask, positions, predict):
        """[MASK]s from the decoder, replaced/unchanged tokens from the projected encoder
        output, through the same head (§2.2)."""
        projected = self.mask_decoder.project(encoder_out)  # (N, C_d)
        memory = packed.to_grid(projected).transpose(0, 1)  # (L_e, B, C_d)
        pad = self.mask_decoder.padding_idx
        kept_positions = packed.to_grid(packed.gather(positions), pad)
        mask_features, decoder_length = self.mask_decoder(
            memory, ensure_attendable(~packed.valid), is_mask, positions, predict, kept_positions)
        other_features = projected[packed.gather(predict)]
        from_decoder = is_mask[predict]  # (N,): which predicted positions are [MASK]s
        features = other_features.new_empty(from_decoder.size(0), other_features.size(-1))
        features[from_decoder] = mask_features.to(features.dtype)
        features[~from_decoder] = other_features
        return self.mask_decoder.lm_head(features), decoder_length

    @staticmethod
    def _positions_to_predict(src_tokens, masked_tokens, pad) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(predict, expand_to)``: the real (non-padding) positions to compute logits for and,
        when the caller asked for padding positions too, the positions the returned logits must
        cover (zero logits at padding, whose targets are ignored), else ``None``.

        fairseq's ``masked_lm`` criterion (and ours) asks for padding in a batch without
        corrupted tokens: ``None`` on CPU (every position), and on GPU
        ``torch.where(masked.any(), masked, masked.new([True]))``, which broadcasts to an
        all-True ``(B, T)`` mask, padding included. Any other mask is honoured the
        same way; the one check costs one device-to-host sync, like the packing does."""
        if masked_tokens is None:
            asked = torch.ones_like(src_tokens, dtype=torch.bool)
        elif masked_tokens.shape == src_tokens.shape:
            asked = masked_tokens
        else:  # a mask that broadcasts to the batch (e.g. a one-element [True])
            asked = masked_tokens.expand_as(src_tokens)
        real = src_tokens.ne(pad)
        if masked_tokens is not None and masked_tokens.shape == src_tokens.shape \
                and not bool((asked & ~real).any()):
            return asked, None
        return asked & real, asked

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name != "" else ""
        # RobertaModel's upgrade knows nothing of the decoder; keep our keys out of its way.
        decoder_keys = {k: v for k, v in state_dict.items() if k.startswith(prefix + "mask_decoder.")}
        for k in decoder_keys:
            del state_dict[k]
        super().upgrade_state_dict_named(state_dict, name)
        state_dict.update(decoder_keys)


@register_model("3ml_self")
class ThreeMLSelfModel(ThreeMLModel):
    """3ML-self (§2.2): self-attention decoder over the whole re-assembled sequence."""

    variant = "self"


@register_model("3ml_cross")
class ThreeMLCrossModel(ThreeMLModel):
    """3ML-cross (§2.2): self- and cross-attention decoder over the [MASK] slots only."""

    variant = "cross"


def three_ml_architecture(args, size: StackSize = ENCODER_SIZES["base"],
                          normalization: str = "post-ln"):
    """Defaults of one size (only where not set, so CLI and hydra overrides win).

    The decoder defaults follow Table 4: 2 layers at half the encoder dim, FFN 4x its dim,
    head size 64. ``--normalization`` sets RoBERTa's ``encoder_normalize_before`` and
    ``layernorm_embedding`` (pre-LN as ``roberta_prenorm``; ``--layernorm-embedding`` adds the
    embedding LayerNorm to pre-LN, as ``roberta --encoder-normalize-before`` has it).
    """
    set_stack_size(args, "encoder", size)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", args.encoder_embed_dim // 2)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim",
                                              4 * args.decoder_embed_dim)
    args.decoder_attention_heads = safe_getattr(
        args, "decoder_attention_heads", max(1, args.decoder_embed_dim // 64))
    args.cross_memory_positions = safe_getattr(args, "cross_memory_positions", "none")
    args.static_sizes = safe_getattr(args, "static_sizes", "auto")
    args.normalization = safe_getattr(args, "normalization", normalization)
    args.encoder_normalize_before = args.normalization == "pre-ln"
    # post-LN: RoBERTa's embedding LayerNorm; pre-LN: none, as roberta_prenorm, unless
    # --layernorm-embedding asks for one (what keeps a short pre-LN run from collapsing,
    # docs/transfer.md)
    args.layernorm_embedding = (args.normalization == "post-ln"
                                or bool(safe_getattr(args, "layernorm_embedding", False)))
    roberta_base_architecture(args)


def table_4_normalization(model: str, size: str) -> str:
    """Table 4: pre-LN for large; for base, post-LN for 3ML-self and pre-LN for 3ML-cross
    (small and tiny follow base)."""
    return "pre-ln" if size == "large" or model == "3ml_cross" else "post-ln"


for _model in ("3ml_self", "3ml_cross"):
    for _arch, _size in ((_model, "base"), *((f"{_model}_{s}", s) for s in ENCODER_SIZES)):
        _norm = table_4_normalization(_model, _size)
        register_sized_architecture(
            _model, _arch, functools.partial(three_ml_architecture, normalization=_norm), _size,
            f", {_norm}, Table 4 decoder")
