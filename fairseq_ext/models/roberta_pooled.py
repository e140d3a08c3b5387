"""RoBERTa-family models whose sentence classification heads choose their pooling:
``--classification-pooling first`` (RoBERTa's head on ``<s>``, BERT's [CLS]) or ``mean`` (the
same head on the mean of the non-padding features).

:class:`PooledClassificationMixin` adds the choice to any :class:`RobertaModel` subclass (this
module's ``roberta_pooled``, ``bert_rab``, ``swishrnn_bert``): its heads are
:class:`~fairseq_ext.modules.classification_heads.MeanPoolClassificationHead` (the parameters
and names of RoBERTa's head, so checkpoints move between the poolings), and its forward hands
the head the padding mask. ``roberta_pooled`` is fairseq's RoBERTa with that choice: a
RoBERTa checkpoint (or an exported 3ML encoder) fine-tunes on it through ``--restore-file``
unchanged, with ``--arch roberta_pooled`` (post-LN, embedding LayerNorm; ``--encoder-normalize-
before`` makes it pre-LN with one) or ``roberta_pooled_prenorm`` (pre-LN, no embedding
LayerNorm, as fairseq's ``roberta_prenorm``). ``scripts/export_encoder.py --print-finetune-args
--pooling mean`` prints those flags for an export, and the fine-tuning recipes' ``POOLING=mean``
uses them.

Each of them also takes ``--layer-lr-decay D`` (ELECTRA's layer-wise learning-rate decay for
fine-tuning, :mod:`fairseq_ext.modules.layer_lr_decay`), which ``--optimizer fused_adamw``
honours.
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import (
    RobertaModel,
    base_architecture,
    roberta_prenorm_architecture,
)
from fairseq.utils import safe_getattr

from fairseq_ext.modules.classification_heads import MeanPoolClassificationHead
from fairseq_ext.modules.layer_lr_decay import (
    LayerLrDecayMixin,
    add_layer_lr_decay_args,
    layer_lr_decay,
)

CLASSIFICATION_POOLINGS = ("first", "mean")
DEFAULT_POOLING = "first"


def add_pooling_args(parser) -> None:
    """``--classification-pooling`` and ``--layer-lr-decay``: the fine-tuning choices of the
    models that use :class:`PooledClassificationMixin`."""
    add_layer_lr_decay_args(parser)
    parser.add_argument("--classification-pooling", choices=CLASSIFICATION_POOLINGS,
                        help="what a sentence classification head reads: first (the <s> token, "
                             "RoBERTa's head) or mean (the mean of the non-padding tokens' "
                             f"features); default {DEFAULT_POOLING}")


def classification_pooling(args) -> str:
    return safe_getattr(args, "classification_pooling", None) or DEFAULT_POOLING


def set_finetuning_defaults(args) -> None:
    """The pooling and layer-wise decay where the flags left them unset; a decay outside
    (0, 1] is a one-line error here, when the architecture is set."""
    args.classification_pooling = classification_pooling(args)
    args.layer_lr_decay = layer_lr_decay(args)


class PooledClassificationMixin(LayerLrDecayMixin):
    """For a :class:`RobertaModel` subclass: heads that pool as ``--classification-pooling``
    says, and ``--layer-lr-decay``'s parameter tags (module docstring)."""

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        super().register_classification_head(name, num_classes, inner_dim, **kwargs)
        if classification_pooling(self.args) == "mean":
            args = self.args
            self.classification_heads[name] = MeanPoolClassificationHead(
                input_dim=args.encoder_embed_dim,
                inner_dim=inner_dim or args.encoder_embed_dim,
                num_classes=num_classes,
                activation_fn=args.pooler_activation_fn,
                pooler_dropout=args.pooler_dropout,
                q_noise=args.quant_noise_pq,
                qn_block_size=args.quant_noise_pq_block_size,
                do_spectral_norm=args.spectral_norm_classification_head,
            )

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False,
                classification_head_name=None, **kwargs):
        """RoBERTa's forward; a mean-pooling head also gets ``src_tokens``' padding mask."""
        head = (self.classification_heads[classification_head_name]
                if classification_head_name is not None else None)
        if not isinstance(head, MeanPoolClassificationHead):
            return super().forward(src_tokens, features_only, return_all_hiddens,
                                   classification_head_name, **kwargs)
        features, extra = self.encoder(src_tokens, True, return_all_hiddens, **kwargs)
        return head(features, padding_mask=src_tokens.eq(self.encoder.dictionary.pad())), extra


@register_model("roberta_pooled")
class PooledRobertaModel(PooledClassificationMixin, RobertaModel):
    """fairseq's RoBERTa with ``--classification-pooling`` (module docstring)."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        add_pooling_args(parser)


@register_model_architecture("roberta_pooled", "roberta_pooled")
def roberta_pooled_architecture(args):
    """fairseq's RoBERTa defaults (base: 12 x 768, post-LN, embedding LayerNorm)."""
    set_finetuning_defaults(args)
    base_architecture(args)


@register_model_architecture("roberta_pooled", "roberta_pooled_prenorm")
def roberta_pooled_prenorm_architecture(args):
    """fairseq's ``roberta_prenorm``: pre-LN, no embedding LayerNorm."""
    set_finetuning_defaults(args)
    roberta_prenorm_architecture(args)
