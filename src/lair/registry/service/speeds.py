"""The speed facets of a recipe, recomputed from its measurements after every write that changes them
(a report accepted, a row retracted, a new revision): what the decode sort and the verified filter of
the search compare.

- ``best_decode_tok_s``: the best decode speed of the latest revision's reported rows and of every
  row from a report, verified or reported-by-report (the rows a recipe page shows);
- ``best_verified_decode_tok_s``: the best of the verified (or replicated) rows only: a
  reported-by-report row was not physically checked and never counts as verified;
- ``verified_rows``: how many verified or replicated rows there are.

Retracted rows count in none of them, nor do the rows of a hidden user (:func:`shown_submitter`):
hiding or showing a user recomputes the facets of every recipe they measured (:func:`refresh_for_user`).
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.schema import Measurement, QualityMeasurement, Recipe, Revision, User

__all__ = ["refresh_for_user", "refresh_speeds", "shown_submitter"]


RECIPES = cast(sa.Table, Recipe.__table__)
_USERS = cast(sa.Table, User.__table__)


def shown_submitter(submitted_by: sa.ColumnElement[int | None]) -> sa.ColumnElement[bool]:
    """The speed or quality rows shown (pages, JSON, sorts, speed facets): those not submitted by a
    hidden user, whoever owns the recipe. Showing the user again brings them back; nothing is deleted."""
    hidden = sa.select(_USERS.c.id).where(_USERS.c.hidden == sa.true())
    return sa.or_(submitted_by.is_(None), submitted_by.not_in(hidden))


def refresh_for_user(conn: Connection, user_id: int) -> None:
    """Recompute the speed facets of every recipe the user submitted rows to (after hiding or showing
    them, in the same transaction)."""
    m, q = cast(sa.Table, Measurement.__table__), cast(sa.Table, QualityMeasurement.__table__)
    ids = sa.union(
        sa.select(m.c.recipe_id).where(m.c.submitted_by == user_id),
        sa.select(q.c.recipe_id).where(q.c.submitted_by == user_id),
    )
    for recipe_id in conn.execute(ids).scalars().all():
        refresh_speeds(conn, recipe_id)


def refresh_speeds(conn: Connection, recipe_id: int) -> None:
    m, rv = cast(sa.Table, Measurement.__table__), cast(sa.Table, Revision.__table__)
    from_report = m.c.provenance != "reported"  # verified or reported-by-report: shown at every revision
    verified = m.c.provenance == "verified"  # physically checked (replicated is computed from these)
    latest = sa.select(RECIPES.c.latest_revision).where(RECIPES.c.id == recipe_id).scalar_subquery()
    best, best_verified, count = conn.execute(
        sa.select(
            sa.func.max(m.c.decode_tok_s).filter(sa.or_(from_report, rv.c.number == latest)),
            sa.func.max(m.c.decode_tok_s).filter(verified),
            sa.func.count().filter(verified),
        )
        .select_from(m.join(rv, rv.c.id == m.c.revision_id))
        .where(m.c.recipe_id == recipe_id, m.c.retracted_at.is_(None), shown_submitter(m.c.submitted_by))
    ).one()
    conn.execute(
        sa.update(RECIPES)
        .where(RECIPES.c.id == recipe_id)
        .values(best_decode_tok_s=best, best_verified_decode_tok_s=best_verified, verified_rows=count)
    )
