"""A real report uploaded to a blob store on a full disk (a 64 KiB tmpfs; the report's engine log is
larger) answers 503 ``unavailable`` with ``Retry-After`` and leaves nothing: no row in any table, no
blob, no temporary file; once the disk has room, the same report is accepted. A transaction that
fails after the blobs were written (the caller's commit) deletes them too. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.client import pack_report
from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.actor import Actor
from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.outage import DISK_RETRY_S
from lair.registry.service.publish import seed_examples
from lair.registry.service.reports import submit_report
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.disk import remount, tiny_tmpfs
from lair.testing.registry import db_snapshot

pytestmark = [pytest.mark.integration]


def _files(where: Path) -> list[Path]:
    return [p for p in where.rglob("*") if p.is_file()]


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Engine, int]]:
    """A migrated, seeded registry database and an uploader (its user id)."""
    url = (
        connect_url(str(tmp_path / "r.sqlite3"))
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    reset_limits()
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        uid = create_user(conn, "rig-owner")
    yield url, engine, uid
    if request.param == "postgresql":
        migrate(engine, "base")
    engine.dispose()


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    with tiny_tmpfs(tmp_path / "disk", "64k") as where:
        yield where


def _padded(report: Path) -> bytes:
    """The report with an engine log of 256 KiB: more than the disk holds."""
    log = report / "logs" / "engine.log"
    log.parent.mkdir(exist_ok=True)
    log.write_bytes((log.read_bytes() if log.exists() else b"") + b"INFO step ok\n" * ((256 << 10) // 13))
    assert log.stat().st_size > 64 << 10
    return pack_report(report)


def _post(c: TestClient, data: bytes) -> Any:
    return c.post("/api/v1/reports", content=data, headers={"content-type": "application/gzip"})


def test_an_upload_to_a_full_disk_is_503_and_stores_nothing(
    db: tuple[str, Engine, int], full: Path, report_copy: Path
) -> None:
    url, engine, uid = db
    with engine.begin() as conn:
        token = create_token(conn, uid)
    data = _padded(report_copy)
    before = db_snapshot(url)
    with TestClient(create_app(url, blobs=str(full / "blobs")), raise_server_exceptions=False) as c:
        c.headers["authorization"] = f"Bearer {token}"
        r = _post(c, data)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == str(DISK_RETRY_S)
        err = r.json()["error"]
        assert (err["code"], err["message"]) == ("unavailable", "the registry's disk is full")
        assert db_snapshot(url) == before
        assert _files(full) == []  # the blobs that fitted were deleted, the one that did not left no part
        remount(full, "8m")
        again = _post(c, data)
        assert again.status_code == 201, again.text
        assert {p.name for p in _files(full)} >= {"engine.log", "results.json"}


def test_a_failed_commit_deletes_the_blobs_it_wrote(
    db: tuple[str, Engine, int], tmp_path: Path, report_copy: Path
) -> None:
    url, engine, uid = db
    store = FileBlobStore(tmp_path / "blobs")
    before = db_snapshot(url)
    with pytest.raises(RuntimeError, match="the commit failed"), engine.begin() as conn:
        out = submit_report(conn, pack_report(report_copy), actor=Actor(uid, "rig-owner"), store=store)
        assert _files(tmp_path / "blobs")  # written, not committed yet
        assert store.get(f"reports/{out['id']}/results.json")
        raise RuntimeError("the commit failed")  # the transaction rolls back
    assert db_snapshot(url) == before
    assert _files(tmp_path / "blobs") == []
    with engine.begin() as conn:  # and a report that commits keeps its blobs
        out = submit_report(conn, pack_report(report_copy), actor=Actor(uid, "rig-owner"), store=store)
    with engine.begin() as conn:  # a later transaction on another connection rolls back: no effect
        conn.rollback()
    assert store.get(f"reports/{out['id']}/results.json") == (report_copy / "results.json").read_bytes()
