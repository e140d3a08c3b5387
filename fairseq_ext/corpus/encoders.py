"""Subword tokenizers for the corpus pipeline: training, streaming parallel encoding, and the
fairseq dictionary.

Three tokenizers (:class:`TokenizerSpec.kind`):

* ``spm``: a sentencepiece model; a line becomes its pieces separated by spaces, and a piece
  the model does not know becomes the literal ``<unk>`` (fairseq maps it to its unk index);
* ``gpt2``: fairseq's GPT-2 byte-level BPE (``encoder.json`` + ``vocab.bpe``); a line becomes
  its BPE ids as space-separated integers, as fairseq's ``multiprocessing_bpe_encoder.py`` does;
* ``none``: the text is already tokenized; whitespace is normalised only.

A blank line (the separator between documents) stays blank; a non-blank line always gives at
least one token (``<unk>`` if the tokenizer drops everything), so no document boundary is made.
"""

from __future__ import annotations

import collections
import io
import itertools
import multiprocessing
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .errors import CorpusError

FAIRSEQ_SPECIAL_SYMBOLS = frozenset({"<s>", "<pad>", "</s>", "<unk>"})
UNKNOWN_TOKEN = "<unk>"
FAIRSEQ_OVERWRITE_FLAG = "#fairseq:overwrite"  # optional third field of a dictionary line
LINES_PER_CHUNK = 2000
#: sentencepiece's ``max_sentence_length`` (its default, in bytes): longer lines are not trained on
SPM_MAX_SENTENCE_BYTES = 4192
#: the threads a corpus's sentencepiece model is trained with, whatever ``--workers`` says:
#: sentencepiece's unigram EM sums its statistics per thread, so another count gives another
#: model (2 threads: 28 s for the English corpus's 300,000 lines, 1 thread 41 s)
SPM_TRAINING_THREADS = 2


@dataclass(frozen=True)
class TokenizerSpec:
    """What a worker needs to build its tokenizer (picklable)."""

    kind: str  # "spm", "gpt2" or "none"
    spm_model: str | None = None
    gpt2_encoder_json: str | None = None
    gpt2_vocab_bpe: str | None = None


@dataclass
class EncodedChunk:
    """The encoded text of a chunk of lines, and its counts."""

    text: str  # one encoded line per input line, each ending with "\n"
    tokens: int
    unknown_tokens: int


class SentencePieceLineEncoder:
    """Encodes lines into sentencepiece pieces (strings as fairseq's dictionary knows them)."""

    def __init__(self, model_file: str):
        import sentencepiece

        self.processor = sentencepiece.SentencePieceProcessor(model_file=model_file)
        self.unknown_id = self.processor.unk_id()
        self.pieces = [
            self.processor.id_to_piece(index) for index in range(self.processor.get_piece_size())
        ]
        self.pieces[self.unknown_id] = UNKNOWN_TOKEN

    def encode(self, lines: list[str]) -> EncodedChunk:
        texts = [line for line in lines if line]
        encoded = iter(self.processor.encode(texts, out_type=int)) if texts else iter(())
        output, tokens, unknown = [], 0, 0
        for line in lines:
            if not line:
                output.append("\n")
                continue
            ids = next(encoded) or [self.unknown_id]
            tokens += len(ids)
            unknown += ids.count(self.unknown_id)
            output.append(" ".join(self.pieces[index] for index in ids) + "\n")
        return EncodedChunk("".join(output), tokens, unknown)


class Gpt2LineEncoder:
    """Encodes lines into GPT-2 BPE ids with fairseq's ``gpt2_bpe_utils``."""

    def __init__(self, encoder_json: str, vocab_bpe: str):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        self.bpe = get_encoder(encoder_json, vocab_bpe)

    def encode(self, lines: list[str]) -> EncodedChunk:
        output, tokens = [], 0
        for line in lines:
            ids = [str(index) for index in self.bpe.encode(line)] if line else []
            if line and not ids:
                ids = [UNKNOWN_TOKEN]
            tokens += len(ids)
            output.append(" ".join(ids) + "\n")
        return EncodedChunk("".join(output), tokens, 0)


