"""Zero-shot multiple choice with a ``bidirectional_lm`` checkpoint (Artetxe et al. 2022, §3.2
"Zero-shot priming", Tables 7-8)::

    python scripts/score_choices.py --path CKPT --data DATA --input ROWS.jsonl
        [--scoring full|infill] [--normalization token|none|char] [--r-bidir 1]
        [--template "{premise}, right? {choice}, {hypothesis}" --choices Yes,No,Also]
        [--output PREDICTIONS.jsonl] [--force]

**Input** (JSONL, one object per line; blank lines are skipped). Each row gives the text of every
choice, in one of three forms:

* ``{"context": str, "choices": [str, ...], "label": int}``: choice ``k`` reads
  ``context + SEPARATOR + choices[k]`` (``--separator``, default one space; the choice alone for
  an empty context). Table 7's tasks: the candidate continues the prompt.
* ``{"prefix": str, "suffix": str, "choices": [...], "label": ...}``: ``prefix + choices[k] +
  suffix`` verbatim (spaces are the row's). Table 8's MNLI prompt ``<premise>, right?
  {Yes|No|Also}, <hypothesis>`` is ``{"prefix": "<premise>, right? ", "suffix": ",
  <hypothesis>", "choices": ["Yes", "No", "Also"]}``.
* with ``--template T``: ``T.format(**row, choice=choices[k])``, ``T`` holding ``{choice}`` once
  and the row's other fields by name (``--template "{premise}, right? {choice}, {hypothesis}"``
  on MNLI-style rows ``{"premise": ..., "hypothesis": ..., "label": 0}``); the choices are the
  row's ``choices`` or ``--choices Yes,No,Also``.

``label`` is optional: the index of the right choice, or its text. A row needs at least two
choices. Newlines in the text become spaces (a document of the data-bin is a line).

**Tokens.** Each choice's whole text is encoded with the data-bin's tokenizer (``spm.model``
next to ``dict.txt``, through :class:`fairseq_ext.corpus.encoders.SentencePieceLineEncoder`, as
the corpus pipeline encodes text; ``--tokenizer none`` for data-bins of whitespace-separated
tokens) and mapped to ids with ``dict.txt``, then ``</s>`` is appended, as the binarizer ends every
document. Encoding the whole text, not its parts one by one, keeps the tokenization a document of
that text would have.

**Full-sequence scoring** (``--scoring full``, the default; Table 7, and Table 8's "full"): every
choice's sequence is scored causally (``n_bidir = 0``), and the score of a choice is the summed
log-probability of its tokens after the prefix all the row's sequences share (the context, and any
leading tokens the choices have in common; text after the choice, such as Table 8's hypothesis,
is scored too, as it depends on the choice), normalised by ``--normalization``:

* ``token`` (default): divided by the number of those tokens: the per-token mean
  log-probability, the ``mean`` candidate scoring of the zero-shot priming code of Artetxe et al.
  (2021) (fairseq's ``examples/few_shot``, whose ``mean`` also scores the tokens after the
  candidates' common prefix, ``</s>`` included);
* ``none``: the sum (the candidate's log-likelihood; their ``sum``, up to the shared prefix);
* ``char``: the sum divided by the choice's length in characters.

That code also has ``suffix`` scoring (only the text after the choice; its result tables use it
for WinoGrande) and ``unconditional-norm`` (Brown et al. (2020)'s division by the choice's
probability after ``"Answer:"``; used for OpenBookQA); neither is implemented here.

**Infill scoring** (``--scoring infill``; Table 8's "infill"): for single-token verbalizers. The
choices' sequences must differ in exactly one token (each choice one token of the template);
that slot becomes ``<mask>``, moved to the end with its position, with ``n_bidir = round(R x n)``
(``--r-bidir``, default 1), and the choices are compared by the model's logits at the slot. A
choice that does not fill exactly one token (or maps to ``<unk>``) is an error naming the row and
the choice.

The prediction is the best-scoring choice (ties: the first). Accuracy is printed when rows carry
labels; ``--output`` writes one JSON line per row (``line``, ``choices``, ``scores``,
``prediction``, ``predicted_choice``, ``label``, ``correct``); an existing file is replaced only
with ``--force`` (checked before anything is read), and written whole or not at all
(:mod:`fairseq_ext.training.output_files`).
"""
from __future__ import annotations

