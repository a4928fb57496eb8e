"""Noisy cells are never verified. A cell whose certificate says ``noisy`` (something else used the
bench's machine while it ran, or its repeats disagree: :mod:`lair.bench.machine`, limits in
:mod:`lair.bench.definitions`) keeps its row, as ``reported-by-report`` at most, its note beginning
with each reason ("cell ctx 256 x1: noisy: other processes used 1.79 of 2 cores (90%, limit 25%)"),
as a cell failing any other check after its recomputation (:mod:`.bounds`) does. A report from before
the machine certificate has no verdict to read and is tiered as before.
"""

from __future__ import annotations

from typing import Any

from lair.vocabulary import REPORTED_BY_REPORT, VERIFIED

__all__ = ["noisy_reasons", "noisy_rows"]


def noisy_reasons(cell: dict[str, Any]) -> list[str]:
    """Each reason the cell's certificate gives for ``noisy``, located by the cell; [] when quiet."""
    machine = (cell.get("certificate") or {}).get("machine") or {}
    if machine.get("noisy") is not True:
        return []
    where = f"cell ctx {cell['context']} x{cell['concurrency']}"
    reasons = [r for r in machine.get("reasons") or [] if isinstance(r, str)]
    return [f"{where}: noisy: {r}" for r in reasons] or [f"{where}: noisy"]


def noisy_rows(rows: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``cells`` (the same order), each noisy one at most reported-by-report with its
    reasons first in its note."""
    for row, cell in zip(rows, cells, strict=True):
        reasons = noisy_reasons(cell)
        if reasons:
            if row["provenance"] == VERIFIED:
                row["provenance"] = REPORTED_BY_REPORT
            row["note"] = "; ".join([*reasons, *([row["note"]] if row.get("note") else [])])
    return rows
