"""Engines and migrations.

SQLite is the default (a file in the user's data dir, WAL mode, foreign keys on); PostgreSQL is
used through psycopg 3 when the URL says ``postgresql://``. Migrations are Alembic scripts shipped in
this package (``migrations/versions/NNNN_*.py``), run on the engine's own connection.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event

__all__ = [
    "Checkpointer",
    "connect_url",
    "default_url",
    "dialect_of",
    "make_engine",
    "migrate",
    "sqlite_path",
]

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).parent / "migrations"


def default_url() -> str:
    """The database of :class:`~lair.registry.settings.Settings` (``LAIR_REGISTRY_DB``, else a SQLite
    file under ``LAIR_HOME``, else in the user's data dir)."""
    from lair.registry.settings import Settings

    return connect_url(Settings.from_env().db)


def connect_url(url: str) -> str:
    """A SQLAlchemy URL from what a user types: a path, ``sqlite:///...`` or ``postgresql://...``."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


def dialect_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def sqlite_path(url: str) -> str:
    return url.split(":///", 1)[1]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


CHECKPOINT_S = 0.25
"""How often :class:`Checkpointer` copies SQLite's write-ahead log back into the database."""


class Checkpointer:
    """SQLite's WAL checkpoints on a thread of their own while the app serves.

    By default the commit that takes the log past 1,000 pages copies it back into the database file
    and syncs both before it returns; that commit is some write's, which then waits tens to hundreds
    of milliseconds (most of a vote's p99 under load). While this runs, the engine's connections
    leave checkpoints to it (``wal_autocheckpoint=0``): a passive checkpoint every ``CHECKPOINT_S``
    on a connection of its own, which waits for no reader or writer and holds no lock a write needs.
    Connections opened before :meth:`start` keep checkpointing themselves."""

    def __init__(self, engine: Engine) -> None:
        self.path = sqlite_path(str(engine.url))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        event.listen(engine, "connect", self._connected)

    def _connected(self, dbapi_conn: Any, _record: Any) -> None:
        if self._thread is not None and not self._stop.is_set():
            dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lair-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            while not self._stop.wait(CHECKPOINT_S):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:  # busy or gone for a moment: the next round tries again
                    log.debug("checkpoint failed", exc_info=True)
        finally:
            conn.close()

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


WRITE_WAIT_S = 10.0
"""How long a SQLite write waits for this process's other writer (as ``busy_timeout``) before a 503."""
_DML = ("INSERT", "UPDATE", "DELETE", "REPLAC")
_GATES: dict[str, threading.Lock] = {}
_GATES_LOCK = threading.Lock()


def _gate(path: str) -> threading.Lock:
    with _GATES_LOCK:
        return _GATES.setdefault(os.path.realpath(path), threading.Lock())


class GatedConnection(sqlite3.Connection):
    """A pysqlite connection whose write transactions take turns on one lock per database file in
    this process (``sqlite3.connect(..., factory=GatedConnection)``).

    SQLite has one writer; a second one waits in SQLite's busy handler, which sleeps 1, 2, 5, 10,
    15, 20, 25 ... ms between tries: a write that met a 12 ms write slept until 18 ms, long after the
    lock was free (8 threads writing 12 ms each: 199 ms in all, 102 ms on the lock). Here the statement
    that makes pysqlite begin a transaction (the first INSERT, UPDATE or DELETE) first takes the
    file's lock, and the commit or rollback that ends it gives it back once SQLite has let go: the
    next writer starts at once. Writers in other processes still meet the busy handler."""

    def __init__(self, database: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, *args, **kwargs)
        self._gate = None if database in ("", ":memory:") else _gate(database)
        self._holds = False

    def enter(self, sql: str) -> None:
        """Before ``sql`` runs: the file's lock when it begins a write transaction."""
        if self._gate is None or self._holds or self.in_transaction:
            return
        if sql.lstrip()[:6].upper() not in _DML:
            return
        if not self._gate.acquire(timeout=WRITE_WAIT_S):
            raise sqlite3.OperationalError("database is locked")  # a 503, as SQLite's own timeout
        self._holds = True

    def leave(self) -> None:
        """After a statement, commit or rollback: the lock back once no transaction is open."""
        if not self.in_transaction:
            self._release()

    def _release(self) -> None:
        if self._holds and self._gate is not None:
            self._holds = False
            self._gate.release()

    def cursor(self, factory: Any = None) -> sqlite3.Cursor:  # type: ignore[override]
        return super().cursor(factory or _GatedCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor().execute(sql, parameters)

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.leave()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.leave()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._release()


class _GatedCursor(sqlite3.Cursor):
    connection: GatedConnection

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        self.connection.enter(sql)
        try:
            return super().execute(sql, parameters)
        finally:
            self.connection.leave()  # only when no transaction was begun (it failed to begin)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> sqlite3.Cursor:  # type: ignore[override]
        self.connection.enter(sql)
        try:
            return super().executemany(sql, seq_of_parameters)
        finally:
            self.connection.leave()


def make_engine(url: str | None = None) -> Engine:
    url = connect_url(url or default_url())
    if dialect_of(url) == "sqlite":
        Path(sqlite_path(url)).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "factory": GatedConnection})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # connect_timeout: a server that drops packets fails the connect (a 503) instead of hanging it
    return create_engine(
        url, pool_pre_ping=True, pool_size=4, max_overflow=4, connect_args={"connect_timeout": 5}
    )


def _alembic_config(connection: Any) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(engine: Engine, target: str = "head") -> None:
    """Upgrade to ``target`` (``head``), or downgrade when it is ``base`` or a lower revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    with engine.begin() as conn:
        cfg = _alembic_config(conn)
        current = MigrationContext.configure(conn).get_current_revision()
        if target == "base" or (target != "head" and current and target < current):
            command.downgrade(cfg, target)
        else:
            command.upgrade(cfg, target)


def migrate_on(conn: Connection, target: str) -> None:
    """Upgrade to ``target`` inside the caller's transaction on ``conn`` (it commits or rolls back
    the schema with its own writes); an unknown ``target`` raises alembic's ``CommandError``."""
    from alembic import command

    command.upgrade(_alembic_config(conn), target)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


__all__ += ["current_revision", "migrate_on"]
