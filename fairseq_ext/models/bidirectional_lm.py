"""Generalized bidirectionality (Artetxe et al., 2022): the ``bidirectional_lm`` model and its
``bidir_lm_*`` archs (Table 2).

A decoder-only Transformer (fairseq's decoder layers, pre-LN, learned positions looked up at each
token's ``src_positions``) whose attention follows the batch's layout: within a document token
``i`` attends to ``j`` iff ``j <= i`` or ``j < n_bidir``, and to the earlier documents of its row
unless ``no_cross_document_attention`` (§2, footnote 4, Figure 3). The ``bidirectional_lm`` task
builds the layout and puts its settings into the model's args (its ``build_model``); a batch
without one is one example per row with ``n_bidir = round(R x n)`` (``--r-bidir``, §3.2).
Details: docs/bidirectional.md ("What is built", "Attention paths"), docs/bidirectional_finetuning.md.
"""
import argparse
import logging

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.distributed import fsdp_wrap
from fairseq.models import FairseqLanguageModel, register_model
from fairseq.models.transformer import Embedding, TransformerConfig, TransformerDecoder
from fairseq.models.transformer_lm import base_lm_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.utils import safe_getattr
from omegaconf import OmegaConf

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.data.bidirectional_eval_dataset import parse_r_bidir
from fairseq_ext.models.dictionary_check import DictionaryCheckedLoading
from fairseq_ext.models.sizes import (
    DECODER_LM_SIZES,
    StackSize,
    register_sized_architecture,
    set_stack_size,
)
from fairseq_ext.models.validation import check_attention_heads
from fairseq_ext.modules.bidirectional_attention_mask import (
    additive_attention_mask,
    causal_layout,
    may_attend,
)
from fairseq_ext.modules.block_sparse_attention import (
    ATTENTION_IMPLS,
    choose_attention_impl,
    flex_pays_off,
    layout_blocks,
    min_skipped,
)
from fairseq_ext.modules.classification_heads import (
    MeanPoolClassificationHead,
    PositionClassificationHead,
    last_token_positions,
)
from fairseq_ext.modules.positioned_encoder import embed_learned_positions
from fairseq_ext.modules.sdpa_attention import MaskedSelfAttention

logger = logging.getLogger(__name__)
#: What a classification head reads: the final ``</s>`` (§3.2), or the mean of the tokens.
CLASSIFICATION_POOLINGS = ("last", "mean")

#: The batch fields that describe the packed documents (all or none of them).
LAYOUT_FIELDS = ("src_positions", "doc_ids", "bidir_lens")
#: The model's args key of the ``bidirectional_lm`` task's --no-cross-document-attention, which
#: the task puts there (``BidirectionalLMTask.build_model``).
NO_CROSS_DOCUMENT_ATTENTION = "no_cross_document_attention"
DEFAULT_MAX_TARGET_POSITIONS = 1024
#: The model's args key of ``--r-bidir`` (batches without a layout).
R_BIDIR = "r_bidir"
#: The model's args key of ``--attention-impl``.
ATTENTION_IMPL = "attention_impl"


