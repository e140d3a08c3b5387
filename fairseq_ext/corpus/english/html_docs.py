"""A reader for trees of HTML documentation (javadoc, DocBook, Sphinx, rustdoc, mdBook,
texi2html, Publican, Apache's, Exim's and Postfix's own pages, vim help rendered as HTML).

:func:`html_paragraphs` turns one page into plain paragraphs (block elements end one, inline
elements keep their text), leaving out code, navigation, tables of contents and the generators'
repeated summaries; :func:`read_html_tree` yields one :class:`RawDocument` per HTML file of a
package's subtree. Pages are tokenized with one regular expression over HTML's tag syntax rather
than :mod:`html.parser`, whose tokenizing alone takes 2.5 times as long on javadoc (9 s against
this reader's 3.6 s for 82 MB). The corpus it feeds: docs/corpus.md.
"""
from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterator
from html import unescape
from pathlib import Path

from ..errors import CorpusError
from .raw import RawDocument

# Elements whose start or end ends the current paragraph (HTML's block-level and table elements).
BLOCK_TAGS = frozenset("""
address article aside blockquote body caption center dd details dialog dir div dl dt fieldset
figcaption figure footer form frameset h1 h2 h3 h4 h5 h6 header hgroup hr html legend li main
menu nav ol p pre section summary table tbody td tfoot th thead tr ul title
""".split())
# Elements left out with everything inside them.
SKIPPED_TAGS = frozenset("""
head script style noscript template pre nav header footer aside button select textarea svg math
iframe object form map
""".split())
# Class names that mark navigation, tables of contents, permalinks and code blocks in the
# generators this reader meets (DocBook, Sphinx, javadoc, rustdoc, mdBook, texi2html, Apache).
SKIPPED_CLASSES = frozenset("""
navheader navfooter navigation nav-bar navbar toc list-of-tables list-of-figures
list-of-examples docnav sphinxsidebar sphinxsidebarwrapper related footer headerlink permalink
breadcrumb breadcrumbs toplang bottomlang highlight skip-nav sub-nav top-nav bottom-nav
nav-list sub-nav-list member-signature type-signature notable-traits-tooltiptext menu-bar
nav_table toc_header toc_uplink footer_version footer_report
""".split())
SKIPPED_IDS = frozenset("""
page-header banner path quickview footer searchbox sidebar navbar nav breadcrumbs hd ft global-nav
trait-implementations-list blanket-implementations-list synthetic-implementations-list
tocframe languages
""".split())
# (element, class) pairs left out: javadoc's member summaries and inheritance trees.
SKIPPED_ELEMENT_CLASSES = frozenset({("section", "summary"), ("div", "inheritance"), ("div", "header")})
VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
# Start tags that close an open ``<p>`` (HTML's implied end of a paragraph).
_CLOSES_P = BLOCK_TAGS - {"td", "th", "tr", "tbody", "thead", "tfoot", "caption", "dd", "dt", "li"}

_SENTENCE_END = re.compile(r"[a-z)][.!?][\"')]*(?:\s|$)")
_INVISIBLE = str.maketrans("", "", "\u00ad\u200b\u200c\u200d\ufeff")
_HTML_LANG = re.compile(r"""<html\b[^>]*?\blang\s*=\s*["']?([A-Za-z-]+)""", re.IGNORECASE)
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def _holds_sentence(text: str) -> bool:
    """Whether a table cell's text reads as a sentence: four words or more and a full stop,
    question or exclamation mark after a word."""
    return len(text.split()) >= 4 and _SENTENCE_END.search(text) is not None


def _collapse(text: str) -> str:
    return " ".join(text.translate(_INVISIBLE).split())


# A start or end tag (name, attributes: quoted values may hold ">"), a comment, a doctype or a
# processing instruction.
_TOKEN = re.compile(r"""<(?:(/?)([a-zA-Z][a-zA-Z0-9:-]*)((?:[^>"']|"[^"]*"|'[^']*')*)>"""
                    r"""|!--.*?-->|![^>]*>|\?[^>]*>)""", re.DOTALL)
