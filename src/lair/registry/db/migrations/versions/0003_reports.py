"""Uploaded run reports: one row per accepted report (its verified speed rows are measurements).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reports",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "revision_id", sa.Integer, sa.ForeignKey("revisions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("submitted_by", sa.Integer, sa.ForeignKey("users.id")),
        sa.Column("rig_fingerprint", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("files", sa.Text, nullable=False),
        sa.Column("run_name", sa.String(500), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_reports_recipe", "reports", ["recipe_id", "created_at"])
    op.create_index("ix_measurements_report", "measurements", ["report_id"])


def downgrade() -> None:
    op.drop_index("ix_measurements_report", "measurements")
    op.drop_table("reports")
