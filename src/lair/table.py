"""The one table renderer of recipes, reports, comparisons and the CLI: a table is a header and rows of
text cells; it comes out as Markdown (``markdown_table``), as plain text columns (``text_table``), or
as HTML through the report's Jinja2 template (its ``table`` macro), from the same cells. It imports
nothing of lair, so every layer may use it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["markdown_table", "text_table"]


def _md_cell(text: str) -> str:
    """A cell that cannot break its row: pipes escaped, newlines folded."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (no trailing newline)."""
    lines = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows])


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, numbers right-aligned (no trailing newline)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str], align_numbers: bool) -> str:
        out = []
        for c, w in zip(cells, widths, strict=True):
            numeric = align_numbers and c.replace(",", "").replace(".", "").lstrip("+-").rstrip("%").isdigit()
            out.append(c.rjust(w) if numeric else c.ljust(w))
        return "  ".join(out).rstrip()

    return "\n".join([line(head, False), *(line(r, True) for r in rows)])
