"""Full-sequence infilling (Artetxe et al. 2022, §3.2 "Single token infilling", Table 6)::

    python scripts/infill_rescore.py DATA --proposer MSK_BI.pt --scorer NXT_UNI.pt [--scorer ...]
        [--top-k 32] [--r-bidir 1] [--eval-seed 1] [--infill-positions 1] [--valid-subset valid]
        [--candidates-out FILE | --candidates-in FILE] [--json FILE] [--force]

**Positions.** Each document of the ``--valid-subset`` split gets the masked positions of
``fairseq-validate --eval-mode infill --eval-seed S --infill-positions K`` (default 1; the same
:class:`~fairseq_ext.data.bidirectional_eval_dataset.BidirectionalEvalDataset`, built by the
``bidirectional_lm`` task from ``DATA`` with the proposer's ``--document-format`` and
``--tokens-per-sample``, so the documents are read and cut as in its training), so direct and
full-sequence infilling are scored on the same positions. Documents without a non-special
token, and documents shorter than 2 tokens (no next-token term to score), are skipped, counted
and printed.

**Proposals.** The proposer (a checkpoint trained on ``<mask>`` tokens; the paper uses the 125M
MskBi) infills each position directly, with ``n_bidir = round(R x n)`` (``--r-bidir``, default
1: the paper's MskBi uses ``n_bidir = n``), and its ``--top-k`` highest-scoring non-special tokens
(the ``--eval-mode infill`` argmax restricted the same way) are the candidates. Its own direct
accuracy (the top candidate) is printed for reference, with the upper bound of re-ranking: the
share of positions whose answer is among the candidates (paper, footnote 9: 95.19% for K = 32).

**Re-ranking.** Each scorer (any checkpoint trained on next tokens) scores every candidate's
filled-in document by its full-sequence log-likelihood with ``n_bidir = 0``
(:func:`~fairseq_ext_lab.evaluation.sequence_scoring.sequence_log_likelihoods`): the K filled-in
copies of a document are one batch, one forward per document and candidate set. The prediction is
the best-scoring candidate (ties: the proposer's higher-ranked one); accuracy is the share of
positions where it is the original token, printed ± its binomial standard error
(:mod:`fairseq_ext.reporting.uncertainty`).

**Differences.** Every scorer re-ranks the same candidates at the same positions, so the report
compares them paired over those positions: each scorer against the best scorer, and the best
scorer against the proposer's direct infilling, ``acc_A - acc_B ± sd(c_A - c_B) / sqrt(N)``,
``*`` where the difference is larger than twice that error. The JSON keeps every scorer's
per-position outcome (``correct_by_position``, in proposal order) and the ``differences``.

**Candidate files.** ``--candidates-out FILE`` writes the proposals as JSONL: a header line
(``format``, ``version``, the dictionary's ``dictionary_sha256`` over its symbols and its
``dictionary_size``, ``proposer``, ``proposer_variant``, ``valid_subset``, ``eval_seed``,
``r_bidir``, ``top_k``, ``document_format``, ``tokens_per_sample``, ``documents`` and the skipped
counts), then one line per document: ``document`` (its index in the split), ``length``,
``position``, ``answer`` (the original token id), ``candidates`` (token ids, best first) and
``log_probs`` (the proposer's log-probabilities of the candidates). ``--candidates-in FILE``
reuses them without a proposer, so several scorers (or runs) re-rank one proposal set; a file
whose dictionary fingerprint differs from a scorer's dictionary, or whose documents differ from
``DATA``'s, is an error naming the file and the option, and ``--top-k`` may only shrink the stored
candidate lists.

**Outputs.** ``--candidates-out`` and ``--json`` files are never overwritten without ``--force``
(checked before any checkpoint is loaded), and are written whole or not at all
(:mod:`fairseq_ext.training.output_files`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import torch

from fairseq_ext.data.bidirectional_eval_dataset import BidirectionalEvalDataset
from fairseq_ext.reporting.uncertainty import (
    RESOLVED_AT,
    binomial_standard_error,
    paired_accuracy_difference,
)
from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask
from fairseq_ext.training.output_files import (
    OutputError,
    atomic_file,
    error_line,
    refuse_existing,
    write_text,
)
from fairseq_ext_lab.evaluation.sequence_scoring import (
    ScoringError,
    ScoringModel,
    dictionary_fingerprint,
    load_scoring_model,
    pick_device,
    require_capability,
    sequence_log_likelihoods,
)

DEFAULT_TOP_K = 32
DEFAULT_R_BIDIR = "1"
DEFAULT_EVAL_SEED = 1
DEFAULT_SUBSET = "valid"
CANDIDATES_FORMAT = "fairseq_ext.infill_candidates"
#: 2: the header records ``document_format`` (documents are blank-line separated by default).
CANDIDATES_VERSION = 2


@dataclass
class Proposal:
    """The candidates of one document's masked position."""

    document: int
    length: int
    position: int
    answer: int
    candidates: List[int]
    log_probs: List[float]


