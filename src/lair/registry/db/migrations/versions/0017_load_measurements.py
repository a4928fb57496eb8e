"""Open-loop load cells and sweep headlines of accepted reports (``lair bench --rate/--sweep``),
recomputed by the registry from ``load.jsonl`` (lair.registry.service.load_cells). A new table: no
existing row changes, and a release before this one never reads or writes it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "load_measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "revision_id", sa.Integer, sa.ForeignKey("revisions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("report_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("context", sa.BigInteger, nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("offered_rate", sa.Float),
        sa.Column("cache", sa.String(10), nullable=False, server_default="cold"),
        sa.Column("figures", sa.Text, nullable=False),
        sa.Column("flags", sa.Text, nullable=False, server_default="[]"),
        sa.Column("provenance", sa.String(20), nullable=False),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("submitted_by", sa.Integer, sa.ForeignKey("users.id")),
        sa.Column("rig_fingerprint", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_load_recipe", "load_measurements", ["recipe_id", "report_id"])
    op.create_index("ix_load_report", "load_measurements", ["report_id"])


def downgrade() -> None:
    op.drop_index("ix_load_report", "load_measurements")
    op.drop_index("ix_load_recipe", "load_measurements")
    op.drop_table("load_measurements")
