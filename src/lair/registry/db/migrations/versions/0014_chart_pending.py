"""The recipes whose stored page waits for a chart.

A write that changes a recipe's rows used to draw its two speed charts (matplotlib, 0.2-0.5 s)
inside its transaction, and a revision's p99 under a read load was over a second. Now the write
stores the page with a placeholder, notes the recipe in ``chart_pending`` and the drawer of its
process draws the charts after the write and renders the page again; a process that starts picks up
what one that stopped left. Additive: the release before neither writes nor reads it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chart_pending",
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("chart_pending")
