"""Quality rows of a recipe: reported (``meta.quality``, typed by the author), verified (an accepted
report whose per-sample records the registry re-scored, :mod:`.rescore`), reported-by-report (an
accepted report whose samples cannot be re-scored on the registry: HumanEval's programs are never
run here) and replicated.

Verified rows of one revision, suite, metric and sample count form a group; each rig counts once
(its rows reduced to their median score), and so does each report. The group is replicated when
``MIN_RIGS`` or more distinct rigs of ``MIN_ACCOUNTS`` or more accounts agree within
``MAX_QUALITY_SPREAD`` percentage points (max - min of the rigs' scores): one account never replicates
itself, whatever fingerprints it uploads (as for speed rows, :mod:`.tiers`). Retracted rows stay in
the list, struck, and never count.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.bench.definitions import percentile
from lair.registry.db.tables import QUALITY, REVISIONS, USERS
from lair.registry.service.speeds import shown_submitter
from lair.replication import Evidence, evidence

__all__ = ["MAX_QUALITY_SPREAD", "annotate_quality", "quality_rows"]

MAX_QUALITY_SPREAD = 2.0
"""Largest spread of scores across rigs, in percentage points, that still counts as agreeing."""


def _row(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "revision": r.revision,
        "suite": r.suite,
        "metric": r.metric,
        "score": r.score,
        "unit": r.unit,
        "n": r.n,
        "stderr": r.stderr,
        "repeats": r.repeats,
        "repeat_spread": None if r.spread_min is None else {"min": r.spread_min, "max": r.spread_max},
        "flips": r.flips,
        "provenance": r.provenance,
        "note": r.note,
        "submitted_by": r.submitted_by_name,
        "created_at": r.created_at.isoformat(),
        "retracted": r.retracted_at is not None,
        "retracted_reason": r.retracted_reason,
        "report_id": r.report_id,
        "rig": r.rig_fingerprint,
    }


def _rigs(rows: list[dict[str, Any]]) -> tuple[Evidence, float | None]:
    """The evidence and spread of a group's verified rows (:func:`lair.replication.evidence`)."""
    ev = evidence(rows, "score")
    scores = [percentile(v, 50) for v in ev.per_rig.values()]
    return ev, (max(scores) - min(scores)) if len(scores) > 1 else None


def _links(rid: str) -> dict[str, str]:
    where = f"/reports/{rid}/files"
    return {
        "report": f"/reports/{rid}",
        "samples": f"{where}/eval_samples.jsonl",
        "fingerprint": f"{where}/fingerprint.json",
    }


def annotate_quality(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with ``tier``, ``rigs`` and ``spread`` (verified rows) and ``links`` (site paths) to
    its report's page, per-sample records and fingerprint."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    key = ("revision", "suite", "metric", "n")
    for r in rows:
        if r["provenance"] == "verified" and not r["retracted"]:
            groups[tuple(r[k] for k in key)].append(r)
    out = []
    for r in rows:
        links = _links(r["report_id"]) if r["report_id"] else {}
        if r["provenance"] != "verified":
            out.append(r | {"tier": r["provenance"], "rigs": None, "spread": None, "links": links})
            continue
        ev, spread = _rigs(groups.get(tuple(r[k] for k in key), []))
        agree = ev.enough and spread is not None and spread <= MAX_QUALITY_SPREAD
        tier = "replicated" if agree and not r["retracted"] else "verified"
        out.append(r | {"tier": tier, "rigs": ev.rigs, "spread": spread, "links": links})
    return out


def quality_rows(conn: Connection, recipe_id: int, revision_number: int) -> list[dict[str, Any]]:
    """The recipe's quality rows: measured ones of every revision, reported ones of this revision."""
    q = QUALITY
    stmt = (
        sa.select(q, REVISIONS.c.number.label("revision"), USERS.c.name.label("submitted_by_name"))
        .join(REVISIONS, REVISIONS.c.id == q.c.revision_id)
        .outerjoin(USERS, USERS.c.id == q.c.submitted_by)
        .where(q.c.recipe_id == recipe_id, shown_submitter(q.c.submitted_by))
        .where(sa.or_(q.c.provenance != "reported", REVISIONS.c.number == revision_number))
        .order_by(q.c.suite, q.c.id)
    )
    return annotate_quality([_row(r) for r in conn.execute(stmt)])
