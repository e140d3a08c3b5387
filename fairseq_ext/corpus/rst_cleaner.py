"""Turn reStructuredText (Sphinx flavour) into plain paragraphs of English prose.

:func:`clean_rst` takes one document and returns its paragraphs, one string each, with all
markup removed and whitespace collapsed: prose, headings and the prose inside directives are
kept; code, tables, comments, targets and document metadata are dropped; inline markup becomes
its text. The parser is line based and tolerant: it never raises on malformed input. The corpus
it builds: docs/corpus.md.
"""

from __future__ import annotations

import re

#: Bump whenever the cleaner's output changes: data-bins record it, so one cleaned by an older
#: version is never silently reused.
CLEANER_VERSION = 1

__all__ = ["clean_rst", "inline_to_text"]

# Directives whose whole block (arguments, options and body) is not prose.
DROPPED_DIRECTIVES = frozenset("""
    code-block sourcecode code doctest testcode testoutput testsetup testcleanup
    literalinclude include toctree index productionlist highlight highlightlang
    tabularcolumns list-table csv-table table image figure raw contents sectionauthor
    moduleauthor codeauthor currentmodule parsed-literal audit-event audit-event-table
    limited-api-list miscnews math graphviz default-role role meta
    """.split())
# Directives whose argument text is prose (kept in the paragraph that the argument starts).
PROSE_ARGUMENT_DIRECTIVES = frozenset("""
    note warning important caution attention danger error hint tip seealso impl-detail
    versionadded versionchanged deprecated deprecated-removed topic sidebar rubric admonition
    """.split())
# Directives whose argument starts with version numbers that are not prose.
VERSION_DIRECTIVES = frozenset("versionadded versionchanged deprecated deprecated-removed".split())

_ADORNMENT_LINE = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}$")  # three or more of one punctuation mark
_SIMPLE_TABLE_BORDER = re.compile(r"^=+( +=+)*$")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w:.+-]+)::(?:\s+(.*))?$")
_SUBSTITUTION_DEFINITION = re.compile(r"^\.\.\s+\|([^|]+)\|\s+([\w:.-]+)::\s*(.*)$")
_FOOTNOTE = re.compile(r"^\.\.\s+\[([^\]]+)\](?:\s+(.*))?$")
_FIELD = re.compile(r"^:([^:`\s][^:`]*):(?:\s+(.*))?$")
_LIST_ITEM = re.compile(r"^([-*+\u2022]|\d+\.|#\.|\(\d+\)|\d+\)|\([a-zA-Z]\))(\s+)(\S.*)$")
_OPTION_LINE = re.compile(r"^:[^:\s][^:]*:(\s|$)")
_VERSION_PREFIX = re.compile(r"^\d+(\.\d+)*(\s+\d+(\.\d+)*)?\s*")

_INLINE = re.compile(
    r"""
    (?P<literal>``(?=\S)(?P<literal_text>.+?)(?<=\S)``(?!`))
  | (?P<interpreted>
        (?::(?P<role>[\w.+-]+(?::[\w.+-]+)?):)?
        `(?=[^\s`])(?P<interpreted_text>[^`]+?)(?<=\S)`
        (?::(?P<suffix_role>[\w.+-]+):)?
        (?:__?)?
    )
  | (?P<substitution>(?<![\w|])\|(?=\S)(?P<substitution_name>[^|\n]+?)(?<=\S)\|(?:__?)?)
  | (?P<footnote_reference>\s*\[(?:\#[\w-]*|\*|[\w.-]+)\]_(?!\w))
  | (?P<strong>(?<![\w*\\])\*\*(?=\S)(?P<strong_text>.+?)(?<=\S)\*\*(?![\w*]))
  | (?P<emphasis>(?<![\w*\\])\*(?=[^\s*])(?P<emphasis_text>.+?)(?<=[^\s\\])\*(?![\w*]))
  | (?P<reference>(?<!\w)(?P<reference_name>[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?)__?(?!\w))
  | (?P<escape>\\(?P<escaped>.))
    """,
    re.VERBOSE | re.DOTALL,
)
_EXPLICIT_TITLE = re.compile(r"^(?P<title>.*?\S)\s*<(?P<target>[^<>]+)>$", re.DOTALL)


