"""Registry tests run on SQLite and on a real PostgreSQL (a database of their own per session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.testing.registry import pg_database


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with pg_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database at schema head; on PostgreSQL the schema is dropped again afterwards."""
    if request.param == "sqlite":
        url = connect_url(str(tmp_path / "registry.sqlite3"))
        yield url
        return
    url = connect_url(request.getfixturevalue("pg_url"))
    yield url
    engine = make_engine(url)
    migrate(engine, "base")
    engine.dispose()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    migrate(eng)
    yield eng
    eng.dispose()