@dataclass
class ProposalSet:
    """Every document's proposals and how they were made (the candidates file's header)."""

    header: Dict[str, object]
    proposals: List[Proposal] = field(default_factory=list)

    @property
    def top_k(self) -> int:
        return int(self.header["top_k"])

    def truncated(self, top_k: int) -> "ProposalSet":
        header = dict(self.header, top_k=top_k)
        return ProposalSet(header, [Proposal(p.document, p.length, p.position, p.answer,
                                             p.candidates[:top_k], p.log_probs[:top_k])
                                    for p in self.proposals])


# --- documents and positions ----------------------------------------------------------------

def infill_eval_dataset(data, subset: str, tokens_per_sample: int, r_bidir: str, eval_seed: int,
                        document_format: str, infill_positions: int = 1):
    """``(task, dataset)``: the ``--eval-mode infill`` evaluation dataset of ``DATA``'s
    ``subset``, built by the ``bidirectional_lm`` task exactly as ``fairseq-validate`` builds it
    (the variant does not enter the dataset)."""

    cfg = BidirectionalLMConfig(data=str(data), tokens_per_sample=int(tokens_per_sample),
                                document_format=str(document_format), eval_mode="infill",
                                r_bidir=str(r_bidir), eval_seed=int(eval_seed),
                                infill_positions=int(infill_positions),
                                variant="msk_bi", seed=1)
    task = BidirectionalLMTask.setup_task(cfg)
    try:
        task.load_dataset(subset, combine=False)
    except FileNotFoundError as error:
        raise ScoringError(f"--valid-subset {subset}: {error}") from None
    dataset = task.dataset(subset)
    assert isinstance(dataset, BidirectionalEvalDataset)
    return task, dataset


def document_tokens(dataset, document: int) -> np.ndarray:
    return np.asarray(dataset.documents[document]).astype(np.int64)


def scorable_items(dataset):
    """``(item index, document, masked position)`` of the rows full-sequence scoring can serve
    (documents of at least 2 tokens), and how many of the dataset's rows are shorter."""
    items, short = [], 0
    for index in range(len(dataset)):
        if int(dataset.sizes[index]) < 2:
            short += 1
            continue
        items.append((index, int(dataset.item_document[index]), int(dataset.item_position[index])))
    return items, short


# --- proposals ------------------------------------------------------------------------------