_ATTRIBUTE = re.compile(r"""\b(class|id)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
# Inline elements that only pass their text on (``br`` adds a space, vim help's ``b`` matters).
_PLAIN_INLINE_TAGS = frozenset("""
a abbr acronym b big cite code dfn em font i img kbd label mark q samp small span strong sub sup
time tt u var wbr
""".split())

_SAME_TAG: dict[str, re.Pattern[str]] = {}
# Elements whose content is raw text (no tags inside): the tokenizer jumps to their end tag.
_RAW_TEXT_END = {tag: re.compile(rf"</{tag}\s*>", re.IGNORECASE) for tag in ("script", "style")}


class _ParagraphCollector:
    """Collects the paragraphs of one page (:func:`html_paragraphs`) from the start tags, end
    tags and text that :meth:`feed` finds; a left-out element is jumped over by searching for
    its own tag."""

    def __init__(self, vim_help: bool) -> None:
        self.paragraphs: list[str] = []
        self._vim_help = vim_help
        self._parts: list[str] = []
        self._in_cell = False
        self._skipped_tag: str | None = None  # the element being left out, with its nesting
        self._skipped_depth = 0
        self._pre_parts: list[str] | None = None  # vim help: the text of the open <pre>
        self._pre_bold_depth = 0

    def feed(self, html: str) -> None:
        """Tokenize ``html`` with :data:`_TOKEN` and collect its paragraphs."""
        position = 0
        length = len(html)
        search = _TOKEN.search
        while position < length:
            match = search(html, position)
            end = length if match is None else match.start()
            if end > position:
                if self._skipped_tag is None and self._pre_parts is None:
                    data = html[position:end]
                    self._parts.append(unescape(data) if "&" in data else data)
                else:
                    self._text(html[position:end])
            if match is None:
                break
            position = match.end()
            tag = match.group(2)
            if tag is None:
                continue
            tag = tag.lower()
            closing = match.group(1)
            attributes = match.group(3)
            if tag in _PLAIN_INLINE_TAGS and self._pre_parts is None and (
                    closing or ("class" not in attributes and "id" not in attributes)):
                continue  # the common case, and nothing to do
            if closing:
                self._end(tag)
                continue
            was_skipping = self._skipped_tag is not None
            self._start(tag, attributes)
            if attributes.endswith("/") and tag not in VOID_TAGS:
                self._end(tag)
            elif tag in _RAW_TEXT_END:
                raw_end = _RAW_TEXT_END[tag].search(html, position)
                position = length if raw_end is None else raw_end.end()
                self._end(tag)
            elif not was_skipping and self._skipped_tag is not None and tag != "p":
                position = self._skip_element(html, position)

    def _skip_element(self, html: str, position: int) -> int:
        """Jump past the end of the element being left out, counting only its own tag (an
        open ``<p>`` can end without its end tag, so it is tokenized instead)."""
        tag = self._skipped_tag or ""
        pattern = _SAME_TAG.get(tag)
        if pattern is None:
            pattern = _SAME_TAG[tag] = re.compile(rf"<(/?){tag}(?=[\s>/])[^>]*>", re.IGNORECASE)
        for match in pattern.finditer(html, position):
            if match.group(1):
                self._skipped_depth -= 1
                if self._skipped_depth == 0:
                    self._skipped_tag = None
                    return match.end()
            elif not match.group(0).endswith("/>"):
                self._skipped_depth += 1
        return len(html)

    def _text(self, data: str) -> None:
        if self._skipped_tag is not None:
            return
        if "&" in data:
            data = unescape(data)
        if self._pre_parts is not None:
            if self._pre_bold_depth:
                # vim help: examples and tag targets are bold; keep their line breaks only
                self._pre_parts.append("\n" * data.count("\n"))
            else:
                self._pre_parts.append(data)
            return
        self._parts.append(data)

    def _flush(self) -> None:
        if not self._parts:
            return
        text = "".join(self._parts)
        self._parts = []
        if text.isspace():
            return
        text = _collapse(text)
        if text and (not self._in_cell or _holds_sentence(text)):
            self.paragraphs.append(text)

    def _is_skipped(self, tag: str, attributes: str) -> bool:
        if tag in SKIPPED_TAGS:
            return not (self._vim_help and tag == "pre")
        if "class" not in attributes and "id" not in attributes:
            return False
        for match in _ATTRIBUTE.finditer(attributes):
            value = match.group(2) or match.group(3) or match.group(4) or ""
            if match.group(1).lower() == "id":
                if value in SKIPPED_IDS:
                    return True
                continue
            for token in value.split():
                if (token in SKIPPED_CLASSES or (tag, token) in SKIPPED_ELEMENT_CLASSES
                        or token.startswith("highlight-")):
                    return True
        return False

    def _start(self, tag: str, attributes: str) -> None:
        if self._skipped_tag is not None:
            if tag == self._skipped_tag:
                self._skipped_depth += 1
                return
            if not (self._skipped_tag == "p" and tag in _CLOSES_P):
                return
            self._skipped_tag = None  # a block start closes an open <p>
        if self._pre_parts is not None:
            if tag == "b":
                self._pre_bold_depth += 1
            return
        if tag in BLOCK_TAGS:
            self._flush()
            if tag in ("td", "th"):
                self._in_cell = True
            elif tag in ("table", "tr"):
                self._in_cell = False
        if self._is_skipped(tag, attributes):
            if tag not in VOID_TAGS:
                self._skipped_tag = tag
                self._skipped_depth = 1
            return
        if tag == "pre" and self._vim_help:
            self._pre_parts = []
        elif tag == "br":
            self._parts.append(" ")

    def _end(self, tag: str) -> None:
        if self._skipped_tag is not None:
            if tag == self._skipped_tag:
                self._skipped_depth -= 1
                if self._skipped_depth == 0:
                    self._skipped_tag = None
            return
        if self._pre_parts is not None:
            if tag == "b":
                self._pre_bold_depth = max(0, self._pre_bold_depth - 1)
            elif tag == "pre":
                self._end_pre()
            return
        if tag in BLOCK_TAGS:
            self._flush()
            if tag in ("td", "th", "tr", "table"):
                self._in_cell = False

    def _end_pre(self) -> None:
        self.paragraphs.extend(_vim_help_paragraphs("".join(self._pre_parts or ())))
        self._pre_parts = None

    def close(self) -> None:
        if self._pre_parts is not None:
            self._end_pre()
        self._flush()


_VIM_RULE = re.compile(r"^\s*(?:[=\-*]{6,}|~+)\s*$")
_VIM_EMPTY_TAG = re.compile(r"\*\*")
_VIM_LINK = re.compile(r"\|([^|\s]+)\|")
_VIM_HEADLINE = re.compile(r"^[A-Z][A-Z0-9 .,:'()-]*~?\s*$")
_VIM_COLUMNS = re.compile(r"\S\t+\S")
_VIM_ITEM_COLUMN = re.compile(r"^\S[^\t]*\t+(?=\S)")


def _vim_help_paragraphs(text: str) -> list[str]:
    """The paragraphs of vim help text (``:help help-writing``): blocks of lines between blank
    lines, rule lines (``====``), headlines and dropped examples; ``|link|`` bars and emptied
    ``*tag*`` stars removed. A block whose first line is ``item<TAB>text`` keeps the text only;
    a block whose every line has a tab between two columns (a table, a list of contents) gives
    one paragraph per line."""
    paragraphs: list[str] = []
    block: list[str] = []

    def end_block() -> None:
        if len(block) > 1 and all(_VIM_COLUMNS.search(line) for line in block):
            rows = block
        else:
            rows = [" ".join([_VIM_ITEM_COLUMN.sub("", block[0]), *block[1:]])] if block else []
        for row in rows:
            joined = _collapse(_VIM_LINK.sub(r"\1", row))
            if joined:
                paragraphs.append(joined)
        block.clear()

    for line in text.split("\n"):
        line = _VIM_EMPTY_TAG.sub("", line)
        if not line.strip() or _VIM_RULE.match(line) or _VIM_HEADLINE.match(line.strip()):
            end_block()
        else:
            block.append(line)
    end_block()
    return paragraphs


def html_paragraphs(html: str, *, vim_help: bool = False) -> list[str]:
    """The plain paragraphs of one HTML page, in reading order.

    Block elements (``p``, ``li``, ``dt``, ``dd``, ``blockquote``, ``h1``-``h6``, ``div``, table
    cells ...) end a paragraph (an unclosed ``<p>`` ends at the next block, as in HTML), inline
    elements (``a``, ``em``, ``code``, ``span`` ...) keep their text, entities are decoded
    (:func:`html.unescape`) and whitespace is collapsed. Left out: ``head``, scripts and styles,
    preformatted blocks (``pre``, Sphinx's ``div.highlight``), ``nav``/``header``/``footer``/
    ``aside``, forms and buttons, the navigation bars, tables of contents, breadcrumbs and
    permalinks the generators mark with a class or id (:data:`SKIPPED_CLASSES`,
    :data:`SKIPPED_IDS`), javadoc's member summaries (each row repeats the first sentence of a
    member's detail) and rustdoc's trait implementation lists (copies of the trait's docs). A
    table cell's text is kept only when it holds a sentence (:func:`_holds_sentence`).

    ``vim_help``: the page is vim help, plain text inside one ``<pre>``, kept and split into
    paragraphs at blank lines, examples and ``*tag*`` targets dropped
    (:func:`_vim_help_paragraphs`)."""
    collector = _ParagraphCollector(vim_help)
    collector.feed(html)
    collector.close()
    return collector.paragraphs


def _decode(data: bytes) -> str:
    """Bytes of a page as text: UTF-8 when they are valid UTF-8 (vim's pages declare
    ISO-8859-1 but hold UTF-8), else the charset the page's ``<meta>`` declares."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    declared = _CHARSET.search(data, 0, 4096)
    encoding = declared.group(1).decode("ascii").lower() if declared else "cp1252"
    try:
        return data.decode(encoding, errors="replace")
    except LookupError:
        return data.decode("cp1252", errors="replace")


def page_language(html: str) -> str:
    """The ``lang`` (or ``xml:lang``) of the page's ``<html>`` element, lowercased; ``""``
    when it has none."""
    match = _HTML_LANG.search(html, 0, 4096)
    return match.group(1).lower() if match else ""


def _read_page(path: Path) -> str:
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:
        raise CorpusError(f"cannot read {path}: {error}") from error
    return _decode(data)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over relative paths: ``*`` and ``?`` stay within a path segment, ``**/`` spans
    any number of directories, ``[...]`` is a character class (``[!...]`` its complement);
    a pattern without ``/`` matches the file name at any depth."""
    if "/" not in pattern:
        pattern = "**/" + pattern
    out = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:[^/]*/)*")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        else:
            character = pattern[index]
            if character == "*":
                out.append("[^/]*")
            elif character == "?":
                out.append("[^/]")
            elif character == "[":
                end = pattern.find("]", index + 1)
                if end < 0:
                    out.append(re.escape(character))
                else:
                    members = pattern[index + 1:end].replace("\\", "\\\\")
                    out.append("[" + ("^" + members[1:] if members.startswith("!") else members) + "]")
                    index = end
            else:
                out.append(re.escape(character))
            index += 1
    return re.compile("".join(out) + r"\Z")


def _tree_files(top: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> list[str]:
    """Relative paths (``/``-separated, sorted) of the regular files under ``top`` that match
    an ``include`` glob and no ``exclude`` glob; symbolic links are not followed (Debian's
    doc packages link shared copies, whose targets are read where they lie)."""
    included = [_glob_regex(pattern) for pattern in include]
    excluded = [_glob_regex(pattern) for pattern in exclude]
    found = []
    for directory, subdirectories, names in os.walk(top):
        subdirectories.sort()
        relative_directory = os.path.relpath(directory, top)
        prefix = "" if relative_directory == "." else relative_directory.replace(os.sep, "/") + "/"
        for name in names:
            if os.path.islink(os.path.join(directory, name)):
                continue
            relative = prefix + name
            if any(regex.match(relative) for regex in included) and not any(
                    regex.match(relative) for regex in excluded):
                found.append(relative)
    return sorted(found)


_PAGE_SUFFIX = re.compile(r"\.x?html?(?:\.gz)?\Z")


def read_html_tree(package_root: Path, source: str, subdir: str,
                   include: tuple[str, ...] = ("*.html",), exclude: tuple[str, ...] = (),
                   *, vim_help: bool = False) -> Iterator[RawDocument]:
    """One document per HTML file under ``package_root/subdir`` matching ``include`` and not
    ``exclude`` (globs relative to ``subdir``, see :func:`_glob_regex`), in sorted relative-path
    order; ``.gz`` files are decompressed. The identity is ``"<source>/<relative path without
    .html>"`` (``.gz`` too). Pages whose ``<html lang>`` names another language than English,
    and pages without any paragraph, are not yielded. ``vim_help``: the pages are vim help
    (see :func:`html_paragraphs`)."""
    top = Path(package_root) / subdir
    if not top.is_dir():
        raise CorpusError(f"no directory {top}: not the expected unpacked package")
    for relative in _tree_files(top, include, exclude):
        html = _read_page(top / relative)
        language = page_language(html)
        if language and not language.startswith("en"):
            continue  # a translation filed among the English pages
        paragraphs = html_paragraphs(html, vim_help=vim_help)
        if paragraphs:
            yield RawDocument(f"{source}/{_PAGE_SUFFIX.sub('', relative)}", tuple(paragraphs))
