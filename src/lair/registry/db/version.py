"""The registry's clock and its version counter: :func:`now` (aware UTC) and :func:`bump_version`, the
first statement of every write."""

from __future__ import annotations

import weakref
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.tables import VERSION

__all__ = ["bump_version", "now"]


def now() -> datetime:
    return datetime.now(UTC)


_STAMPED: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def _stamped(conn: Connection) -> bool:
    """Whether the database has ``registry_version.documents`` (migration 0012; remembered per engine
    once it has: tests of older migrations write on older schemas)."""
    if conn.engine in _STAMPED:
        return True
    if any(c["name"] == "documents" for c in sa.inspect(conn).get_columns("registry_version")):
        _STAMPED.add(conn.engine)
        return True
    return False


def bump_version(conn: Connection) -> None:
    """The first statement of every write: ``n`` and, this release keeping the stored documents,
    ``documents`` with it (``n - documents`` moves only for a write of an older release, which
    bumps ``n`` alone: :func:`~.stored.refresh_stale`). Its row lock orders concurrent writers."""
    values = {"n": VERSION.c.n + 1, "changed_at": now()}
    if _stamped(conn):
        values["documents"] = VERSION.c.documents + 1  # NULL stays NULL: stale until refreshed
    conn.execute(sa.update(VERSION).where(VERSION.c.id == 1).values(values))
