"""Masked-token prediction of hub directories on held-out text: 3ML with its decoder kept
against its encoder-only export (Liao et al., 2022, §2.2 "Fine-tuning and Inference": the
decoder is dropped for fine-tuning, but infilling may be better with it kept).

Every model sees the same input: the held-out split of a data-bin cut into blocks as
``masked_lm`` cuts its training data (``--sample-break-mode complete``, ``<s>`` first), with
the same positions replaced by ``<mask>`` (each real token with probability ``--mask-prob``,
at least one per block, drawn from ``--seed`` and the block's index, never ``<s>``/``</s>``).
Each model predicts all of a block's masked positions at once (``model(tokens,
masked_tokens=...)``, what ``fill_mask`` computes for one [MASK]), and we count top-1 accuracy
and the cross-entropy of the original tokens. Only [MASK] replacement is used (no 80/10/10):
this measures filling blanks, the use the paper has in mind.

The command line is ``scripts/compare_fill_mask.py``::

    python scripts/export_encoder.py CKPT exports/3ml-encoder
    python scripts/export_encoder.py --keep-decoder CKPT exports/3ml-full
    python scripts/compare_fill_mask.py --data data-bin/python-docs-spm8000 \\
        exports/3ml-full exports/3ml-encoder

A hub directory's dictionary must be the data-bin's (the error names the file otherwise). An
encoder-only export of a 3ML model whose decoder dim differs from its encoder dim has a freshly
initialised MLM head (:mod:`fairseq_ext.export.encoder`): its scores are reported, and flagged, but say
nothing about the encoder.
"""
import argparse
import dataclasses
import logging
import math
import sys
from pathlib import Path
from typing import List, Sequence

import torch

from fairseq_ext.training.output_files import error_line

logger = logging.getLogger(__name__)


class FillMaskError(ValueError):
    """A problem with the user's input, reported as one line (exit status 2)."""


@dataclasses.dataclass
class FillMaskScore:
    masked_tokens: int = 0
    correct: int = 0
    nll_nats: float = 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.masked_tokens

    @property
    def loss_bits(self) -> float:
        return self.nll_nats / self.masked_tokens / math.log(2)


def held_out_blocks(data: Path, split: str, dictionary, tokens_per_sample: int
                    ) -> List[torch.Tensor]:
    """The split's blocks of at most ``tokens_per_sample`` tokens, ``<s>`` first, as
    ``masked_lm`` builds its samples (``complete`` break mode). A sentence longer than a block
    is a block of its own there; such blocks are left out here (as fairseq-validate's
    ``--skip-invalid-size-inputs-valid-test`` would), and the log counts them."""
    from fairseq.data import TokenBlockDataset, data_utils

    dataset = data_utils.load_indexed_dataset(str(data / split), dictionary)
    if dataset is None:
        raise FillMaskError(f"{data}: no '{split}' split (give another with --split)")
    blocks = TokenBlockDataset(dataset, dataset.sizes, tokens_per_sample - 1,
                               pad=dictionary.pad(), eos=dictionary.eos(), break_mode="complete")
    bos = torch.tensor([dictionary.bos()])
    kept = [torch.cat([bos, blocks[i].long()]) for i in range(len(blocks))
            if blocks.sizes[i] < tokens_per_sample]
    if len(kept) < len(blocks):
        logger.info("%s/%s: left out %d of %d blocks, single sentences longer than "
                    "--tokens-per-sample %d", data, split, len(blocks) - len(kept), len(blocks),
                    tokens_per_sample)
    return kept


