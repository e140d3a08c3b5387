"""What every format reader yields: documents of plain paragraphs, before any filtering."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RawDocument:
    """One document of a source, as its reader found it.

    ``identity`` is stable across runs and machines (``"<source>/<part>"``, e.g.
    ``"sword-kjv/Genesis"``): it decides the document's split. ``paragraphs`` are plain text
    with markup removed and whitespace collapsed to single spaces, in reading order; the
    quality filter, deduplication and the leak filter come later.
    """

    identity: str
    paragraphs: tuple[str, ...]
