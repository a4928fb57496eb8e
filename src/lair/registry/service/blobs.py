"""Where the raw files of accepted reports live: a :class:`BlobStore`.

The interface is the three calls an object store answers (put, get, delete under a prefix), so any
store that answers them can take over. Two ship with lair:

- :class:`FileBlobStore`: files under one folder (the default);
- :class:`DbBlobStore`: rows of the ``blobs`` table in the registry's own database (SQLite or
  PostgreSQL), so several app processes over one PostgreSQL share them with nothing else to set up.

Both write atomically (a temporary file renamed into place; one transaction per row): a failed
``put`` (a full disk, the database gone) leaves what was there before and nothing partial.

``blob_store(spec)`` picks one by URL (``lair serve --blobs``, ``LAIR_REGISTRY_BLOBS``):

- a folder path or ``file:///folder``: :class:`FileBlobStore`;
- ``db``: :class:`DbBlobStore` on the registry's database;
- none: a ``<db file>-blobs`` folder beside the SQLite database file, else ``<data dir>/registry-blobs``;
- any other scheme (``s3://bucket/prefix``): the factory registered for it, with
  :func:`register_blob_store` or, from another package, the ``lair.registry.blob_stores`` entry point
  group (name: the scheme, value: a callable ``(url, engine) -> BlobStore``).

Keys are relative paths (``reports/<id>/logs/engine.log``); one with ``..``, an empty segment or a
leading ``/`` is refused as not found by every store.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import urlparse

import sqlalchemy as sa
from sqlalchemy import Engine

from lair.errors import RegistryError
from lair.registry.db.schema import Blob

__all__ = ["BlobStore", "DbBlobStore", "FileBlobStore", "blob_store", "register_blob_store"]

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
ENTRY_POINTS = "lair.registry.blob_stores"
BLOBS = cast(sa.Table, Blob.__table__)


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing what was there."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under ``key``; a missing key raises ``RegistryError`` 404."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix/`` (nothing there is no error)."""
        ...


StoreFactory = Callable[[str, Engine | None], BlobStore]
_FACTORIES: dict[str, StoreFactory] = {}


def _checked(key: str) -> str:
    if not _KEY.fullmatch(key) or ".." in key.split("/"):
        raise RegistryError(404, "not_found", f"no such file: {key}")
    return key


def _missing(key: str) -> RegistryError:
    return RegistryError(404, "not_found", f"no such file: {key}")


class FileBlobStore:
    """Blobs as files under ``root``. A write is atomic: the bytes go to a temporary file of a unique
    name in the same folder, are flushed to disk, then renamed over the key (``os.replace``); a
    failed write (a full disk) removes its temporary file, so a key holds the old bytes or the new
    ones, never part of them, and nothing half-written is left behind."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put(self, key: str, data: bytes) -> None:
        path = self.root / _checked(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, key: str) -> bytes:
        path = self.root / _checked(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise _missing(key) from None

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.root / _checked(prefix), ignore_errors=True)


class DbBlobStore:
    """Blobs as rows of the ``blobs`` table (migration 0007), each write in its own transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def put(self, key: str, data: bytes) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(BLOBS).where(BLOBS.c.key == _checked(key)))
            conn.execute(sa.insert(BLOBS).values(key=key, data=data, size=len(data)))

    def get(self, key: str) -> bytes:
        with self.engine.connect() as conn:
            data = conn.execute(sa.select(BLOBS.c.data).where(BLOBS.c.key == _checked(key))).scalar()
        if data is None:
            raise _missing(key)
        return bytes(data)

    def delete_prefix(self, prefix: str) -> None:
        under = BLOBS.c.key.startswith(_checked(prefix) + "/", autoescape=True)
        with self.engine.begin() as conn:
            conn.execute(sa.delete(BLOBS).where(under))


def register_blob_store(scheme: str, factory: StoreFactory) -> None:
    """Make ``blob_store("<scheme>://...")`` build its store with ``factory(url, engine)``."""
    _FACTORIES[scheme] = factory


def _factory(scheme: str) -> StoreFactory | None:
    if scheme in _FACTORIES:
        return _FACTORIES[scheme]
    found = entry_points(group=ENTRY_POINTS, name=scheme)
    return cast(StoreFactory, next(iter(found)).load()) if found else None


def _default_root(db_url: str | None) -> Path:
    if db_url and db_url.startswith("sqlite:///") and ":memory:" not in db_url:
        db = Path(db_url.removeprefix("sqlite:///").split("?", 1)[0])
        return db.with_name(db.stem + "-blobs")
    from platformdirs import user_data_path

    return user_data_path("lair", appauthor=False) / "registry-blobs"


def blob_store(
    spec: str | None = None, *, db_url: str | None = None, engine: Engine | None = None
) -> BlobStore:
    """The store ``spec`` names (see the module doc); ``engine`` is the registry's database."""
    spec = spec or os.environ.get("LAIR_REGISTRY_BLOBS")
    if not spec:
        return FileBlobStore(_default_root(db_url))
    if spec == "db":
        if engine is None:
            raise RegistryError(422, "invalid", "the db blob store needs the registry's database")
        return DbBlobStore(engine)
    parsed = urlparse(spec)
    if parsed.scheme in ("", "file"):
        return FileBlobStore(parsed.path if parsed.scheme else spec)
    factory = _factory(parsed.scheme)
    if factory is None:
        raise RegistryError(
            422,
            "invalid",
            f"no blob store for {parsed.scheme}:// URLs",
            hint=f"give a folder, a file:// URL or db; or install a package with a {ENTRY_POINTS!r} "
            f"entry point named {parsed.scheme!r}",
        )
    return factory(spec, engine)