@torch.no_grad()
def propose(proposer: ScoringModel, dataset, top_k: int, batch_size: int = 16) -> List[Proposal]:
    """The top ``top_k`` non-special candidates of the proposer at every scorable document's
    masked position (module docstring), from the evaluation dataset's own batches."""
    items, _ = scorable_items(dataset)
    special = torch.tensor(proposer.special_ids, dtype=torch.long)
    allowed = len(proposer.dictionary) - len(special)
    if not 1 <= top_k <= allowed:
        raise ScoringError(f"--top-k {top_k}: must lie in 1..{allowed} (the non-special symbols "
                           "of the dictionary)")
    proposals = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        batch = dataset.collater([dataset[index] for index, _, _ in chunk])
        net_input = {key: value.to(proposer.device) for key, value in batch["net_input"].items()}
        target = batch["target"].to(proposer.device)
        predicted = target.ne(proposer.pad)
        logits, _ = proposer.model(**net_input, masked_tokens=predicted)
        logits = logits.float().cpu()
        if logits.size(0) != len(chunk):
            raise RuntimeError("infill batches must predict one token per document")
        log_probs = torch.log_softmax(logits, dim=-1)
        scores = logits.index_fill(1, special, -math.inf)
        best = scores.topk(top_k, dim=-1).indices
        answers = target[predicted].cpu()
        for row, (_, document, position) in enumerate(chunk):
            candidates = best[row].tolist()
            proposals.append(Proposal(
                document=document, length=len(dataset.documents[document]),
                position=position, answer=int(answers[row]),
                candidates=candidates,
                log_probs=[float(log_probs[row, c]) for c in candidates]))
    return proposals


def make_proposals(proposer: ScoringModel, data, subset: str, r_bidir: str, eval_seed: int,
                   top_k: int, batch_size: int = 16, infill_positions: int = 1):
    """``(ProposalSet, dataset)`` of the proposer on ``DATA``'s ``subset``."""
    require_capability(proposer, "mask", "direct infilling (the proposals)",
                       "give a checkpoint trained on masks (msk_*, hyb_*; the paper uses MskBi) "
                       "as --proposer, and this one as --scorer")
    tokens_per_sample = int(proposer.task.cfg.tokens_per_sample)
    document_format = str(proposer.task.cfg.document_format)
    _, dataset = infill_eval_dataset(data, subset, tokens_per_sample, r_bidir, eval_seed,
                                     document_format, infill_positions)
    proposals = propose(proposer, dataset, top_k, batch_size)
    _, short = scorable_items(dataset)
    header = {
        "format": CANDIDATES_FORMAT, "version": CANDIDATES_VERSION,
        "dictionary_sha256": proposer.fingerprint, "dictionary_size": len(proposer.dictionary),
        "proposer": proposer.path, "proposer_variant": proposer.variant,
        "valid_subset": subset, "eval_seed": int(eval_seed), "r_bidir": str(r_bidir),
        "top_k": int(top_k), "document_format": document_format,
        "tokens_per_sample": tokens_per_sample, "infill_positions": int(infill_positions),
        "documents": len({p.document for p in proposals}), "positions": len(proposals),
        "skipped_no_maskable_token": int(dataset.skipped),
        "skipped_too_short": int(short),
    }
    return ProposalSet(header, proposals), dataset


# --- candidate files --------------------------------------------------------------------------

def write_candidates(path: Path, proposals: ProposalSet, force: bool = False) -> None:
    """The proposals as a candidate file (JSONL: the header, then a row per document); an
    existing ``path`` is replaced only with ``force``."""
    with atomic_file(path, force) as handle:
        handle.write(json.dumps(proposals.header) + "\n")
        for proposal in proposals.proposals:
            handle.write(json.dumps(asdict(proposal)) + "\n")


HEADER_KEYS = ("dictionary_sha256", "dictionary_size", "valid_subset", "eval_seed", "r_bidir",
               "top_k", "document_format", "tokens_per_sample", "infill_positions")
ROW_KEYS = ("document", "length", "position", "answer", "candidates", "log_probs")


