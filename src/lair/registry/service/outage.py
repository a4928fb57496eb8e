"""When the registry cannot answer for a while: its database is unreachable or its disk is full.

:func:`unavailable` maps such a failure to :class:`~lair.errors.Unavailable`, a ``RegistryError`` 503
``unavailable`` with the seconds a client should wait (the web layer sends them as ``Retry-After``):

- the database unreachable, restarting or shut down: SQLAlchemy's ``OperationalError`` and
  ``InterfaceError`` on PostgreSQL, any DBAPI error that invalidated its connection, and psycopg's
  own errors (the response cache reads the data version on its own connection);
- a SQLite database locked past its busy timeout, unable to open, or failing I/O;
- a full disk or an exceeded quota (``ENOSPC``, ``EDQUOT``) under the blob store or the database
  (SQLite's "database or disk is full", PostgreSQL's ``disk_full``);
- the S3 object store unreachable or failing (botocore's connection and timeout errors, an answer of
  5xx, ``SlowDown``): :func:`object_store_down`;
- the Redis that holds the shared rate limits unreachable, timing out or still loading its data
  (redis-py's ``ConnectionError``, ``TimeoutError``): a limited write or sign-in cannot be counted,
  so it is not let through uncounted either.

Anything else is a bug, not an outage: it stays a 500. The message names what is down, never the
driver's text (which can hold the database's host, user or file path).
"""

from __future__ import annotations

import errno
import sqlite3
import sys

from sqlalchemy import exc as sa_exc

from lair.errors import Unavailable

__all__ = [
    "DATABASE_RETRY_S",
    "DISK_RETRY_S",
    "LIMITS_RETRY_S",
    "OBJECT_STORE_RETRY_S",
    "Unavailable",
    "unavailable",
]

DATABASE_RETRY_S = 5
"""A database restart or failover takes seconds."""
DISK_RETRY_S = 60
"""A full disk needs an operator."""
OBJECT_STORE_RETRY_S = 5
"""An object store's restart or a throttled burst passes in seconds."""
LIMITS_RETRY_S = 5
"""A Redis restart takes seconds."""
_FULL = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_DOWN = ("locked", "busy", "unable to open", "disk i/o", "readonly")
_SQLITE_FULL = ("disk is full",)


def _database() -> Unavailable:
    return Unavailable(
        "the registry's database is unavailable",
        retry_after=DATABASE_RETRY_S,
        hint=f"try again in {DATABASE_RETRY_S} s",
    )


def _disk() -> Unavailable:
    return Unavailable(
        "the registry's disk is full",
        retry_after=DISK_RETRY_S,
        hint="nothing was stored; try again later",
    )


def _object_store() -> Unavailable:
    return Unavailable(
        "the registry's object store is unavailable",
        retry_after=OBJECT_STORE_RETRY_S,
        hint=f"nothing was stored; try again in {OBJECT_STORE_RETRY_S} s",
    )


def _botocore(exc: BaseException) -> Unavailable | None:
    """The S3 client's outages. botocore is only looked up once imported (by the S3 blob store):
    an error can come from it only then, and the registry does not pay for its import otherwise."""
    errors = sys.modules.get("botocore.exceptions")
    if errors is None:
        return None
    if isinstance(exc, errors.ConnectionError | errors.HTTPClientError):
        return _object_store()  # refused, reset, timed out, closed mid-answer
    if isinstance(exc, errors.ClientError):
        meta = exc.response.get("ResponseMetadata", {})
        code = exc.response.get("Error", {}).get("Code", "")
        if int(meta.get("HTTPStatusCode") or 0) >= 500 or code in ("SlowDown", "ServiceUnavailable"):
            return _object_store()
    return None


def _redis(exc: BaseException) -> Unavailable | None:
    """The rate-limit store's outages; redis-py is only looked up once imported (by the limiter)."""
    errors = sys.modules.get("redis.exceptions")
    if errors is None or not isinstance(exc, errors.ConnectionError | errors.TimeoutError):
        return None
    return Unavailable(
        "the registry's rate-limit store is unavailable",
        retry_after=LIMITS_RETRY_S,
        hint=f"nothing was stored; try again in {LIMITS_RETRY_S} s",
    )


def _psycopg(exc: BaseException) -> Unavailable | None:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg ships with lair
        return None
    if isinstance(exc, psycopg.errors.DiskFull):
        return _disk()
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return _database()
    return None


def _sqlite(exc: sqlite3.Error) -> Unavailable | None:
    text = str(exc).lower()
    if any(w in text for w in _SQLITE_FULL):
        return _disk()
    if isinstance(exc, sqlite3.OperationalError) and any(w in text for w in _SQLITE_DOWN):
        return _database()
    return None


def unavailable(exc: BaseException) -> Unavailable | None:
    """The 503 that ``exc`` stands for, or None when it is no outage."""
    if isinstance(exc, Unavailable):
        return exc
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return _disk()
    if isinstance(exc, sa_exc.DBAPIError):
        inner = exc.orig
        if isinstance(inner, sqlite3.Error):
            return _sqlite(inner)
        if inner is not None and (found := _psycopg(inner)) is not None:
            return found
        if exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
            return _database()
        return None
    if isinstance(exc, sqlite3.Error):
        return _sqlite(exc)
    if (found := _botocore(exc) or _redis(exc)) is not None:
        return found
    return _psycopg(exc)
