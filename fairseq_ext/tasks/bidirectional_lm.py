"""``--task bidirectional_lm``: pre-training with generalized bidirectionality (Artetxe et al.,
2022, §2, Table 1, §3.1, Appendix A / Figure 3) and its evaluation modes (§3.2, Tables 3-5).

``--variant`` picks a row of Table 1 (``--n-mask``, ``--n-bidir``, ``--n-predict`` override it:
:mod:`fairseq_ext.data.bidirectional_sampling`); whole documents (:mod:`fairseq_ext.data.documents`)
are packed into rows of at most ``--tokens-per-sample`` tokens (§3.1, footnote 3) and the
objective is applied to each (:mod:`fairseq_ext.data.bidirectional_lm_dataset`).
:meth:`BidirectionalLMTask.build_model` hands the model ``--no-cross-document-attention``
(footnote 4). Settings that cannot work stop the run when the config is read, naming the flag
(docs/bidirectional.md, "What is built" and "Evaluation").
"""
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import Dictionary, TokenBlockDataset, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.language_modeling import SAMPLE_BREAK_MODE_CHOICES
from omegaconf import II, MISSING, OmegaConf, open_dict

from fairseq_ext.cli.errors import ConfigError
from fairseq_ext.criterions.bidirectional_lm import EVAL_ROWS_KEY, evaluation_report_lines
from fairseq_ext.data.bidirectional_eval_dataset import (
    EVAL_MODES,
    MODES_WITH_R,
    PAPER_R_VALUES,
    BidirectionalEvalDataset,
    parse_r_bidir,
    r_label,
)
from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset
from fairseq_ext.data.bidirectional_sampling import VARIANTS, ObjectiveSampler
from fairseq_ext.data.data_bin import DataBinError, check_data_bin, check_splits, special_ids
from fairseq_ext.data.documents import (
    BLANK_LINE_SEPARATED,
    DOCUMENT_FORMATS,
    LINES,
    SMALLEST_BLANK_LINE_BLOCK,
    DocumentFormatError,
    check_document_format,
    read_documents,
    spread_indices,
    warn_if_format_mismatch,
    whole_document_count,
)
from fairseq_ext.reporting.eval_scores import EvalScoresWriter, check_eval_scores_path

logger = logging.getLogger(__name__)

VARIANT_CHOICES = ChoiceEnum(list(VARIANTS))
DOCUMENT_FORMAT_CHOICES = ChoiceEnum(list(DOCUMENT_FORMATS))
#: ``--eval-mode training_objective``: fairseq-validate scores the training objective (sampled
#: masks and prefixes over packed rows, as fairseq-train's validation does).
TRAINING_OBJECTIVE = "training_objective"
EVAL_MODE_CHOICES = ChoiceEnum([*EVAL_MODES, TRAINING_OBJECTIVE])
#: Break modes that keep documents whole (``none`` cuts them at block boundaries).
DOCUMENT_BREAK_MODES = ("complete", "complete_doc", "eos")
MASK_SYMBOL = "<mask>"
#: The model this task's batches (``src_positions``, ``doc_ids``, ``bidir_lens``) are for.
BIDIRECTIONAL_LM_MODEL = "bidirectional_lm"


