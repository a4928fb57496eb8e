"""External identities: a GitHub or Hugging Face account (provider + its stable subject id) linked to a user.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "external_identities",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("login", sa.String(255), nullable=False, server_default=""),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_sign_in_at", TS, nullable=False),
        sa.UniqueConstraint("provider", "subject", name="uq_external_identities_provider_subject"),
    )
    op.create_index("ix_external_identities_user", "external_identities", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_external_identities_user", "external_identities")
    op.drop_table("external_identities")
