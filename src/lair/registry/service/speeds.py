"""The speed facets of a recipe, recomputed from its measurements after every write that changes them
(a report accepted, a row retracted, a new revision): what the decode sort and the verified filter of
the search compare.

- ``best_decode_tok_s``: the best decode speed of the latest revision's reported rows and of every
  verified or replicated row (the rows a recipe page shows);
- ``best_verified_decode_tok_s``: the best of the verified or replicated rows only;
- ``verified_rows``: how many verified or replicated rows there are.

Retracted rows count in none of them.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.schema import Measurement, Recipe, Revision

__all__ = ["refresh_speeds"]


RECIPES = cast(sa.Table, Recipe.__table__)


def refresh_speeds(conn: Connection, recipe_id: int) -> None:
    m, rv = cast(sa.Table, Measurement.__table__), cast(sa.Table, Revision.__table__)
    verified = m.c.provenance != "reported"
    latest = sa.select(RECIPES.c.latest_revision).where(RECIPES.c.id == recipe_id).scalar_subquery()
    best, best_verified, count = conn.execute(
        sa.select(
            sa.func.max(m.c.decode_tok_s).filter(sa.or_(verified, rv.c.number == latest)),
            sa.func.max(m.c.decode_tok_s).filter(verified),
            sa.func.count().filter(verified),
        )
        .select_from(m.join(rv, rv.c.id == m.c.revision_id))
        .where(m.c.recipe_id == recipe_id, m.c.retracted_at.is_(None))
    ).one()
    conn.execute(
        sa.update(RECIPES)
        .where(RECIPES.c.id == recipe_id)
        .values(best_decode_tok_s=best, best_verified_decode_tok_s=best_verified, verified_rows=count)
    )