class WhitespaceLineEncoder:
    """For already tokenized text: the tokens are the whitespace-separated words."""

    def encode(self, lines: list[str]) -> EncodedChunk:
        output, tokens = [], 0
        for line in lines:
            words = line.split()
            tokens += len(words)
            output.append(" ".join(words) + "\n")
        return EncodedChunk("".join(output), tokens, 0)


def build_encoder(
    spec: TokenizerSpec,
) -> SentencePieceLineEncoder | Gpt2LineEncoder | WhitespaceLineEncoder:
    if spec.kind == "spm":
        return SentencePieceLineEncoder(spec.spm_model)
    if spec.kind == "gpt2":
        return Gpt2LineEncoder(spec.gpt2_encoder_json, spec.gpt2_vocab_bpe)
    return WhitespaceLineEncoder()


_worker_encoder = None  # the encoder of this (worker) process, set by _load_worker_encoder


def _load_worker_encoder(spec: TokenizerSpec) -> None:
    global _worker_encoder
    _worker_encoder = build_encoder(spec)


def _encode_chunk(lines: list[str]) -> EncodedChunk:
    return _worker_encoder.encode(lines)


def ordered_parallel_map(
    function: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int,
    initializer: Callable[..., None],
    initargs: tuple,
) -> Iterator[Any]:
    """``map(function, items)`` on ``workers`` processes, results in input order.

    Unlike ``Pool.imap``, which reads its whole input ahead, at most ``2 * workers`` items are
    in flight at a time, so memory stays bounded however long ``items`` is. With one worker
    everything runs in this process.
    """
    if workers <= 1:
        initializer(*initargs)
        yield from map(function, items)
        return
    with multiprocessing.Pool(workers, initializer=initializer, initargs=initargs) as pool:
        pending: collections.deque = collections.deque()
        for item in items:
            pending.append(pool.apply_async(function, (item,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def iter_line_chunks(path: Path, lines_per_chunk: int = LINES_PER_CHUNK) -> Iterator[list[str]]:
    """The lines of a text file (without line ends), in lists of ``lines_per_chunk``."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        lines = (line.rstrip("\n") for line in handle)
        while chunk := list(itertools.islice(lines, lines_per_chunk)):
            yield chunk


def encode_file(
    source: Path, destination: Path, spec: TokenizerSpec, workers: int
) -> dict[str, int]:
    """Encode ``source`` line by line into ``destination``, streaming, on ``workers``
    processes. Returns the counts: ``lines`` (all, separators included), ``tokens`` and
    ``unknown_tokens``."""
    counts = {"lines": 0, "tokens": 0, "unknown_tokens": 0}
    chunks = iter_line_chunks(source)
    with open(destination, "w", encoding="utf-8", newline="\n") as output:
        for encoded in ordered_parallel_map(
            _encode_chunk, chunks, workers, _load_worker_encoder, (spec,)
        ):
            output.write(encoded.text)
            counts["lines"] += encoded.text.count("\n")
            counts["tokens"] += encoded.tokens
            counts["unknown_tokens"] += encoded.unknown_tokens
    return counts


def sample_training_lines(text: Path, size: int, seed: int = 1) -> list[str]:
    """``size`` of ``text``'s trainable lines (non-blank, at most :data:`SPM_MAX_SENTENCE_BYTES`
    bytes), a uniform sample drawn with ``random.Random(seed)`` and kept in file order (all of
    them when there are no more than ``size``). The same file gives the same sample on every
    machine, which sentencepiece's own ``input_sentence_size`` sampler does not (two trainings
    of one file with one seed gave two models)."""

    def trainable(line: bytes) -> Optional[bytes]:
        body = line.rstrip(b"\r\n")
        return body if body.strip() and len(body) <= SPM_MAX_SENTENCE_BYTES else None

    with open(text, "rb") as handle:
        eligible = sum(1 for line in handle if trainable(line) is not None)
    keep = None if eligible <= size else set(random.Random(seed).sample(range(eligible), size))
    with open(text, "rb") as handle:
        bodies = (body for body in map(trainable, handle) if body is not None)
        lines = [body.decode("utf-8", errors="replace") for index, body in enumerate(bodies)
                 if keep is None or index in keep]
    return lines


def train_sentencepiece(
    train_text: Path,
    model_file: Path,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    input_sentence_size: int,
    threads: int = SPM_TRAINING_THREADS,
) -> None:
    """Train a sentencepiece model on ``train_text`` (one sentence per line; blank lines are
    ignored) and write it to ``model_file``.

    At most ``input_sentence_size`` lines are trained on, a seeded sample
    (:func:`sample_training_lines`), which bounds the memory. The model depends on the text
    alone: the sample is seeded, the lines are fed as an iterator (a model trained from a file
    records the file's path), and ``threads`` is the same everywhere (sentencepiece's
    training differs with its thread count: the corpus builder keeps the default,
    :data:`SPM_TRAINING_THREADS`, never ``--workers``). ``vocab_size`` is a soft limit
    (``hard_vocab_limit=False``) so that a small corpus gives a smaller vocabulary instead of
    an error.
    """
    import sentencepiece

    sentencepiece.set_random_generator_seed(1)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sample_training_lines(train_text, input_sentence_size)),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            max_sentence_length=SPM_MAX_SENTENCE_BYTES,
            hard_vocab_limit=False,
            num_threads=threads,
            minloglevel=1,
        )
    except (RuntimeError, OSError) as error:
        message = " ".join(str(error).split())
        raise CorpusError(
            f"sentencepiece training failed: {message} (try another --vocab-size)"
        ) from error
    model_file.write_bytes(model.getvalue())


def count_tokens(tokenized: Path) -> collections.Counter:
    """Occurrences of each whitespace-separated token of a tokenized text file."""
    counts: collections.Counter = collections.Counter()
    for chunk in iter_line_chunks(tokenized):
        for line in chunk:
            counts.update(line.split())
    return counts


def write_sentencepiece_dictionary(model_file: Path, destination: Path,
                                   tokenized_train: Optional[Path] = None) -> int:
    """Write the fairseq dictionary of a sentencepiece model: one ``piece count`` line per
    piece in id order (so fairseq's ids follow sentencepiece's), without the control and
    unknown symbols (fairseq adds ``<s>``, ``<pad>``, ``</s>`` and ``<unk>`` itself). ``count``
    is the piece's number of occurrences in ``tokenized_train`` (the training split, as
    ``fairseq-preprocess`` writes it and tools that read ``dict.txt`` expect; 0 for a piece
    it never uses), or 1 for every piece without it. Returns the number of entries."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    counts = count_tokens(tokenized_train) if tokenized_train is not None else None
    entries = 0
    with open(destination, "w", encoding="utf-8", newline="\n") as output:
        for index in range(processor.get_piece_size()):
            if processor.is_control(index) or processor.is_unknown(index):
                continue
            piece = processor.id_to_piece(index)
            if (
                not piece
                or len(piece.split()) != 1
                or piece != piece.strip()
                or piece in FAIRSEQ_SPECIAL_SYMBOLS
            ):
                raise CorpusError(
                    f"sentencepiece piece {piece!r} (id {index}) cannot be a fairseq dictionary entry"
                )
            output.write(f"{piece} {1 if counts is None else counts.get(piece, 0)}\n")
            entries += 1
    return entries


def write_counted_dictionary(tokenized_train: Path, destination: Path) -> int:
    """Write a fairseq dictionary of every token of ``tokenized_train`` with its count, most
    frequent first (ties by token), like ``fairseq-preprocess`` builds one. Returns the number
    of entries."""
    counts = count_tokens(tokenized_train)
    with open(destination, "w", encoding="utf-8", newline="\n") as output:
        entries = 0
        for token, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            if token not in FAIRSEQ_SPECIAL_SYMBOLS:
                output.write(f"{token} {count}\n")
                entries += 1
    return entries


def count_dictionary_entries(dictionary: Path) -> int:
    """Check that ``dictionary`` reads as a fairseq dictionary and count its entries."""
    entries = 0
    with open(dictionary, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.rstrip()
            text = text.removesuffix(" " + FAIRSEQ_OVERWRITE_FLAG)
            symbol, _, count = text.rpartition(" ")
            if not symbol or not count.isdigit():
                raise CorpusError(
                    f"{dictionary}:{number}: not a fairseq dictionary line (expected 'symbol count')"
                )
            entries += 1
    return entries
