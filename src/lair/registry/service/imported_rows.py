"""Rows of a report imported from a peer's result file (``lair import-results``): never verified.

Such a report's ``results.json`` has an ``imported`` block (the tool, its version, the sha256 of
the peer's file). Its cells are the peer's figures, or recomputed by lair from the peer's own
per-request timings; either way the registry holds no raw timings of lair's bench to recompute
them from, no certificate and no fingerprint of a machine it can check. The report is accepted (the
recipe revision it names must exist, and no cell may be above its roofline) and every row is stored
``reported-by-report`` with a note naming its source: the registry's tier for a report's word.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["imported_digest", "imported_note", "imported_rows"]


def imported_note(imported: dict[str, Any]) -> str:
    """Why an imported row is not verified, with its provenance."""
    how = "recomputed by lair from its per-request timings" if imported.get("recomputed") else "its figures"
    tool, version, sha = imported.get("tool"), imported.get("version"), imported.get("sha256")
    return (
        f"imported from {tool} {version} (file sha256 {sha}; {how}): not verified, "
        "the registry has no raw timings of lair's bench to recompute"
    )


def imported_rows(rows: list[dict[str, Any]], imported: dict[str, Any], tier: str) -> list[dict[str, Any]]:
    """``rows`` at ``tier`` (never verified), each noting where it came from."""
    note = imported_note(imported)
    return [r | {"provenance": tier, "note": note, "certificate": None} for r in rows]


def imported_digest(imported: dict[str, Any]) -> str:
    """An imported report's identity: the peer's file (the same file imported twice is one report)."""
    return hashlib.sha256(f"imported:{imported.get('tool')}:{imported.get('sha256')}".encode()).hexdigest()
