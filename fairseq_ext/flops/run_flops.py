"""Training FLOPs per update of a run, from the settings fairseq-train trains it with.

:func:`training_args` parses a fairseq-train command line with fairseq's own parser (the
``--user-dir`` imported, the task's, model's and criterion's flags and defaults, the arch
function's sizes), so a default changed in fairseq, in a task or model config or in a recipe
reaches the count as it reaches the run. :func:`update_training_flops` counts one update of
such a run with :func:`~fairseq_ext.flops.families.training_flops_of_rows`, the function the
criteria count each batch with (:mod:`~fairseq_ext.flops.training_metrics`): the same model
spec (:func:`~fairseq_ext.flops.families.spec_from_args`), rows of ``--tokens-per-sample``
tokens, and the predicted tokens a row is expected to hold (``masked_lm``'s corruption:
:func:`masked_lm_predicted_per_sequence`).
"""
import argparse
from typing import Sequence, Tuple

from fairseq_ext.flops.families import spec_from_args, training_flops_of_rows
from fairseq_ext.flops.formulas import corrupted_tokens


def training_args(argv: Sequence[str]) -> argparse.Namespace:
    """fairseq-train's arguments for ``argv`` (the command line after the program name), built
    as fairseq-train builds them (``options.get_training_parser`` and
    ``options.parse_args_and_arch``, which imports ``--user-dir`` and runs the arch function)."""
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), input_args=list(argv))


def rows_per_update(args: argparse.Namespace) -> float:
    """Rows of ``--tokens-per-sample`` tokens in one update of one worker: ``--batch-size``
    rows (at most ``--max-tokens`` tokens' worth when both are given), else ``--max-tokens``
    tokens, times the first ``--update-freq``."""
    length = args.tokens_per_sample
    limits = [float(limit) for limit in (args.batch_size,
                                         None if args.max_tokens is None
                                         else args.max_tokens / length) if limit is not None]
    if not limits:
        raise ValueError("give --batch-size or --max-tokens: the batch sets the FLOPs of an update")
    return min(limits) * args.update_freq[0]


def masked_lm_predicted_per_sequence(args: argparse.Namespace) -> Tuple[float, float]:
    """``(mask, other)``: the expected ``<mask>`` and other corrupted tokens of a row of
    ``--tokens-per-sample`` tokens under ``masked_lm``'s corruption: ``--mask-prob`` of the
    tokens, of which ``--leave-unmasked-prob`` stay and ``--random-token-prob`` are replaced
    (3ML paper, App. D: ``f m L`` [MASK]s, ``f = 1 - leave_unmasked - random``;
    :func:`~fairseq_ext.flops.formulas.corrupted_tokens`, which checks ``--mask-prob``)."""
    return corrupted_tokens(args.tokens_per_sample, args.mask_prob,
                            1.0 - args.leave_unmasked_prob - args.random_token_prob)


def update_training_flops(args: argparse.Namespace, vocab_size: int, mask_per_sequence: float,
                          other_per_sequence: float) -> float:
    """Training FLOPs of one update of the run ``args`` configure (:func:`training_args`):
    :func:`rows_per_update` rows of ``--tokens-per-sample`` tokens, each with
    ``mask_per_sequence`` ``<mask>`` and ``other_per_sequence`` other predicted tokens, counted
    as the criteria count a batch (:func:`~fairseq_ext.flops.families.training_flops_of_rows`
    on the model's :func:`~fairseq_ext.flops.families.spec_from_args`)."""
    return training_flops_of_rows(spec_from_args(args), rows_per_update(args),
                                  args.tokens_per_sample, mask_per_sequence, other_per_sequence,
                                  vocab_size)
