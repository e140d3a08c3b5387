"""Offline fine-tuning tasks from human-written labelled text on a Debian machine -> data-bins:
``python -m fairseq_ext.corpus.downstream`` (``scripts/prepare_downstream.sh``).

Classification tasks built from what Debian installs (or ``--fetch`` pins), encoded with the
pre-training sentencepiece model and dictionary into the layout of fairseq's
``sentence_prediction`` task that :mod:`fairseq_ext.corpus.glue` writes: ``OUT_DIR/<TASK>-bin``
with ``train``, ``valid`` (dev) and ``valid1`` (the selection split, held-out rows of the train
pool on which the learning rate is chosen), plus ``OUT_DIR/downstream.json``. The default suite
(:data:`DEFAULT_TASKS`) is DebSection, GlossTopic and FortuneTopic; GlossPair is built when
named. Every task's texts are cut, deduplicated, split by a seeded shuffle, cleared of overlap
with the pre-training corpus and sized with equal classes; two baselines (majority class, bag of
words) are scored on dev. :mod:`.downstream_sources` reads the sources. The tasks, their sources
and licenses, the overlap rules and the measured sizes and baselines: docs/downstream.md.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from fairseq_ext.training.output_files import OutputError, error_line

from .downstream_sources import (
    CATEGORIES,
    DEFAULT_FORTUNES_DIR,
    DEFAULT_TRANSLATIONS,
    DEFAULT_WORDNET_DIR,
    GLOSS_TOPICS,
    MAX_CHARS,
    SECTIONS,
    Example,
    Synset,
    debian_examples,
    fortune_examples,
    gloss_pairs,
    gloss_topic_examples,
    normalize,
    pinned_packages_text,
    read_packages,
    read_translations,
    read_wordnet,
    translation_files,
)
from .encoders import TokenizerSpec, count_dictionary_entries, encode_file
from .errors import CorpusError
from .glue import run_preprocess, split_prefixes, write_lines

PROG = "prepare_downstream.sh"
BUILDER_VERSION = 3
NGRAM = 13
#: Examples per task: 1,000 train (2 epochs of batch 16 = 126 updates fine-tune the 3ML study's
#: 6 x 192 encoder in about 40 s on one thread), 1,500 dev (an accuracy near 50% has an SE of
#: 1.3 points; 500 rows had 2.2) and 500 selection rows (``valid1``: the learning rate is
#: chosen on them), drawn from the train pool, disjoint from train.
DEFAULT_TRAIN_SIZE, DEFAULT_DEV_SIZE, DEFAULT_SELECTION_SIZE = 1000, 1500, 500
#: The fairseq split the selection rows are binarized as (a second validation subset, as
#: MNLI's mismatched dev is): runs validate on ``valid,valid1`` and log ``valid1_accuracy``.
SELECTION_SPLIT = "valid1"
STAMP = "downstream.stamp.json"
SUMMARY = "downstream.json"


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    name: str
    kind: str  # "single" or "pair"
    source: str
    license: str
    default: bool = True  # built when no task is named


TASKS = {task.name: task for task in (
    TaskInfo("DebSection", "single",
             "Debian bookworm main package lists: apt-cache dumpavail (Section, synopsis) and "
             "Translation-en (long descriptions), sections " + " ".join(SECTIONS),
             "each description is part of its package's metadata; Debian main packages are "
             "under DFSG-free licenses"),
    TaskInfo("GlossTopic", "single",
             "WordNet 3.0 data.noun (Debian package wordnet-base): definitions of the "
             "lexicographer files " + " ".join(f"noun.{t}" for t in GLOSS_TOPICS.values()),
             "WordNet 3.0 license (Princeton University; BSD-like, redistribution permitted "
             "with the copyright notice)"),
    TaskInfo("FortuneTopic", "single",
             "Debian fortunes (/usr/share/games/fortunes), categories " + " ".join(CATEGORIES),
             "fortune-mod's fortunes: BSD license (Debian packages fortunes, fortunes-min)"),
    TaskInfo("GlossPair", "pair",
             "WordNet 3.0 data.noun, data.verb, data.adj, data.adv (Debian package wordnet-base)",
             "WordNet 3.0 license (Princeton University; BSD-like, redistribution permitted "
             "with the copyright notice)", default=False),
)}
#: The suite built when no task is named: GlossPair is left out (at 1,000 training pairs no
#: fine-tuned model of the studies left chance on it, 48.5-52.4% against 50%).
DEFAULT_TASKS = tuple(name for name, task in TASKS.items() if task.default)


# --- overlap with the pre-training corpus ----------------------------------------------------

def word_windows(words: list[str], n: int = NGRAM) -> Iterator[int]:
    for start in range(len(words) - n + 1):
        yield hash(" ".join(words[start:start + n]))


def corpus_fingerprint(paths: Iterable[Path]) -> str:
    """The sha256 of the corpus files' lines as :class:`CorpusIndex` reads them (UTF-8, bad
    bytes replaced): what a finished task's stamp is checked against, in a second or two, where
    the index of a 130 MB corpus takes most of a minute (it is built only for a task to build)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                digest.update(line.encode("utf-8"))
    return digest.hexdigest()


