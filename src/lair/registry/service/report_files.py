"""What the read side needs of stored reports: their raw file names and the GPUs their fingerprints
name (kept apart from :mod:`.reports`, the write side, which re-renders pages through the read side)."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.tables import REPORTS
from lair.registry.service.fitting import fingerprint_gpus

__all__ = ["report_files", "report_gpus"]


def report_gpus(conn: Connection, ids: set[str]) -> dict[str, tuple[str, int] | None]:
    """The (GPU model, count) each report's fingerprint names (None: a CPU-only rig)."""
    if not ids:
        return {}
    stmt = sa.select(REPORTS.c.id, REPORTS.c.fingerprint).where(REPORTS.c.id.in_(sorted(ids)))
    return {r.id: fingerprint_gpus(json.loads(r.fingerprint)) for r in conn.execute(stmt)}


def report_files(conn: Connection, ids: set[str]) -> dict[str, list[str]]:
    """The raw file names of each of the reports ``ids``."""
    if not ids:
        return {}
    stmt = sa.select(REPORTS.c.id, REPORTS.c.files).where(REPORTS.c.id.in_(sorted(ids)))
    return {r.id: json.loads(r.files) for r in conn.execute(stmt)}
