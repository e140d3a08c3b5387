"""GNU info files to plain paragraphs, node by node: :func:`info_nodes`.

The format (Texinfo manual, "Info Files" appendix; makeinfo's output conventions): nodes are
separated by ``\x1f``; a node starts with a header line ``File: f.info,  Node: Name,  Next: ...,
Up: ...``; chunks that are not nodes hold the indirect table of a split manual (``f.info-1``...),
the tag table and local variables. Node text is hard-wrapped at 72 columns, paragraphs are
separated by blank lines, later paragraphs have a 3-space first-line indent; headings are
underlined with ``*``, ``=``, ``-`` or ``.``; examples are indented 5 columns deeper than the
text around them, as are the bodies of definitions (`` -- Function: name args``), table entries
and list items; menus start at ``* Menu:``; cross references read ``*Note Node::``,
``*note label: Node.`` or ``*note (manual)Node::``.
"""

from __future__ import annotations

import re

__all__ = ["INFO_SEPARATOR", "info_nodes"]


def _collapse(text: str) -> str:
    return " ".join(text.split())


INFO_SEPARATOR = "\x1f"
_INFO_NODE_NAME = re.compile(r"Node:\s*(?:\x7f([^\x7f]*)\x7f|([^,\t]+))")
_INFO_UNDERLINE = re.compile(r"^([*=\-.])\1{2,}$")
_INFO_HEADING_NUMBER = re.compile(r"^(?:\d+(?:\.\d+)*|[A-Z](?:\.\d+)+)\s+")
_INFO_DEFINITION = re.compile(r"^ -- [^:]+:")
_INFO_LIST_ITEM = re.compile(r"^(•|\*|-|\d+\.|[a-z]\.)\s+(?=\S)")
_INFO_FOOTNOTES = re.compile(r"^\s*-{5,} Footnotes -{5,}\s*$")
_INFO_XREF = re.compile(
    r"\*([Nn]ote)\s+(?:(?P<short>[^:*]{1,200}?)::|(?P<label>[^:*]{1,200}?):\s+[^.,*]{1,200}?(?P<end>[.,]))"
)
_INFO_EMPHASIS = re.compile(r"(?<![\w*])([_*])(?=[^\s_*])([^_*\n]{1,100}?)(?<=\S)\1(?![\w*])")
_EXAMPLE_INDENT = 5
_TERM_WIDTH = 50  # a table term is a short line; a paragraph's lines fill the width


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _info_inline_to_text(text: str) -> str:
    """Cross references keep their link text (``*Note Foo::`` -> ``See Foo``, ``(*note Foo::)`` ->
    ``(see Foo)``, ``*note label: Node.`` -> ``label.``); ``_emphasis_`` / ``*strong*`` -> text."""

    def replace(match: re.Match) -> str:
        before = match.string[max(match.start() - 1, 0):match.start()]
        after = match.string[match.end():match.end() + 1]
        if match["short"] is not None:
            text = match["short"]
        else:  # the terminator ends the sentence, unless the reference closes a parenthesis
            text = match["label"] + ("" if before == "(" and after == ")" else match["end"])
        text = re.sub(r"^\([^)]*\)", "", _collapse(text)) or text
        if match[1] == "Note":
            return "See " + text
        return ("see " if before == "(" else "") + text

    text = _INFO_XREF.sub(replace, _collapse(text.replace("\x7f", "")))
    return _INFO_EMPHASIS.sub(r"\2", text)