@dataclass
class BidirectionalLMConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={
        "help": "colon-separated data-bin directories, used in turn across epochs"})
    tokens_per_sample: int = field(default=1024, metadata={
        "help": "most tokens in a row of packed documents (§3.1: 1024); longer documents are "
                "split into pieces, each a document of its own"})
    document_format: DOCUMENT_FORMAT_CHOICES = field(default=BLANK_LINE_SEPARATED, metadata={
        "help": "what a document is in the data-bin: blank_line_separated (non-empty lines "
                "ended by an empty line, as fairseq's complete_doc reads them) or lines (each "
                "line); every line's </s> stays in its document"})
    sample_break_mode: SAMPLE_BREAK_MODE_CHOICES = field(default="complete", metadata={
        "help": "how documents are packed into rows: complete (several whole documents per row, "
                "§3.1 footnote 3), eos (one per row), or with --document-format lines "
                "complete_doc (lines packed within blank-line documents)"})
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
    eval_mode: Optional[EVAL_MODE_CHOICES] = field(default=None, metadata={
        "help": "score the validation splits one document per sequence (§3.2): full_doc_ppl "
                "(Table 3), suffix_ppl (Table 4), infill (Table 5), or training_objective; "
                "needed by fairseq-validate (fairseq-train's default: training_objective)"})
    r_bidir: Optional[str] = field(default=None, metadata={
        "help": "suffix_ppl and infill: n_bidir = R x the context (the prefix, or the whole "
                f"document for infill); one R or a list scored in one run, e.g. {PAPER_R_VALUES}"})
    suffix_fraction: float = field(default=0.2, metadata={
        "help": "suffix_ppl: the share of each document's last tokens to predict (§3.2: 0.2)"})
    eval_seed: int = field(default=1, metadata={
        "help": "infill: seeds the masked positions of each document (with the document's index "
                "only, so every model and R is scored on the same positions)"})
    infill_positions: int = field(default=1, metadata={
        "help": "infill: masked positions per document, each scored in a row of its own; more "
                "give a smaller standard error (the first K are the same for any larger K)"})
    eval_max_documents: int = field(default=0, metadata={
        "help": "--eval-mode: score only this many documents, spread evenly over the split "
                "(document floor(i * D / N) of its D), the same for every model and R; 0: every "
                "document"})
    eval_scores_out: Optional[str] = field(default=None, metadata={
        "help": "fairseq-validate --eval-mode: also write each scored row (document, position, "
                "R, tokens, loss, correct) as a JSON line to this new file, for paired "
                "comparisons of models"})
    seed: int = II("common.seed")
    #: rows padded to a multiple of this length (``--required-seq-len-multiple``; chosen by
    #: ``--torch-compile`` when left at 1): fewer batch shapes to compile
    required_seq_len_multiple: int = II("dataset.required_seq_len_multiple")


def model_name(model_cfg) -> Optional[str]:
    """The arch a model config builds (hydra's ``_name``, fairseq-train's ``--arch``)."""
    return getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)


def objective_sampler(cfg: BidirectionalLMConfig) -> ObjectiveSampler:
    """Check ``cfg`` (errors name the flag) and build its per-document sampler."""
    break_mode = str(cfg.sample_break_mode)
    document_format = str(cfg.document_format)
    if break_mode not in DOCUMENT_BREAK_MODES:
        raise ConfigError(
            f"--sample-break-mode {break_mode}: the objective is applied to whole documents "
            f"(§3.1), and '{break_mode}' cuts documents at block boundaries; use complete (the "
            f"paper's, footnote 3) or eos")
    if cfg.tokens_per_sample < 1:
        raise ConfigError(f"--tokens-per-sample {cfg.tokens_per_sample} must be positive")
    check_document_format(document_format, cfg.tokens_per_sample)
    if break_mode == "complete_doc" and document_format == BLANK_LINE_SEPARATED:
        raise ConfigError(
            f"--sample-break-mode complete_doc with --document-format {BLANK_LINE_SEPARATED}: the "
            "documents are already read whole (complete_doc's reading), so there is no boundary "
            "left for complete_doc to keep; use complete (several documents per row, the "
            f"paper's) or eos (one per row), or --document-format {LINES} to pack lines within "
            "documents")
    if break_mode == "complete_doc" and cfg.tokens_per_sample < SMALLEST_BLANK_LINE_BLOCK:
        raise ConfigError(f"--tokens-per-sample {cfg.tokens_per_sample} with complete_doc: must be "
                          f"at least {SMALLEST_BLANK_LINE_BLOCK}, or a split long line could leave "
                          "a 1-token piece, which complete_doc takes for a document separator")
    sampler = ObjectiveSampler.from_task_config(cfg)
    sampler.check_targets_stay_hidden(cfg.tokens_per_sample)
    check_evaluation(cfg, sampler)
    return sampler


