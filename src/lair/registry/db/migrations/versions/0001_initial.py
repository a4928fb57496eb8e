"""Initial schema: users, recipes (+ facets, tags, full-text index), revisions, measurements, votes,
the version counter.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _users() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("display_name", sa.String(200), nullable=False, server_default=""),
        sa.Column("link", sa.String(500)),
        sa.Column("is_admin", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("hidden", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("password_hash", sa.String(200)),
        sa.Column("created_at", TS, nullable=False),
    )


def _recipes() -> None:
    op.create_table(
        "recipes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("slug", sa.String(200), nullable=False, unique=True),
        sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("upstream_id", sa.Integer, sa.ForeignKey("recipes.id")),
        sa.Column("upstream_revision", sa.Integer),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("summary", sa.Text, nullable=False, server_default=""),
        sa.Column("latest_revision", sa.Integer, nullable=False, server_default="1"),
        sa.Column("votes", sa.Integer, nullable=False, server_default="0"),
        sa.Column("hidden", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(100)),
        sa.Column("gpu_key", sa.String(100)),
        sa.Column("gpu_count", sa.Integer),
        sa.Column("vram_gb", sa.Float),
        sa.Column("model_id", sa.String(300)),
        sa.Column("model_key", sa.String(300)),
        sa.Column("max_context", sa.BigInteger),
        sa.Column("license", sa.String(100)),
        sa.Column("best_decode_tok_s", sa.Float),
        sa.Column("verified_rows", sa.Integer, nullable=False, server_default="0"),
        sa.Column("search_text", sa.Text, nullable=False, server_default=""),
    )
    for name, cols in (
        ("ix_recipes_votes", ["votes", "id"]),
        ("ix_recipes_updated", ["updated_at", "id"]),
        ("ix_recipes_engine", ["engine", "votes"]),
        ("ix_recipes_gpu", ["gpu_key", "gpu_count", "votes"]),
        ("ix_recipes_model", ["model_key", "votes"]),
        ("ix_recipes_context", ["max_context"]),
        ("ix_recipes_vram", ["vram_gb"]),
        ("ix_recipes_verified", ["verified_rows"]),
        ("ix_recipes_owner", ["owner_id"]),
    ):
        op.create_index(name, "recipes", cols)
    op.create_table(
        "recipe_tags",
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tag", sa.String(100), primary_key=True),
    )
    op.create_index("ix_recipe_tags_tag", "recipe_tags", ["tag", "recipe_id"])


def _revisions() -> None:
    op.create_table(
        "revisions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("toml", sa.Text, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("notes", sa.Text, nullable=False, server_default=""),
        sa.Column("author_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("recipe_id", "number", name="uq_revisions_recipe_number"),
    )
    op.create_index("ix_revisions_sha256", "revisions", ["sha256"])


def _measurements() -> None:
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "revision_id", sa.Integer, sa.ForeignKey("revisions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("context", sa.BigInteger, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False, server_default="1"),
        sa.Column("prefill_tok_s", sa.Float),
        sa.Column("decode_tok_s", sa.Float),
        sa.Column("decode_tok_s_per_stream", sa.Float),
        sa.Column("ttft_ms", sa.Float),
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
    op.create_index("ix_measurements_recipe", "measurements", ["recipe_id", "context"])
    op.create_index("ix_measurements_context_decode", "measurements", ["context", "decode_tok_s"])


def _votes_and_version() -> None:
    op.create_table(
        "votes",
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("recipe_id", sa.Integer, sa.ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_votes_recipe", "votes", ["recipe_id"])
    op.create_table(
        "registry_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("changed_at", TS, nullable=False),
    )
    op.execute("INSERT INTO registry_version (id, n, changed_at) VALUES (1, 0, CURRENT_TIMESTAMP)")


def _full_text() -> None:
    """SQLite: an FTS5 table keyed by recipe id; PostgreSQL: a generated tsvector with a GIN index."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute("CREATE VIRTUAL TABLE recipe_fts USING fts5(body, tokenize='porter unicode61')")
    else:
        op.execute(
            "ALTER TABLE recipes ADD COLUMN search_tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED"
        )
        op.execute("CREATE INDEX ix_recipes_search ON recipes USING gin (search_tsv)")


def upgrade() -> None:
    _users()
    _recipes()
    _revisions()
    _measurements()
    _votes_and_version()
    _full_text()


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE recipe_fts")
    for table in (
        "registry_version",
        "votes",
        "measurements",
        "revisions",
        "recipe_tags",
        "recipes",
        "users",
    ):
        op.drop_table(table)