def read_candidates(path: Path) -> ProposalSet:
    """A ``--candidates-out`` file; malformed files are errors naming it and the option."""
    where = f"--candidates-in {path}"
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ScoringError(f"{where}: cannot be read ({error.strerror or error})") from None
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != CANDIDATES_FORMAT:
        raise ScoringError(f"{where}: not a candidates file (its first line must be the header "
                           f"that --candidates-out writes, with \"format\": \"{CANDIDATES_FORMAT}\")")
    if header.get("version") != CANDIDATES_VERSION or any(key not in header for key in HEADER_KEYS):
        raise ScoringError(f"{where}: header of version {header.get('version')} lacks some of "
                           f"{', '.join(HEADER_KEYS)}; write it again with --candidates-out")
    proposals = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            proposal = Proposal(**{key: row[key] for key in ROW_KEYS})
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ScoringError(f"{where}:{number}: not a proposal row (keys "
                               f"{', '.join(ROW_KEYS)})") from None
        if len(proposal.candidates) < int(header["top_k"]):
            raise ScoringError(f"{where}:{number}: {len(proposal.candidates)} candidates, the "
                               f"header says top_k {header['top_k']}")
        proposals.append(proposal)
    return ProposalSet(header, proposals)


def check_fingerprint(proposals: ProposalSet, path: Path, dictionary, data) -> None:
    """The candidate ids mean the same tokens in ``dictionary``: ``DATA``'s ``dict.txt`` plus
    ``<mask>``, the dictionary every ``--scorer`` scores ``DATA`` with."""
    expected = proposals.header["dictionary_sha256"]
    fingerprint = dictionary_fingerprint(dictionary)
    if expected != fingerprint:
        raise ScoringError(
            f"--candidates-in {path}: its candidates were proposed with another dictionary "
            f"(sha256 {str(expected)[:12]}..., {proposals.header['dictionary_size']} symbols) than "
            f"the one the --scorer checkpoints score with (DATA {data}'s dict.txt + <mask>: sha256 "
            f"{fingerprint[:12]}..., {len(dictionary)} symbols): token ids would mean different "
            "tokens; give the data-bin the candidates were made on, or make them again with "
            "--proposer ... --candidates-out")


def check_documents(proposals: ProposalSet, path: Path, dataset) -> None:
    """Every stored proposal's document, position and answer are ``DATA``'s."""
    items, _ = scorable_items(dataset)
    scorable = {(document, position) for _, document, position in items}
    for proposal in proposals.proposals:
        tokens = (document_tokens(dataset, proposal.document)
                  if (proposal.document, proposal.position) in scorable else None)
        if (tokens is None or len(tokens) != proposal.length
                or int(tokens[proposal.position]) != proposal.answer):
            raise ScoringError(
                f"--candidates-in {path}: document {proposal.document} does not match DATA's "
                f"{proposals.header['valid_subset']} split (length, masked position or answer "
                "differ): the file was made from other data; make it again with --candidates-out")
    if len(proposals.proposals) != len(items):
        raise ScoringError(f"--candidates-in {path}: {len(proposals.proposals)} documents, DATA's "
                           f"{proposals.header['valid_subset']} split has {len(items)}")


# --- re-ranking -------------------------------------------------------------------------------

def filled_in(tokens: np.ndarray, position: int, candidates: Sequence[int]) -> np.ndarray:
    """``(K, n)``: the document with each candidate at ``position``."""
    copies = np.tile(np.asarray(tokens, dtype=np.int64), (len(candidates), 1))
    copies[:, position] = np.asarray(candidates, dtype=np.int64)
    return copies


def rescore(scorer: ScoringModel, dataset, proposals: ProposalSet):
    """Per proposal: the scorer's full-sequence log-likelihood of each candidate's filled-in
    document (one forward per document: its K copies are one batch) and the chosen candidate."""
    require_capability(scorer, "next", "full-sequence scoring (--scorer)",
                       "give it as --proposer (direct infilling) instead")
    chosen, all_scores = [], []
    for proposal in proposals.proposals:
        tokens = document_tokens(dataset, proposal.document)
        copies = filled_in(tokens, proposal.position, proposal.candidates)
        scores = sequence_log_likelihoods(scorer, copies, batch_size=len(copies))
        chosen.append(proposal.candidates[int(np.argmax(scores))])  # ties: the proposer's order
        all_scores.append(scores)
    return chosen, all_scores


def accuracy(correct: int, total: int) -> float:
    return 100.0 * correct / total if total else math.nan


