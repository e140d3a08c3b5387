"""The raw sources of the offline fine-tuning tasks (:mod:`.downstream`), read into labelled
examples: Debian package descriptions (``DebSection``), WordNet 3.0 glosses (``GlossTopic``,
``GlossPair``) and fortunes (``FortuneTopic``). What each task takes from its source, and why:
docs/downstream.md, "The tasks"; deduplication, splits, overlap removal, baselines and data-bins
are :mod:`.downstream`'s.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import lzma
import random
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import CorpusError

#: Every text is cut at this many characters (:func:`cut`).
MAX_CHARS = 400
DEFAULT_FORTUNES_DIR = Path("/usr/share/games/fortunes")
DEFAULT_WORDNET_DIR = Path("/usr/share/wordnet")
DEFAULT_TRANSLATIONS = "/var/lib/apt/lists/*_i18n_Translation-en*"
APT_HELPER = "/usr/lib/apt/apt-helper"
#: Sections whose descriptions are prose about what the program does (not library boilerplate).
SECTIONS = ("admin", "games", "graphics", "net", "science", "sound")
#: Fortune categories with 600+ entries of prose (no ASCII art, no translations to do).
CATEGORIES = ("computers", "people", "politics", "science", "songs-poems", "work")
WORDNET_FILES = {"noun": "data.noun", "verb": "data.verb", "adj": "data.adj", "adv": "data.adv"}
#: GlossTopic's classes: WordNet lexicographer files (a data line's ``lex_filenum``, the
#: numbering of WordNet's lexnames(5WN)), six noun topics of 2,500+ synsets each whose
#: definitions describe a kind of thing (not the abstract files: act, attribute, state...).
GLOSS_TOPICS = {5: "animal", 6: "artifact", 13: "food", 15: "location", 18: "person", 20: "plant"}


@dataclasses.dataclass(frozen=True)
class Example:
    """One labelled example: its inputs (one, or a pair) and the text checked for overlap."""

    inputs: tuple[str, ...]
    label: str
    group: str = ""  # examples of one group go to one split (DebSection: the source package)

    @property
    def key(self) -> str:
        """The normalized text deduplicated and checked against the pre-training corpus: the
        text, or a pair's second input (the definition)."""
        return normalize(self.inputs[-1])


@dataclasses.dataclass(frozen=True)
class Synset:
    pos: str
    offset: str
    lemmas: tuple[str, ...]
    definition: str
    lex_filenum: int = -1  # the lexicographer file (lexnames(5WN)): GlossTopic's label


# --- text ---------------------------------------------------------------------------------

#: What to do when the machine's package lists hold only synopses (the downstream builder and
#: the English corpus's held-out index both need the long descriptions).
NO_LONG_DESCRIPTIONS = (
    "debian packages: the package lists carry no long descriptions (Debian ships them in "
    "Translation-en lists); fetch them: apt-get update -o Acquire::Languages=en")


def normalize(text: str) -> str:
    """Lowercase, punctuation and whitespace collapsed to single spaces."""
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


def cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` with collapsed whitespace, cut to at most ``limit`` characters (at the last
    space before the limit, if there is one in its second half)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return head[:space] if space > limit // 2 else head


# --- Debian package descriptions -------------------------------------------------------------

def control_paragraphs(text: str) -> Iterator[dict[str, str]]:
    """The paragraphs of a Debian control-format text (Packages, Translation-en), as
    {field: value}; continuation lines are kept with their line breaks and leading space."""
    fields: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, name = {}, None
        elif line[0] in " \t":
            if name is not None:
                fields[name] += "\n" + line
        else:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    if fields:
        yield fields


def description_text(description: str) -> tuple[str, str]:
    """(synopsis, first paragraph of the long description) of a Description field's value,
    without Debian's leading spaces; " ." lines separate paragraphs."""
    synopsis, _, rest = description.partition("\n")
    paragraph = []
    for line in rest.split("\n"):
        line = line.strip()
        if line == ".":
            if paragraph:
                break
            continue
        if line:
            paragraph.append(line)
    return synopsis.strip(), " ".join(paragraph)


def section_label(section: str) -> str:
    """An archive section without its area prefix (contrib/, non-free/, non-free-firmware/)."""
    return section.rsplit("/", 1)[-1].strip()


def read_packages(packages_file: Path | None) -> str:
    """The package records: ``packages_file``, or ``apt-cache dumpavail``'s output."""
    if packages_file is not None:
        if not packages_file.is_file():
            raise CorpusError(f"debian packages: --packages-file {packages_file}: no such file")
        return packages_file.read_text(encoding="utf-8", errors="replace")
    if shutil.which("apt-cache") is None:
        raise CorpusError("debian packages: apt-cache not found (a Debian system's apt), or give "
                          "--packages-file")
    proc = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, check=False)
    text = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0 or "\nPackage:" not in "\n" + text:
        raise CorpusError("debian packages: apt-cache dumpavail lists no packages; "
                          "run apt-get update (package lists are empty)")
    return text


def pinned_packages_text(lists) -> str:
    """The package records of the pinned lists' Packages files (:class:`.apt_lists.AptLists`),
    as ``apt-cache dumpavail`` would print them from those lists alone."""
    return "\n\n".join(read_compressed(path) for path in lists.packages_files())


def read_compressed(path: Path) -> str:
    """A plain, .gz, .xz or (through apt-helper) .lz4 apt list file."""
    if path.suffix == ".gz":
        data = gzip.decompress(path.read_bytes())
    elif path.suffix == ".xz":
        data = lzma.decompress(path.read_bytes())
    elif path.suffix in (".lz4", ".zst", ".bz2"):
        proc = subprocess.run([APT_HELPER, "cat-file", str(path)], capture_output=True, check=False)
        if proc.returncode != 0:
            raise CorpusError(f"debian packages: cannot read {path} ({APT_HELPER} cat-file failed)")
        data = proc.stdout
    else:
        data = path.read_bytes()
    return data.decode("utf-8", errors="replace")


def translation_files(translations_file: Path | None) -> list[Path]:
    if translations_file is not None:
        if not translations_file.is_file():
            raise CorpusError(f"debian packages: --translations-file {translations_file}: "
                              "no such file")
        return [translations_file]
    return [Path(p) for p in sorted(glob.glob(DEFAULT_TRANSLATIONS))]


def read_translations(paths: Iterable[Path]) -> dict[str, str]:
    """{Description-md5: the Description-en value} of Translation-en files."""
    long = {}
    for path in paths:
        for fields in control_paragraphs(read_compressed(path)):
            if "Description-md5" in fields and "Description-en" in fields:
                long[fields["Description-md5"]] = fields["Description-en"]
    return long


def debian_examples(packages_text: str, translations: dict[str, str],
                    sections: Iterable[str] = SECTIONS) -> tuple[list[Example], dict]:
    """One example per package record of ``sections``: synopsis + first paragraph of the long
    description (from the record, else from ``translations``); records without a long
    description are skipped (counted). The binary packages of a source package are one group
    (one split: they often share their long description)."""
    wanted = set(sections)
    examples, without_long = [], 0
    for fields in control_paragraphs(packages_text):
        label = section_label(fields.get("Section", ""))
        if label not in wanted or "Description" not in fields:
            continue
        synopsis, first = description_text(fields["Description"])
        if not first and fields.get("Description-md5") in translations:
            synopsis, first = description_text(translations[fields["Description-md5"]])
        if not first:
            without_long += 1
            continue
        text = synopsis if synopsis.endswith((".", "!", "?", ":")) else synopsis + "."
        source = (fields.get("Source") or fields.get("Package", "")).split()
        examples.append(Example((cut(f"{text} {first}"),), label,
                                group=f"source:{source[0]}" if source else ""))
    if not examples and without_long:
        raise CorpusError(NO_LONG_DESCRIPTIONS)
    return examples, {"records_without_long_description": without_long}


# --- fortunes -------------------------------------------------------------------------------

ATTRIBUTION = re.compile(r"^\s*--")


def fortune_entries(text: str) -> list[str]:
    """The entries of a fortune file (separated by lines of ``%``)."""
    entries, current = [], []
    for line in text.splitlines():
        if line.strip() == "%":
            entries.append("\n".join(current))
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current))
    return [entry for entry in entries if entry.strip()]


def clean_fortune(entry: str) -> str:
    """A fortune's text: the attribution ("-- Author", and the indented lines that continue
    it) dropped, whitespace collapsed."""
    kept, attribution = [], False
    for line in entry.splitlines():
        if ATTRIBUTION.match(line):
            attribution = True
        elif attribution and line[:1] in (" ", "\t"):
            continue
        else:
            attribution = False
            if line.strip():
                kept.append(line.strip())
    return " ".join(kept)


def fortune_examples(fortunes_dir: Path, categories: Iterable[str] = CATEGORIES) -> list[Example]:
    install = "install them: apt-get install fortunes fortunes-min (or pass --fetch)"
    if not fortunes_dir.is_dir() or not any(
            p.is_file() and not p.suffix for p in fortunes_dir.iterdir()):
        raise CorpusError(f"fortunes: {fortunes_dir} has no category files; {install}")
    examples = []
    for category in categories:
        path = fortunes_dir / category
        if not path.is_file():
            raise CorpusError(f"fortunes: no category file {path}; {install}")
        for entry in fortune_entries(path.read_text(encoding="utf-8", errors="replace")):
            text = cut(clean_fortune(entry))
            if text:
                examples.append(Example((text,), category))
    return examples


# --- WordNet --------------------------------------------------------------------------------

def parse_synset(line: str, pos: str) -> Synset | None:
    """A data.<pos> line (``offset lex_filenum ss_type w_cnt word lex_id ... | gloss``) ->
    its lemmas (underscores as spaces, adjective markers like ``(a)`` dropped) and its
    definition (the gloss before its first ``;``); None for the license header and glossless
    lines."""
    if not line or line.startswith(" "):
        return None
    head, bar, gloss = line.partition(" | ")
    fields = head.split()
    if not bar or len(fields) < 4:
        return None
    count = int(fields[3], 16)
    words = fields[4:4 + 2 * count:2]
    lemmas = []
    for word in words:
        lemma = re.sub(r"\([a-z]+\)$", "", word).replace("_", " ").strip()
        if lemma and lemma not in lemmas:
            lemmas.append(lemma)
    definition = gloss.split(";", 1)[0].strip()
    if not lemmas or not definition:
        return None
    return Synset(pos, fields[0], tuple(lemmas), cut(definition), int(fields[1]))


def read_wordnet(wordnet_dir: Path) -> list[Synset]:
    """The synsets of WordNet's data files in ``wordnet_dir`` (data.noun must be there; the
    others are read where they are: wordnet-base installs all four)."""
    if not (wordnet_dir / WORDNET_FILES["noun"]).is_file():
        raise CorpusError(f"wordnet: no {wordnet_dir / WORDNET_FILES['noun']}; install it: "
                          "apt-get install wordnet-base (or pass --fetch)")
    synsets = []
    for pos, name in WORDNET_FILES.items():
        path = wordnet_dir / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            synsets += filter(None, (parse_synset(line.rstrip("\n"), pos) for line in handle))
    return synsets


def gloss_topic_examples(synsets: Iterable[Synset]) -> list[Example]:
    """GlossTopic's candidates: each noun synset of a :data:`GLOSS_TOPICS` file as its
    definition (no lemma) labelled with that file's topic; in the files' order."""
    return [Example((synset.definition,), GLOSS_TOPICS[synset.lex_filenum])
            for synset in synsets
            if synset.pos == "noun" and synset.lex_filenum in GLOSS_TOPICS]


def lemma_in(lemma: str, definition: str) -> bool:
    """Whether ``lemma`` appears as words inside ``definition`` (a copy cue)."""
    return f" {normalize(lemma)} " in f" {normalize(definition)} "


def gloss_pairs(synsets: list[Synset], size: int, rng: random.Random) -> list[Example]:
    """Up to ``size`` examples (half ``match``, half ``other``) from ``synsets`` (in order; all
    of one split): a ``match`` takes a synset's lemma and its definition; an ``other`` a
    synset's lemma and the definition of the next unused synset of the same part of speech
    that does not have that lemma. Lemmas found inside the definition shown are not used.
    Each synset's definition is shown at most once."""
    half = size // 2
    matches: list[Example] = []
    others: list[Example] = []
    waiting: dict[str, Synset] = {}  # per part of speech: a synset whose lemma awaits a definition
    for synset in synsets:
        if len(matches) >= half and len(others) >= half:
            break
        if len(matches) < half and len(matches) <= len(others):
            lemmas = [lemma for lemma in synset.lemmas if not lemma_in(lemma, synset.definition)]
            if lemmas:
                matches.append(Example((rng.choice(lemmas), synset.definition), "match"))
            continue
        holder = waiting.pop(synset.pos, None)
        if holder is None:
            waiting[synset.pos] = synset
            continue
        lemmas = [lemma for lemma in holder.lemmas
                  if lemma not in synset.lemmas and not lemma_in(lemma, synset.definition)]
        if lemmas and len(others) < half:
            others.append(Example((rng.choice(lemmas), synset.definition), "other"))
        else:
            waiting[synset.pos] = holder
    n = min(len(matches), len(others), half)
    examples = matches[:n] + others[:n]
    rng.shuffle(examples)
    return examples

