"""Registry tests run on SQLite and on a real PostgreSQL (a database of their own per session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
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


@pytest.fixture(scope="session")
def s3() -> Iterator[object]:
    """An S3-protocol server of the session's own (moto's standalone server on 127.0.0.1)."""
    from lair.testing.s3 import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture
def s3_url(s3: object, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://BUCKET/blobs`` on a new bucket of that server, its endpoint and keys in the environment."""
    import secrets

    for k, v in s3.env.items():  # type: ignore[attr-defined]
        monkeypatch.setenv(k, v)
    bucket = f"lair-{secrets.token_hex(4)}"
    s3.create_bucket(bucket)  # type: ignore[attr-defined]
    return f"s3://{bucket}/blobs"


@pytest.fixture
def llama_client(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, Engine, str]]:
    """The registry app with the examples and the llama recipe published, and alice's CLI token."""
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        token = create_token(conn, create_user(conn, "alice"), "cli")
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield c, engine, token
