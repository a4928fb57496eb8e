"""Migrations: an empty database upgrades to head and downgrades back to nothing, on both databases."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

import lair.registry.db.migrations as mig
from lair.registry.db.engine import current_revision, make_engine, migrate
from lair.registry.db.schema import Base

APP_TABLES = {"users", "recipes", "recipe_tags", "revisions", "measurements", "votes", "registry_version"}
APP_TABLES |= {"sessions", "api_tokens", "reports", "quality_measurements", "external_identities", "blobs"}
VERSIONS = Path(mig.__file__).parent / "versions"
HEAD = sorted(p.name[:4] for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))[-1]


def test_upgrade_to_head_and_back_down(db_url: str) -> None:
    engine = make_engine(db_url)
    assert current_revision(engine) is None
    assert not APP_TABLES & set(sa.inspect(engine).get_table_names())
    migrate(engine)
    assert current_revision(engine) == HEAD
    insp = sa.inspect(engine)
    assert set(insp.get_table_names()) >= APP_TABLES
    # the migration creates what the models declare, column for column
    for table in Base.metadata.sorted_tables:
        have = {c["name"] for c in insp.get_columns(table.name)}
        assert {c.name for c in table.columns} <= have, table.name
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT n FROM registry_version WHERE id = 1")).scalar_one() == 0
    migrate(engine, "0001")  # one step down: the accounts tables go, the recipes stay
    assert current_revision(engine) == "0001"
    assert (
        "sessions" not in sa.inspect(engine).get_table_names()
        and "recipes" in sa.inspect(engine).get_table_names()
    )
    migrate(engine)
    assert current_revision(engine) == HEAD
    migrate(engine, "base")
    assert current_revision(engine) is None
    left = set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    assert left == set()
    engine.dispose()


def test_migrations_are_numbered_and_chained() -> None:
    files = sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert files, "no migrations shipped"
    prev = None
    for f in files:
        text = f.read_text()
        num = f.name[:4]
        assert f'revision = "{num}"' in text
        assert (f"down_revision = {prev!r}" if prev else "down_revision = None") in text.replace(
            "'", '"'
        ).replace('"None"', "None") or (prev and f'down_revision = "{prev}"' in text)
        prev = num