def validate_bidirectional_lm_config(args) -> None:
    """Clear errors, naming the flag, for sizes the model cannot take."""
    check_attention_heads(args)
    for flag in ("decoder_layers", "decoder_ffn_embed_dim", "max_target_positions"):
        value = safe_getattr(args, flag, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1; got {value}")
    if not safe_getattr(args, "decoder_learned_pos", True):
        raise ConfigError("bidirectional_lm needs learned positional embeddings (masked tokens "
                          "keep the position of their original slot); drop "
                          "--decoder-learned-pos false")
    if safe_getattr(args, "adaptive_softmax_cutoff", None) or safe_getattr(args, "adaptive_input",
                                                                           False):
        raise ConfigError("bidirectional_lm has no adaptive input/softmax; drop "
                          "--adaptive-softmax-cutoff / --adaptive-input")
    check_attention_impl(args)


def check_attention_impl(args) -> None:
    """``--attention-impl``: one of :data:`ATTENTION_IMPLS`. (Where ``flex`` cannot train, the
    run's check refuses it: :func:`fairseq_ext.models.validation.check_flex_trains`.)"""
    impl = safe_getattr(args, ATTENTION_IMPL, None) or "auto"
    if impl not in ATTENTION_IMPLS:
        raise ConfigError(f"--attention-impl {impl!r}: choose one of {', '.join(ATTENTION_IMPLS)}")


def model_r_bidir(value) -> float:
    """The model's ``--r-bidir``: one ratio in [0, 1]; unset (``None``, as in a pre-training
    checkpoint's args) is 0, causal. Errors name the flag."""
    if value is None:
        return 0.0
    values = parse_r_bidir(str(value))
    if len(values) != 1:
        raise ConfigError(f"--r-bidir {value!r}: the model takes one ratio in [0, 1] (n_bidir = R "
                          "x each example's length; 0 causal, 1 fully bidirectional), not a list "
                          "(lists are for fairseq-validate --task bidirectional_lm --eval-mode)")
    return values[0]


def example_layout(tokens: torch.Tensor, padding_idx: int, r_bidir: float = 0.0):
    """``(positions, doc_ids, bidir_lens)`` of one example per row (left or right padding):
    positions ``0 .. n - 1`` over the ``n`` real tokens of the row and ``n_bidir = round(R x n)``
    (halves up, as the evaluation modes round), so ``R = 0`` is a causal LM over the row
    (:func:`~fairseq_ext.modules.bidirectional_attention_mask.causal_layout`) and ``R = 1`` full
    bidirectional attention over the example; padding gets document ``-1``."""
    positions, doc_ids, bidir_lens = causal_layout(tokens, padding_idx)
    if r_bidir > 0:
        real = doc_ids.ge(0)
        lengths = real.sum(dim=1, keepdim=True).to(torch.float64)
        n_bidir = torch.floor(lengths * float(r_bidir) + 0.5).long()
        bidir_lens = torch.where(real, n_bidir.expand_as(doc_ids), bidir_lens)
    return positions, doc_ids, bidir_lens


class BidirectionalDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer (built without cross-attention) whose self-attention takes the
    per-example mask (:class:`MaskedSelfAttention`; same parameters and names)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return MaskedSelfAttention(
            embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )


class BidirectionalTransformerDecoder(TransformerDecoder):
    """fairseq's ``TransformerDecoder`` (no encoder attention) on packed documents: explicit
    positions and the generalized-bidirectionality mask."""

    def __init__(self, args, dictionary, embed_tokens, cross_document: bool = True,
                 r_bidir: float = 0.0, attention_impl: str = "auto"):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=True)
        self.cross_document = cross_document
        self.r_bidir = r_bidir  # batches without a layout: n_bidir = round(R x n) per row
        self.attention_impl = attention_impl  # auto | sdpa | flex (choose_attention_impl)
        self._logged_paths = set()

    # A copy of fairseq's TransformerDecoderBase.build_decoder_layer, which names its layer class.
    def build_decoder_layer(self, cfg, no_encoder_attn=True):
        """As fairseq's, with our layer: activation checkpointing and FSDP wrapping honoured."""
        cfg = TransformerConfig.from_namespace(cfg)
        layer = BidirectionalDecoderLayer(cfg, no_encoder_attn=True)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, src_positions=None, doc_ids=None, bidir_lens=None,
                masked_tokens=None, src_lengths=None, return_all_hiddens: bool = False, **kwargs):
        """Logits ``(B, T, V)`` (features with ``features_only``), or ``(N, V)`` for the
        positions ``masked_tokens`` (``(B, T)`` bool or broadcastable to it), row-major, as
        RoBERTa's ``masked_tokens``; and ``{"attn", "inner_states"}``."""
        x, extra = self.extract_features(prev_output_tokens, encoder_out=encoder_out,
                                         incremental_state=incremental_state,
                                         src_positions=src_positions, doc_ids=doc_ids,
                                         bidir_lens=bidir_lens, **kwargs)
        if masked_tokens is not None:
            x = x[masked_tokens.expand(x.shape[:2])]
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         src_positions=None, doc_ids=None, bidir_lens=None, **kwargs):
        """Features ``(B, T, C)`` after the final LayerNorm. Incremental decoding (causal, no
        layout) is fairseq's own path."""
        layout = {"src_positions": src_positions, "doc_ids": doc_ids, "bidir_lens": bidir_lens}
        given = [name for name, value in layout.items() if value is not None]
        if incremental_state is not None:
            if given:
                raise ValueError("incremental decoding is causal: it takes no "
                                 f"{', '.join(given)}")
            if self.r_bidir > 0:
                raise ValueError(f"incremental decoding is causal, but this model attends with "
                                 f"--r-bidir {self.r_bidir} (n_bidir = R x the example): build "
                                 "it with --r-bidir 0 to generate")
            return super().extract_features(prev_output_tokens, encoder_out=None,
                                            incremental_state=incremental_state, **kwargs)
        if given and len(given) < len(layout):
            missing = [name for name in layout if name not in given]
            raise ValueError(f"bidirectional_lm needs all of {', '.join(LAYOUT_FIELDS)} or none "
                             f"(a plain causal LM); got {', '.join(given)} without "
                             f"{', '.join(missing)}")
        tokens = prev_output_tokens
        if not given:
            src_positions, doc_ids, bidir_lens = example_layout(tokens, self.padding_idx,
                                                                self.r_bidir)
        return self.extract_features_with_layout(tokens, src_positions, doc_ids, bidir_lens)

    def needs_grad(self) -> bool:
        """Whether this call's outputs need gradients."""
        return torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())

    def attention_path(self, tokens) -> str:
        """``"sdpa"`` or ``"flex"`` for this batch as far as where FlexAttention runs decides
        (``--attention-impl``; docs/bidirectional.md): whether the call needs gradients, the device,
        attention dropout in effect, the row length. (``auto`` on CPU then also asks whether
        it pays off: :meth:`attention_mask`.)"""
        dropout = max((m.dropout_module.p for m in self.modules()
                       if isinstance(m, MaskedSelfAttention)
                       and (m.training or m.dropout_module.apply_during_inference)), default=0.0)
        return choose_attention_impl(self.attention_impl, tokens.device, self.needs_grad(),
                                     dropout, tokens.size(1))

    def attention_mask(self, tokens, doc_ids, bidir_lens, dtype):
        """The batch's mask for every layer: FlexAttention's
        :class:`~fairseq_ext.modules.block_sparse_attention.DocumentBlockMask` where
        :meth:`attention_path` allows it (under ``auto``, where it also pays off:
        :func:`~fairseq_ext.modules.block_sparse_attention.flex_pays_off`), else SDPA's additive
        ``(B, 1, T, T)`` float mask; both from the same rule. Logs each kind of choice once."""
        why, allowed = "", None
        if self.attention_path(tokens) == "flex":
            blocks = layout_blocks(doc_ids, bidir_lens, self.cross_document)
            if self.attention_impl == "flex" or flex_pays_off(blocks, tokens.device, dtype):
                self.log_attention_path("FlexAttention", tokens.device, why)
                return blocks.block_mask()
            why = (f"; FlexAttention pays off on {tokens.device.type} where the BlockMask skips "
                   f"at least {min_skipped(tokens.device, dtype):.0%} of the scores; this batch's skips "
                   f"{blocks.skipped_fraction():.0%}")
            allowed = blocks.dense_mask()  # the rule evaluated once per batch, either way
        self.log_attention_path("SDPA with a dense mask", tokens.device, why)
        if allowed is None:
            allowed = may_attend(doc_ids, bidir_lens, self.cross_document)
        return additive_attention_mask(allowed, dtype)

    # not traced by torch.compile: a guard on the set of logged paths would recompile the
    # training graph once validation has logged its own path
    @torch.compiler.disable
    def log_attention_path(self, path: str, device: torch.device, why: str) -> None:
        needs_grad = self.needs_grad()
        key = (path, device.type, needs_grad, bool(why))
        if key not in self._logged_paths:
            self._logged_paths.add(key)
            logger.info("bidirectional_lm attention: %s (--attention-impl %s; %s, %s%s)", path,
                        self.attention_impl, device.type,
                        "with gradients" if needs_grad else "no gradients", why)

    # A copy of fairseq's TransformerDecoderBase.extract_features_scriptable, which takes the
    # positions from the token order and one (T, T) mask: no hook for a per-example layout.
    def extract_features_with_layout(self, tokens, positions, doc_ids, bidir_lens):
        """The decoder on ``tokens`` ``(B, T)`` at 0-based ``positions``, attending as the
        layout ``doc_ids`` / ``bidir_lens`` ``(B, T)`` allows (the mask built once, for every
        layer)."""
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        padding = tokens.eq(self.padding_idx)
        position_ids = (positions + self.padding_idx + 1).masked_fill(padding, self.padding_idx)
        x = x + embed_learned_positions(self.embed_positions, position_ids)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # (T, B, C)
        attn_mask = self.attention_mask(tokens, doc_ids, bidir_lens, x.dtype)  # once per batch
        inner_states = [x]
        for layer in self.layers:
            x, _, _ = layer(x, None, None, None, self_attn_mask=attn_mask)
            inner_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [None], "inner_states": inner_states}