def accuracy_error(correct: int, total: int) -> float:
    """The binomial standard error of :func:`accuracy`, in points."""
    return 100.0 * binomial_standard_error(correct, total)


def summary(proposals: ProposalSet) -> Dict[str, object]:
    """The proposer's direct accuracy and the top-K upper bound (%), with the counts."""
    rows = proposals.proposals
    direct = sum(p.candidates[0] == p.answer for p in rows)
    in_top = sum(p.answer in p.candidates for p in rows)
    return {"documents": len({p.document for p in rows}), "positions": len(rows),
            "top_k": proposals.top_k,
            "direct_correct": direct, "direct_accuracy": accuracy(direct, len(rows)),
            "direct_accuracy_se": accuracy_error(direct, len(rows)),
            "in_top_k": in_top, "upper_bound": accuracy(in_top, len(rows))}


def report_lines(data, results: Dict[str, object]) -> List[str]:
    """The printed report of :func:`run`'s results."""
    header, stats = results["header"], results["summary"]
    skipped = int(header["skipped_no_maskable_token"]) + int(header["skipped_too_short"])
    lines = [
        f"infill rescoring | {data} {header['valid_subset']} | eval seed {header['eval_seed']} | "
        f"documents {stats['documents']} | positions {stats['positions']} | skipped {skipped} "
        f"({header['skipped_no_maskable_token']} without a non-special token, "
        f"{header['skipped_too_short']} shorter than 2 tokens)",
        f"proposer {header['proposer']} ({header['proposer_variant']}) | direct infill, r_bidir "
        f"{header['r_bidir']} | accuracy {stats['direct_accuracy']:.2f} ± "
        f"{stats['direct_accuracy_se']:.2f}",
        f"top-{stats['top_k']} upper bound (answer among the candidates) | accuracy "
        f"{stats['upper_bound']:.2f}",
    ]
    for row in results["scorers"]:
        lines.append(f"scorer {row['checkpoint']} ({row['variant']}) | full-sequence, n_bidir 0 | "
                     f"accuracy {row['accuracy']:.2f} ± {row['accuracy_se']:.2f}")
    lines.append("(± 1 binomial standard error over positions)")
    if results.get("differences"):
        lines.append(f"paired differences over the same positions, in points (* resolved: larger "
                     f"than {RESOLVED_AT:g} standard errors of the difference):")
        for row in results["differences"]:
            mark = " *" if row["resolved"] else ""
            lines.append(f"  {row['a']} - {row['b']} | {row['difference']:+.2f} ± "
                         f"{row['standard_error']:.2f}{mark}")
    return lines


def scorer_label(row: Dict[str, object]) -> str:
    return f"{row['checkpoint']} ({row['variant']})"