class CorpusIndex:
    """The normalized lines of a corpus and the hashes of its ``NGRAM``-word windows (each line's
    and those crossing the ends of lines within a document), to find texts a corpus holds."""

    def __init__(self, paths: Iterable[Path] = (), n: int = NGRAM):
        self.n = n
        self.lines: set[str] = set()
        self.windows: set[int] = set()
        for path in paths:
            tail: list[str] = []
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    tail = self.add(line, tail)

    def add(self, line: str, tail: list[str] = ()) -> list[str]:
        """Index ``line`` (following the words ``tail``); returns the tail for the next line."""
        normal = normalize(line)
        if not normal:
            return []
        self.lines.add(normal)
        words = list(tail) + normal.split()
        self.windows.update(word_windows(words, self.n))
        return words[-(self.n - 1):]

    def overlap(self, text: str) -> str | None:
        """"line" if the normalized ``text`` is a normalized corpus line, "window" if one of its
        ``n``-word windows is in the corpus, else None."""
        normal = normalize(text)
        if normal in self.lines:
            return "line"
        if any(window in self.windows for window in word_windows(normal.split(), self.n)):
            return "window"
        return None


# --- dedup, split and size ---------------------------------------------------------------

def deduplicate(examples: list[Example]) -> tuple[list[Example], dict]:
    """The first example of each normalized text; a text found under two labels is dropped."""
    labels: dict[str, set[str]] = collections.defaultdict(set)
    for example in examples:
        labels[example.key].add(example.label)
    kept, seen, duplicates, conflicting = [], set(), 0, 0
    for example in examples:
        key = example.key
        if not key or len(labels[key]) > 1:
            conflicting += 1
        elif key in seen:
            duplicates += 1
        else:
            seen.add(key)
            kept.append(example)
    return kept, {"duplicates": duplicates, "label_conflicts": conflicting}


def dev_share(train_size: int, dev_size: int) -> float:
    return dev_size / (train_size + dev_size)


def remove_overlap(dev_pool: list, train_pool: list, corpus: CorpusIndex | None,
                   key=lambda item: item.key) -> tuple[list, list, dict]:
    """The pools without the items the corpus holds (dev, and train: the train pool gives the
    train and selection rows), and without train items equal to a dev one or sharing a 13-word
    window with one; the counts removed for each reason."""
    removed = {"dev_in_pretraining_line": 0, "dev_in_pretraining_window": 0,
               "train_in_pretraining_line": 0, "train_in_pretraining_window": 0,
               "train_equal_dev": 0, "train_window_in_dev": 0}
    kept_dev = []
    for item in dev_pool:
        found = corpus.overlap(key(item)) if corpus is not None else None
        if found:
            removed[f"dev_in_pretraining_{found}"] += 1
        else:
            kept_dev.append(item)
    dev_index = CorpusIndex()
    for item in kept_dev:
        dev_index.add(key(item))
    kept_train = []
    for item in train_pool:
        in_corpus = corpus.overlap(key(item)) if corpus is not None else None
        if in_corpus:
            removed[f"train_in_pretraining_{in_corpus}"] += 1
            continue
        found = dev_index.overlap(key(item))
        if found:
            removed["train_equal_dev" if found == "line" else "train_window_in_dev"] += 1
        else:
            kept_train.append(item)
    return kept_dev, kept_train, removed