def mask_positions(blocks: Sequence[torch.Tensor], specials: Sequence[int], mask_prob: float,
                   seed: int) -> List[torch.Tensor]:
    """Boolean masks: each non-special token with probability ``mask_prob``, at least one per
    block, from a generator seeded with ``(seed, block index)`` (the same for every model)."""
    masks = []
    for index, block in enumerate(blocks):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
        eligible = ~torch.isin(block, torch.tensor(list(specials)))
        draw = torch.rand(block.shape, generator=generator) < mask_prob
        mask = draw & eligible
        if not mask.any() and eligible.any():
            candidates = eligible.nonzero().flatten()
            mask[candidates[torch.randint(len(candidates), (1,), generator=generator)]] = True
        masks.append(mask)
    return masks


@torch.no_grad()
def score(model, mask_idx: int, pad_idx: int, blocks: Sequence[torch.Tensor],
          masks: Sequence[torch.Tensor], batch_size: int = 16) -> FillMaskScore:
    """Top-1 accuracy and cross-entropy of ``model`` (a fairseq RoBERTa-contract model: 3ML or
    RoBERTa) at the masked positions."""
    from fairseq.data import data_utils

    result = FillMaskScore()
    model.eval()
    for start in range(0, len(blocks), batch_size):
        tokens = data_utils.collate_tokens(list(blocks[start:start + batch_size]), pad_idx)
        mask = data_utils.collate_tokens([m.long() for m in masks[start:start + batch_size]],
                                         0).bool()
        logits, _ = model(tokens.masked_fill(mask, mask_idx), masked_tokens=mask)
        target = tokens[mask]
        result.masked_tokens += target.numel()
        result.correct += int(logits.argmax(-1).eq(target).sum())
        result.nll_nats += float(torch.nn.functional.cross_entropy(
            logits.float(), target, reduction="sum"))
    return result


def load_hub(directory: Path):
    """A hub directory (``scripts/export_encoder.py``) through fairseq's
    ``RobertaModel.from_pretrained``; 3ML ones (``--keep-decoder``) need the plugin's archs,
    registered by the package root that importing this module imported."""
    from fairseq.models.roberta import RobertaModel

    if not (directory / "model.pt").is_file():
        raise FillMaskError(f"{directory}: not a hub directory (no model.pt; write one with "
                            "scripts/export_encoder.py CKPT DIR)")
    return RobertaModel.from_pretrained(str(directory)).eval()


def same_dictionary(hub, dictionary, hub_dir: Path, data: Path) -> None:
    ours = hub.task.source_dictionary
    if ours.symbols[:len(dictionary)] != dictionary.symbols:
        raise FillMaskError(f"{hub_dir}/dict.txt differs from {data}/dict.txt: the model was "
                            "trained on another data-bin")


#: The symbol a sentence marks its blank with (fairseq's ``fill_mask`` convention).
MASK = "<mask>"


def piece_word(piece: str) -> str:
    """A sentencepiece piece as a reader sees it: without the word-start mark ``\u2581``
    (specials such as ``</s>`` as they are)."""
    return piece.replace("\u2581", " ").strip() or piece


@torch.no_grad()
def top_guesses(hub, masked: str, topk: int = 5) -> List[tuple]:
    """``[(word, probability)]``: the ``topk`` pieces a hub model (:func:`load_hub`: RoBERTa,
    or 3ML with its decoder) puts at the one ``<mask>`` of ``masked``. The tokens and the
    softmax are those of fairseq's ``fill_mask`` (each text span through the hub's BPE, the
    model's LM head at the mask), but every piece is kept: ``fill_mask`` drops ``<s>`` and
    ``</s>`` from its words and then pairs the rest with the probabilities of the ones before
    them."""
    if masked.count(MASK) != 1:
        raise FillMaskError(f"{masked!r}: mark exactly one blank with {MASK}")
    spans = f" {MASK} ".join(hub.bpe.encode(span.rstrip()) for span in masked.split(MASK))
    dictionary = hub.task.source_dictionary
    tokens = dictionary.encode_line(f"<s> {spans.strip()} </s>", append_eos=False,
                                    add_if_not_exist=False).long()[None]
    logits, _ = hub.model.eval()(tokens, masked_tokens=tokens.eq(hub.task.mask_idx))
    probs, index = logits[0].float().softmax(-1).topk(topk)
    return [(piece_word(dictionary[i]), float(p)) for i, p in zip(index.tolist(), probs.tolist())]


