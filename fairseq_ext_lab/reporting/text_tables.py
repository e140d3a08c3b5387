"""Plain-text tables for the demo and the evaluation reports."""
from typing import List, Sequence


def ascii_table(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A boxed table: the first column left-aligned (names), the others right-aligned (figures)."""
    widths = [max(len(title), *(len(row[i]) for row in rows)) for i, title in enumerate(titles)]
    rule = "+" + "+".join("-" * (width + 2) for width in widths) + "+"
    lines: List[str] = [rule, "| " + " | ".join(t.ljust(w) for t, w in zip(titles, widths)) + " |",
                        rule]
    lines += ["| " + " | ".join(cell.rjust(w) if i else cell.ljust(w)
                                for i, (cell, w) in enumerate(zip(row, widths))) + " |"
              for row in rows]
    return "\n".join(lines + [rule])
