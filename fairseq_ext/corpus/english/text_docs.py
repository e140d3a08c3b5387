"""Readers for technical documentation that is not HTML: Perl POD, GNU info, reStructuredText,
Linux ABI descriptions and plain hard-wrapped text (README, NEWS, Emacs' ``etc/``, org-mode).

Each reader takes a package root (a Debian package unpacked with ``dpkg -x``), a source name, a
sub-directory and ``include`` / ``exclude`` globs (a glob with a ``/`` matches the path relative
to the sub-directory, one without matches the file name), reads ``.gz`` files transparently and
yields :class:`RawDocument` objects. Nothing under ``usr/share/man`` is ever read, nor any
symbolic link (its target is either read at its own path or lies outside the package). The
parsing is in pure functions of a document's text: :func:`~.pod.pod_paragraphs`,
:func:`~.info.info_nodes`, :func:`fairseq_ext.corpus.rst_cleaner.clean_rst`, and here
:func:`text_paragraphs` and :func:`abi_paragraphs`. The sources: docs/corpus.md.
"""

from __future__ import annotations

import codecs
import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from fnmatch import fnmatch
from pathlib import Path

from ..errors import CorpusError
from ..rst_cleaner import clean_rst
from .info import INFO_SEPARATOR, info_nodes
from .pod import pod_encoding, pod_paragraphs
from .raw import RawDocument

__all__ = [
    "abi_paragraphs", "info_nodes", "pod_paragraphs", "read_abi_files", "read_info_files",
    "read_pod_tree", "read_rst_tree", "read_text_files", "text_paragraphs",
]

_HELD_OUT_DIRECTORY = ("usr", "share", "man")
_INFO_PART = re.compile(r"\.info-\d+(?:\.gz)?$")
_INFO_INDIRECT = re.compile(r"\x1f\s*\nIndirect:\s*\n")
_INFO_INDIRECT_ENTRY = re.compile(r"^([^:\n]+):\s*\d+\s*$", re.MULTILINE)
_INFO_CODING = re.compile(r"^coding:\s*([\w-]+)", re.MULTILINE)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _select_files(package_root: Path, subdir: str, include: Iterable[str],
                  exclude: Iterable[str]) -> list[tuple[Path, str]]:
    """The regular files under ``package_root/subdir`` matching ``include`` and not ``exclude``,
    sorted, as (path, path relative to the sub-directory)."""
    package_root = Path(package_root).resolve()
    root = package_root / subdir
    if not root.is_dir():
        raise CorpusError(f"{root}: no such directory")
    include, exclude = tuple(include), tuple(exclude)

    def matches(relative: str, name: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch(relative if "/" in pattern else name, pattern) for pattern in patterns)

    selected = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        inside_package = path.relative_to(package_root).parts
        if inside_package[:3] == _HELD_OUT_DIRECTORY or not matches(relative, path.name, include):
            continue
        if matches(relative, path.name, exclude) or not path.is_file() or path.resolve() != path:
            continue  # excluded, not a file, or reached through a symbolic link
        selected.append((path, relative))
    return selected


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if path.name.endswith(".gz") else data
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as error:
        raise CorpusError(f"{path}: unreadable or corrupt ({error})") from None


def _decode(data: bytes, encoding: str | None = None) -> str:
    """``data`` in ``encoding`` if given and known, else UTF-8, else CP-1252 (as POD does)."""
    if encoding:
        try:
            return data.decode(codecs.lookup(encoding).name, errors="replace")
        except LookupError:
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _identity(source: str, relative: str, suffixes: tuple[str, ...]) -> str:
    """``source/relative`` without ``.gz`` and then without the first of ``suffixes`` it has."""
    relative = relative.removesuffix(".gz")
    for suffix in suffixes:
        if relative.endswith(suffix) and len(relative) > len(suffix):
            relative = relative[: -len(suffix)]
            break
    return f"{source}/{relative}"


def _document(identity: str, paragraphs: Iterable[str]) -> RawDocument | None:
    kept = tuple(paragraph for paragraph in paragraphs if paragraph)
    return RawDocument(identity, kept) if kept else None


def read_pod_tree(package_root: Path, source: str, subdir: str, include: Iterable[str] = ("*.pod",),
                  exclude: Iterable[str] = ()) -> Iterator[RawDocument]:
    """One document per POD file (``=encoding`` honoured), named ``source/<path without .pod>``."""
    for path, relative in _select_files(package_root, subdir, include, exclude):
        data = _read_bytes(path)
        text = _decode(data, pod_encoding(data))
        document = _document(_identity(source, relative, (".pod",)), pod_paragraphs(text))
        if document:
            yield document


