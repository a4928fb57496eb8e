"""SQLite's write-ahead log is copied back by the app's checkpoint thread, never by a write's commit.

Observed on the files themselves: a commit of 8 MB grows the ``-wal`` file; the database file grows
by as much only once a checkpoint copied the pages into it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from lair.registry.db import engine as engines
from lair.registry.db.engine import Checkpointer, connect_url, make_engine, migrate

MB = 1 << 20


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(connect_url(str(tmp_path / "registry.sqlite3")))
    migrate(eng)
    eng.dispose()  # the connections from here on are opened while the checkpointer runs
    yield eng
    eng.dispose()


def _write(engine: Engine, size: int) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS scratch (b BLOB)")
        for _ in range(size // MB):
            conn.exec_driver_sql("INSERT INTO scratch (b) VALUES (randomblob(1048576))")


def _db_size(engine: Engine) -> int:
    return os.path.getsize(engines.sqlite_path(str(engine.url)))


def test_a_commit_leaves_the_log_to_the_checkpointer(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "CHECKPOINT_S", 3600.0)  # started, but not due within the test
    checkpoints = Checkpointer(sqlite_engine)
    checkpoints.start()
    try:
        with sqlite_engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        before = _db_size(sqlite_engine)
        _write(sqlite_engine, 8 * MB)  # past the 1,000 pages at which a commit would checkpoint
        assert _db_size(sqlite_engine) - before < MB
        assert os.path.getsize(engines.sqlite_path(str(sqlite_engine.url)) + "-wal") >= 8 * MB
    finally:
        checkpoints.close()
    sqlite_engine.dispose()
    with sqlite_engine.connect() as conn:  # stopped: new connections checkpoint themselves again
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000


def test_the_checkpointer_copies_the_log_back_while_connections_stay_open(sqlite_engine: Engine) -> None:
    checkpoints = Checkpointer(sqlite_engine)
    checkpoints.start()
    try:
        with sqlite_engine.connect() as held:  # an open connection: no checkpoint at close either
            before = _db_size(sqlite_engine)
            _write(sqlite_engine, 8 * MB)
            deadline = time.monotonic() + 20
            while _db_size(sqlite_engine) - before < 8 * MB:
                assert time.monotonic() < deadline, "no checkpoint copied the log back"
                time.sleep(0.05)
            assert held.exec_driver_sql("SELECT count(*) FROM scratch").scalar() == 8
    finally:
        checkpoints.close()
