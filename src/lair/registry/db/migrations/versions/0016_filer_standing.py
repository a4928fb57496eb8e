"""The standing of the account that filed each report: its age in days and how many reports and
revisions it had filed before, and whether that made it new (:mod:`lair.registry.service.standing`).
Replications by accounts made for the occasion are shown as such. Additive and nullable: a report from
before (or filed by the release before, during a rolling upgrade) has no standing.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COLUMNS = (("filer_age_days", sa.Float()), ("filer_history", sa.Integer()), ("filer_new", sa.Boolean()))


def upgrade() -> None:
    # plain ALTER TABLE on both databases: a batch would copy the table on SQLite (and reflect the
    # expression index of recipes, which it cannot)
    for name, kind in COLUMNS:
        op.add_column("reports", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    for name, _kind in reversed(COLUMNS):
        op.drop_column("reports", name)
