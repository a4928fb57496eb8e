"""The certificate behind each speed row from a report, and its energy figures.

- ``cell_certificates``: one row per measurement of an accepted report that carried a certificate
  (``lair.registry.service.certificates``): what the recipe page shows of it as JSON (prefix cache,
  client load and verdict, order and seed, warm-up, idle gap, GPU telemetry summary, software), and
  the energy figures as columns (``j_per_output_token``, ``j_per_prompt_token``, ``avg_w``,
  ``peak_w``, ``energy_source``), filled on upload from the cell's certificate. Additive: the release
  before it never reads the table, and its uploads simply store no certificate rows.
- ``recipe_documents`` is emptied: the stored pages and JSON were rendered without the certificate
  and energy columns; ``lair serve`` renders them again at start (``stored.refresh_missing``), and
  until then each read is rendered by its route.

Rows of reports accepted before this migration have no certificate row; the page says so (their
report's ``results.json`` still holds the whole certificate).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cell_certificates",
        sa.Column(
            "measurement_id",
            sa.Integer,
            sa.ForeignKey("measurements.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("certificate", sa.Text, nullable=False),
        sa.Column("j_per_output_token", sa.Float),
        sa.Column("j_per_prompt_token", sa.Float),
        sa.Column("avg_w", sa.Float),
        sa.Column("peak_w", sa.Float),
        sa.Column("energy_source", sa.String(32)),
    )
    op.execute("DELETE FROM recipe_documents")


def downgrade() -> None:
    op.drop_table("cell_certificates")
    op.execute("DELETE FROM recipe_documents")
