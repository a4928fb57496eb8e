"""The charts a write left to draw: which engine has a started drawer in this process (its queue) and
the ``chart_pending`` rows of the recipes whose stored page waits for a chart. The stored documents
(:mod:`.stored`) hand their charts over through it; the drawer (:mod:`.drawer`) registers here and
renders the page again once drawn, so neither imports the other's module in a circle."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Protocol, cast

import sqlalchemy as sa
from sqlalchemy import Engine

from lair.registry.db.schema import ChartPending

if TYPE_CHECKING:
    from lair.report.charts import Chart

__all__ = ["PENDING", "Queue", "drawer_for", "note_pending", "register", "unregister"]

PENDING = cast(sa.Table, ChartPending.__table__)
_NOTE = sa.text("INSERT INTO chart_pending (recipe_id) VALUES (:rid) ON CONFLICT (recipe_id) DO NOTHING")


class Queue(Protocol):
    """What a write needs of a started drawer: to take a recipe's charts."""

    def submit(self, recipe_id: int, charts: list[Chart]) -> None: ...


_DRAWERS: weakref.WeakKeyDictionary[Engine, Queue] = weakref.WeakKeyDictionary()


def register(engine: Engine, drawer: Queue) -> None:
    _DRAWERS[engine] = drawer


def unregister(engine: Engine) -> None:
    _DRAWERS.pop(engine, None)


def drawer_for(engine: Engine) -> Queue | None:
    """The started drawer of ``engine`` in this process (None: draw inline)."""
    return _DRAWERS.get(engine)


def note_pending(conn: sa.Connection, recipe_id: int) -> None:
    """In the write's transaction: the recipe's stored page waits for a chart."""
    conn.execute(_NOTE, {"rid": recipe_id})
