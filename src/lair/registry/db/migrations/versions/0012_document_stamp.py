"""The stamp that tells the stored documents apart from writes that did not render them.

- ``registry_version.documents``: bumped together with ``n`` by every write of a release that keeps
  the stored documents (``publish.bump_version``), so ``n - documents`` stays put while only such
  releases write. A write by a release before this migration (one that renders no documents, or
  renders them as it did) bumps ``n`` alone: ``documents`` falls behind, the stored rows are not
  served (``stored.DOCUMENT_SQL`` reads them only while ``documents = n``) and every read is
  rendered by its route until ``stored.refresh_stale`` has rendered every recipe again and set
  ``documents = n`` (no such write in between). This is what lets an old release serve and write
  while the schema is upgraded and the new release starts beside it (docs/deploy.md, "Upgrading
  while serving").

Additive: a nullable column the release before never reads. A database that holds recipes starts
stale (``n - 1``: rendered again once, since a release before this one may have written without
rendering); an empty one starts current.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("registry_version", sa.Column("documents", sa.BigInteger, nullable=True))
    op.execute(
        "UPDATE registry_version SET documents = CASE WHEN EXISTS (SELECT 1 FROM recipes) THEN n - 1"
        " ELSE n END"
    )


def downgrade() -> None:
    with op.batch_alter_table("registry_version") as t:
        t.drop_column("documents")
