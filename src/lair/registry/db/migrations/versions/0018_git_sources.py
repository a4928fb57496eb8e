"""Where an imported revision came from (``lair registry import-git``): repository, path and commit
per revision. A new table: no existing row changes, and a release before this one never reads it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "git_sources",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "revision_id", sa.Integer, sa.ForeignKey("revisions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("repo", sa.String(500), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "path", "commit", name="uq_git_source"),
    )
    op.create_index("ix_git_source_revision", "git_sources", ["revision_id"])


def downgrade() -> None:
    op.drop_index("ix_git_source_revision", "git_sources")
    op.drop_table("git_sources")
