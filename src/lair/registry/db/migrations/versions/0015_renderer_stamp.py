"""The stamp that tells which release's templates rendered the stored documents.

- ``registry_version.renderer``: the fingerprint (:data:`lair.registry.service.stored.renderer`) of
  the templates and view code that rendered the stored documents. A release whose templates changed
  without a migration (a new section, a fixed label) used to keep serving the pages the release
  before rendered until each recipe's next write. ``lair serve`` now compares the stamp with its own
  fingerprint before it serves, and when they differ marks the documents stale (``documents`` one
  behind ``n``): the routes render every read until every recipe is rendered again, and the refresh
  that stamps them current writes its fingerprint here.

Additive: a nullable column the release before never reads; NULL (every database when it gets this
column) is a fingerprint no release has, so the first start after this migration renders once.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("registry_version", sa.Column("renderer", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("registry_version") as t:
        t.drop_column("renderer")