def paired_differences(proposals: ProposalSet,
                       scorer_rows: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Module docstring, "Differences": every other scorer against the best one, then the best
    scorer against the proposer's direct infilling, paired over the same positions."""
    if not scorer_rows or not proposals.proposals:
        return []
    best = max(range(len(scorer_rows)), key=lambda i: scorer_rows[i]["correct"])  # first on ties
    direct = [int(p.candidates[0] == p.answer) for p in proposals.proposals]
    pairs = [(scorer_label(row), row["correct_by_position"], scorer_label(scorer_rows[best]),
              scorer_rows[best]["correct_by_position"])
             for index, row in enumerate(scorer_rows) if index != best]
    pairs.append((scorer_label(scorer_rows[best]), scorer_rows[best]["correct_by_position"],
                  f"proposer {proposals.header['proposer']} (direct)", direct))
    out = []
    for a, correct_a, b, correct_b in pairs:
        estimate = paired_accuracy_difference(correct_a, correct_b)
        out.append({"a": a, "b": b, "difference": estimate.value,
                    "standard_error": estimate.standard_error, "resolved": estimate.resolved()})
    return out


# --- command line -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infill_rescore.py",
        description="Table 6 of Artetxe et al. (2022): single-token infilling by full-sequence "
                    "scoring. A direct-infilling proposer (--proposer, e.g. MskBi) proposes the "
                    "top-K non-special tokens at each document's masked position (the positions "
                    "of fairseq-validate --eval-mode infill --eval-seed S); each --scorer picks "
                    "the candidate whose filled-in document has the highest full-sequence "
                    "log-likelihood (n_bidir = 0). Prints each scorer's accuracy, the proposer's "
                    "direct accuracy and the top-K upper bound.",
        epilog="Candidate files (--candidates-out / --candidates-in) are JSONL: a header "
               "(dictionary_sha256 of the dictionary's symbols, proposer, valid_subset, eval_seed, "
               "r_bidir, top_k, document_format, tokens_per_sample, counts) and one row per "
               "document (document, length, position, answer, candidates, log_probs).")
    parser.add_argument("data", type=Path, help="the data-bin (dict.txt and the --valid-subset split)")
    parser.add_argument("--proposer", type=Path,
                        help="direct-infilling checkpoint trained on masks (the paper: 125M MskBi)")
    parser.add_argument("--scorer", type=Path, action="append", default=[],
                        help="checkpoint trained on next tokens that re-ranks by full-sequence "
                             "log-likelihood (n_bidir = 0); repeat for several")
    parser.add_argument("--top-k", type=int, default=None,
                        help=f"candidates per position (default {DEFAULT_TOP_K}, the paper's; with "
                             "--candidates-in: the file's, or fewer)")
    parser.add_argument("--r-bidir", default=None,
                        help=f"the proposer's n_bidir = round(R x n) (default {DEFAULT_R_BIDIR}: "
                             "n_bidir = n, as the paper's MskBi)")
    parser.add_argument("--eval-seed", type=int, default=None,
                        help=f"seeds the masked positions as --eval-mode infill does (default "
                             f"{DEFAULT_EVAL_SEED})")
    parser.add_argument("--infill-positions", type=int, default=None,
                        help="masked positions per document, as --eval-mode infill's (default 1, "
                             "the paper's); more give smaller standard errors")
    parser.add_argument("--valid-subset", default=None,
                        help=f"the split to score (default {DEFAULT_SUBSET})")
    parser.add_argument("--candidates-out", type=Path, help="write the proposals (JSONL) there")
    parser.add_argument("--candidates-in", type=Path,
                        help="re-rank the proposals of a --candidates-out file instead of running "
                             "a proposer")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="documents per proposer forward (default 16); each scorer forward is "
                             "one document's K candidates")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
    parser.add_argument("--json", type=Path, help="also write the results as JSON there")
    parser.add_argument("--force", action="store_true",
                        help="overwrite --candidates-out and --json files that exist")
    return parser


def check_same(flag: str, given, stored, path: Path) -> None:
    if given is not None and str(given) != str(stored):
        raise ScoringError(f"{flag} {given}: --candidates-in {path} was made with {flag} {stored}; "
                           "drop the flag or make new candidates")