# --- reStructuredText ---------------------------------------------------------------------------


def read_rst_tree(package_root: Path, source: str, subdir: str,
                  include: Iterable[str] = ("*.rst", "*.rst.txt", "*.rst.gz"),
                  exclude: Iterable[str] = ()) -> Iterator[RawDocument]:
    """One document per reST file (Sphinx ``_sources/*.rst.txt`` included), cleaned by
    :func:`fairseq_ext.corpus.rst_cleaner.clean_rst`, named ``source/<path without .rst>``."""
    for path, relative in _select_files(package_root, subdir, include, exclude):
        paragraphs = clean_rst(_decode(_read_bytes(path)))
        document = _document(_identity(source, relative, (".rst.txt", ".rst", ".txt")), paragraphs)
        if document:
            yield document


# --- GNU info ---------------------------------------------------------------------------------


def _info_texts(path: Path) -> list[str]:
    """The texts of a manual's files: its main file and, if it has an indirect table, its parts."""
    main = _read_bytes(path)
    coding = _INFO_CODING.search(main[-2000:].decode("ascii", "replace"))
    encoding = coding[1] if coding else None
    texts = [_decode(main, encoding)]
    indirect = _INFO_INDIRECT.search(texts[0])
    if indirect:
        table = texts[0][indirect.end():].split(INFO_SEPARATOR, 1)[0]
        for part_name in _INFO_INDIRECT_ENTRY.findall(table):
            candidates = [path.with_name(part_name), path.with_name(part_name + ".gz")]
            part = next((candidate for candidate in candidates if candidate.is_file()), None)
            if part is None:
                raise CorpusError(f"{path}: indirect part {part_name} is missing")
            texts.append(_decode(_read_bytes(part), encoding))
    return texts


def read_info_files(package_root: Path, source: str, subdir: str, include: Iterable[str] = ("*.info*",),
                    exclude: Iterable[str] = ()) -> Iterator[RawDocument]:
    """One document per node of each info manual (split manuals read through their indirect
    table; the parts are not read on their own), named ``source/<manual>/<node>``."""
    files = _select_files(package_root, subdir, include, exclude)
    names = {path.name for path, _ in files}
    for path, relative in files:
        if _INFO_PART.search(path.name):
            main = _INFO_PART.sub(".info", path.name)
            if main in names or main + ".gz" in names:
                continue
        manual = re.sub(r"\.info(-\d+)?$", "", path.name.removesuffix(".gz"))
        for text in _info_texts(path):
            for node, paragraphs in info_nodes(text):
                document = _document(f"{source}/{manual}/{node}", paragraphs)
                if document:
                    yield document


# --- plain text ---------------------------------------------------------------------------------

_RULE_LINE = re.compile(r"^\s*([-=_*~#+.^\"'`])\1{2,}\s*$")
_MODE_LINE = re.compile(r"-\*-.*?-\*-")
_OUTLINE_HEADING = re.compile(r"^(\*+)\s+(?=\S)")
_TEXT_LIST_ITEM = re.compile(r"^([-*+•o]|>>|\d+[.)]|\([\w*]{1,3}\)|\[\d+\])\s+(?=\S)")
_LOCAL_VARIABLES = re.compile(r"^\W*Local [Vv]ariables:\s*$")
_ORG_BLOCK = re.compile(r"^\s*#\+(begin|end)_\w+", re.IGNORECASE)
_ORG_FILE = re.compile(r"-\*-.*\bmode:\s*org\b|^#\+\w+:", re.MULTILINE)
_ORG_LINK = re.compile(r"\[\[([^\]]+)\](?:\[([^\]]+)\])?\]")
_ORG_VERBATIM = re.compile(r"(?<![\w=~])([=~])(?=\S)([^=~\n]*?\S)\1(?![\w=~])")
_TABLE_GAP = re.compile(r"\S {3,}\S")
_MIN_FILL_COLUMN = 60
# A line is wrapped when the next word would have made it longer than this share of the fill
# column (the 90th percentile of the file's line lengths): fill commands fill lines to it.
_WRAP_SHARE = 0.8
_CODE_LINE_END = re.compile(r"[{};\\]$")


