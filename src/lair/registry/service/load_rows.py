"""A recipe's open-loop load results: the cells and sweep headlines the registry recomputed from the
reports' ``load.jsonl`` (:mod:`.load_cells`), and its warm multi-turn cells from ``sessions.jsonl``
(:mod:`.warm_cells`), grouped by report and context for the page and the JSON
document. Each group is one run on one rig: rate cells in rising offered rate, the sweep's knee,
max goodput under its SLO and users at a speed, and a throughput-vs-latency chart per context. They
are shown apart from the speed table: a load cell answers "how much traffic", the speed table "how
fast is one request at this context", and the two are never ranked together."""

from __future__ import annotations

import json
import weakref
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.registry.db.tables import LOAD, REVISIONS, USERS
from lair.registry.db.version import now
from lair.registry.service.speeds import shown_submitter
from lair.registry.service.timefmt import iso

__all__ = ["load_records", "load_view"]


def load_records(
    load: list[dict[str, Any]], ids: tuple[int, int], report_id: str, user_id: int | None, rig: str
) -> list[dict[str, Any]]:
    """The ``load_measurements`` rows of an accepted report's recomputed load cells and sweeps."""
    base: dict[str, Any] = {"recipe_id": ids[0], "revision_id": ids[1], "report_id": report_id}
    base |= {"submitted_by": user_id, "rig_fingerprint": rig, "created_at": now()}
    keys = ("kind", "context", "step", "offered_rate", "cache", "provenance", "note")
    return [
        base
        | {k: c[k] for k in keys}
        | {"figures": json.dumps(c["figures"]), "flags": json.dumps(c["flags"])}
        for c in load
    ]


_READ = (
    sa.select(LOAD, REVISIONS.c.number.label("revision"), USERS.c.name.label("submitted_by_name"))
    .join(REVISIONS, REVISIONS.c.id == LOAD.c.revision_id)
    .outerjoin(USERS, USERS.c.id == LOAD.c.submitted_by)
)


def _cell(r: Any) -> dict[str, Any]:
    if r.kind == "warm":  # no step or offered rate: a closed-loop conversation
        extra = {"cache": r.cache, "flags": json.loads(r.flags), "provenance": r.provenance, "note": r.note}
        figures: dict[str, Any] = json.loads(r.figures)
        return extra | figures
    return {
        "context": r.context,
        "step": r.step,
        "offered_rate": r.offered_rate,
        "cache": r.cache,
        "flags": json.loads(r.flags),
        "provenance": r.provenance,
        "note": r.note,
        **json.loads(r.figures),
    }


_ROWS = {
    "rate": ("rows", "load.jsonl"),
    "sweep": ("rows", "load.jsonl"),
    "warm": ("sessions", "sessions.jsonl"),
}
"""The link to a kind of stored cell's raw rows."""

_AT_0017: weakref.WeakSet[Engine] = weakref.WeakSet()


def _has_table(conn: Connection) -> bool:
    """Whether the database has migration 0017's table (remembered per engine once it has: a test of
    an older migration renders pages at that schema)."""
    if conn.engine in _AT_0017:
        return True
    if sa.inspect(conn).has_table(LOAD.name):
        _AT_0017.add(conn.engine)
        return True
    return False


def load_view(conn: Connection, recipe_id: int) -> list[dict[str, Any]]:
    """One entry per report with load cells, newest first: its revision, rig, filer and links, and
    per context its rate cells (rising rate) and sweep headline (None without a sweep); [] on a
    database before migration 0017."""
    if not _has_table(conn):
        return []
    stmt = _READ.where(LOAD.c.recipe_id == recipe_id, shown_submitter(LOAD.c.submitted_by))
    reports: dict[str, dict[str, Any]] = {}
    contexts: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in conn.execute(stmt.order_by(LOAD.c.created_at.desc(), LOAD.c.id)):
        rep = reports.setdefault(
            r.report_id,
            {
                "report_id": r.report_id,
                "revision": r.revision,
                "rig": r.rig_fingerprint,
                "submitted_by": r.submitted_by_name,
                "created_at": iso(r.created_at),
                "links": {"report": f"/reports/{r.report_id}"},
            },
        )
        rep["links"][_ROWS[r.kind][0]] = f"/reports/{r.report_id}/files/{_ROWS[r.kind][1]}"
        group = contexts[rep["report_id"]].setdefault(
            r.context, {"context": r.context, "cells": [], "sweep": None, "warm": None}
        )
        if r.kind == "sweep":
            group["sweep"] = json.loads(r.figures)
        elif r.kind == "warm":
            group["warm"] = _cell(r) | {"context": r.context}
        else:
            group["cells"].append(_cell(r))
    out = []
    for rid, rep in reports.items():
        groups = [contexts[rid][c] for c in sorted(contexts[rid])]
        for g in groups:
            g["cells"].sort(key=lambda c: c["offered_rate"])
        out.append(rep | {"contexts": groups})
    return out
