"""An account's standing when it filed a report: how old it was and what it had filed before.

A free account costs nothing, so two of them replicate a forged row as well as two people would
(:mod:`.tiers`, :mod:`.replication`). The registry cannot tell the accounts apart from people; what it
can show is that an account was made for the occasion. On upload (:func:`filing_standing`) each report
keeps its account's age in days (``filer_age_days``), how many reports and recipe revisions it had
filed before (``filer_history``) and whether that made it *new* (``filer_new``, migration 0016): younger
than the ``new_account_days`` setting (``LAIR_REGISTRY_NEW_ACCOUNT_DAYS``, 7 by default) or with no
history. The standing is the one at filing time, so it never changes once stored, and a stored page
never goes stale. A report from before migration 0016 has no standing (``new`` is None: unknown).
"""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.registry.db.schema import Report, Revision, User

__all__ = [
    "COLUMNS",
    "DEFAULT_NEW_ACCOUNT_DAYS",
    "account_standing",
    "filing_standing",
    "has_standings",
    "standing_columns",
]

DEFAULT_NEW_ACCOUNT_DAYS = 7.0
"""An account younger than this many days when it files is shown as new (the setting's default)."""
_DAY_S = 86400.0


_REPORTS = cast(sa.Table, Report.__table__)
REVISIONS = cast(sa.Table, Revision.__table__)
USERS = cast(sa.Table, User.__table__)
COLUMNS = ("filer_age_days", "filer_history", "filer_new")
_AT_0016: weakref.WeakSet[Engine] = weakref.WeakSet()


def has_standings(conn: Connection) -> bool:
    """Whether ``reports`` has migration 0016's columns (remembered per engine once it has: a test of
    an older migration writes and renders at that schema)."""
    if conn.engine in _AT_0016:
        return True
    if COLUMNS[0] in {c["name"] for c in sa.inspect(conn).get_columns("reports")}:
        _AT_0016.add(conn.engine)
        return True
    return False


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def filing_standing(conn: Connection, user_id: int | None, at: datetime, days: float) -> dict[str, Any]:
    """The columns ``filer_age_days``, ``filer_history`` and ``filer_new`` of a report ``user_id``
    files at ``at``; all None without an account (none at all before migration 0016)."""
    if not has_standings(conn):
        return {}
    if user_id is None:
        return dict.fromkeys(COLUMNS)
    made = conn.execute(sa.select(USERS.c.created_at).where(USERS.c.id == user_id)).scalar_one()
    age = max((_aware(at) - _aware(made)).total_seconds() / _DAY_S, 0.0)
    reports = sa.select(sa.func.count()).select_from(_REPORTS).where(_REPORTS.c.submitted_by == user_id)
    revisions = sa.select(sa.func.count()).select_from(REVISIONS).where(REVISIONS.c.author_id == user_id)
    history = int(conn.execute(reports).scalar_one()) + int(conn.execute(revisions).scalar_one())
    return {
        "filer_age_days": round(age, 3),
        "filer_history": history,
        "filer_new": age < days or history == 0,
    }


def standing_columns(conn: Connection, reports: sa.Table) -> list[sa.ColumnElement[Any]]:
    """The standing columns of ``reports`` to select beside a row (:func:`account_standing` reads
    them; NULLs before migration 0016)."""
    if not has_standings(conn):
        return [sa.null().label(c) for c in COLUMNS]
    return [reports.c[c] for c in COLUMNS]


def _why(age: float | None, history: int | None) -> str:
    parts = []
    if age is not None:
        parts.append(f"{age:.1f} days old")
    if history == 0:
        parts.append("nothing filed before")
    elif history is not None:
        parts.append(f"{history} report(s) and revision(s) filed before")
    return "an account " + ", ".join(parts) + " when it filed" if parts else ""


def account_standing(row: Any) -> dict[str, Any]:
    """``{"new", "age_days", "history", "why"}`` of the account behind a selected row (``new`` None:
    filed before the registry kept standings)."""
    new = None if row.filer_new is None else bool(row.filer_new)
    why = _why(row.filer_age_days, row.filer_history) if new else None
    return {"new": new, "age_days": row.filer_age_days, "history": row.filer_history, "why": why}
