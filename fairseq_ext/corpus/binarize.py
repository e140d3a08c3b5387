"""Binarize tokenized text into fairseq's mmap data-bin format, on several processes.

What ``fairseq-preprocess --only-source --srcdict DICT --dataset-impl mmap`` writes for a
split, byte for byte: each line of the tokenized file becomes one item, its tokens mapped
through fairseq's :class:`~fairseq.data.Dictionary` (a token missing from it becomes
``<unk>``) and ``</s>`` appended; the items go through fairseq's own mmap builder
(:func:`fairseq.data.indexed_dataset.make_builder`, the smallest integer type that holds the
vocabulary). fairseq's binarizer maps one token at a time through ``Dictionary.encode_line``
and splits the file by byte offsets; here the workers map chunks of lines and the builder
writes the items in file order: 20 times faster on the English corpus (``docs/corpus.md``,
"Time to build"). Lines end at ``\n`` only, as the encode step writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .encoders import iter_line_chunks, ordered_parallel_map

LINES_PER_CHUNK = 20_000


@dataclass
class BinarizedChunk:
    """The token ids of a chunk of lines (``</s>`` ending each), concatenated, and the line
    lengths; ``replaced``: tokens that became ``<unk>`` because the dictionary lacks them."""

    ids: np.ndarray
    sizes: np.ndarray
    replaced: int


@dataclass
class BinarizedSplit:
    """fairseq-preprocess's report of a split: items (lines), tokens with ``</s>`` and the
    tokens replaced by ``<unk>``."""

    items: int
    tokens_with_eos: int
    replaced: int

    @property
    def replaced_percent(self) -> float:
        return 100.0 * self.replaced / self.tokens_with_eos if self.tokens_with_eos else 0.0


_worker_dictionary = None  # the dictionary of this (worker) process, set by _load_dictionary


def _load_dictionary(dictionary_file: str) -> None:
    global _worker_dictionary
    from fairseq.data import Dictionary

    _worker_dictionary = Dictionary.load(dictionary_file)


def _binarize_chunk(lines: list[str]) -> BinarizedChunk:
    dictionary = _worker_dictionary
    indices, unknown, eos = dictionary.indices, dictionary.unk(), dictionary.eos()
    unknown_word = dictionary.unk_word
    ids, sizes, replaced = [], [], 0
    for line in lines:
        words = line.split()  # Dictionary.encode_line's tokenize_line: whitespace runs
        for word in words:
            index = indices.get(word, unknown)
            if index == unknown and word != unknown_word:
                replaced += 1
            ids.append(index)
        ids.append(eos)
        sizes.append(len(words) + 1)
    return BinarizedChunk(np.array(ids, dtype=np.int32), np.array(sizes, dtype=np.int64), replaced)


def binarize_file(tokenized: Path, dictionary_file: Path, output_prefix: Path,
                  workers: int) -> BinarizedSplit:
    """Write ``output_prefix.bin`` / ``.idx`` from ``tokenized`` (one item per line) on
    ``workers`` processes; return the counts fairseq-preprocess reports."""
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    vocabulary_size = len(Dictionary.load(str(dictionary_file)))
    builder = indexed_dataset.make_builder(f"{output_prefix}.bin", impl="mmap",
                                           vocab_size=vocabulary_size)
    counts = BinarizedSplit(items=0, tokens_with_eos=0, replaced=0)
    chunks = iter_line_chunks(tokenized, LINES_PER_CHUNK)
    for chunk in ordered_parallel_map(_binarize_chunk, chunks, workers, _load_dictionary,
                                      (str(dictionary_file),)):
        start = 0
        for size in chunk.sizes.tolist():
            builder.add_item(torch.from_numpy(chunk.ids[start:start + size]))
            start += size
        counts.items += len(chunk.sizes)
        counts.tokens_with_eos += len(chunk.ids)
        counts.replaced += chunk.replaced
    builder.finalize(f"{output_prefix}.idx")
    return counts