def split_single(examples: list[Example], train_size: int, dev_size: int, seed: int,
                 corpus: CorpusIndex | None) -> tuple[list[Example], list[Example], dict]:
    """(train, dev, report) of deduplicated single-text examples: the groups (by default each
    text is one) of each label (a group's first example's) in a seeded order, the first
    ``dev_share`` of them to the dev pool, the rest to train; overlap removed; then equal
    classes of at most ``size // classes`` examples each, in a seeded order."""
    labels = sorted({e.label for e in examples})
    share = dev_share(train_size, dev_size)
    groups: dict[str, list[Example]] = {}
    for example in examples:
        groups.setdefault(example.group or example.key, []).append(example)
    by_label: dict[str, list[str]] = collections.defaultdict(list)
    for group, members in groups.items():
        by_label[members[0].label].append(group)
    dev_pool, train_pool = [], []
    for label in labels:
        names = sorted(by_label[label])
        random.Random(f"{seed}:{label}").shuffle(names)
        n_dev = round(len(names) * share)
        dev_pool += [e for name in names[:n_dev] for e in groups[name]]
        train_pool += [e for name in names[n_dev:] for e in groups[name]]
    dev_pool, train_pool, removed = remove_overlap(dev_pool, train_pool, corpus)
    per_dev = min([dev_size // len(labels)] + [sum(e.label == lb for e in dev_pool) for lb in labels])
    per_train = min([train_size // len(labels)]
                    + [sum(e.label == lb for e in train_pool) for lb in labels])
    rng = random.Random(seed)
    dev = [e for label in labels for e in [x for x in dev_pool if x.label == label][:per_dev]]
    train = [e for label in labels for e in [x for x in train_pool if x.label == label][:per_train]]
    rng.shuffle(dev)
    rng.shuffle(train)
    return train, dev, {"removed": removed, "pools": {"dev": len(dev_pool), "train": len(train_pool)}}


def split_pairs(synsets: list[Synset], train_size: int, dev_size: int, seed: int,
                corpus: CorpusIndex | None) -> tuple[list[Example], list[Example], dict]:
    """(train, dev, report) of GlossPair: synsets deduplicated on their definition, shuffled,
    the first ``dev_share`` to the dev pool; dev synsets whose definition the corpus holds
    removed; then :func:`gloss_pairs` in each pool."""
    first: dict[str, Synset] = {}
    duplicates = 0
    for synset in synsets:
        key = normalize(synset.definition)
        if key in first:
            duplicates += 1
        else:
            first[key] = synset
    pool = sorted(first.values(), key=lambda s: (s.pos, s.offset))
    random.Random(seed).shuffle(pool)
    n_dev = round(len(pool) * dev_share(train_size, dev_size))
    dev_pool, train_pool, removed = remove_overlap(pool[:n_dev], pool[n_dev:], corpus,
                                                   key=lambda s: normalize(s.definition))
    dev = gloss_pairs(dev_pool, dev_size, random.Random(f"{seed}:dev"))
    train = gloss_pairs(train_pool, train_size, random.Random(f"{seed}:train"))
    return train, dev, {"removed": removed, "dedup": {"duplicates": duplicates, "label_conflicts": 0},
                        "pools": {"dev": len(dev_pool), "train": len(train_pool)}}


def overlap_figures(train: list[Example], dev: list[Example], corpus: CorpusIndex | None) -> dict:
    """The final check: dev examples whose normalized text (a pair: the definition) is in train,
    and dev and train (with selection) examples the pre-training corpus holds (all 0 after the
    removal)."""
    train_keys = {e.key for e in train}

    def in_corpus(examples: list[Example]) -> int:
        return (sum(bool(corpus.overlap(e.inputs[-1])) for e in examples)
                if corpus is not None else 0)

    return {"dev_in_train": sum(e.key in train_keys for e in dev),
            "dev_in_pretraining": in_corpus(dev), "train_in_pretraining": in_corpus(train)}


# --- baselines ------------------------------------------------------------------------------

def standard_error(accuracy: float, n: int) -> float:
    """sqrt(p (1 - p) / n): the binomial standard error of an accuracy over ``n`` rows."""
    return math.sqrt(accuracy * (1.0 - accuracy) / n) if n else float("nan")


def majority_baseline(train_labels: list[str], dev_labels: list[str]) -> dict:
    """Accuracy on dev of always answering train's most frequent label (ties: the first by
    name)."""
    counts = collections.Counter(train_labels)
    label = min(counts, key=lambda lb: (-counts[lb], lb))
    accuracy = sum(lb == label for lb in dev_labels) / len(dev_labels)
    return {"label": label, "accuracy": accuracy, "se": standard_error(accuracy, len(dev_labels)),
            "n": len(dev_labels)}


def bow_logreg_baseline(train: list[Example], dev: list[Example]) -> dict:
    """scikit-learn LogisticRegression (C=1, max_iter=1000, default solver) on bag-of-words
    counts (lowercase unigrams; a pair: one vectorizer per input, features side by side),
    fitted on train, accuracy on dev."""
    import sklearn
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    n_inputs = len(train[0].inputs)
    vectorizers = [CountVectorizer(lowercase=True) for _ in range(n_inputs)]
    x_train = hstack([v.fit_transform([e.inputs[i] for e in train])
                      for i, v in enumerate(vectorizers)]).tocsr()
    x_dev = hstack([v.transform([e.inputs[i] for e in dev]) for i, v in enumerate(vectorizers)]).tocsr()
    model = LogisticRegression(C=1.0, max_iter=1000)
    model.fit(x_train, [e.label for e in train])
    predicted = model.predict(x_dev)
    accuracy = sum(p == e.label for p, e in zip(predicted, dev)) / len(dev)
    return {"accuracy": accuracy, "se": standard_error(accuracy, len(dev)), "n": len(dev),
            "library": f"scikit-learn {sklearn.__version__}",
            "model": "LogisticRegression(C=1.0, max_iter=1000) on CountVectorizer(lowercase=True) "
                     "unigram counts" + (", one vectorizer per input, hstack" if n_inputs > 1 else "")}


# --- sources -> examples ---------------------------------------------------------------------

def source_examples(task: str, args: argparse.Namespace) -> tuple[list, dict]:
    """The task's candidates (examples, or GlossPair's synsets) and notes on reading them."""
    if task == "DebSection":
        if getattr(args, "fetch", False) and args.packages_file is None \
                and args.translations_file is None:
            from .apt_lists import ensure_lists

            lists = ensure_lists(Path(args.cache_dir), lambda line: print(line, flush=True))
            return debian_examples(pinned_packages_text(lists),
                                   read_translations(lists.translation_files()))
        text = read_packages(args.packages_file)
        return debian_examples(text, read_translations(translation_files(args.translations_file)))
    if task == "FortuneTopic":
        return fortune_examples(fetched_if_missing(args, "fortunes_dir")), {}
    synsets = read_wordnet(fetched_if_missing(args, "wordnet_dir"))
    if task == "GlossTopic":
        return gloss_topic_examples(synsets), {}
    return synsets, {}


#: The Debian package and the folder in it of each source ``--fetch`` can download.
FETCHABLE = {"fortunes_dir": ("fortunes", "usr/share/games/fortunes"),
             "wordnet_dir": ("wordnet-base", "usr/share/wordnet")}


def fetched_if_missing(args: argparse.Namespace, source: str) -> Path:
    """The source folder ``args.<source>``; with ``--fetch``, when it is empty or missing, the
    folder of its Debian package downloaded and unpacked into ``--cache-dir`` (``apt-get
    download`` and ``dpkg -x``: no root install; done once, then reused)."""
    folder = getattr(args, source)
    if not getattr(args, "fetch", False) or (folder.is_dir() and any(folder.iterdir())):
        return folder
    from .python_docs import ensure_package

    package, subdir = FETCHABLE[source]
    unpacked, _ = ensure_package(package, subdir, Path(args.cache_dir),
                                 lambda line: print(line, flush=True))
    return unpacked


def fingerprint(candidates: list) -> str:
    digest = hashlib.sha256()
    for item in candidates:
        digest.update(json.dumps(dataclasses.astuple(item)).encode("utf-8"))
    return digest.hexdigest()


def build_examples(task: str, candidates: list, train_size: int, dev_size: int, seed: int,
                   corpus: CorpusIndex | None) -> tuple[list[Example], list[Example], dict]:
    """(train, dev, report) of a task's candidates."""
    if task == "GlossPair":
        return split_pairs(candidates, train_size, dev_size, seed, corpus)
    kept, dedup = deduplicate(candidates)
    train, dev, report = split_single(kept, train_size, dev_size, seed, corpus)
    report["dedup"] = dedup
    return train, dev, report


# --- data-bins --------------------------------------------------------------------------------

def write_prep(prep: Path, splits: dict[str, list[Example]], spec: TokenizerSpec,
               workers: int) -> dict[str, list[Path]]:
    """``prep/{split}.raw.inputN`` (text), ``{split}.inputN`` (pieces) and ``{split}.label`` for
    ``splits`` {"train": ..., "valid": ...}; returns the files to binarize per input."""
    shutil.rmtree(prep, ignore_errors=True)
    prep.mkdir(parents=True)
    n_inputs = len(splits["train"][0].inputs)
    names = [f"input{i}" for i in range(n_inputs)]
    encoded: dict[str, list[Path]] = {name: [] for name in [*names, "label"]}
    for split, examples in splits.items():
        for i, name in enumerate(names):
            raw, pieces = prep / f"{split}.raw.{name}", prep / f"{split}.{name}"
            write_lines(raw, [e.inputs[i] for e in examples])
            encode_file(raw, pieces, spec, workers)
            encoded[name].append(pieces)
        write_lines(prep / f"{split}.label", [e.label for e in examples])
        encoded["label"].append(prep / f"{split}.label")
    return encoded


def binarize(encoded: dict[str, list[Path]], destdir: Path, dictionary: Path, workers: int,
             label_dict: Path | None, stamp: dict) -> None:
    """fairseq-preprocess each input with ``dictionary`` and the labels with ``label_dict``
    (None: their own, from train) into a temporary folder, renamed onto ``destdir``."""
    building = destdir.parent / f".{destdir.name}.building"
    shutil.rmtree(building, ignore_errors=True)
    try:
        for name, files in encoded.items():
            srcdict = label_dict if name == "label" else dictionary
            run_preprocess(split_prefixes(files), building / name, workers, srcdict=srcdict)
        (building / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
        if destdir.exists():
            shutil.rmtree(destdir)
        destdir.parent.mkdir(parents=True, exist_ok=True)
        os.replace(building, destdir)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def label_counts(train: list[Example], dev: list[Example]) -> dict:
    train_counts = collections.Counter(e.label for e in train)
    dev_counts = collections.Counter(e.label for e in dev)
    return {label: {"train": train_counts[label], "dev": dev_counts[label]}
            for label in sorted(set(train_counts) | set(dev_counts))}


def bins(out_dir: Path, task: str) -> Path:
    return out_dir / f"{task}-bin"


def read_stamp(destdir: Path) -> dict | None:
    try:
        return json.loads((destdir / STAMP).read_text())
    except (OSError, ValueError):
        return None


def check_existing(out_dir: Path, task: str, settings: dict, force: bool) -> dict | None:
    """The summary of a finished build of ``task`` with these ``settings`` (to skip it), None if
    there is none (or ``force``); an :class:`OutputError` for a build with other settings."""
    paths = [bins(out_dir, task)]
    if force or not any(p.exists() for p in paths):
        return None
    stamps = [read_stamp(p) for p in paths]
    if all(s is not None and s.get("settings") == settings for s in stamps):
        return stamps[0]["summary"]
    old = next((s.get("settings") for s in stamps if s is not None), None)
    if old is None:
        why = "was not built by this command (or is unfinished)"
    else:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        why = "was built with other settings (" + ", ".join(changed) + ")"
        if old.get("builder_version") != settings["builder_version"]:
            why = (f"was built by an older scripts/prepare_downstream.sh (builder version "
                   f"{old.get('builder_version')}; this one is {settings['builder_version']}: "
                   "1,500 dev rows and a selection split)")
    raise OutputError(f"{paths[0]} {why}; pass --force to rebuild it, or give another OUT_DIR")


def split_selection(pool: list[Example], selection_size: int) -> tuple[list[Example], list[Example]]:
    """(train, selection) of the train pool's examples (in their seeded order): per label, its
    share of ``selection_size`` to selection (equal classes in, equal classes out), the rest
    to train; both keep the pool's order."""
    labels = sorted({e.label for e in pool})
    per_label = selection_size // max(1, len(labels))
    chosen: set[int] = set()
    for label in labels:
        chosen.update([i for i, e in enumerate(pool) if e.label == label][:per_label])
    return ([e for i, e in enumerate(pool) if i not in chosen],
            [e for i, e in enumerate(pool) if i in chosen])


def prepare_task(task: str, candidates: list, notes: dict, settings: dict, args: argparse.Namespace,
                 corpus: CorpusIndex, spec: TokenizerSpec) -> dict:
    """Build ``OUT_DIR/<task>-bin`` (train, dev as ``valid``, selection as ``valid1``); returns
    the task's summary."""
    info = TASKS[task]
    out_dir, workers = args.out_dir, max(1, args.workers)
    pool, dev, report = build_examples(task, candidates, args.train_size + args.selection_size,
                                       args.dev_size, args.seed, corpus)
    train, selection = split_selection(pool, args.selection_size)
    if not train or not dev or not selection:
        raise CorpusError(f"{task}: too few examples ({len(train)} train, {len(dev)} dev, "
                          f"{len(selection)} selection) from {len(candidates)} candidates")
    overlap = overlap_figures(train + selection, dev, corpus)
    overlap["removed"] = report["removed"]
    labels = label_counts(train, dev)
    sizes = {"train": len(train), "dev": len(dev), "selection": len(selection),
             "candidates": len(candidates),
             "requested": {"train": args.train_size, "dev": args.dev_size,
                           "selection": args.selection_size},
             "pools_after_removal": report["pools"]}
    short = [f"{split} {len(items)} < {want}" for split, items, want in
             (("train", train, args.train_size), ("dev", dev, args.dev_size),
              ("selection", selection, args.selection_size))
             if len(items) < want - len(labels) + 1]
    if short:
        sizes["note"] = ("fewer than asked (" + ", ".join(short) + "): the source has no more "
                         "after deduplication, overlap removal and equal classes")
    main_bin = bins(out_dir, task)
    summary = {
        "name": task, "kind": info.kind,
        "settings": {k: settings[k] for k in ("seed", "train_size", "dev_size", "selection_size")},
        "source": info.source, "license": info.license,
        "num_classes": len(labels), "labels": labels, "sizes": sizes, "metric": "accuracy",
        "deduplication": report["dedup"], "source_notes": notes, "overlap": overlap,
        "baselines": {"majority": majority_baseline([e.label for e in train], [e.label for e in dev]),
                      "bow_logreg": bow_logreg_baseline(train, dev)},
        "data_bin": str(main_bin.relative_to(out_dir)), "selection_split": SELECTION_SPLIT,
        "prep": str(Path("prep") / task),
    }
    stamp = {"settings": settings, "summary": summary}
    encoded = write_prep(out_dir / "prep" / task,
                         {"train": train, "valid": dev, SELECTION_SPLIT: selection}, spec, workers)
    binarize(encoded, main_bin, args.dictionary, workers, None, stamp)
    return summary


def summary_line(summary: dict, skipped: bool = False) -> str:
    sizes, base, overlap = summary["sizes"], summary["baselines"], summary["overlap"]
    labels = " ".join(f"{lb}={c['train']}/{c['dev']}" for lb, c in summary["labels"].items())
    removed = ", ".join(f"{k} {v}" for k, v in overlap["removed"].items())
    dedup = ", ".join(f"{k} {v}" for k, v in summary["deduplication"].items())
    line = (f"{summary['name']}: train {sizes['train']}, dev {sizes['dev']}, selection "
            f"{sizes['selection']}; labels train/dev {labels}; "
            f"majority {base['majority']['accuracy']:.3f}±{base['majority']['se']:.3f}, "
            f"bow_logreg {base['bow_logreg']['accuracy']:.3f}±{base['bow_logreg']['se']:.3f}; "
            f"overlap dev-in-train {overlap['dev_in_train']}, dev-in-pretraining "
            f"{overlap['dev_in_pretraining']}, train-in-pretraining "
            f"{overlap['train_in_pretraining']} (removed: {removed}; dedup: {dedup})")
    if "note" in sizes:
        line += f"; {sizes['note']}"
    return ("skip (already built with these settings): " if skipped else "") + line


# --- CLI ----------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build offline fine-tuning tasks (DebSection, GlossTopic, FortuneTopic; "
                    "GlossPair when named) from "
                    "Debian's package descriptions, WordNet and fortunes, into fairseq's "
                    "sentence_prediction layout with the pre-training sentencepiece model and "
                    "dictionary.")
    parser.add_argument("data_bin", type=Path, metavar="DATA_BIN",
                        help="the pre-training data-bin (spm.model, dict.txt, prep/{train,valid,"
                             "test}.txt), e.g. data-bin/python-docs-spm8000")
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    parser.add_argument("tasks", nargs="*", metavar="TASK",
                        help=f"any of {' '.join(TASKS)} (default: {' '.join(DEFAULT_TASKS)})")
    parser.add_argument("--train-size", type=int, default=DEFAULT_TRAIN_SIZE,
                        help="train examples per task (default: %(default)s, sized so that a "
                             "study fine-tunes every checkpoint on every task within its time)")
    parser.add_argument("--dev-size", type=int, default=DEFAULT_DEV_SIZE,
                        help="dev examples per task (default: %(default)s)")
    parser.add_argument("--selection-size", type=int, default=DEFAULT_SELECTION_SIZE,
                        help="held-out examples of the train pool the learning rate is chosen "
                             "on, binarized as valid1 (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="encoding and fairseq-preprocess processes (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild tasks already built")
    parser.add_argument("--fortunes-dir", type=Path, default=DEFAULT_FORTUNES_DIR,
                        help="fortune category files (default: %(default)s)")
    parser.add_argument("--wordnet-dir", type=Path, default=DEFAULT_WORDNET_DIR,
                        help="WordNet's data.noun, ... (default: %(default)s)")
    parser.add_argument("--fetch", action="store_true",
                        help="download a missing fortunes or WordNet package into --cache-dir (no "
                             "root), and read DebSection from Debian bookworm main's lists there")
    parser.add_argument("--cache-dir", type=Path, default=Path("data/cache"),
                        help="where --fetch keeps the packages (default: %(default)s, as "
                             "scripts/prepare_corpus.sh)")
    parser.add_argument("--packages-file", type=Path, default=None,
                        help="a Packages-format file read instead of `apt-cache dumpavail`")
    parser.add_argument("--translations-file", type=Path, default=None,
                        help=f"a Translation-en file of long descriptions (default: {DEFAULT_TRANSLATIONS})")
    return parser


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(args: argparse.Namespace) -> dict:
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        raise CorpusError(f"unknown task {unknown[0]!r}; one of {' '.join(TASKS)}")
    if min(args.train_size, args.dev_size, args.selection_size) < 2:
        raise CorpusError("--train-size, --dev-size and --selection-size must be at least 2")
    tasks = list(dict.fromkeys(args.tasks)) or list(DEFAULT_TASKS)
    args.spm_model, args.dictionary = args.data_bin / "spm.model", args.data_bin / "dict.txt"
    corpus_files = [args.data_bin / "prep" / f"{split}.txt" for split in ("train", "valid", "test")]
    for path in [args.spm_model, args.dictionary, *corpus_files]:
        if not path.is_file():
            raise CorpusError(f"DATA_BIN {args.data_bin}: no {path.relative_to(args.data_bin)} "
                              "(a sentencepiece data-bin of scripts/prepare_corpus.sh)")
    count_dictionary_entries(args.dictionary)
    corpus_sha256 = corpus_fingerprint(corpus_files)
    base_settings = {"builder_version": BUILDER_VERSION, "seed": args.seed,
                     "train_size": args.train_size, "dev_size": args.dev_size,
                     "selection_size": args.selection_size, "max_chars": MAX_CHARS,
                     "ngram": NGRAM,
                     "spm_model_sha256": sha256_file(args.spm_model),
                     "dictionary_sha256": sha256_file(args.dictionary),
                     "pretraining_corpus_sha256": corpus_sha256}
    # read every source and check every existing bin before the first is built
    plans = []
    for task in tasks:
        candidates, notes = source_examples(task, args)
        settings = {**base_settings, "task": task, "source_sha256": fingerprint(candidates)}
        plans.append((task, candidates, notes, settings,
                      check_existing(args.out_dir, task, settings, args.force)))
    spec = TokenizerSpec("spm", spm_model=str(args.spm_model))
    summary_path = args.out_dir / SUMMARY
    try:
        previous_document = json.loads(summary_path.read_text())
        # tasks of an older builder are not this suite's (their bins are refused above)
        previous = (previous_document["tasks"]
                    if previous_document.get("builder_version") == BUILDER_VERSION else {})
    except (OSError, ValueError, KeyError):
        previous = {}
    summaries = {}
    corpus = None  # the window index, built once, only for a task that is built
    for task, candidates, notes, settings, done in plans:
        if done is not None:
            summaries[task] = done
            print(summary_line(done, skipped=True), flush=True)
            continue
        if corpus is None:
            corpus = CorpusIndex(corpus_files)
        summaries[task] = prepare_task(task, candidates, notes, settings, args, corpus, spec)
        print(summary_line(summaries[task]), flush=True)
    document = {
        "builder_version": BUILDER_VERSION,
        "settings": {"seed": args.seed, "train_size": args.train_size, "dev_size": args.dev_size,
                     "selection_size": args.selection_size, "max_chars": MAX_CHARS,
                     "ngram": NGRAM},
        "data_bin": str(args.data_bin),
        "tokenizer": {"kind": "spm", "model": str(args.spm_model),
                      "sha256": base_settings["spm_model_sha256"]},
        "dictionary": {"path": str(args.dictionary), "sha256": base_settings["dictionary_sha256"]},
        "pretraining_corpus": {"files": [str(p) for p in corpus_files],
                               "sha256": corpus_sha256},
        "tasks": {**previous, **summaries},
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    temporary = summary_path.with_name(f".{SUMMARY}.tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(temporary, summary_path)
    return document


def main(argv: list[str] | None = None) -> int:
    """Returns 0 on success, 2 on a user error (one line on stderr)."""
    args = build_parser().parse_intermixed_args(argv)
    try:
        run(args)
    except (CorpusError, OutputError) as error:
        print(error_line(PROG, error), file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