def _text_lines(text: str) -> list[str]:
    """Lines with tabs expanded, trailing space, mode lines, org ``#+`` lines and ``#+begin_``
    blocks removed, up to a ``Local Variables:`` trailer."""
    lines = []
    in_org_block = False
    for line in text.replace("\f", "").splitlines():
        line = line.expandtabs(8).rstrip()
        if _LOCAL_VARIABLES.match(line):
            break
        org = _ORG_BLOCK.match(line)
        if org:
            in_org_block = org[1].lower() == "begin"
            continue
        if in_org_block or line.lstrip().startswith("#+"):
            continue
        if "-*-" in line:
            line = _MODE_LINE.sub("", line).rstrip()
            if not line.strip():
                continue
        lines.append(line)
    return lines


def _is_table_or_code(block: list[str]) -> bool:
    """Most lines with column gaps (3+ spaces inside), or ending like code (``{ } ; \\``)."""
    gaps = sum(1 for line in block if _TABLE_GAP.search(line.strip()))
    code = sum(1 for line in block if _CODE_LINE_END.search(line))
    return 2 * gaps > len(block) or 2 * code > len(block)


def text_paragraphs(text: str, org: bool | None = None) -> list[str]:
    """The paragraphs of hard-wrapped plain text (blank lines between paragraphs); ``org``:
    whether it is an org-mode file (by default: whether its mode line or ``#+KEYWORD:`` lines
    say so), whose inline markup is then removed.

    The lines of a paragraph are joined. Outline headings (``* Heading``, ``** Sub``) and list
    items (``- ``, ``* ``, ``1.``, ``(a)``, ``>>``...) start a new paragraph, without their marker;
    a heading takes the next line only when it does not end like a sentence and the line does not
    start with a capital (a wrapped heading). Dropped:
    rule lines (``----``, ``+++``), blocks of tables or code, and indented blocks that are not
    list items (examples, key tables), i.e. lines indented deeper than the paragraph they follow
    (a list item's text may go on deeper, unless it ends with ``:``) and indented paragraphs,
    unless their first line only is indented or their lines are wrapped prose at one indentation.
    """
    lines = _text_lines(text)
    base = min((_indent(line) for line in lines if line.strip()), default=0)
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line[base:])
        elif blocks[-1]:
            blocks.append([])
    lengths = sorted(len(line) for block in blocks for line in block)
    fill_column = max(lengths[len(lengths) * 9 // 10], _MIN_FILL_COLUMN) if lengths else _MIN_FILL_COLUMN
    paragraphs = []
    for block in blocks:
        if block and not _is_table_or_code(block):
            paragraphs.extend(_block_paragraphs(block, fill_column))
    if org or (org is None and _ORG_FILE.search(text[:2000])):
        paragraphs = [_org_inline_to_text(paragraph) for paragraph in paragraphs]
    return [paragraph for paragraph in paragraphs if paragraph]


def _org_inline_to_text(text: str) -> str:
    """Org markup: ``[[target][text]]`` -> text, ``[[target]]`` -> target, ``~code~`` and
    ``=verbatim=`` -> their text."""
    text = _ORG_LINK.sub(lambda match: match[2] or match[1], text)
    return _ORG_VERBATIM.sub(r"\2", text)


def _wrapped(previous: str, line: str, fill_column: int) -> bool:
    """Whether the break before ``line`` is a wrap (its first word would not have fitted on
    ``previous``), not a deliberate line break (a list of short lines, an address)."""
    first_word = line.split(None, 1)[0]
    return len(previous) + 1 + len(first_word) > _WRAP_SHARE * fill_column


def _indented_prose(block: list[str], start: int, fill_column: int) -> bool:
    """Whether the indented lines from ``block[start]`` are a wrapped paragraph: two lines or
    more at one indentation, each break a wrap (code and tables have short lines)."""
    indent = _indent(block[start])
    end = start + 1
    while (end < len(block) and _indent(block[end]) == indent
           and _wrapped(block[end - 1], block[end], fill_column)):
        end += 1
    return end - start >= 2 and (end == len(block) or _indent(block[end]) < indent)


def _block_paragraphs(block: list[str], fill_column: int) -> list[str]:
    paragraphs: list[str] = []
    current: list[str] = []
    continuation = 0  # indentation of the current paragraph's continuation lines
    heading = in_item = False  # whether the current paragraph is an outline heading, a list item
    skip_from: int | None = None  # indentation of the example being skipped

    def flush() -> None:
        if current:
            paragraphs.append(_collapse(" ".join(current)))
            current.clear()

    for index, line in enumerate(block):
        indent = _indent(line)
        stripped = line.strip()
        if skip_from is not None and indent >= skip_from:
            continue
        skip_from = None
        if _RULE_LINE.match(line):
            flush()
            continue
        outline = _OUTLINE_HEADING.match(line)
        item = None if outline else _TEXT_LIST_ITEM.match(stripped)
        if outline or item:
            flush()
            marker_end = outline.end() if outline else indent + item.end()
            current.append(line[marker_end:])
            continuation, heading, in_item = (0 if outline else marker_end), bool(outline), bool(item)
            continue
        if current:
            if heading and (current[-1][-1:] in ".!?:" or stripped[0].isupper()):
                flush()
            elif not _wrapped(block[index - 1], line, fill_column):
                flush()
            elif indent <= continuation + 2 or (in_item and not current[-1].endswith(":")):
                current.append(stripped)
                heading = False
                continue
            else:
                flush()
                skip_from = indent
                continue
        following = block[index + 1] if index + 1 < len(block) else ""
        first_line_indent = following and _indent(following) == 0
        if indent > 0 and not first_line_indent and not _indented_prose(block, index, fill_column):
            skip_from = indent
            continue
        current.append(stripped)
        continuation, heading, in_item = (0 if first_line_indent else indent), False, False
    flush()
    return paragraphs


def _outline_sections(lines: list[str]) -> list[list[str]]:
    """``lines`` cut before each top-level outline heading (``* Heading`` at the margin)."""
    sections: list[list[str]] = [[]]
    for line in lines:
        if line.startswith("* ") and line[2:3].strip() and sections[-1]:
            sections.append([])
        sections[-1].append(line)
    return sections


def read_text_files(package_root: Path, source: str, subdir: str, include: Iterable[str],
                    exclude: Iterable[str] = (), split_sections: bool = False) -> Iterator[RawDocument]:
    """One document per plain-text file (:func:`text_paragraphs`), named ``source/<path>``; with
    ``split_sections``, a file with top-level outline headings (``* ...``) gives one document per
    section (``source/<path>/<n>``, the text before the first heading being section 0)."""
    for path, relative in _select_files(package_root, subdir, include, exclude):
        text = _decode(_read_bytes(path))
        identity = _identity(source, relative, ())
        sections = _outline_sections(_text_lines(text)) if split_sections else []
        if sum(1 for section in sections if section[0].startswith("* ")) >= 2:
            org = bool(_ORG_FILE.search(text[:2000]))
            for number, section in enumerate(sections):
                document = _document(f"{identity}/{number}", text_paragraphs("\n".join(section), org))
                if document:
                    yield document
            continue
        document = _document(identity, text_paragraphs(text))
        if document:
            yield document


# --- Linux ABI descriptions (Documentation/ABI/README) ------------------------------------------

_ABI_FIELD = re.compile(r"^(What|Date|KernelVersion|Contact|Description|Users|Defined on file)\s*:\s*(.*)$")


def abi_paragraphs(text: str) -> list[str]:
    """The paragraphs of the ``Description:`` fields of a kernel ABI file (entries of ``What:``,
    ``Date:``, ``Contact:``, ``Description:``, ``Users:`` fields); the field text, indented by a
    tab or more, is read as plain text (:func:`text_paragraphs`)."""
    paragraphs: list[str] = []
    description: list[str] | None = None
    for line in text.splitlines() + ["What:"]:
        field = _ABI_FIELD.match(line)
        if field:
            if description is not None:
                body = [body_line.expandtabs(8) for body_line in description[1:]]
                margin = min((_indent(body_line) for body_line in body if body_line.strip()), default=0)
                dedented = [description[0]] + [body_line[margin:] for body_line in body]
                paragraphs.extend(text_paragraphs("\n".join(dedented)))
            description = [field[2]] if field[1] == "Description" else None
        elif description is not None:
            description.append(line)
    return paragraphs


def read_abi_files(package_root: Path, source: str, subdir: str, include: Iterable[str] = ("*",),
                   exclude: Iterable[str] = ("README*",)) -> Iterator[RawDocument]:
    """One document per kernel ABI file (:func:`abi_paragraphs`), named ``source/<path>``."""
    for path, relative in _select_files(package_root, subdir, include, exclude):
        document = _document(_identity(source, relative, ()), abi_paragraphs(_decode(_read_bytes(path))))
        if document:
            yield document