def run(args) -> Dict[str, object]:
    """Everything :func:`main` does but printing; returns the results (``--json``'s content)."""
    from fairseq_ext.data.bidirectional_eval_dataset import parse_r_bidir

    if (args.proposer is None) == (args.candidates_in is None):
        raise ScoringError("give exactly one of --proposer CKPT (make the candidates) and "
                           "--candidates-in FILE (reuse candidates made earlier)")
    if args.candidates_out is not None and args.proposer is None:
        raise ScoringError("--candidates-out needs --proposer (it writes the proposer's candidates)")
    if not args.scorer and args.candidates_out is None:
        raise ScoringError("nothing to do: give at least one --scorer CKPT (or --candidates-out FILE "
                           "to only write the proposals)")
    if args.batch_size < 1:
        raise ScoringError(f"--batch-size {args.batch_size} must be at least 1")
    if args.infill_positions is not None and args.infill_positions < 1:
        raise ScoringError(f"--infill-positions {args.infill_positions} must be at least 1")
    if not (Path(args.data) / "dict.txt").is_file():
        raise ScoringError(f"DATA {args.data}: no dict.txt there (give the data-bin directory)")
    refuse_existing([args.candidates_out, args.json], args.force)  # before any checkpoint loads
    device = pick_device(args.cpu)
    if args.proposer is not None:
        r_bidir = DEFAULT_R_BIDIR if args.r_bidir is None else args.r_bidir
        values = parse_r_bidir(r_bidir)
        if len(values) != 1:
            raise ScoringError(f"--r-bidir {r_bidir}: the proposer takes one ratio in [0, 1]")
        top_k = DEFAULT_TOP_K if args.top_k is None else args.top_k
        proposer = load_scoring_model(args.proposer, args.data, "--proposer", device)
        proposals, dataset = make_proposals(
            proposer, args.data, args.valid_subset or DEFAULT_SUBSET, r_bidir,
            DEFAULT_EVAL_SEED if args.eval_seed is None else args.eval_seed, top_k, args.batch_size,
            1 if args.infill_positions is None else args.infill_positions)
        del proposer
        if args.candidates_out is not None:
            write_candidates(args.candidates_out, proposals, args.force)
    else:
        path = args.candidates_in
        proposals = read_candidates(path)
        header = proposals.header
        check_same("--r-bidir", None if args.r_bidir is None else parse_r_bidir(args.r_bidir)[0],
                   parse_r_bidir(str(header["r_bidir"]))[0], path)
        check_same("--eval-seed", args.eval_seed, header["eval_seed"], path)
        check_same("--infill-positions", args.infill_positions, header["infill_positions"], path)
        check_same("--valid-subset", args.valid_subset, header["valid_subset"], path)
        if args.top_k is not None:
            if not 1 <= args.top_k <= proposals.top_k:
                raise ScoringError(f"--top-k {args.top_k}: --candidates-in {path} holds "
                                   f"{proposals.top_k} candidates per position; give 1.."
                                   f"{proposals.top_k} or make a larger set")
            proposals = proposals.truncated(args.top_k)
        data_task, dataset = infill_eval_dataset(args.data, header["valid_subset"],
                                                 header["tokens_per_sample"], header["r_bidir"],
                                                 header["eval_seed"], header["document_format"],
                                                 header["infill_positions"])
        check_fingerprint(proposals, path, data_task.source_dictionary, args.data)
        check_documents(proposals, path, dataset)
    scorer_rows = []
    for scorer_path in args.scorer:
        scorer = load_scoring_model(scorer_path, args.data, "--scorer", device)
        require_capability(scorer, "next", "full-sequence scoring (--scorer)",
                           "give it as --proposer (direct infilling) instead")
        longest = max((p.length for p in proposals.proposals), default=0)
        if longest > scorer.max_positions:
            raise ScoringError(f"{scorer.describe()}: has {scorer.max_positions} positions, but "
                               f"documents reach {longest} tokens (the proposer's "
                               f"--tokens-per-sample {proposals.header['tokens_per_sample']})")
        chosen, _ = rescore(scorer, dataset, proposals)
        by_position = [int(c == p.answer) for c, p in zip(chosen, proposals.proposals)]
        correct = sum(by_position)
        scorer_rows.append({"checkpoint": str(scorer_path), "variant": scorer.variant,
                            "correct": correct,
                            "accuracy": accuracy(correct, len(proposals.proposals)),
                            "accuracy_se": accuracy_error(correct, len(proposals.proposals)),
                            "correct_by_position": by_position})
        del scorer
    return {"header": proposals.header, "summary": summary(proposals), "scorers": scorer_rows,
            "differences": paired_differences(proposals, scorer_rows)}


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        results = run(args)
        if args.json is not None:
            write_text(args.json, json.dumps(results, indent=2), args.force)
    except (ValueError, OutputError) as error:  # ScoringError, the task helpers' flag errors
        print(error_line(parser.prog, error), file=sys.stderr)
        return 2
    for line in report_lines(args.data, results):
        print(line)
    if args.candidates_out is not None:
        print(f"candidates written to {args.candidates_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