def _info_body_paragraphs(lines: list[str]) -> list[str]:
    """The paragraphs of one node's body (the lines after its header line).

    Paragraphs are separated by blank lines; headings (a line underlined with ``*``, ``=``, ``-``
    or ``.``) are paragraphs of their own, without their number. ``body`` is the indentation of
    the current text: 0 at the top, 5 more inside a ``-- Category: name`` definition, a table
    entry (a term line followed by lines 5 deeper) or a list item (text after its bullet). Lines
    ``5`` or more deeper than ``body`` are examples and dropped, as are menus (``* Menu:`` up to a
    prose paragraph), definition lines and the footnotes rule.
    """
    paragraphs: list[str] = []
    current: list[str] = []
    body = 0
    in_menu = False

    def flush() -> None:
        if current:
            paragraphs.append(_info_inline_to_text(" ".join(current)))
            current.clear()

    index = 0
    while index < len(lines):
        line = lines[index].expandtabs(8).rstrip()
        index += 1
        if not line:
            flush()
            continue
        following = lines[index].rstrip() if index < len(lines) else ""
        if line.startswith("* Menu:"):
            flush()
            in_menu = True
            continue
        if in_menu:
            previous_blank = index < 2 or not lines[index - 2].strip()
            is_label = previous_blank and (not following.strip() or following.startswith("* "))
            if line.startswith("* ") or line[0] == " " or is_label:
                continue
            in_menu = False
        if not line[0].isspace() and _INFO_UNDERLINE.match(following) and len(following) >= len(line) - 1:
            flush()
            paragraphs.append(_INFO_HEADING_NUMBER.sub("", line.strip()))
            body, index = 0, index + 1
            continue
        if _INFO_FOOTNOTES.match(line):
            flush()
            continue
        indent = _indent(line)
        if _INFO_DEFINITION.match(line):
            flush()
            body = _EXAMPLE_INDENT
            continue
        if indent < body:
            flush()
            body = indent // _EXAMPLE_INDENT * _EXAMPLE_INDENT
        item = _INFO_LIST_ITEM.match(line[indent:])
        if item and body + 1 <= indent <= body + 4:
            flush()
            current.append(line[indent + item.end():])
            # continuation lines start at the next multiple of 5 ("  10. text" continues at 5)
            body = min(indent + item.end(), (indent // _EXAMPLE_INDENT + 1) * _EXAMPLE_INDENT)
            continue
        if indent >= body + _EXAMPLE_INDENT:
            flush()
            continue
        terms_end = _table_terms_end(lines, index - 1, body) if not current and indent == body else None
        if terms_end is not None:
            terms = [term.strip() for term in lines[index - 1:terms_end]]
            paragraphs.append(_info_inline_to_text(" ".join(terms)))
            body, index = body + _EXAMPLE_INDENT, terms_end
            continue
        current.append(line.strip())
    flush()
    return [paragraph for paragraph in paragraphs if paragraph]


def _table_terms_end(lines: list[str], start: int, body: int) -> int | None:
    """Where the description starts if ``lines[start]`` begins a table entry: up to four short
    term lines at ``body``, not ending with ``:`` (text introducing an example), followed by a
    line indented 5 deeper; else None."""
    end = start
    while (end < len(lines) and end - start < 4 and lines[end].strip()
           and _indent(lines[end].expandtabs(8)) == body and len(lines[end].strip()) <= _TERM_WIDTH):
        end += 1
    if end == start or end == len(lines) or lines[end - 1].rstrip().endswith(":"):
        return None
    return end if _indent(lines[end].expandtabs(8)) == body + _EXAMPLE_INDENT and lines[end].strip() else None


def info_nodes(text: str) -> list[tuple[str, list[str]]]:
    """The nodes of one info file's text (a whole manual, or one part of a split manual), in
    order, as (node name, paragraphs). What is not a node (the preamble before the first
    separator, the indirect and tag tables, local variables) is skipped."""
    nodes = []
    for chunk in text.split(INFO_SEPARATOR)[1:]:
        lines = chunk.lstrip("\n").split("\n")
        if not lines[0].startswith("File:"):
            continue
        name = _INFO_NODE_NAME.search(lines[0])
        if not name:
            continue
        nodes.append(((name[1] or name[2]).strip(), _info_body_paragraphs(lines[1:])))
    return nodes
