"""``--task bidirectional_lm``: pre-training with "generalized bidirectionality" (Artetxe et al.
2022, "On the Role of Bidirectionality in Language Model Pre-Training", §2, Table 1, §3.1,
Appendix A / Figure 3).

``--variant`` picks a row of Table 1 (``nxt_uni nxt_pre msk_uni msk_bi hyb_uni hyb_pre``);
``--n-mask``, ``--n-bidir`` and ``--n-predict`` override its count expressions one by one
(grammar and the plain-LM documents of ``--plain-lm-prob``:
:mod:`fairseq_ext.data.bidirectional_sampling`). Documents (the lines of the data-bin) are packed
into rows of at most ``--tokens-per-sample`` tokens with ``--sample-break-mode complete``
(§3.1, footnote 3) and the objective is applied to each on its own
(:mod:`fairseq_ext.data.bidirectional_lm_dataset`, which also documents the batch).

``--no-cross-document-attention`` is read by the model from the task
(``task.cfg.no_cross_document_attention``, or :attr:`BidirectionalLMTask.cross_document_attention`);
off by default: a token attends to every token of the earlier documents of its row, as in the
paper (footnote 4). The batch carries ``doc_ids``, which is all the model needs for either.

Mistakes stop the run at setup with a message naming the flag: an unknown variant, a
probability outside ``[0, 1]``, a malformed count expression, one that may let a position attend
to its own target (footnote 1), ``--sample-break-mode none`` (it cuts documents at block
boundaries), and a dictionary that already holds ``<mask>`` (the data could then contain the
token that marks masked positions).
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import Dictionary, TokenBlockDataset, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.language_modeling import SAMPLE_BREAK_MODE_CHOICES
from omegaconf import II, MISSING

from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset, split_long_documents
from fairseq_ext.data.bidirectional_sampling import VARIANTS, ObjectiveSampler

logger = logging.getLogger(__name__)

VARIANT_CHOICES = ChoiceEnum(list(VARIANTS))
#: Break modes that keep documents whole (``none`` cuts them at block boundaries).
DOCUMENT_BREAK_MODES = ("complete", "complete_doc", "eos")
MASK_SYMBOL = "<mask>"


@dataclass
class BidirectionalLMConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={
        "help": "colon-separated data-bin directories, used in turn across epochs"})
    tokens_per_sample: int = field(default=1024, metadata={
        "help": "most tokens in a row of packed documents (§3.1: 1024); longer documents are "
                "split into pieces, each a document of its own"})
    sample_break_mode: SAMPLE_BREAK_MODE_CHOICES = field(default="complete", metadata={
        "help": "how documents (lines) are packed into rows: complete (§3.1, footnote 3), "
                "complete_doc (not across blank-line document boundaries) or eos (one per row); "
                "none is refused: it cuts documents"})
    variant: VARIANT_CHOICES = field(default="hyb_pre", metadata={
        "help": "row of Table 1: nxt_uni nxt_pre msk_uni msk_bi hyb_uni hyb_pre"})
    mask_prob: float = field(default=0.15, metadata={
        "help": "p of B(n,p), the binomial number of masked tokens (Table 1: 0.15)"})
    plain_lm_prob: float = field(default=0.1, metadata={
        "help": "probability that a document gets n_mask = n_bidir = 0 (Table 1's caption: 0.1)"})
    n_mask: Optional[str] = field(default=None, metadata={
        "help": "count expression for the masked tokens of a document, e.g. B(n,p) (default: "
                "the variant's)"})
    n_bidir: Optional[str] = field(default=None, metadata={
        "help": "count expression for the bidirectional prefix, e.g. U(1,n), n, 0 (default: "
                "the variant's)"})
    n_predict: Optional[str] = field(default=None, metadata={
        "help": "count expression for the predicted suffix, e.g. n, n-n_bidir, n_mask, "
                "max(n-n_bidir,n_mask) (default: the variant's)"})
    no_cross_document_attention: bool = field(default=False, metadata={
        "help": "tokens attend only within their own document (default: also to every token of "
                "the earlier documents of their row, footnote 4)"})
    seed: int = II("common.seed")


def objective_sampler(cfg: BidirectionalLMConfig) -> ObjectiveSampler:
    """Check ``cfg`` (errors name the flag) and build its per-document sampler."""
    break_mode = str(cfg.sample_break_mode)
    if break_mode not in DOCUMENT_BREAK_MODES:
        raise ValueError(
            f"--sample-break-mode {break_mode}: the objective is applied to whole documents "
            f"(§3.1), and '{break_mode}' cuts documents at block boundaries; use complete (the "
            f"paper's, footnote 3), complete_doc or eos")
    if cfg.tokens_per_sample < 1:
        raise ValueError(f"--tokens-per-sample {cfg.tokens_per_sample} must be positive")
    if break_mode == "complete_doc" and cfg.tokens_per_sample < 3:
        raise ValueError(f"--tokens-per-sample {cfg.tokens_per_sample} with complete_doc: must be "
                         "at least 3, or a split long line could leave a 1-token piece, which "
                         "complete_doc takes for a document separator")
    sampler = ObjectiveSampler.from_flags(
        cfg.variant, mask_prob=cfg.mask_prob, plain_lm_prob=cfg.plain_lm_prob,
        n_mask=cfg.n_mask, n_bidir=cfg.n_bidir, n_predict=cfg.n_predict)
    sampler.check_targets_stay_hidden(cfg.tokens_per_sample)
    return sampler


@register_task("bidirectional_lm", dataclass=BidirectionalLMConfig)
class BidirectionalLMTask(FairseqTask):
    """Generalized bidirectionality (module docstring): loads ``dict.txt`` and adds ``<mask>``
    (as ``masked_lm`` does), builds a :class:`BidirectionalLMDataset` per split."""

    cfg: BidirectionalLMConfig

    def __init__(self, cfg: BidirectionalLMConfig, dictionary: Dictionary,
                 sampler: Optional[ObjectiveSampler] = None):
        super().__init__(cfg)
        self.sampler = sampler if sampler is not None else objective_sampler(cfg)
        if MASK_SYMBOL in dictionary.indices:
            raise ValueError(
                f"the dictionary of --data ({cfg.data}) already contains {MASK_SYMBOL}: the data "
                f"could then hold the token that marks masked positions; binarize with a "
                f"dictionary without it (the task adds it)")
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol(MASK_SYMBOL)
        variant = str(cfg.variant)
        if cfg.plain_lm_prob > 0 and cfg.n_predict is None and variant.startswith("msk_"):
            logger.warning(
                "--variant %s: the plain-LM documents (--plain-lm-prob %s) have n_mask = 0, so "
                "n_predict = n_mask = 0: nothing to predict (the paper does not train msk_* on "
                "next tokens, footnote 5); they are context for later documents only",
                variant, cfg.plain_lm_prob)

    @classmethod
    def setup_task(cls, cfg: BidirectionalLMConfig, **kwargs):
        sampler = objective_sampler(cfg)  # flag errors before touching the data
        paths = utils.split_paths(cfg.data)
        if not paths:
            raise ValueError("--data (the positional data-bin argument) is empty")
        dictionary = Dictionary.load(os.path.join(paths[0], "dict.txt"))
        logger.info("dictionary: %d types", len(dictionary))
        return cls(cfg, dictionary, sampler)

    @property
    def cross_document_attention(self) -> bool:
        """Whether a token may attend to the earlier documents of its row (footnote 4)."""
        return not self.cfg.no_cross_document_attention

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        split_path = os.path.join(paths[(epoch - 1) % len(paths)], split)
        lines = data_utils.load_indexed_dataset(split_path, self.dictionary, combine=combine)
        if lines is None:
            raise FileNotFoundError(f"Dataset not found: {split} ({split_path})")
        documents = split_long_documents(lines, lines.sizes, self.cfg.tokens_per_sample)
        blocks = TokenBlockDataset(
            documents, documents.sizes, self.cfg.tokens_per_sample,
            pad=self.dictionary.pad(), eos=self.dictionary.eos(),
            break_mode=str(self.cfg.sample_break_mode), document_sep_len=1)
        logger.info("loaded %d rows of %d documents (%d lines) from %s", len(blocks),
                    len(documents), len(lines), split_path)
        self.datasets[split] = BidirectionalLMDataset(
            blocks, documents.sizes, self.sampler, mask_idx=self.mask_idx,
            pad_idx=self.dictionary.pad(), seed=self.cfg.seed)

    def max_positions(self):
        return self.cfg.tokens_per_sample

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
