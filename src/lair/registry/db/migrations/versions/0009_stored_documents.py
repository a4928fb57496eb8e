"""Stored documents, drawn charts, narrow list versions, and the indexes the searches at 100k need.

- ``recipe_documents``: each visible recipe's JSON document and anonymous page (and each revision's),
  rendered by the write that changes them (``lair.registry.service.stored``). The table starts empty:
  a recipe without rows is rendered by its route on every read until ``lair serve`` fills them in at
  start (``stored.refresh_missing``) or the next write to it renders them.
- ``chart_svgs``: drawn speed charts keyed by the sha256 of what they show.
- ``registry_version.lists`` / ``.votes``: the counters the cache of lists and searches keys on
  (every write still bumps ``n``).
- Indexes for the plans of the filtered search and its sorts (EXPLAIN QUERY PLAN / EXPLAIN ANALYZE at
  100k recipes): the visible-recipe sorts walk ``(hidden, <sort key>, id)``; a GPU filter walks
  ``(gpu_key, votes, id)`` in the sort's order and stops at the page's 20 rows (with
  ``(gpu_key, max_context)`` it sorted every recipe of that GPU: 33 ms at 100k); the hidden users the
  visibility test excludes are found through ``ix_users_hidden`` instead of a scan of every user.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_recipes_shown_votes": ["hidden", "votes", "id"],
    "ix_recipes_shown_updated": ["hidden", "updated_at", "id"],
    "ix_recipes_gpu_votes": ["gpu_key", "votes", "id"],
}


def upgrade() -> None:
    op.create_table(
        "recipe_documents",
        sa.Column("slug", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("etag", sa.String(40), nullable=False),
        sa.Column("modified", sa.String(40), nullable=False),
    )
    op.create_index("ix_recipe_documents_recipe", "recipe_documents", ["recipe_id"])
    op.create_table(
        "chart_svgs",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("svg", sa.Text, nullable=False),
    )
    with op.batch_alter_table("registry_version") as t:
        t.add_column(sa.Column("lists", sa.BigInteger, nullable=False, server_default="0"))
        t.add_column(sa.Column("votes", sa.BigInteger, nullable=False, server_default="0"))
    for name, cols in _INDEXES.items():
        op.create_index(name, "recipes", cols)
    op.create_index("ix_users_hidden", "users", ["hidden"])


def downgrade() -> None:
    op.drop_index("ix_users_hidden", "users")
    for name in _INDEXES:
        op.drop_index(name, "recipes")
    with op.batch_alter_table("registry_version") as t:
        t.drop_column("votes")
        t.drop_column("lists")
    op.drop_table("chart_svgs")
    op.drop_index("ix_recipe_documents_recipe", "recipe_documents")
    op.drop_table("recipe_documents")