def unigram_guesses(data: Path, topk: int = 5) -> List[tuple]:
    """``[(word, share)]``: the ``topk`` commonest non-special pieces of a data-bin's training
    split and their shares of its non-special tokens, the guess of a model that ignores context."""
    import numpy as np

    from fairseq_ext_lab.evaluation.masked_lm_scores import training_piece_counts

    try:
        dictionary, counts = training_piece_counts(data)
    except FileNotFoundError as error:
        raise FillMaskError(str(error)) from None
    counts = counts.astype(np.float64)
    order = np.argsort(-counts, kind="stable")[:topk]
    return [(piece_word(dictionary[int(i)]), float(counts[i] / counts.sum())) for i in order]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="compare_fill_mask.py",
        description="Masked-token accuracy and loss of hub directories (3ML with its decoder "
                    "kept, its encoder-only export, RoBERTa) on the same held-out positions.")
    parser.add_argument("hub_dirs", nargs="+", type=Path, metavar="HUB_DIR")
    parser.add_argument("--data", type=Path, required=True, help="data-bin of the held-out text")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--tokens-per-sample", type=int, default=128)
    parser.add_argument("--mask-prob", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-blocks", type=int, default=None,
                        help="score only the first N blocks")
    args = parser.parse_args(argv)
    if not 0 < args.mask_prob < 1:
        parser.error(f"--mask-prob {args.mask_prob}: must be in (0, 1)")
    if args.tokens_per_sample < 3:
        parser.error("--tokens-per-sample must be at least 3")
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.WARNING)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logger.setLevel(logging.INFO)
    try:
        from fairseq.data import Dictionary

        if not (args.data / "dict.txt").is_file():
            raise FillMaskError(f"{args.data}: no dict.txt (give a data-bin with --data)")
        dictionary = Dictionary.load(str(args.data / "dict.txt"))
        blocks = held_out_blocks(args.data, args.split, dictionary, args.tokens_per_sample)
        blocks = blocks[:args.max_blocks] if args.max_blocks else blocks
        masks = mask_positions(blocks, (dictionary.bos(), dictionary.eos(), dictionary.pad()),
                               args.mask_prob, args.seed)
        rows = []
        for hub_dir in args.hub_dirs:
            hub = load_hub(hub_dir)
            same_dictionary(hub, dictionary, hub_dir, args.data)
            if args.tokens_per_sample > hub.model.max_positions():
                raise FillMaskError(f"{hub_dir}: the model takes at most "
                                    f"{hub.model.max_positions()} positions; give "
                                    f"--tokens-per-sample {hub.model.max_positions()}")
            result = score(hub.model, hub.task.mask_idx, dictionary.pad(), blocks, masks,
                           args.batch_size)
            export = torch.load(hub_dir / "model.pt", map_location="cpu", mmap=True,
                                weights_only=True).get("export", {})
            kind = ("3ML, decoder kept" if export.get("decoder_kept") else
                    "encoder only" + (", head NOT trained" if export.get("lm_head_dense")
                                      == "initialised" else ""))
            rows.append([hub_dir.name, kind, str(result.masked_tokens),
                         f"{100 * result.accuracy:.2f}", f"{result.loss_bits:.3f}"])
    except FillMaskError as e:
        print(error_line("compare_fill_mask.py", e), file=sys.stderr)
        return 2
    from fairseq_ext_lab.reporting.text_tables import ascii_table

    print(f"{args.data} {args.split}: {len(blocks)} blocks of <= {args.tokens_per_sample} "
          f"tokens, mask prob {args.mask_prob}, seed {args.seed}")
    print(ascii_table(["model", "kind", "masked", "top-1 acc %", "loss (bits)"], rows))
    return 0