def check_evaluation(cfg: BidirectionalLMConfig, sampler: ObjectiveSampler) -> None:
    """Refuse, naming the flag, evaluation settings that are malformed, incomplete, or ask the
    checkpoint for something it was never trained to do (docs/bidirectional.md, "Evaluation")."""
    if not 0.0 < float(cfg.suffix_fraction) < 1.0:
        raise ConfigError(f"--suffix-fraction {cfg.suffix_fraction} must lie in (0, 1): it is the "
                          "share of each document's tokens to predict (§3.2: 0.2)")
    if cfg.infill_positions < 1:
        raise ConfigError(f"--infill-positions {cfg.infill_positions} must be at least 1 (masked "
                          "positions scored per document)")
    mode = None if cfg.eval_mode is None else str(cfg.eval_mode)
    if cfg.eval_max_documents < 0:
        raise ConfigError(f"--eval-max-documents {cfg.eval_max_documents} must be 0 (every "
                          "document) or the number of documents to score")
    if cfg.eval_max_documents and mode not in EVAL_MODES:
        raise ConfigError(f"--eval-max-documents {cfg.eval_max_documents} needs --eval-mode "
                          f"{' / '.join(EVAL_MODES)}: it chooses the documents those modes score")
    if cfg.infill_positions != 1 and mode != "infill":
        raise ConfigError(f"--infill-positions {cfg.infill_positions} belongs to --eval-mode infill "
                          f"(it counts masked positions per document); this run has --eval-mode "
                          f"{mode}")
    if cfg.eval_scores_out is not None:
        if mode not in EVAL_MODES:
            raise ConfigError(f"--eval-scores-out {cfg.eval_scores_out} needs --eval-mode "
                              f"{' / '.join(EVAL_MODES)}: it writes the rows those modes score")
        check_eval_scores_path(cfg.eval_scores_out)
    if mode is None:
        if cfg.r_bidir is not None:
            raise ConfigError(f"--r-bidir {cfg.r_bidir} without --eval-mode: add --eval-mode "
                              "suffix_ppl or --eval-mode infill (the training objective draws "
                              "n_bidir itself)")
        return
    if mode not in (*EVAL_MODES, TRAINING_OBJECTIVE):
        raise ConfigError(f"--eval-mode {mode!r} is not one of "
                          f"{', '.join((*EVAL_MODES, TRAINING_OBJECTIVE))}")
    if mode == TRAINING_OBJECTIVE:
        if cfg.r_bidir is not None:
            raise ConfigError(f"--eval-mode training_objective draws n_bidir as in training; "
                              f"--r-bidir {cfg.r_bidir} belongs to suffix_ppl or infill")
        return
    if mode in MODES_WITH_R:
        if cfg.r_bidir is None:
            raise ConfigError(f"--eval-mode {mode} needs --r-bidir: n_bidir = R x the context; "
                              f"give one R in [0, 1] or a list, e.g. --r-bidir {PAPER_R_VALUES}")
        r_values = parse_r_bidir(cfg.r_bidir)
    elif cfg.r_bidir is not None:
        raise ConfigError(f"--eval-mode full_doc_ppl scores with n_bidir = 0 (Table 3); "
                          f"--r-bidir {cfg.r_bidir} belongs to suffix_ppl or infill")
    else:
        r_values = []
    trained = sampler.trained_capabilities()
    variant = str(cfg.variant)
    if mode in ("full_doc_ppl", "suffix_ppl") and "next" not in trained:
        raise ConfigError(
            f"--eval-mode {mode}: this checkpoint (--variant {variant}) was never trained to "
            "predict next tokens (the paper excludes msk_* from perplexity, footnote 5); score "
            "it with --eval-mode infill")
    if mode == "infill" and "mask" not in trained:
        raise ConfigError(
            f"--eval-mode infill: this checkpoint (--variant {variant}) was never trained on "
            "<mask> tokens, so it cannot infill directly; use full-sequence scoring instead "
            "(scripts/infill_rescore.py, Table 6), or --eval-mode full_doc_ppl / suffix_ppl")
    if "bidir" not in trained and any(r > 0 for r in r_values):
        logger.warning(
            "--r-bidir %s: this checkpoint (--variant %s) never had a bidirectional prefix in "
            "training; R > 0 shows it attention it was not trained with", cfg.r_bidir, variant)


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
            raise ConfigError(
                f"the dictionary of --data ({cfg.data}) already contains {MASK_SYMBOL}: the data "
                f"could then hold the token that marks masked positions; binarize with a "
                f"dictionary without it (the task adds it)")
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol(MASK_SYMBOL)
        #: set by fairseq-train's validation (begin_valid_epoch), never by fairseq-validate
        self.validating_during_training = False
        #: --eval-scores-out: the rows fairseq-validate scored
        self.eval_scores = (None if cfg.eval_scores_out is None
                            else EvalScoresWriter(cfg.eval_scores_out, self.eval_settings()))
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
            raise ConfigError("--data (the positional data-bin argument) is empty")
        check_data_bin(paths[0])
        dictionary = Dictionary.load(os.path.join(paths[0], "dict.txt"))
        logger.info("dictionary: %d types", len(dictionary))
        return cls(cfg, dictionary, sampler)

    @property
    def cross_document_attention(self) -> bool:
        """Whether a token may attend to the earlier documents of its row (footnote 4)."""
        return not self.cfg.no_cross_document_attention

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's, after putting into a ``bidirectional_lm`` model's config what it takes
        from this task (as fairseq's ``sentence_prediction`` passes ``max_positions``):
        ``no_cross_document_attention`` (footnote 4), and ``r_bidir = 0``: this task's batches
        carry their own layout, and its ``--r-bidir`` is the evaluation R, not the model's."""
        model_class = ARCH_MODEL_REGISTRY.get(model_name(cfg))
        bidirectional = MODEL_REGISTRY[BIDIRECTIONAL_LM_MODEL]
        if isinstance(model_class, type) and issubclass(model_class, bidirectional):
            with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
                cfg.no_cross_document_attention = bool(self.cfg.no_cross_document_attention)
                cfg.r_bidir = 0.0
        return super().build_model(cfg, from_checkpoint)

    @property
    def eval_mode(self) -> Optional[str]:
        return None if self.cfg.eval_mode is None else str(self.cfg.eval_mode)

    def special_token_ids(self):
        """Ids infilling never masks nor predicts: the dictionary's specials, ``<mask>`` and
        the ``madeupword`` padding symbols fairseq-preprocess adds."""
        return special_ids(self.dictionary)

    def eval_settings(self) -> dict:
        """What decides which rows an evaluation scores (``--eval-scores-out``'s header): two
        runs with equal settings on the same data score the same rows."""
        return {key: (None if getattr(self.cfg, key) is None else str(getattr(self.cfg, key)))
                for key in ("eval_mode", "document_format", "tokens_per_sample", "r_bidir",
                            "suffix_fraction", "eval_seed", "infill_positions",
                            "eval_max_documents")}

    @property
    def eval_group_labels(self):
        """Metric label of each evaluation group (one per --r-bidir value; ``full``)."""
        if self.eval_mode in MODES_WITH_R:
            return [r_label(value) for value in parse_r_bidir(self.cfg.r_bidir)]
        return ["full"]

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        """The training objective for the training split; for the splits fairseq loads for
        validation (``combine=False``: fairseq-train's valid subsets, fairseq-validate's) the
        ``--eval-mode`` evaluation when one is set."""
        paths = utils.split_paths(self.cfg.data)
        data = paths[(epoch - 1) % len(paths)]
        check_splits(data, split, validation=not combine, combine=combine)
        split_path = os.path.join(data, split)
        lines = data_utils.load_indexed_dataset(split_path, self.dictionary, combine=combine)
        if lines is None:
            raise FileNotFoundError(f"Dataset not found: {split} ({split_path})")
        if "task_cfg" in kwargs and self.eval_mode is None:
            # fairseq-validate passes the checkpoint's task config; fairseq-train does not
            raise ConfigError(
                "fairseq-validate on a bidirectional_lm checkpoint needs an evaluation mode: add "
                "--task bidirectional_lm and one of --eval-mode full_doc_ppl, --eval-mode "
                "suffix_ppl --r-bidir R, --eval-mode infill --r-bidir R, or --eval-mode "
                "training_objective (README, 'Evaluating bidirectional_lm'). If you gave one, the "
                "checkpoint was written before fairseq-ext had evaluation modes, and fairseq drops "
                "flags its saved config lacks")
        document_format = str(self.cfg.document_format)
        warn_if_format_mismatch(split_path, lines.sizes, document_format)
        try:
            documents = read_documents(lines, lines.sizes, document_format,
                                       self.cfg.tokens_per_sample, self.dictionary.pad(),
                                       self.dictionary.eos())
        except DocumentFormatError as error:
            raise DataBinError(f"the {split} split of {data}: {error}; use --document-format "
                               f"{LINES}, or add text to it") from None
        whole = whole_document_count(lines.sizes, document_format)
        read = (f"{whole} documents ({document_format}; {len(documents)} pieces of at most "
                f"{self.cfg.tokens_per_sample} tokens, {len(lines)} lines)")
        if self.eval_mode in EVAL_MODES and not combine:
            dataset = BidirectionalEvalDataset(
                documents, documents.sizes, self.eval_mode,
                parse_r_bidir(self.cfg.r_bidir) if self.eval_mode in MODES_WITH_R else [],
                self.cfg.suffix_fraction, self.cfg.eval_seed, self.mask_idx,
                self.dictionary.pad(), self.special_token_ids(),
                positions_per_document=self.cfg.infill_positions, split=split,
                kept_documents=(spread_indices(len(documents), self.cfg.eval_max_documents)
                                if self.cfg.eval_max_documents else None))
            rows = (f"; {dataset.rows_per_group} masked positions (--infill-positions "
                    f"{self.cfg.infill_positions})" if self.eval_mode == "infill" else "")
            spread = (f" ({dataset.considered} of {len(documents)} spread over the split, "
                      f"--eval-max-documents {self.cfg.eval_max_documents})"
                      if dataset.considered < len(documents) else "")
            logger.info("%s: --eval-mode %s%s on %d documents%s, one per sequence; %d skipped as "
                        "too short for it%s; read as %s", split, self.eval_mode,
                        f" --r-bidir {self.cfg.r_bidir}" if self.eval_mode in MODES_WITH_R else "",
                        dataset.scored, spread, dataset.skipped, rows, read)
            self.datasets[split] = dataset
            return
        blocks = TokenBlockDataset(
            documents, documents.sizes, self.cfg.tokens_per_sample,
            pad=self.dictionary.pad(), eos=self.dictionary.eos(),
            break_mode=str(self.cfg.sample_break_mode), document_sep_len=1)
        logger.info("loaded %d rows of %s from %s", len(blocks), read, split_path)
        self.datasets[split] = BidirectionalLMDataset(
            blocks, documents.sizes, self.sampler, mask_idx=self.mask_idx,
            pad_idx=self.dictionary.pad(), seed=self.cfg.seed,
            pad_to_multiple=self.seq_len_multiple())

    def seq_len_multiple(self) -> int:
        """``--required-seq-len-multiple``; 1 where the config was built outside fairseq's
        (a reference left unresolved)."""
        multiple = getattr(self.cfg, "required_seq_len_multiple", 1)
        return multiple if isinstance(multiple, int) and multiple > 0 else 1

    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        self.validating_during_training = True

    def valid_step(self, sample, model, criterion):
        """fairseq's, keeping the criterion's per-row scores (:data:`EVAL_ROWS_KEY`) out of the
        logging output, for ``--eval-scores-out``."""
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        rows = logging_output.pop(EVAL_ROWS_KEY, None)
        if rows is not None and self.eval_scores is not None and not self.validating_during_training:
            self.eval_scores.add_batch(sample, rows, self.eval_group_labels)
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if self.eval_mode in EVAL_MODES and not self.validating_during_training:
            for line in evaluation_report_lines(logging_outputs):
                logger.info(line)
            if self.eval_scores is not None and self.eval_scores.rows:
                self.eval_scores.write()
                logger.info("wrote %d scored rows to %s", len(self.eval_scores.rows),
                            self.eval_scores.path)

    def max_positions(self):
        return self.cfg.tokens_per_sample

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
