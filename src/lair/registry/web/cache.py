"""A cache of rendered responses, correct across processes.

Every write bumps the one-row counter ``registry_version`` in its transaction. Each GET first reads
the counter (SQLite: a plain query on a per-process connection, microseconds; PostgreSQL: one query
shared by every request that arrived before it started, so a burst of requests costs one round trip
and a request never sees a counter read that began before it arrived). A cached response is served
only when it was rendered at the current counter, so a write through any process is seen by the next
request to any other process. Entries are evicted least-recently-used past a byte budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["Entry", "PgVersions", "ResponseCache", "SqliteVersions", "Versions", "make_versions"]

VERSION_SQL = "SELECT n FROM registry_version WHERE id = 1"


@dataclass(frozen=True)
class Entry:
    version: int
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes
    last_modified: bytes | None


class ResponseCache:
    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._d: OrderedDict[bytes, Entry] = OrderedDict()

    def get(self, key: bytes) -> Entry | None:
        e = self._d.get(key)
        if e is not None:
            self._d.move_to_end(key)
        return e

    def put(self, key: bytes, entry: Entry) -> None:
        old = self._d.pop(key, None)
        if old is not None:
            self.size -= len(old.body)
        if len(entry.body) > self.max_bytes // 4:
            return
        self._d[key] = entry
        self.size += len(entry.body)
        while self.size > self.max_bytes and self._d:
            _, gone = self._d.popitem(last=False)
            self.size -= len(gone.body)


def etag_of(body: bytes) -> bytes:
    return b'"' + hashlib.blake2b(body, digest_size=12).hexdigest().encode() + b'"'


class Versions:
    async def current(self) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class SqliteVersions(Versions):
    """One autocommit connection per process: each read sees the latest committed counter."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    async def current(self) -> int:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        row = self._conn.execute(VERSION_SQL).fetchone()
        return int(row[0])

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


PG_TIMEOUT_S = 5.0
"""Longest a counter read (connect included) may take: a PostgreSQL that drops packets instead of
refusing them is an outage (503), not a hung request."""


class PgVersions(Versions):
    """Single-flight counter reads on one async psycopg connection (autocommit, read committed)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._lock: asyncio.Lock | None = None
        self._next: asyncio.Future[int] | None = None

    async def _connect(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=max(2, round(PG_TIMEOUT_S))
            )
        return self._conn

    async def current(self) -> int:
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().create_task(self._read())
        return await asyncio.shield(self._next)

    async def _read(self) -> None:
        assert self._lock is not None
        async with self._lock:  # the query below starts after every waiter on this future arrived
            fut, self._next = self._next, None
            assert fut is not None
            try:
                async with asyncio.timeout(PG_TIMEOUT_S):
                    conn = await self._connect()
                    cur = await conn.execute(VERSION_SQL)
                    row = await cur.fetchone()
                fut.set_result(int(row[0]))
            except TimeoutError:
                import psycopg

                self._conn = None
                fut.set_exception(psycopg.OperationalError(f"no answer within {PG_TIMEOUT_S:g} s"))
            except Exception as exc:
                self._conn = None
                fut.set_exception(exc)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def make_versions(url: str) -> Versions:
    from lair.registry.db.engine import dialect_of, sqlite_path

    if dialect_of(url) == "sqlite":
        return SqliteVersions(sqlite_path(url))
    return PgVersions("postgresql://" + url.split("://", 1)[1])
