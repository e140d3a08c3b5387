"""Perl POD to plain paragraphs: :func:`pod_paragraphs`.

The format (``perlpod``, ``perlpodspec``): paragraphs separated by blank lines, of three kinds:
command paragraphs (``=head1`` ... ``=head6``, ``=over``/``=item``/``=back``, ``=begin``/``=end``,
``=for``, ``=encoding``, ``=pod``/``=cut``), verbatim paragraphs (first line indented: code) and
ordinary paragraphs, whose text may hold formatting codes ``B<bold>``, ``I<italic>``,
``C<code>``, ``F<file>``, ``S<no break>``, ``L<text|target>``, ``E<gt>``, ``X<index>``, ``Z<>``,
nested, and written with more brackets and inner spaces when the text holds ``>``
(``C<< $a->b >>``).
"""

from __future__ import annotations

import html.entities
import re

__all__ = ["pod_encoding", "pod_inline_to_text", "pod_paragraphs"]


def _collapse(text: str) -> str:
    return " ".join(text.split())


_POD_COMMAND = re.compile(r"^=([a-zA-Z]\w*)\s*(.*)$", re.DOTALL)
_POD_ENCODING = re.compile(rb"^=encoding\s+(\S+)", re.MULTILINE)
_POD_BLANK_LINES = re.compile(r"\n(?:[ \t]*\n)+")
_POD_BULLET_ITEM = re.compile(r"^(?:[*o+-]|\d+\.?)(?:\s+|$)")
_POD_CODE_START = r"(?P<letter>[IBCLEFSXZ])(?P<brackets><+)"


def pod_paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a POD document (perlpodspec): ``=head`` texts, ``=item`` terms
    and ordinary paragraphs, with formatting codes replaced by their text. Verbatim (indented)
    paragraphs, ``=begin``/``=end`` and ``=for`` blocks, other commands and everything outside
    POD (before the first command, after ``=cut``) are dropped."""
    paragraphs = []
    in_pod = False
    begin_depth = 0
    for block in _POD_BLANK_LINES.split(text.replace("\r\n", "\n").strip("\n") + "\n"):
        block = block.strip("\n")
        if not block:
            continue
        command = _POD_COMMAND.match(block) if block.startswith("=") else None
        if command:
            name, argument = command[1], command[2]
            in_pod = name != "cut"
            if name == "begin":
                begin_depth += 1
            elif name == "end":
                begin_depth = max(begin_depth - 1, 0)
            elif begin_depth == 0 and (name.startswith("head") or name == "item"):
                if name == "item":
                    argument = _POD_BULLET_ITEM.sub("", argument.strip(), count=1)
                paragraphs.append(pod_inline_to_text(argument))
        elif in_pod and begin_depth == 0 and block[0] not in " \t":
            paragraphs.append(pod_inline_to_text(block))
    return [paragraph for paragraph in paragraphs if paragraph]


def pod_inline_to_text(text: str) -> str:
    """Replace POD formatting codes (``B<>``, ``C<< >>``, ``L<text|target>``, ``E<gt>``...) by
    their text and collapse whitespace; ``X<>`` and ``Z<>`` disappear."""
    if "<" not in text:
        return _collapse(text)
    nodes, _ = _parse_pod_codes(text, 0, 0)
    return _collapse(_render_pod(nodes))


_POD_SCANNERS: dict[int, re.Pattern] = {}


def _pod_scanner(brackets: int) -> re.Pattern:
    """Finds the next code start, or the closer of a code opened with ``brackets`` brackets
    (``>`` for one, whitespace and as many ``>`` for more; none at the top level)."""
    if brackets not in _POD_SCANNERS:
        closer = "" if brackets == 0 else ">" if brackets == 1 else r"\s+" + ">" * brackets
        alternatives = [_POD_CODE_START] + ([f"(?P<close>{closer})"] if closer else [])
        _POD_SCANNERS[brackets] = re.compile("|".join(alternatives))
    return _POD_SCANNERS[brackets]


def _parse_pod_codes(text: str, position: int, brackets: int) -> tuple[list, int]:
    """Parse ``text`` from ``position`` up to the closer of a code with ``brackets`` brackets;
    return the nodes (strings and ``(letter, nodes)`` pairs) and the position after it."""
    nodes: list = []
    scanner = _pod_scanner(brackets)
    while True:
        match = scanner.search(text, position)
        if not match:  # an unclosed code runs to the end
            nodes.append(text[position:])
            return nodes, len(text)
        nodes.append(text[position:match.start()])
        if match.lastgroup == "close":
            return nodes, match.end()
        opened = len(match["brackets"])
        start = match.end()
        if opened > 1 and start < len(text) and text[start].isspace():
            while start < len(text) and text[start].isspace():
                start += 1
        else:  # "C<<x>" is a one-bracket code whose text starts with "<"
            opened, start = 1, match.start("brackets") + 1
        children, position = _parse_pod_codes(text, start, opened)
        nodes.append((match["letter"], children))


def _render_pod(nodes: list) -> str:
    parts = []
    for node in nodes:
        if isinstance(node, str):
            parts.append(node)
            continue
        letter, children = node
        if letter in "XZ":
            continue
        if letter == "E":
            parts.append(_pod_escape(_render_pod(children).strip()))
        elif letter == "L":
            parts.append(_pod_link(children))
        else:
            parts.append(_render_pod(children))
    return "".join(parts)


def _pod_escape(name: str) -> str:
    """``E<name>``: ``lt``, ``gt``, ``verbar``, ``sol``, an HTML entity name or a number."""
    special = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}
    if name in special:
        return special[name]
    try:
        if name.lower().startswith("0x"):
            return chr(int(name, 16))
        if name.isdigit():
            return chr(int(name, 8) if name.startswith("0") and len(name) > 1 else int(name))
    except (ValueError, OverflowError):
        return ""
    code_point = html.entities.name2codepoint.get(name)
    return chr(code_point) if code_point else ""


def _pod_link(children: list) -> str:
    """The displayed text of ``L<...>``: the text before ``|``, a URL, or (perlpodspec)
    ``"section" in name`` / ``"section"`` / ``name``."""
    for index, node in enumerate(children):
        if isinstance(node, str) and "|" in node:
            return _render_pod(children[:index]) + node.split("|", 1)[0]
    target = _collapse(_render_pod(children))
    if re.match(r"^[a-z][\w+.-]*:[^:\s]\S*$", target):
        return target
    if "/" in target and not target.startswith('"'):
        name, section = target.split("/", 1)
        section = section.strip().strip('"')
        return f'"{section}" in {name}' if name else f'"{section}"'
    return target


def pod_encoding(data: bytes) -> str | None:
    """The encoding a POD file declares with ``=encoding``, if any."""
    declared = _POD_ENCODING.search(data)
    return declared[1].decode("ascii", "replace") if declared else None
