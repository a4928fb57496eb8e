"""Quality rows: one per suite score, with the speed rows' provenance tiers and retraction; the
quality figures already published (each revision's ``meta.quality``) become reported rows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _table() -> sa.Table:
    return op.create_table(
        "quality_measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "revision_id", sa.Integer, sa.ForeignKey("revisions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("suite", sa.String(200), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False, server_default=""),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("unit", sa.String(20), nullable=False, server_default="%"),
        sa.Column("n", sa.Integer),
        sa.Column("stderr", sa.Float),
        sa.Column("repeats", sa.Integer),
        sa.Column("spread_min", sa.Float),
        sa.Column("spread_max", sa.Float),
        sa.Column("flips", sa.Integer),
        sa.Column("provenance", sa.String(20), nullable=False, server_default="reported"),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("submitted_by", sa.Integer, sa.ForeignKey("users.id")),
        sa.Column("rig_fingerprint", sa.String(64)),
        sa.Column("report_id", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("retracted_at", TS),
        sa.Column("retracted_reason", sa.Text),
        sa.Column("retracted_by", sa.Integer, sa.ForeignKey("users.id")),
    )


def _reported(toml: str) -> list[dict[str, Any]]:
    try:
        meta = tomllib.loads(toml).get("meta") or {}
    except tomllib.TOMLDecodeError:
        return []
    return [q for q in meta.get("quality") or [] if isinstance(q, dict) and "suite" in q and "score" in q]


def _backfill(table: sa.Table) -> None:
    conn, t = op.get_bind(), datetime.now(UTC)
    revs = sa.table(
        "revisions", sa.column("id"), sa.column("recipe_id"), sa.column("toml"), sa.column("author_id")
    )
    rows = [
        {
            "recipe_id": r.recipe_id,
            "revision_id": r.id,
            "suite": str(q["suite"])[:200],
            "score": float(q["score"]),
            "unit": str(q.get("unit", "%"))[:20],
            "note": str(q.get("note", "")),
            "provenance": "reported",
            "submitted_by": r.author_id,
            "created_at": t,
            "metric": "",
        }
        for r in conn.execute(sa.select(revs).order_by(revs.c.id))
        for q in _reported(r.toml)
    ]
    if rows:
        op.bulk_insert(table, rows)


def upgrade() -> None:
    table = _table()
    op.create_index("ix_quality_recipe", "quality_measurements", ["recipe_id", "suite"])
    op.create_index("ix_quality_report", "quality_measurements", ["report_id"])
    _backfill(table)


def downgrade() -> None:
    op.drop_table("quality_measurements")
