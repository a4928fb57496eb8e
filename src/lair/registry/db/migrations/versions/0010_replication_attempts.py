"""Replication attempts: a report uploaded by ``lair reproduce --submit`` is linked to the row it
replicates (``POST /api/v1/reports?replicates=SLUG@REV#ROW``), with the registry's verdict.

- ``replication_attempts``: the row replicated (``target_id``), the attempt's report and its row of
  the same cell, ``replicated`` / ``not-reproduced``, the decode delta and every figure's comparison
  (JSON), the attempt's rig and uploader. Additive: the release before it never reads the table.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replication_attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "target_id", sa.Integer, sa.ForeignKey("measurements.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "report_id", sa.String(32), sa.ForeignKey("reports.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("measurements.id", ondelete="CASCADE")),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("delta_pct", sa.Float),
        sa.Column("comparison", sa.Text, nullable=False),
        sa.Column("rig_fingerprint", sa.String(64), nullable=False),
        sa.Column("submitted_by", sa.Integer, sa.ForeignKey("users.id")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_replication_target", "replication_attempts", ["target_id", "created_at"])
    op.create_index("ix_replication_report", "replication_attempts", ["report_id"])


def downgrade() -> None:
    op.drop_index("ix_replication_report", "replication_attempts")
    op.drop_index("ix_replication_target", "replication_attempts")
    op.drop_table("replication_attempts")