import argparse
import json
import math
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from fairseq_ext.training.output_files import OutputError, atomic_file, error_line, refuse_existing
from fairseq_ext_lab.evaluation.sequence_scoring import (
    ScoringError,
    ScoringModel,
    infill_logits,
    load_scoring_model,
    pick_device,
    require_capability,
    token_log_probs,
)

NORMALIZATIONS = ("token", "none", "char")
SCORINGS = ("full", "infill")
SPM_MODEL = "spm.model"
TABLE_8_TEMPLATE = "{premise}, right? {choice}, {hypothesis}"


@dataclass
class ChoiceRow:
    """One input row: the full text of each choice, and the label (an index) if given."""

    line: int
    choices: List[str]
    texts: List[str]
    label: Optional[int]


# --- reading rows -----------------------------------------------------------------------------

def template_fields(template: str) -> List[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def check_template(template: str) -> None:
    fields = template_fields(template)
    if fields.count("choice") != 1:
        raise ScoringError(f"--template {template!r}: must hold {{choice}} exactly once (where the "
                           f"choice goes), e.g. --template {TABLE_8_TEMPLATE!r}")
    if "" in fields or any(name.isdigit() for name in fields):
        raise ScoringError(f"--template {template!r}: name every field ({{premise}}, not {{}})")


def parse_label(value, choices: Sequence[str], where: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ScoringError(f"{where}: \"label\" must be a choice's index or its text, got {value!r}")
    if isinstance(value, str):
        if value not in choices:
            raise ScoringError(f"{where}: \"label\" {value!r} is none of the choices {choices}")
        return list(choices).index(value)
    if not 0 <= value < len(choices):
        raise ScoringError(f"{where}: \"label\" {value} is outside 0..{len(choices) - 1}")
    return value


def row_texts(row: Dict, choices: Sequence[str], template: Optional[str], separator: str,
              where: str) -> List[str]:
    if template is not None:
        try:
            return [template.format(**{**row, "choice": choice}) for choice in choices]
        except KeyError as error:
            raise ScoringError(f"{where}: --template needs the field {error.args[0]!r}, which the row "
                               "lacks") from None
    if "context" in row:
        context = row["context"]
        if not isinstance(context, str):
            raise ScoringError(f"{where}: \"context\" must be a string")
        return [f"{context}{separator}{choice}" if context else choice for choice in choices]
    if "prefix" in row or "suffix" in row:
        prefix, suffix = row.get("prefix", ""), row.get("suffix", "")
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ScoringError(f"{where}: \"prefix\" and \"suffix\" must be strings")
        return [f"{prefix}{choice}{suffix}" for choice in choices]
    raise ScoringError(f"{where}: a row needs \"context\" (+ \"choices\"), or \"prefix\"/\"suffix\" "
                       "(+ \"choices\"), or --template (score_choices.py --help)")


def read_rows(path: Path, template: Optional[str] = None, choices: Optional[Sequence[str]] = None,
              separator: str = " ") -> List[ChoiceRow]:
    """The rows of ``path`` (module docstring); errors name the file and line."""
    if template is not None:
        check_template(template)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ScoringError(f"--input {path}: cannot be read ({error.strerror or error})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"--input {path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ScoringError(f"{where}: not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise ScoringError(f"{where}: a row must be a JSON object")
        row_choices = row.get("choices", choices)
        if row_choices is None:
            raise ScoringError(f"{where}: no \"choices\" (give them in the row, or --choices A,B,C "
                               "with --template)")
        if (not isinstance(row_choices, list) or len(row_choices) < 2
                or not all(isinstance(c, str) and c.strip() for c in row_choices)):
            raise ScoringError(f"{where}: \"choices\" must be a list of at least 2 non-empty strings")
        texts = row_texts(row, row_choices, template, separator, where)
        texts = [" ".join(text.split("\n")) for text in texts]
        rows.append(ChoiceRow(number, list(row_choices), texts,
                              parse_label(row.get("label"), row_choices, where)))
    if not rows:
        raise ScoringError(f"--input {path}: no rows")
    return rows


# --- tokens -----------------------------------------------------------------------------------

class TextEncoder:
    """Text -> ids of the data-bin's dictionary, with the corpus pipeline's line encoders."""

    def __init__(self, dictionary, encoder):
        self.dictionary = dictionary
        self.encoder = encoder

    @classmethod
    def for_data(cls, data, dictionary, tokenizer: str = "spm") -> "TextEncoder":
        from fairseq_ext.corpus.encoders import SentencePieceLineEncoder, WhitespaceLineEncoder

        if tokenizer == "none":
            return cls(dictionary, WhitespaceLineEncoder())
        model = Path(data) / SPM_MODEL
        if not model.is_file():
            raise ScoringError(f"--data {data}: no {SPM_MODEL} next to dict.txt (the sentencepiece "
                               "model fairseq-ext-prepare-corpus writes); for a data-bin of "
                               "whitespace-separated tokens give --tokenizer none")
        return cls(dictionary, SentencePieceLineEncoder(str(model)))

    def encode(self, texts: Sequence[str]) -> List[List[int]]:
        """Ids of each text, ``</s>`` appended (a document as the binarizer writes it)."""
        encoded = self.encoder.encode(list(texts)).text.split("\n")[:len(texts)]
        return [self.dictionary.encode_line(line, add_if_not_exist=False, append_eos=True).tolist()
                for line in encoded]

    def pieces(self, ids: Sequence[int]) -> str:
        return " ".join(self.dictionary[i] for i in ids)


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    length = min(len(seq) for seq in sequences)
    for index in range(length):
        if any(seq[index] != sequences[0][index] for seq in sequences[1:]):
            return index
    return length


def common_suffix_length(sequences: Sequence[Sequence[int]]) -> int:
    return common_prefix_length([list(reversed(seq)) for seq in sequences])


# --- scoring ----------------------------------------------------------------------------------

def scored_start(sequences: Sequence[Sequence[int]]) -> int:
    """First position whose token counts in a choice's score: after the prefix every sequence
    shares, at least 1 (the first token has no predecessor), leaving every sequence at least its
    last token."""
    shortest = min(len(seq) for seq in sequences)
    return max(1, min(common_prefix_length(sequences), shortest - 1))


def normalize(total: float, tokens: int, characters: int, normalization: str) -> float:
    if normalization == "token":
        return total / tokens
    if normalization == "char":
        return total / characters
    return total


def full_scores(scoring: ScoringModel, rows: Sequence[ChoiceRow], encoded: Sequence[List[List[int]]],
                normalization: str, batch_size: int) -> List[List[float]]:
    """Per row, each choice's normalised log-probability of its tokens after the shared prefix
    (module docstring), every sequence scored causally."""
    flat = [seq for sequences in encoded for seq in sequences]
    log_probs = token_log_probs(scoring, flat, batch_size=batch_size)
    scores, offset = [], 0
    for row, sequences in zip(rows, encoded):
        start = scored_start(sequences)
        row_scores = []
        for choice, seq in zip(row.choices, sequences):
            # log_probs[t] is log p(x_{t+1} | x_<=t): tokens start.. are entries start-1..
            total = float(log_probs[offset][start - 1:].sum())
            row_scores.append(normalize(total, len(seq) - start, len(choice), normalization))
            offset += 1
        scores.append(row_scores)
    return scores


def verbalizer_slot(row: ChoiceRow, sequences: Sequence[List[int]], encoder: TextEncoder,
                    unk: int, where: str):
    """``(position, token of each choice)``: the one position where the choices' sequences
    differ; an error naming the row and choice unless each choice fills exactly one token."""
    prefix = common_prefix_length(sequences)
    suffix = min(common_suffix_length(sequences), min(len(s) for s in sequences) - prefix)
    middles = [seq[prefix:len(seq) - suffix] for seq in sequences]
    for choice, middle in zip(row.choices, middles):
        if len(middle) != 1:
            filled = "; ".join(f"{c!r} -> {encoder.pieces(m) or 'nothing'}"
                               for c, m in zip(row.choices, middles))
            raise ScoringError(
                f"{where}: choice {choice!r} fills {len(middle)} tokens of the text, not one "
                f"({filled}); --scoring infill needs single-token verbalizers (use --scoring "
                "full for multi-token choices)")
        if middle[0] == unk:
            raise ScoringError(f"{where}: choice {choice!r} is not in the dictionary (it encodes "
                               "to <unk>); --scoring infill needs a verbalizer token of dict.txt")
    tokens = [middle[0] for middle in middles]
    if len(set(tokens)) != len(tokens):
        raise ScoringError(f"{where}: choices {row.choices} do not encode to distinct tokens")
    return prefix, tokens


def infill_scores(scoring: ScoringModel, rows: Sequence[ChoiceRow],
                  encoded: Sequence[List[List[int]]], encoder: TextEncoder, r_bidir: float,
                  batch_size: int, input_path) -> List[List[float]]:
    """Per row, the model's logit of each choice's token at the masked verbalizer slot."""
    documents, positions, tokens = [], [], []
    for row, sequences in zip(rows, encoded):
        position, choice_tokens = verbalizer_slot(row, sequences, encoder, scoring.dictionary.unk(),
                                                  f"--input {input_path}:{row.line}")
        documents.append(sequences[0])
        positions.append(position)
        tokens.append(choice_tokens)
    logits = infill_logits(scoring, documents, positions, r_bidir, batch_size=batch_size)
    return [[float(logits[i, t]) for t in choice_tokens] for i, choice_tokens in enumerate(tokens)]


def predictions(rows: Sequence[ChoiceRow], scores: Sequence[Sequence[float]]) -> List[Dict]:
    out = []
    for row, row_scores in zip(rows, scores):
        best = int(np.argmax(row_scores))  # ties: the first
        out.append({"line": row.line, "choices": row.choices, "scores": list(row_scores),
                    "prediction": best, "predicted_choice": row.choices[best],
                    "label": row.label,
                    "correct": None if row.label is None else best == row.label})
    return out


def score_rows(scoring: ScoringModel, rows: Sequence[ChoiceRow], encoder: TextEncoder,
               mode: str = "full", normalization: str = "token", r_bidir: float = 1.0,
               batch_size: int = 32, input_path="input") -> List[Dict]:
    """The per-row predictions of ``mode`` (``full`` or ``infill``) on ``rows``."""
    encoded = [encoder.encode(row.texts) for row in rows]
    if mode == "full":
        require_capability(scoring, "next", "full-sequence scoring (--scoring full)",
                           "use --scoring infill (single-token verbalizers) with it")
        scores = full_scores(scoring, rows, encoded, normalization, batch_size)
    else:
        require_capability(scoring, "mask", "infill scoring (--scoring infill)",
                           "use --scoring full (full-sequence scoring) with it")
        scores = infill_scores(scoring, rows, encoded, encoder, r_bidir, batch_size, input_path)
    return predictions(rows, scores)


def accuracy_of(results: Sequence[Dict]):
    """``(accuracy %, correct, labelled rows)``; NaN accuracy without labels."""
    labelled = [r for r in results if r["label"] is not None]
    correct = sum(bool(r["correct"]) for r in labelled)
    return (100.0 * correct / len(labelled) if labelled else math.nan), correct, len(labelled)


# --- command line -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="score_choices.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Zero-shot multiple choice with a bidirectional_lm checkpoint (Artetxe et al. "
                    "2022, Tables 7-8): full-sequence scoring of each choice (n_bidir = 0), or "
                    "direct infilling of a single-token verbalizer.",
        epilog="""input (--input, JSONL, one row per line):
  {"context": "The cat sat on the", "choices": ["mat", "moon"], "label": 0}
      choice k reads context + --separator + choices[k]
  {"prefix": "It rains, right? ", "suffix": ", the street is wet.",
   "choices": ["Yes", "No", "Also"], "label": 0}
      choice k reads prefix + choices[k] + suffix (Table 8's MNLI template)
  --template "{premise}, right? {choice}, {hypothesis}" --choices Yes,No,Also
      on rows {"premise": "...", "hypothesis": "...", "label": 0}
  "label" (optional): the right choice's index or text. Accuracy is printed when rows have one;
  --output writes one JSON line per row (line, choices, scores, prediction, predicted_choice,
  label, correct).

--scoring full scores the tokens after the prefix all choices share (the context; text after
the choice is scored too), each text encoded whole with DATA's spm.model and ended with </s>.
--scoring infill masks the one token where the choices differ (each choice must encode to one
token) and compares the choices' logits there, with n_bidir = round(R x n).""")
    parser.add_argument("--path", type=Path, required=True, help="bidirectional_lm checkpoint")
    parser.add_argument("--data", type=Path, required=True,
                        help="the data-bin the checkpoint was trained on: its dict.txt and "
                             "spm.model encode the text")
    parser.add_argument("--input", type=Path, required=True, help="rows (JSONL; see below)")
    parser.add_argument("--output", type=Path, help="write per-row predictions (JSONL) there")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    parser.add_argument("--scoring", choices=SCORINGS, default="full",
                        help="full: full-sequence scoring, n_bidir = 0 (default; Table 7, Table "
                             "8's full); infill: direct infilling of single-token verbalizers "
                             "(Table 8's infill)")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default="token",
                        help="--scoring full: token (default) = the length normalisation of "
                             "Artetxe et al. (2021): the choice's summed log-probability divided "
                             "by its number of tokens, i.e. the per-token mean log-probability "
                             "(the 'mean' scoring of their zero-shot code, fairseq "
                             "examples/few_shot, over the tokens after the choices' shared "
                             "prefix, </s> included); none = the summed log-probability; char = "
                             "the sum divided by the choice's length in characters. (Their "
                             "task-specific 'suffix' and 'unconditional-norm' scorings are not "
                             "implemented.)")
    parser.add_argument("--r-bidir", default=None,
                        help="--scoring infill: n_bidir = round(R x n) over the n tokens of the "
                             "text (default 1: fully bidirectional)")
    parser.add_argument("--template",
                        help="format each row as this text, {choice} marking the choice and "
                             f"{{field}} the row's fields, e.g. {TABLE_8_TEMPLATE!r} (Table 8)")
    parser.add_argument("--choices",
                        help="comma-separated choices for rows without \"choices\" (with "
                             "--template), e.g. Yes,No,Also")
    parser.add_argument("--separator", default=" ",
                        help="between \"context\" and the choice (default: one space)")
    parser.add_argument("--tokenizer", choices=("spm", "none"), default="spm",
                        help="spm (default): DATA/spm.model; none: the data-bin's tokens are "
                             "whitespace-separated words")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sequences (full) or rows (infill) per forward (default 32)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
    return parser


def run(args) -> Dict[str, object]:
    from fairseq_ext.data.bidirectional_eval_dataset import parse_r_bidir

    if args.batch_size < 1:
        raise ScoringError(f"--batch-size {args.batch_size} must be at least 1")
    if args.scoring == "full" and args.r_bidir is not None:
        raise ScoringError(f"--r-bidir {args.r_bidir} belongs to --scoring infill; full-sequence "
                           "scoring uses n_bidir = 0")
    r_bidir = "1" if args.r_bidir is None else args.r_bidir
    r_values = parse_r_bidir(r_bidir)
    if len(r_values) != 1:
        raise ScoringError(f"--r-bidir {r_bidir}: give one ratio in [0, 1]")
    choices = None
    if args.choices is not None:
        choices = [c.strip() for c in args.choices.split(",")]
        if len(choices) < 2 or not all(choices):
            raise ScoringError(f"--choices {args.choices!r}: give at least two non-empty choices, "
                               "comma-separated")
    if not (Path(args.data) / "dict.txt").is_file():
        raise ScoringError(f"--data {args.data}: no dict.txt there (give the data-bin directory)")
    refuse_existing([args.output], args.force)  # before the rows are read and scored
    rows = read_rows(args.input, args.template, choices, args.separator)
    scoring = load_scoring_model(args.path, args.data, "--path", pick_device(args.cpu))
    encoder = TextEncoder.for_data(args.data, scoring.dictionary, args.tokenizer)
    results = score_rows(scoring, rows, encoder, args.scoring, args.normalization, r_values[0],
                         args.batch_size, args.input)
    accuracy, correct, labelled = accuracy_of(results)
    setting = (f"full-sequence, n_bidir 0, {args.normalization} normalization"
               if args.scoring == "full" else f"infill, r_bidir {r_bidir}")
    return {"checkpoint": str(args.path), "variant": scoring.variant, "setting": setting,
            "rows": results, "accuracy": accuracy, "correct": correct, "labelled": labelled}


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        results = run(args)
        if args.output is not None:
            with atomic_file(args.output, args.force) as handle:
                for row in results["rows"]:
                    handle.write(json.dumps(row) + "\n")
    except (ValueError, OutputError) as error:  # ScoringError, the task helpers' flag errors
        print(error_line(parser.prog, error), file=sys.stderr)
        return 2
    line = (f"score_choices | {args.input} | {len(results['rows'])} rows | {results['checkpoint']} "
            f"({results['variant']}) | {results['setting']}")
    if results["labelled"]:
        line += (f" | accuracy {results['accuracy']:.2f} ({results['correct']}/"
                 f"{results['labelled']} labelled rows)")
    else:
        line += " | no labels"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