def clean_rst(text: str) -> list[str]:
    """Return the prose paragraphs of one reStructuredText document, one string each.

    * kept: paragraphs, list items, definition-list terms and definitions, footnote text, and
      the prose inside directives such as ``note``, ``warning``, ``seealso``, ``versionadded`` /
      ``versionchanged`` / ``deprecated`` (their version numbers dropped), ``only`` and the
      description directives (``function``, ``method``, ``class``, ``c:function``...: the
      signature dropped, the description body kept);
    * headings are kept, each as its own paragraph; their underline/overline lines are dropped;
    * dropped: comments, directive lines and their ``:option:`` lines, code and literal blocks
      (``::`` blocks, ``code-block``, ``doctest``, ``testcode``, ``>>>`` sessions...), grid and
      simple tables (and ``list-table``), ``toctree`` / ``index`` / ``include`` /
      ``productionlist`` contents, substitution definitions, hyperlink targets, transitions, and
      top-level field lists (``:Author:``, ``:tocdepth:``); nested field lists such as
      ``:param x: text`` become ``param x: text``;
    * inline markup becomes its text: ``:func:`len``` -> ``len``, ``:class:`~foo.Bar``` ->
      ``Bar``, ``:ref:`text <label>``` -> ``text``, ````literal```` -> ``literal``, ``*emph*``
      and ``**strong**`` -> their text, ```text <url>`_`` -> ``text``, ``:pep:`8``` -> ``PEP 8``,
      ``:issue:`123``` -> ``bpo-123``; ``|name|`` substitutions defined with ``replace::`` or
      ``unicode::`` in the same document are expanded (others become their name); footnote
      references such as ``[#]_`` are removed."""
    lines = [line.rstrip() for line in text.expandtabs(8).splitlines()]
    substitutions = _collect_substitutions(lines)
    paragraphs = []
    for raw in _RstBlockParser(lines).raw_paragraphs():
        paragraph = inline_to_text(raw, substitutions)
        if paragraph:
            paragraphs.append(paragraph)
    return paragraphs


def inline_to_text(text: str, substitutions: dict[str, str] | None = None) -> str:
    """Replace the inline markup of ``text`` by its plain text and collapse whitespace."""
    substitutions = substitutions or {}

    def replace(match: re.Match) -> str:
        kind = match.lastgroup
        if kind == "literal":
            return match["literal_text"]
        if kind == "interpreted":
            return _interpreted_text(
                match["role"] or match["suffix_role"], match["interpreted_text"]
            )
        if kind == "substitution":
            name = match["substitution_name"]
            return substitutions.get(name, name)
        if kind == "footnote_reference":
            return ""
        if kind == "strong":
            return _unescape(match["strong_text"])
        if kind == "emphasis":
            return _unescape(match["emphasis_text"])
        if kind == "reference":
            return match["reference_name"]
        return _unescape(match[0])

    return " ".join(_INLINE.sub(replace, text).split())


def _unescape(text: str) -> str:
    """Resolve backslash escapes: ``\\*`` -> ``*``; an escaped space disappears."""
    return re.sub(r"\\(.)", lambda match: "" if match[1].isspace() else match[1], text)


def _interpreted_text(role: str | None, content: str) -> str:
    """The displayed text of an interpreted-text span (a role, or a hyperlink reference)."""
    role = (role or "").rsplit(":", 1)[-1].lower()
    explicit = _EXPLICIT_TITLE.match(content)
    if explicit:
        return explicit["title"]
    if role in ("pep", "rfc"):
        return f"{role.upper()} {content.split('#', 1)[0]}"
    if role in ("issue", "gh"):
        return f"{'bpo' if role == 'issue' else 'gh'}-{content}"
    if role in ("samp", "file"):
        content = re.sub(r"(?<!\\)[{}]", "", content).replace("\\{", "{").replace("\\}", "}")
    content = content.lstrip("!")
    if content.startswith("~"):
        content = content[1:]
        head, parenthesis, tail = content.partition("(")
        content = head.rsplit(".", 1)[-1] + parenthesis + tail
    return content


