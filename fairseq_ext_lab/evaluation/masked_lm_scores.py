"""Masked-LM scores of fairseq checkpoints, sequence by sequence, beside the training split's
unigram model on the same positions, so that every [MASK] loss carries a standard error and two
models (or a model and the unigram) are compared paired over the same validation sequences::

    python -m fairseq_ext_lab.evaluation.masked_lm_scores DATA CKPT [CKPT ...] [--mask-prob 0.15]
        [--seed 1] [--subset valid] [--max-sequences N] [--device cpu|cuda] [--out FILE]

Each checkpoint is loaded with fairseq's own ``checkpoint_utils`` (safe unpickling, as
``fairseq-validate`` loads it) and its stock ``masked_lm`` task builds the split with the
masking given here, not the one it trained with: ``--mask-prob`` (default 15%, RoBERTa's), 80/10/10
corruption and ``--seed``. fairseq's ``MaskTokensDataset`` draws each sequence's corruption from
``(seed, epoch, index)``, so every checkpoint scored with the same flags is scored on exactly
the same corrupted positions, whatever rate it trained at (a 3ML model trained at 40% is asked
the same questions as RoBERTa-15%). The ``<s>`` that ``masked_lm`` puts at the start of every
block is left out where it was corrupted: a model predicts it from its position alone, which a
unigram cannot, and at 64-token blocks counting it would credit every model with about 0.1 bit
of "context". For each sequence of the split it records:

* ``mask_loss`` / ``mask_tokens``: the summed loss (nats) of the ``<mask>`` inputs and their
  number (the 3ML paper's [MASK] category, Table 2c; :mod:`..criterions.masked_lm_categories`);
* ``corrupted_loss`` / ``corrupted_tokens``: the same over every corrupted position (fairseq's
  ``masked_lm`` loss);
* ``mask_unigram_loss`` / ``corrupted_unigram_loss``: the same positions scored by the unigram
  model of the training split (:func:`train_unigram`), the baseline a model that ignores
  context reaches.

The loss of a model is the ratio ``sum_s l_s / sum_s n_s`` over sequences ``s``; its standard
error, and that of a paired difference, are the delta method over sequences
(:func:`fairseq_ext.reporting.uncertainty.mean_loss`,
:func:`~fairseq_ext.reporting.uncertainty.paired_mean_loss_difference`). ``--out`` writes the
per-sequence arrays as JSON (never over an existing file). ``--max-sequences N`` scores ``N``
sequences spread evenly over the split (:func:`spread_indices`), on the whole split's positions
for them: a fixed subset for a split too large to score in a run's minutes.
``--device cuda`` runs the models on the GPU (fp32, as on the CPU); the corruption is drawn on
the CPU by the dataset either way, so the positions, and the sums to within float rounding, are
the same on both.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from fairseq_ext.data.data_bin import special_ids
from fairseq_ext.data.documents import spread_indices
from fairseq_ext.reporting.uncertainty import Estimate, mean_loss, paired_mean_loss_difference
from fairseq_ext.training.output_files import OutputError, error_line, write_text

#: The per-sequence fields of :class:`SequenceScores` (besides ``ids``).
FIELDS = ("mask_loss", "mask_tokens", "mask_unigram_loss",
          "corrupted_loss", "corrupted_tokens", "corrupted_unigram_loss")
LN2 = math.log(2.0)


@dataclasses.dataclass
class Unigram:
    """The training split's unigram model over a fairseq dictionary.

    ``counts[i]``: occurrences of entry ``i`` in the training stream the ``masked_lm`` task
    builds (the split's tokens with their ``</s>``, and one ``<s>`` per block it prepends);
    ``log_probs``: add-one (Laplace) smoothed log-probabilities (nats) over every entry but
    ``<pad>`` and ``<mask>`` (never targets), so a valid token unseen in training costs a
    finite loss; ``commonest``: the commonest non-special entry (the infilling baseline's
    constant guess)."""

    counts: np.ndarray
    log_probs: np.ndarray
    commonest: int

    @classmethod
    def from_counts(cls, counts: Sequence[int], never_targets: Sequence[int],
                    specials: Sequence[int]) -> "Unigram":
        counts = np.asarray(counts, dtype=np.int64)
        smoothed = counts.astype(np.float64) + 1.0
        smoothed[list(never_targets)] = 0.0
        with np.errstate(divide="ignore"):
            log_probs = np.log(smoothed / smoothed.sum())
        candidates = counts.copy()
        candidates[list(specials)] = -1
        return cls(counts=counts, log_probs=log_probs, commonest=int(np.argmax(candidates)))

    def cross_entropy_bits(self, tokens: Sequence[int]) -> float:
        """Mean loss (bits) of ``tokens`` under this model."""
        return float(-self.log_probs[np.asarray(tokens)].mean() / LN2)


def split_token_counts(dataset, vocabulary_size: int) -> np.ndarray:
    """Occurrences of each id in a fairseq indexed dataset (one tensor per line), counted in one
    pass over all its tokens."""
    if len(dataset) == 0:
        return np.zeros(vocabulary_size, dtype=np.int64)
    tokens = np.concatenate([np.asarray(dataset[index], dtype=np.int64)
                             for index in range(len(dataset))])
    return np.bincount(tokens, minlength=vocabulary_size)


def train_unigram(task, split: str = "train") -> Unigram:
    """:class:`Unigram` of ``split`` as ``task`` (fairseq's ``masked_lm``) builds it: the split's
    token counts, plus one ``<s>`` per ``--tokens-per-sample`` block (``PrependTokenDataset``)."""
    from fairseq.data import TokenBlockDataset, data_utils

    dictionary = task.source_dictionary
    prefix = str(Path(task.cfg.data.split(":")[0]) / split)
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, combine=False)
    if dataset is None:
        raise FileNotFoundError(f"no {split} split in {task.cfg.data} (looked for {prefix}.bin)")
    counts = split_token_counts(dataset, len(dictionary))
    blocks = TokenBlockDataset(dataset, dataset.sizes, task.cfg.tokens_per_sample - 1,
                               pad=dictionary.pad(), eos=dictionary.eos(),
                               break_mode=task.cfg.sample_break_mode)
    counts[dictionary.bos()] += len(blocks)
    return Unigram.from_counts(counts, never_targets=[dictionary.pad(), dictionary.index("<mask>")],
                               specials=special_ids(dictionary))


def training_piece_counts(data) -> tuple:
    """``(dictionary, counts)``: a data-bin's dictionary and the occurrences of each of its
    pieces in the training split, counted from its tokens (a ``dict.txt`` may hold placeholder
    counts), the special symbols' set to 0."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(Path(data) / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(Path(data) / "train"), dictionary, combine=False)
    if dataset is None:
        raise FileNotFoundError(f"no train split in {data}")
    counts = split_token_counts(dataset, len(dictionary))
    counts[special_ids(dictionary)] = 0
    return dictionary, counts


def commonest_piece(data) -> tuple:
    """``(id, symbol)`` of the commonest non-special piece of a data-bin's training split."""
    dictionary, counts = training_piece_counts(data)
    piece = int(np.argmax(counts))
    return piece, dictionary[piece]


@dataclasses.dataclass
class SequenceScores:
    """Per-sequence sums (module docstring); ``ids`` the sequences' indices in the split."""

    ids: np.ndarray
    mask_loss: np.ndarray
    mask_tokens: np.ndarray
    mask_unigram_loss: np.ndarray
    corrupted_loss: np.ndarray
    corrupted_tokens: np.ndarray
    corrupted_unigram_loss: np.ndarray

    def to_json(self) -> Dict[str, list]:
        return {"ids": self.ids.tolist(), **{f: getattr(self, f).tolist() for f in FIELDS}}

    @classmethod
    def from_json(cls, record: Dict[str, list]) -> "SequenceScores":
        return cls(ids=np.asarray(record["ids"], dtype=np.int64),
                   **{f: np.asarray(record[f], dtype=np.float64) for f in FIELDS})

    def loss_bits(self, kind: str = "mask", unigram: bool = False) -> Estimate:
        """Mean loss (bits) ± SE of the ``kind`` positions (``mask`` or ``corrupted``), of the
        model or (``unigram``) of the training split's unigram on the same positions."""
        losses = getattr(self, f"{kind}_unigram_loss" if unigram else f"{kind}_loss")
        return to_bits(mean_loss(losses, getattr(self, f"{kind}_tokens")))

    def below_unigram_bits(self, kind: str = "mask") -> Estimate:
        """``unigram - model`` (bits) over the same positions, paired over sequences."""
        tokens = getattr(self, f"{kind}_tokens")
        return to_bits(paired_mean_loss_difference(getattr(self, f"{kind}_unigram_loss"), tokens,
                                                   getattr(self, f"{kind}_loss"), tokens))


def to_bits(estimate: Estimate) -> Estimate:
    return Estimate(estimate.value / LN2, estimate.standard_error / LN2)


def paired_difference_bits(a: SequenceScores, b: SequenceScores, kind: str = "mask") -> Estimate:
    """``loss_a - loss_b`` (bits) over the same sequences, ± the delta-method SE paired over
    sequences. ``a`` and ``b`` must score the same sequences; their positions may differ (then
    the pairing is over sequences only, and the error is larger)."""
    if not np.array_equal(a.ids, b.ids):
        raise ValueError("paired differences need the same scored sequences in both")
    return to_bits(paired_mean_loss_difference(
        getattr(a, f"{kind}_loss"), getattr(a, f"{kind}_tokens"),
        getattr(b, f"{kind}_loss"), getattr(b, f"{kind}_tokens")))


def load_for_scoring(checkpoint: Path, data: Path, mask_prob: float, seed: int):
    """``(model, task)`` of a masked-LM checkpoint, its task rebuilt on ``data`` with the
    masking of this evaluation."""
    from fairseq import checkpoint_utils

    overrides = {"data": str(data), "mask_prob": mask_prob, "leave_unmasked_prob": 0.1,
                 "random_token_prob": 0.1, "seed": seed, "mask_whole_words": False}
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides=overrides)
    model = models[0]
    model.eval()
    return model, task


def spread_sequences(dataset, count: int):
    """``dataset`` restricted to :func:`spread_indices` of it: a fairseq dataset whose
    ``ordered_indices`` yields only those, so that the batches' corruption, which
    ``MaskTokensDataset`` draws from ``(seed, epoch, index)``, is the whole split's scoring's
    at those indices."""
    from fairseq.data import BaseWrapperDataset

    kept = spread_indices(len(dataset), count)

    class SpreadSequencesDataset(BaseWrapperDataset):
        def ordered_indices(self):
            indices = self.dataset.ordered_indices()
            return indices[np.isin(indices, kept)]

    return SpreadSequencesDataset(dataset)


def score(model, task, unigram: Unigram, subset: str = "valid",
          batch_size: int = 16, device: str = "cpu",
          max_sequences: Optional[int] = None) -> SequenceScores:
    """:class:`SequenceScores` of ``model`` on ``subset`` (module docstring), or on
    ``max_sequences`` of its sequences spread over it; the forward passes on ``device``, the
    bookkeeping on the CPU."""
    import torch
    import torch.nn.functional as F
    from fairseq import utils

    model.to(device)

    task.load_dataset(subset, combine=False, epoch=1)
    dataset = task.dataset(subset)
    if max_sequences is not None:
        dataset = spread_sequences(dataset, max_sequences)
    dictionary = task.source_dictionary
    pad, bos, mask_idx = dictionary.pad(), dictionary.bos(), dictionary.index("<mask>")
    iterator = task.get_batch_iterator(
        dataset=dataset, max_sentences=batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=True, seed=1, num_workers=0).next_epoch_itr(shuffle=False)
    unigram_nll = torch.from_numpy(-unigram.log_probs)
    sums: Dict[str, Dict[int, float]] = {field: {} for field in FIELDS}
    seen: List[int] = []
    with torch.no_grad():
        for sample in iterator:
            if not sample:
                continue
            ids = sample["id"].tolist()
            seen.extend(ids)
            target = sample["target"]
            masked = target.ne(pad)
            if not masked.any():
                continue
            targets = target[masked]
            inputs = sample["net_input"]["src_tokens"][masked]
            net_input = utils.apply_to_sample(lambda tensor: tensor.to(device),
                                              sample["net_input"])
            logits = model(**net_input, masked_tokens=masked.to(device))[0]
            losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                     targets.to(device), reduction="none").double().cpu()
            reference = unigram_nll[targets]
            rows = masked.nonzero()[:, 0]
            scored = targets.ne(bos).double()  # not the <s> every block starts with
            losses, reference = losses * scored, reference * scored
            is_mask = inputs.eq(mask_idx).double() * scored
            per_position = {
                "mask_loss": losses * is_mask, "mask_tokens": is_mask,
                "mask_unigram_loss": reference * is_mask, "corrupted_loss": losses,
                "corrupted_tokens": scored, "corrupted_unigram_loss": reference,
            }
            for field, values in per_position.items():
                totals = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, rows, values)
                for sequence, total in zip(ids, totals.tolist()):
                    sums[field][sequence] = sums[field].get(sequence, 0.0) + total
    order = np.asarray(sorted(set(seen)), dtype=np.int64)
    return SequenceScores(ids=order, **{
        field: np.asarray([sums[field].get(int(i), 0.0) for i in order]) for field in FIELDS})