@register_model("bidirectional_lm")
class BidirectionalLanguageModel(DictionaryCheckedLoading, FairseqLanguageModel):
    """Generalized bidirectionality (Artetxe et al., 2022): a decoder-only LM whose attention
    follows each batch's documents, bidirectional prefixes and moved masks."""

    def __init__(self, args, decoder: BidirectionalTransformerDecoder):
        super().__init__(decoder)
        self.args = args
        self.classification_heads = nn.ModuleDict()

    @staticmethod
    def add_args(parser):
        parser.add_argument("--activation-fn", choices=utils.get_available_activation_fns(),
                            help="FFN activation (default: gelu, as GPT-3)")
        parser.add_argument("--dropout", type=float, metavar="D", help="dropout (default 0.1)")
        parser.add_argument("--attention-dropout", type=float, metavar="D",
                            help="dropout on attention probabilities (default 0.1)")
        parser.add_argument("--activation-dropout", type=float, metavar="D",
                            help="dropout after the FFN activation (default 0)")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N",
                            help="hidden dim d (Table 2)")
        parser.add_argument("--decoder-ffn-embed-dim", type=int, metavar="N",
                            help="FFN inner dim (default 4 d)")
        parser.add_argument("--decoder-layers", type=int, metavar="N", help="layers l (Table 2)")
        parser.add_argument("--decoder-attention-heads", type=int, metavar="N",
                            help="attention heads h (Table 2)")
        parser.add_argument("--max-target-positions", type=int, metavar="N",
                            help="learned positions (default: --tokens-per-sample, else 1024); "
                                 "every document must be shorter")
        parser.add_argument("--no-scale-embedding", action="store_true",
                            help="do not scale token embeddings by sqrt(d)")
        parser.add_argument("--checkpoint-activations", action="store_true",
                            help="recompute activations in the backward pass")
        parser.add_argument("--pooler-activation-fn", choices=utils.get_available_activation_fns(),
                            help="classification heads: activation (default tanh)")
        parser.add_argument("--pooler-dropout", type=float, metavar="D",
                            help="classification heads: dropout (default 0)")
        parser.add_argument("--classification-pooling", choices=CLASSIFICATION_POOLINGS,
                            help="what a classification head reads: last (the final </s>, "
                                 "the paper's; default) or mean (the mean of the non-padding "
                                 "tokens' features)")
        parser.add_argument("--load-checkpoint-heads", action="store_true",
                            help="(re-)register the checkpoint's classification heads")
        parser.add_argument("--attention-impl", choices=ATTENTION_IMPLS,
                            help="sdpa (a dense mask), flex (FlexAttention's block mask: CUDA, "
                                 "or CPU without gradients; no attention dropout) or auto "
                                 "(default: flex where it runs and pays off); same results")
        # No default (not even None): fairseq-train declares the model's flags and then the
        # task's on one parser and keeps the first declaration, so under --task
        # bidirectional_lm this flag is the task's evaluation --r-bidir, which must stay unset
        # unless typed; a string, so that it takes the task's lists too.
        parser.add_argument("--r-bidir", type=str, metavar="R", default=argparse.SUPPRESS,
                            help="batches without a layout (fine-tuning, §3.2): n_bidir = "
                                 "round(R x the example's length), 0 (default) causal, 1 fully "
                                 "bidirectional; under --task bidirectional_lm the task's R")

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, False)
        bidirectional_lm_architecture(args)  # fills what a checkpoint's args may lack
        if safe_getattr(args, "max_target_positions", None) is None:
            task_positions = task.max_positions() if hasattr(task, "max_positions") else None
            args.max_target_positions = (safe_getattr(args, "tokens_per_sample", None)
                                         or (task_positions if isinstance(task_positions, int)
                                             else None)
                                         or DEFAULT_MAX_TARGET_POSITIONS)
        validate_bidirectional_lm_config(args)
        no_cross = bool(safe_getattr(args, NO_CROSS_DOCUMENT_ATTENTION, False))
        r_bidir = model_r_bidir(safe_getattr(args, R_BIDIR, None))
        setattr(args, NO_CROSS_DOCUMENT_ATTENTION, no_cross)  # the checkpoint keeps both
        setattr(args, R_BIDIR, r_bidir)
        dictionary = task.source_dictionary
        embed_tokens = Embedding(len(dictionary), args.decoder_embed_dim, dictionary.pad())
        decoder = BidirectionalTransformerDecoder(args, dictionary, embed_tokens,
                                                  cross_document=not no_cross, r_bidir=r_bidir,
                                                  attention_impl=args.attention_impl)
        if OmegaConf.is_config(args):
            OmegaConf.set_struct(args, True)
        return cls(args, decoder)

    def forward(self, src_tokens, src_lengths=None, src_positions=None, doc_ids=None,
                bidir_lens=None, features_only=False, classification_head_name=None,
                masked_tokens=None, classification_positions=None, **kwargs):
        """``(logits (B, T, V), extra)``; ``features_only``: features ``(B, T, C)``;
        ``masked_tokens`` ``(B, T)`` bool: logits ``(N, V)`` of those positions only
        (row-major); ``classification_head_name``: that head's ``(B, classes)`` on the features
        at ``classification_positions`` ``(B,)`` (default: each row's last real token, the
        final ``</s>``). Without ``src_positions`` / ``doc_ids`` /
        ``bidir_lens``: one example per row, attended with ``n_bidir = round(R x n)``
        (``--r-bidir``; 0: a causal LM over each row)."""
        if classification_head_name is not None:
            if classification_positions is None:
                classification_positions = last_token_positions(src_tokens,
                                                                self.decoder.padding_idx)
            features, extra = self.decoder(src_tokens, src_positions=src_positions,
                                           doc_ids=doc_ids, bidir_lens=bidir_lens,
                                           features_only=True, **kwargs)
            head = self.classification_heads[classification_head_name]
            if isinstance(head, MeanPoolClassificationHead):
                return head(features, padding_mask=src_tokens.eq(self.decoder.padding_idx)), extra
            return head(features, positions=classification_positions), extra
        return self.decoder(src_tokens, src_positions=src_positions, doc_ids=doc_ids,
                            bidir_lens=bidir_lens, features_only=features_only,
                            masked_tokens=masked_tokens, **kwargs)

    # This and upgrade_state_dict_named copy fairseq's RobertaModel methods: this model is a
    # FairseqLanguageModel (a decoder), not a RobertaModel.
    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """Add (or replace) a head ``name``: RoBERTa's dense -> activation -> projection on the
        features of one position per row (§3.2: the final ``</s>``)."""
        dim = self.args.decoder_embed_dim
        if name in self.classification_heads:
            previous = self.classification_heads[name]
            if (num_classes != previous.out_proj.out_features
                    or (inner_dim or dim) != previous.dense.out_features):
                logger.warning("re-registering head %r with num_classes %s (prev: %s) and "
                               "inner_dim %s (prev: %s)", name, num_classes,
                               previous.out_proj.out_features, inner_dim,
                               previous.dense.out_features)
        head_class = (MeanPoolClassificationHead
                      if safe_getattr(self.args, "classification_pooling", "last") == "mean"
                      else PositionClassificationHead)
        self.classification_heads[name] = head_class(
            input_dim=dim, inner_dim=inner_dim or dim, num_classes=num_classes,
            activation_fn=safe_getattr(self.args, "pooler_activation_fn", "tanh"),
            pooler_dropout=safe_getattr(self.args, "pooler_dropout", 0.0),
        )

    def upgrade_state_dict_named(self, state_dict, name):
        """Classification heads as RoBERTa handles them: a checkpoint's heads the model lacks
        are dropped (or registered with ``--load-checkpoint-heads``), heads of other sizes are
        dropped, and heads the checkpoint lacks keep their fresh weights (fine-tuning a
        pre-trained checkpoint)."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        head_prefix = prefix + "classification_heads."
        checkpoint_heads = {key[len(head_prefix):].split(".")[0]
                            for key in state_dict if key.startswith(head_prefix)}
        for head in checkpoint_heads:
            num_classes = state_dict[f"{head_prefix}{head}.out_proj.weight"].size(0)
            inner_dim = state_dict[f"{head_prefix}{head}.dense.weight"].size(0)
            current = self.classification_heads[head] if head in self.classification_heads else None
            if current is None and safe_getattr(self.args, "load_checkpoint_heads", False):
                self.register_classification_head(head, num_classes, inner_dim)
            elif current is None or (num_classes, inner_dim) != (current.out_proj.out_features,
                                                                 current.dense.out_features):
                logger.warning("deleting classification head %r from the checkpoint (%s in the "
                               "current model)", head, "different" if current else "not")
                for key in [k for k in state_dict if k.startswith(f"{head_prefix}{head}.")]:
                    del state_dict[key]
        for key, value in self.classification_heads.state_dict().items():
            if head_prefix + key not in state_dict:
                state_dict[head_prefix + key] = value


# --- architectures (Table 2; small, mini and tiny for CPU runs and tests) -----------------------

def bidirectional_lm_defaults(args, size: StackSize) -> None:
    """``size``, then the GPT-3-style settings of Artetxe et al. (2021) as fairseq's
    ``transformer_lm_gpt`` has them (GELU, dropout 0.1, attention dropout 0.1), learned
    positions, tied input/output embeddings, classification-head defaults, and fairseq's
    ``base_lm_architecture`` for the rest (pre-LN with a final LayerNorm). Only where unset."""
    set_stack_size(args, "decoder", size)
    args.activation_fn = safe_getattr(args, "activation_fn", "gelu")
    args.dropout = safe_getattr(args, "dropout", 0.1)
    args.attention_dropout = safe_getattr(args, "attention_dropout", 0.1)
    args.decoder_learned_pos = safe_getattr(args, "decoder_learned_pos", True)
    args.share_decoder_input_output_embed = safe_getattr(
        args, "share_decoder_input_output_embed", True)
    args.pooler_activation_fn = safe_getattr(args, "pooler_activation_fn", "tanh")
    args.pooler_dropout = safe_getattr(args, "pooler_dropout", 0.0)
    args.classification_pooling = safe_getattr(args, "classification_pooling", None) or "last"
    args.attention_impl = safe_getattr(args, "attention_impl", None) or "auto"
    base_lm_architecture(args)


def bidirectional_lm_architecture(args) -> None:
    """``--arch bidirectional_lm``: the 125M model's defaults (Table 2)."""
    bidirectional_lm_defaults(args, DECODER_LM_SIZES["125m"])


register_sized_architecture("bidirectional_lm", "bidirectional_lm", bidirectional_lm_defaults,
                            "125m", " (Table 2's 125M)", table=DECODER_LM_SIZES)
for _size in DECODER_LM_SIZES:
    register_sized_architecture("bidirectional_lm", f"bidir_lm_{_size}",
                                bidirectional_lm_defaults, _size, table=DECODER_LM_SIZES)
