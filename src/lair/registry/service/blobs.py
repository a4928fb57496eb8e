"""Where the raw files of accepted reports live: a :class:`BlobStore`.

The interface is the few calls an object store answers (put, get, delete under a prefix), so an
S3-compatible store can take over by implementing it; :class:`FileBlobStore` keeps the blobs as
files under one folder (the default). ``blob_store(spec)`` picks one: a folder path or ``file://``
URL; none given: ``LAIR_REGISTRY_BLOBS``, else a ``blobs`` folder beside the SQLite database file, else
``<data dir>/registry-blobs``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from lair.errors import RegistryError

__all__ = ["BlobStore", "FileBlobStore", "blob_store"]

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete_prefix(self, prefix: str) -> None: ...


def _checked(key: str) -> str:
    if not _KEY.fullmatch(key) or ".." in key.split("/"):
        raise RegistryError(404, "not_found", f"no such file: {key}")
    return key


class FileBlobStore:
    """Blobs as files under ``root`` (written to a temporary name, then renamed into place)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put(self, key: str, data: bytes) -> None:
        path = self.root / _checked(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def get(self, key: str) -> bytes:
        path = self.root / _checked(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise RegistryError(404, "not_found", f"no such file: {key}") from None

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.root / _checked(prefix), ignore_errors=True)


def _default_root(db_url: str | None) -> Path:
    env = os.environ.get("LAIR_REGISTRY_BLOBS")
    if env:
        return Path(env)
    if db_url and db_url.startswith("sqlite:///") and ":memory:" not in db_url:
        db = Path(db_url.removeprefix("sqlite:///").split("?", 1)[0])
        return db.with_name(db.stem + "-blobs")
    from platformdirs import user_data_path

    return user_data_path("lair", appauthor=False) / "registry-blobs"


def blob_store(spec: str | None = None, *, db_url: str | None = None) -> BlobStore:
    """The store named by ``spec`` (a folder or ``file://`` URL), else the default beside ``db_url``."""
    if not spec:
        return FileBlobStore(_default_root(db_url))
    parsed = urlparse(spec)
    if parsed.scheme in ("", "file"):
        return FileBlobStore(parsed.path if parsed.scheme else spec)
    raise RegistryError(
        422, "invalid", f"no blob store for {parsed.scheme}:// URLs", hint="give a folder or a file:// URL"
    )