def _collect_substitutions(lines: list[str]) -> dict[str, str]:
    """Map the names of ``replace::`` / ``unicode::`` substitution definitions to their text."""
    substitutions = {}
    for line in lines:
        match = _SUBSTITUTION_DEFINITION.match(line.strip())
        if not match:
            continue
        name, directive, argument = match.groups()
        if directive == "replace":
            substitutions[name] = inline_to_text(argument)
        elif directive == "unicode":
            substitutions[name] = "".join(_unicode_token(token) for token in argument.split())
    return substitutions


def _unicode_token(token: str) -> str:
    """One token of a ``unicode::`` substitution: a code point (0xA0, U+2014, 8212) or text."""
    for prefix in ("0x", "U+", "u+", "\\x", "\\u", "&#x"):
        if token.startswith(prefix):
            try:
                return chr(int(token[len(prefix) :].rstrip(";"), 16))
            except ValueError:
                return token
    return chr(int(token)) if token.isdigit() else token


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_adornment(line: str) -> bool:
    return bool(_ADORNMENT_LINE.match(line))


class _RstBlockParser:
    """Splits a document into raw paragraph strings (inline markup still present).

    One pass over the lines. A paragraph is a run of non-blank lines at one indentation; a
    new list item, a change of indentation or a blank line ends it. Blocks that are not
    prose are skipped as "everything indented deeper than their first line".
    """

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.paragraphs: list[str] = []
        self.current: list[str] = []
        self.current_indent = 0
        # Indentation of the last paragraph if it ended with "::": a following, more
        # indented block is a literal block.
        self.literal_after_indent: int | None = None

    def raw_paragraphs(self) -> list[str]:
        index = 0
        while index < len(self.lines):
            index = self._step(index)
        self._flush()
        return self.paragraphs

    def _step(self, index: int) -> int:
        """Consume the line(s) starting at ``index``; return the index of the next one."""
        line = self.lines[index]
        stripped = line.strip()
        if not stripped:
            self._flush()
            return index + 1
        indent = _indentation(line)
        if self.current:
            if indent == self.current_indent and not self._starts_block(stripped):
                if self._is_heading_underline(stripped, indent):
                    self._flush()
                    return index + 1
                self.current.append(stripped)
                return index + 1
            self._flush()

        if self.literal_after_indent is not None:
            literal_indent, self.literal_after_indent = self.literal_after_indent, None
            if indent > literal_indent:
                return self._skip_indented(index + 1, literal_indent)

        if stripped == ".." or stripped.startswith(".. "):
            return self._explicit_markup(index, indent, stripped)
        if stripped.startswith("__ "):
            return self._skip_indented(index + 1, indent)
        if stripped.startswith(("+-", "+=")) and stripped.endswith("+"):
            return self._skip_until_blank(index)
        if stripped.startswith(">>>"):
            return self._skip_until_blank(index)
        if _is_adornment(stripped) or _SIMPLE_TABLE_BORDER.match(stripped):
            return self._adornment_or_table(index, indent, stripped)

        field = _FIELD.match(stripped)
        if field:
            if indent == 0:
                return self._skip_indented(index + 1, indent)
            return self._start_with_header([f"{field[1]}:", field[2] or ""], index + 1, indent)
        item = _LIST_ITEM.match(stripped)
        if item:
            text_indent = indent + len(item[1]) + len(item[2])
            if item[3] == ".." or item[3].startswith(".. "):
                return self._explicit_markup(index, text_indent, item[3])
            self._start([item[3]], text_indent)
            return index + 1
        if stripped.startswith("| "):
            stripped = stripped[2:]
        self._start([stripped], indent)
        return index + 1

    @staticmethod
    def _starts_block(stripped: str) -> bool:
        """Whether a line at the paragraph's indentation starts a new block instead (only
        explicit markup does: like docutils, a list marker inside a paragraph is text)."""
        return stripped == ".." or stripped.startswith(".. ")

    def _is_heading_underline(self, stripped: str, indent: int) -> bool:
        if indent != 0 or len(self.current) != 1 or not _is_adornment(stripped):
            return False
        return len(stripped) >= min(len(self.current[0]), 4)

    def _start(self, lines: list[str], indent: int) -> None:
        self.current = [line for line in lines if line]
        self.current_indent = indent

    def _start_with_header(self, first_lines: list[str], index: int, indent: int) -> int:
        """Start a paragraph with ``first_lines`` (text of a marker line such as a field, a
        footnote or a prose directive) continued by the lines indented deeper than the
        marker; return the index after them. The paragraph may end with ``::`` like any
        other."""
        header, next_index = self._header_lines(index, indent)
        continuation_indent = _indentation(self.lines[index]) if header else indent + 3
        self._start(first_lines + header, continuation_indent)
        return next_index

    def _flush(self) -> None:
        if not self.current:
            return
        text = " ".join(self.current)
        self.current = []
        if text.endswith("::"):
            self.literal_after_indent = self.current_indent
            if text == "::":
                return
            text = text[:-2].rstrip() if text[-3].isspace() else text[:-1]
        self.paragraphs.append(text)

    def _add_paragraph(self, text: str) -> None:
        if text.strip():
            self.paragraphs.append(text.strip())

    def _skip_indented(self, index: int, indent: int) -> int:
        """Skip blank lines and lines indented deeper than ``indent``."""
        while index < len(self.lines) and (
            not self.lines[index].strip() or _indentation(self.lines[index]) > indent
        ):
            index += 1
        return index

    def _skip_until_blank(self, index: int) -> int:
        while index < len(self.lines) and self.lines[index].strip():
            index += 1
        return index

    def _header_lines(self, index: int, indent: int) -> tuple[list[str], int]:
        """The non-blank lines after an explicit-markup line indented deeper than it, up to a
        blank line or a nested explicit-markup line."""
        header = []
        while (
            index < len(self.lines)
            and self.lines[index].strip()
            and _indentation(self.lines[index]) > indent
            and not self._starts_block(self.lines[index].strip())
        ):
            header.append(self.lines[index].strip())
            index += 1
        return header, index

    def _explicit_markup(self, index: int, indent: int, stripped: str) -> int:
        """A ``..`` block: directive, footnote, or something skipped (comment, target...)."""
        directive = _DIRECTIVE.match(stripped)
        footnote = _FOOTNOTE.match(stripped)
        if directive:
            return self._directive(index, indent, directive[1].lower(), directive[2] or "")
        if footnote:
            return self._start_with_header([footnote[2] or ""], index + 1, indent)
        if stripped == ".." and (index + 1 == len(self.lines) or not self.lines[index + 1].strip()):
            return index + 1
        return self._skip_indented(index + 1, indent)

    def _directive(self, index: int, indent: int, name: str, argument: str) -> int:
        if name in DROPPED_DIRECTIVES:
            return self._skip_indented(index + 1, indent)
        header, next_index = self._header_lines(index + 1, indent)
        argument_lines = [argument]
        for line in header:
            if _OPTION_LINE.match(line):
                break
            argument_lines.append(line)
        if name in PROSE_ARGUMENT_DIRECTIVES:
            if name in VERSION_DIRECTIVES:
                argument_lines[0] = _VERSION_PREFIX.sub("", argument_lines[0].strip(), count=1)
            continuation_indent = _indentation(self.lines[index + 1]) if header else indent + 3
            self._start(argument_lines, continuation_indent)
        # The body (lines indented deeper than the directive) is processed as ordinary blocks.
        return next_index

    def _adornment_or_table(self, index: int, indent: int, stripped: str) -> int:
        """An overlined heading, a simple table, or a transition line."""
        lines = self.lines
        if (
            indent == 0
            and index + 2 < len(lines)
            and lines[index + 1].strip()
            and lines[index + 2].strip() == stripped
            and _is_adornment(stripped)
        ):
            self._add_paragraph(lines[index + 1].strip())
            return index + 3
        if stripped.startswith("=") and (
            " " in stripped or (index + 1 < len(lines) and lines[index + 1].strip())
        ):
            return self._skip_simple_table(index)
        return index + 1

    def _skip_simple_table(self, index: int) -> int:
        """Skip from a simple table's top border to its bottom border (one followed by a
        blank line or the end of the document)."""
        index += 1
        while index < len(self.lines):
            stripped = self.lines[index].strip()
            index += 1
            if _SIMPLE_TABLE_BORDER.match(stripped) and (
                index == len(self.lines) or not self.lines[index].strip()
            ):
                break
        return index
