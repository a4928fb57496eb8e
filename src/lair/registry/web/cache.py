"""The read side of the database for the front of the app: stored documents and version counters.

A recipe's JSON, page and revisions are stored by the writes that change them
(:mod:`~lair.registry.service.stored`): :meth:`Versions.document` reads one (SQLite: a statement on a
per-process connection, run on the event loop, tens of microseconds; PostgreSQL: the reads that
arrive together go in one query on one of a few async psycopg connections, so a read never holds the
loop and a round trip serves many requests).

Everything else that is cached in memory (lists, searches, exports, other pages) keys on the
counters of ``registry_version``, read before the route runs: lists and searches on ``lists`` (bumped
by writes that change them) and ``votes`` (an entry outlives a vote by at most ``VOTE_TTL_S``), the
rest on ``n`` (every write); lists and searches also on :attr:`Ver.foreign`, which moves with the
writes of an older release serving the same database during an upgrade (they bump ``n`` alone). SQLite
reads them with a plain query; PostgreSQL with one query shared by
every request that arrived before it started, so a burst costs one round trip and a request never
sees a counter read that began before it arrived. A write through any process is seen by the next
request to any other. Entries are evicted least-recently-used past a byte budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cachetools import LRUCache

from lair.registry.service.stored import DOCUMENT_SQL

__all__ = [
    "VOTE_TTL_S",
    "Entry",
    "PgVersions",
    "ResponseCache",
    "SqliteVersions",
    "Ver",
    "Versions",
    "make_versions",
]

VERSION_SQL = "SELECT n FROM registry_version WHERE id = 1"
VERSIONS_SQL = "SELECT n, lists, votes, documents FROM registry_version WHERE id = 1"
SQLITE_DOCUMENT = DOCUMENT_SQL.format(p="?")
PG_DOCUMENTS = (
    "SELECT d.slug, d.kind, d.revision, d.body, d.etag, d.modified FROM recipe_documents d"
    " JOIN registry_version v ON v.id = 1 AND v.documents = v.n"
    " JOIN unnest(%s::text[], %s::text[], %s::int[]) AS k(slug, kind, revision)"
    " ON d.slug = k.slug AND d.kind = k.kind AND d.revision = k.revision"
)
"""The reads of one batch (:meth:`PgVersions.document`): :data:`DOCUMENT_SQL` for many keys."""
VOTE_TTL_S = 1.0
"""How long a cached list or search may still show a vote count a newer vote changed (the recipe's
own JSON and page show it at once: they are stored by the vote)."""

Document = tuple[bytes, str, str]
"""A stored document: (body, etag, Last-Modified)."""


class Ver(NamedTuple):
    n: int
    lists: int
    votes: int
    documents: int | None = None

    @property
    def stale(self) -> bool:
        """A write of an older release (it bumps ``n`` alone) since the stored documents were
        rendered: they are not served, and lists and searches key on :attr:`foreign` too."""
        return self.documents != self.n

    @property
    def foreign(self) -> int:
        """Moves with every write of an older release (which bumps neither ``lists`` nor ``votes``
        when it predates them): ``n - documents``, or ``n`` itself while the stamp was never set.
        It goes back to 0 when the documents are stamped current, which bumps ``lists``."""
        return self.n if self.documents is None else self.n - self.documents


@dataclass(frozen=True)
class Entry:
    version: Any
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes
    last_modified: bytes | None
    born: float = field(default_factory=time.monotonic)
    listing: Any = None
    """A list's or search's query and page (:class:`~lair.registry.web.lists.Listing`)."""


class ResponseCache:
    """Rendered responses by key, least-recently-used evicted past ``max_bytes`` of bodies; a body over
    a quarter of that is not kept (and drops the key's older entry). Used on the event loop only."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._d: LRUCache[bytes, Entry] = LRUCache(max_bytes, getsizeof=_body_size)

    @property
    def size(self) -> int:
        """The bytes of the bodies kept."""
        return int(self._d.currsize)

    def get(self, key: bytes) -> Entry | None:
        return self._d.get(key)

    def put(self, key: bytes, entry: Entry) -> None:
        self._d.pop(key, None)
        if len(entry.body) > self.max_bytes // 4:
            return
        self._d[key] = entry  # evicts the least recently used until it fits


def _body_size(entry: Entry) -> int:
    return len(entry.body)


def etag_of(body: bytes) -> bytes:
    return b'"' + hashlib.blake2b(body, digest_size=12).hexdigest().encode() + b'"'


class Versions:
    async def current(self) -> Ver:
        raise NotImplementedError

    async def document(self, slug: str, kind: str, revision: int) -> Document | None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class SqliteVersions(Versions):
    """One autocommit connection per process: each read sees the latest committed counter."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _c(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        return self._conn

    async def current(self) -> Ver:
        return Ver(*self._c().execute(VERSIONS_SQL).fetchone())

    async def document(self, slug: str, kind: str, revision: int) -> Document | None:
        row = self._c().execute(SQLITE_DOCUMENT, (slug, kind, revision)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


PG_TIMEOUT_S = 5.0
"""Longest a counter read (connect included) may take: a PostgreSQL that drops packets instead of
refusing them is an outage (503), not a hung request."""


class PgVersions(Versions):
    """Single-flight counter reads on one async psycopg connection (autocommit, read committed)."""

    POOL = 4
    """Connections for document reads (each read is one query; more only queue on the server's
    cores)."""
    BATCH = 64
    """Most keys one document query asks for."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._lock: asyncio.Lock | None = None
        self._next: asyncio.Future[Ver] | None = None
        self._idle: list[Any] = []
        self._slots: asyncio.Semaphore | None = None
        self._batch: dict[tuple[str, str, int], asyncio.Future[Document | None]] | None = None
        self._fetches: set[asyncio.Task[None]] = set()

    async def _open(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=max(2, round(PG_TIMEOUT_S)), prepare_threshold=0
        )

    async def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = await self._open()
        return self._conn

    async def document(self, slug: str, kind: str, revision: int) -> Document | None:
        """Joins the batch that has not started yet (one query for every key in it, on one of
        ``POOL`` connections): under load a round trip serves tens of requests, and each request's
        read still starts after it arrived."""
        loop = asyncio.get_running_loop()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.POOL)
        if self._batch is None or len(self._batch) >= self.BATCH:
            self._batch = {}
            task = loop.create_task(self._fetch(self._batch))
            self._fetches.add(task)  # held until done: the loop keeps only a weak reference
            task.add_done_callback(self._fetches.discard)
        fut = self._batch.get((slug, kind, revision))
        if fut is None:
            fut = self._batch[(slug, kind, revision)] = loop.create_future()
        return await asyncio.shield(fut)

    async def _fetch(self, batch: dict[tuple[str, str, int], asyncio.Future[Document | None]]) -> None:
        assert self._slots is not None
        async with self._slots:  # requests that arrive while this waits for a connection join it
            if self._batch is batch:
                self._batch = None
            try:
                rows = await self._query(list(batch))
            except BaseException as exc:
                for fut in batch.values():
                    if not fut.done():
                        fut.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
        for key, fut in batch.items():
            row = rows.get(key)
            if not fut.done():
                fut.set_result(None if row is None else (bytes(row[0]), row[1], row[2]))

    async def _query(self, keys: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Any]:
        conn = self._idle.pop() if self._idle else None
        try:
            async with asyncio.timeout(PG_TIMEOUT_S):
                if conn is None or conn.closed:
                    conn = await self._open()
                cols = [list(c) for c in zip(*keys, strict=True)]
                cur = await conn.execute(PG_DOCUMENTS, cols)
                rows = await cur.fetchall()
        except BaseException as exc:  # the connection is in an unknown state: dropped
            if conn is not None:
                asyncio.get_running_loop().create_task(conn.close())
            if isinstance(exc, TimeoutError):
                import psycopg

                raise psycopg.OperationalError(f"no answer within {PG_TIMEOUT_S:g} s") from None
            raise
        self._idle.append(conn)
        return {(r[0], r[1], r[2]): r[3:] for r in rows}

    async def current(self) -> Ver:
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
                    cur = await conn.execute(VERSIONS_SQL)
                    row = await cur.fetchone()
                fut.set_result(Ver(*row))
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
        while self._idle:
            await self._idle.pop().close()


def make_versions(url: str) -> Versions:
    from lair.registry.db.engine import dialect_of, sqlite_path

    if dialect_of(url) == "sqlite":
        return SqliteVersions(sqlite_path(url))
    return PgVersions("postgresql://" + url.split("://", 1)[1])