def score_checkpoints(checkpoints: Sequence[Path], data: Path, mask_prob: float = 0.15,
                      seed: int = 1, subset: str = "valid", batch_size: int = 16,
                      device: str = "cpu",
                      max_sequences: Optional[int] = None) -> Dict[str, SequenceScores]:
    """Every checkpoint scored on the same corrupted positions (of ``max_sequences`` sequences
    spread over the split, when given); the unigram is counted once."""
    results: Dict[str, SequenceScores] = {}
    unigram: Optional[Unigram] = None
    for checkpoint in checkpoints:
        model, task = load_for_scoring(Path(checkpoint), data, mask_prob, seed)
        if unigram is None:
            unigram = train_unigram(task)
        results[str(checkpoint)] = score(model, task, unigram, subset, batch_size, device,
                                         max_sequences)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the fairseq data-bin")
    parser.add_argument("checkpoints", type=Path, nargs="+", help="masked-LM checkpoints")
    parser.add_argument("--mask-prob", type=float, default=0.15,
                        help="corruption rate of this evaluation (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="masking seed (default: %(default)s)")
    parser.add_argument("--subset", default="valid", help="split to score (default: valid)")
    parser.add_argument("--max-sequences", type=int, metavar="N",
                        help="score N sequences spread evenly over the split (default: all)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the models run (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the per-sequence scores as JSON")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if not 0.0 < args.mask_prob < 1.0:
        parser.error(f"--mask-prob {args.mask_prob}: give a rate in (0, 1), e.g. 0.15")
    if args.max_sequences is not None and args.max_sequences < 1:
        parser.error(f"--max-sequences {args.max_sequences}: give 1 or more, or leave it out "
                     "to score the whole split")
    prog = Path(sys.argv[0]).name
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device here; score with --device cpu")
    results = score_checkpoints(args.checkpoints, args.data, args.mask_prob, args.seed,
                                args.subset, args.batch_size, args.device,
                                args.max_sequences)
    for name, scores in results.items():
        loss, unigram, below = (scores.loss_bits(), scores.loss_bits(unigram=True),
                                scores.below_unigram_bits())
        print(f"{name}: [MASK] {loss.value:.3f} ± {loss.standard_error:.3f} bits; unigram "
              f"{unigram.value:.3f} ± {unigram.standard_error:.3f}; below it "
              f"{below.value:.3f} ± {below.standard_error:.3f} ({len(scores.ids)} sequences, "
              f"{int(scores.mask_tokens.sum())} [MASK])")
    if args.out is not None:
        record = {"mask_prob": args.mask_prob, "seed": args.seed, "subset": args.subset,
                  "scores": {name: scores.to_json() for name, scores in results.items()}}
        try:
            write_text(args.out, json.dumps(record), force=args.force)
        except OutputError as error:
            print(error_line(prog, error), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
