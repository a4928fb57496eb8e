"""SQLite writers of one process take turns on the file's lock (:class:`GatedConnection`), not in
SQLite's busy handler: the second writer waits on the lock while the first holds its transaction,
goes on once it ended, and no way of ending a transaction (commit, rollback, a failed statement, a
closed connection) leaves the lock taken. A read never takes it."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from lair.registry.db import engine as engines
from lair.registry.db.engine import GatedConnection, connect_url, make_engine
from lair.registry.service.outage import unavailable


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "gate.sqlite3")


@pytest.fixture
def eng(path: str) -> Iterator[Engine]:
    e = make_engine(connect_url(path))
    with e.begin() as c:
        c.exec_driver_sql("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    yield e
    e.dispose()


def _gate(path: str) -> threading.Lock:
    return engines._gate(path)


def test_the_engines_connections_are_gated(eng: Engine, path: str) -> None:
    with eng.connect() as c:
        assert isinstance(c.connection.dbapi_connection, GatedConnection)
    assert _gate(path) is _gate(str(Path(path).parent / "." / "gate.sqlite3"))  # one per file


def _blocked_in_the_gate(t: threading.Thread, timeout: float = 30.0) -> None:
    """Return once thread ``t`` is inside :meth:`GatedConnection.enter`, waiting on the file's lock
    (its innermost Python frame; the acquire itself is C)."""
    deadline = time.monotonic() + timeout
    while (frame := sys._current_frames().get(t.ident or 0)) is None or frame.f_code is not (
        GatedConnection.enter.__code__
    ):
        assert t.is_alive() and time.monotonic() < deadline, "the second writer never reached the lock"
        time.sleep(0.001)


def test_a_second_writer_waits_on_the_lock_and_goes_on_when_the_first_commits(eng: Engine, path: str) -> None:
    gate = _gate(path)
    second_done = threading.Event()

    def second() -> None:
        with eng.begin() as c:
            c.execute(sa.text("INSERT INTO t (x) VALUES (2)"))
        second_done.set()

    with eng.begin() as c:
        c.execute(sa.text("INSERT INTO t (x) VALUES (1)"))
        assert gate.locked()
        t = threading.Thread(target=second)
        t.start()
        _blocked_in_the_gate(t)
        assert not second_done.is_set()  # waiting on the lock (SQLite would have it wait too)
    t.join(5)
    assert second_done.is_set() and not gate.locked()
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM t")).scalar() == 2


def test_no_way_of_ending_leaves_the_lock_taken(eng: Engine, path: str) -> None:
    gate = _gate(path)
    with eng.connect() as c:  # a read: never taken
        c.execute(sa.text("SELECT count(*) FROM t")).scalar()
        assert not gate.locked()
    with eng.connect() as c:  # rolled back
        c.execute(sa.text("INSERT INTO t (x) VALUES (1)"))
        assert gate.locked()
        c.rollback()
        assert not gate.locked()
    with pytest.raises(sa.exc.IntegrityError), eng.begin() as c:  # a failed statement
        c.execute(sa.text("INSERT INTO t (x) VALUES (5)"))
        c.execute(sa.text("INSERT INTO t (x) VALUES (5)"))
    assert not gate.locked()
    c2 = eng.connect()  # closed without ending its transaction
    c2.execute(sa.text("INSERT INTO t (x) VALUES (6)"))
    assert gate.locked()
    c2.close()
    assert not gate.locked()
    raw = eng.raw_connection()  # the DBAPI connection closed outright
    raw.cursor().execute("INSERT INTO t (x) VALUES (7)")
    assert gate.locked()
    raw.invalidate()
    assert not gate.locked()
    with eng.begin() as c:  # and the next writer goes on at once: none of those is kept
        c.execute(sa.text("INSERT INTO t (x) VALUES (8)"))
    with eng.connect() as c:
        assert list(c.execute(sa.text("SELECT x FROM t")).scalars()) == [8]


def test_a_writer_that_waits_too_long_is_a_503(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "WRITE_WAIT_S", 0.2)
    failed: list[BaseException] = []

    def second() -> None:
        try:
            with eng.begin() as c:
                c.execute(sa.text("INSERT INTO t (x) VALUES (2)"))
        except Exception as exc:
            failed.append(exc)

    with eng.begin() as c:
        c.execute(sa.text("INSERT INTO t (x) VALUES (1)"))
        t = threading.Thread(target=second)
        t.start()
        t.join(5)
    assert len(failed) == 1
    u = unavailable(failed[0])
    assert isinstance(failed[0], sa.exc.OperationalError)  # SQLAlchemy's, as for SQLite's own timeout
    assert isinstance(failed[0].orig, sqlite3.OperationalError)
    assert u is not None and u.status == 503


def test_memory_databases_have_no_gate() -> None:
    conn = sqlite3.connect(":memory:", factory=GatedConnection)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (1,)
    conn.close()
