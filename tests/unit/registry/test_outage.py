"""Outages are told from bugs: real driver errors of a database that is locked, unreachable or full
and a real full disk (a 64 KiB tmpfs) become 503 ``unavailable`` with a retry delay; a missing table
or a broken constraint stays an error (500 or its own 4xx). A blob written to a full disk leaves
nothing partial: no temporary file, and a replaced key keeps its old bytes.

The app's answers (503 + Retry-After on reads, writes and /api/v1/health, an upload to a full disk):
tests/integration/registry/test_pg_outage.py and tests/integration/verify/test_full_disk.py."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.outage import DATABASE_RETRY_S, DISK_RETRY_S, Unavailable, unavailable
from lair.testing.disk import tiny_tmpfs
from lair.testing.registry import free_port


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    with tiny_tmpfs(tmp_path / "disk", "64k") as where:
        yield where


def _is(u: Unavailable | None, retry: int) -> None:
    assert u is not None and (u.status, u.code, u.retry_after) == (503, "unavailable", retry)


def test_a_blob_that_does_not_fit_leaves_nothing_partial(tiny_disk: Path) -> None:
    store = FileBlobStore(tiny_disk / "blobs")
    store.put("reports/a/small.json", b"x" * 8192)
    for key in ("reports/a/big.log", "reports/a/small.json"):  # a new key, and one replaced
        with pytest.raises(OSError) as exc:
            store.put(key, b"y" * (256 << 10))
        assert exc.value.errno == errno.ENOSPC
        _is(unavailable(exc.value), DISK_RETRY_S)
    assert store.get("reports/a/small.json") == b"x" * 8192  # the old bytes, whole
    files = sorted(p.relative_to(tiny_disk).as_posix() for p in tiny_disk.rglob("*") if p.is_file())
    assert files == ["blobs/reports/a/small.json"]  # no temporary file, no part of big.log


def test_a_locked_sqlite_database_is_an_outage(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        engine = sa.create_engine(f"sqlite:///{db}", connect_args={"timeout": 0})
        with pytest.raises(sa.exc.OperationalError) as exc, engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        assert "locked" in str(exc.value)
        _is(unavailable(exc.value), DATABASE_RETRY_S)
        _is(unavailable(exc.value.orig), DATABASE_RETRY_S)  # as the response cache's own connection sees it
        engine.dispose()
    finally:
        holder.close()


def test_an_unreachable_postgresql_is_an_outage() -> None:
    closed = free_port()  # nothing listens there
    engine = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed}/x")
    with pytest.raises(sa.exc.OperationalError) as exc:
        engine.connect()
    _is(unavailable(exc.value), DATABASE_RETRY_S)
    with pytest.raises(psycopg.OperationalError) as raw:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{closed}/x", connect_timeout=2)
    _is(unavailable(raw.value), DATABASE_RETRY_S)
    assert str(closed) not in unavailable(raw.value).message  # type: ignore[union-attr]


def test_bugs_are_not_outages(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    with engine.begin() as conn:
        with pytest.raises(sa.exc.OperationalError) as missing:
            conn.execute(sa.text("SELECT * FROM no_such_table"))
        conn.execute(sa.text("CREATE TABLE t (x UNIQUE)"))
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
    with pytest.raises(sa.exc.IntegrityError) as clash, engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
    assert unavailable(missing.value) is None and unavailable(clash.value) is None
    assert unavailable(OSError(errno.EACCES, "denied")) is None and unavailable(ValueError("x")) is None
    engine.dispose()
