"""Sorting by verified numbers: each recipe's best verified decode speed, indexed for ``sort=decode``
with ``verified=1``; ``verified_rows`` and the new column are filled from the measurements as they are
(non-retracted verified or replicated rows). The per-recipe measurements index gains the decode speed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_LIVE = "m.recipe_id = recipes.id AND m.provenance <> 'reported' AND m.retracted_at IS NULL"


def upgrade() -> None:
    op.add_column("recipes", sa.Column("best_verified_decode_tok_s", sa.Float))
    op.execute(
        "UPDATE recipes SET "
        f"best_verified_decode_tok_s = (SELECT max(m.decode_tok_s) FROM measurements m WHERE {_LIVE}), "
        f"verified_rows = (SELECT count(*) FROM measurements m WHERE {_LIVE})"
    )
    # the sort key as search.py writes it (the -1.0 literal included), so ORDER BY ... LIMIT walks it
    op.create_index(
        "ix_recipes_verified_decode",
        "recipes",
        [sa.text("coalesce(best_verified_decode_tok_s, -1.0) DESC"), sa.text("id DESC")],
    )
    # the best decode at a context (sort=decode&context=N, either tier) is a correlated max per
    # recipe: with decode_tok_s in the index it is one index seek, where (recipe_id, context) let
    # SQLite's planner pick the (context, decode) index and scan every recipe's rows at that context
    op.create_index("ix_measurements_recipe_decode", "measurements", ["recipe_id", "context", "decode_tok_s"])
    op.drop_index("ix_measurements_recipe", "measurements")


def downgrade() -> None:
    op.create_index("ix_measurements_recipe", "measurements", ["recipe_id", "context"])
    op.drop_index("ix_measurements_recipe_decode", "measurements")
    op.drop_index("ix_recipes_verified_decode", "recipes")
    # plain ALTER TABLE on both (SQLite >= 3.35): a batch copy would rebuild the referenced recipes table
    op.execute("ALTER TABLE recipes DROP COLUMN best_verified_decode_tok_s")
