"""Real run reports for the registry's verification: the bundled tiny-cpu example launched and
benchmarked on llama.cpp (xllamacpp) through the real ``lair`` command, once per session; and the
registry they are uploaded to (the real app in process, over SQLite and PostgreSQL). The headless
Chromium (``browser``) is the shared one of :mod:`lair.testing.fixtures`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient
from verify_helpers import BENCH, lair, tiny_copy

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import pg_database


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with pg_database() as url:
        yield url


def _site(request: pytest.FixtureRequest, tmp_path: Path, blobs: str) -> Iterator[tuple[TestClient, Engine]]:
    url = (
        connect_url(str(tmp_path / "r.sqlite3"))
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    reset_limits()  # the in-process rate limits count per uploader across tests; each test starts afresh
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        token = create_token(conn, create_user(conn, "rig-owner"), "cli")
    with TestClient(create_app(url, blobs=blobs), raise_server_exceptions=False) as c:
        c.headers["authorization"] = f"Bearer {token}"
        yield c, engine
    if request.param == "postgresql":
        migrate(engine, "base")
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, Engine, Path]]:
    """The registry (bundled examples published, an uploader's token set) and its blob folder."""
    blobs = tmp_path / "blobs"
    for c, engine in _site(request, tmp_path, str(blobs)):
        yield c, engine, blobs


@pytest.fixture(params=["sqlite", "postgresql"])
def db_blobs_site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, Engine]]:
    """The same registry with ``--blobs db``: the raw files go to its own database."""
    yield from _site(request, tmp_path, "db")


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    """A real report folder of the tiny-cpu example (a small bench: ctx 256, 128 tokens, 2 repeats)."""
    recipe = tiny_copy(tmp_path_factory.mktemp("tiny-report"))
    flags: list[str] = []
    for _ in range(3):
        res = lair("launch", str(recipe), *BENCH, "--json")
        assert res.returncode == 0, res.stderr
        report = Path(json.loads(res.stdout)["report"])
        cells = json.loads((report / "results.json").read_text())["bench"]["cells"]
        # on a loaded machine the bench may flag its own run client-bound, or read a stream's tokens in
        # one read and have no decode speed for a cell: not a clean run for the tests to tamper with
        flags = [f for c in cells for f in c["flags"]]
        flags += ["no decode speed" for c in cells if c.get("decode_tok_s_per_stream") is None]
        if not flags:
            return report
    raise AssertionError(f"no clean run in 3 tries: {flags}")


@pytest.fixture
def report_copy(tiny_report: Path, tmp_path: Path) -> Path:
    """A copy of the session's report to tamper with."""
    out = tmp_path / tiny_report.name
    shutil.copytree(tiny_report, out)
    return out
