"""The index a revision finds the recipe's forks through.

A revision renders the stored documents of the recipe's forks too (a fork's page says when its
upstream has a newer revision), and looked them up with ``WHERE upstream_id = ?``: a scan of every
recipe (4.7 ms of a 25 ms revision at 10k recipes on SQLite, ten times that at 100k).
``ix_recipes_upstream`` makes it one index lookup. Additive: the release before uses it too, unaware.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_recipes_upstream", "recipes", ["upstream_id"])


def downgrade() -> None:
    op.drop_index("ix_recipes_upstream", "recipes")
