"""Where the raw files of accepted reports live: a :class:`BlobStore`.

The interface is the three calls an object store answers (put, get, delete under a prefix), so any
store that answers them can take over. Three ship with lair:

- :class:`FileBlobStore`: files under one folder (the default);
- :class:`DbBlobStore`: rows of the ``blobs`` table in the registry's own database (SQLite or
  PostgreSQL), so several app processes over one PostgreSQL share them with nothing else to set up;
- :class:`S3BlobStore`: objects in a bucket of any S3-compatible store (AWS S3, MinIO, Ceph, R2...),
  through boto3 (``pip install 'lair[s3]'``), for app hosts that share no disk.

Each writes atomically (a temporary file renamed into place; one transaction per row; one S3 PUT,
which replaces an object whole or not at all): a failed ``put`` (a full disk, the database gone,
the object store down) leaves what was there before and nothing partial. An object store that is
unreachable or answers 5xx raises :class:`~.outage.Unavailable` (503 with ``Retry-After``).

``blob_store(spec)`` picks one by URL (``lair serve --blobs``, ``LAIR_REGISTRY_BLOBS``):

- a folder path or ``file:///folder``: :class:`FileBlobStore`;
- ``db``: :class:`DbBlobStore` on the registry's database;
- none: a ``<db file>-blobs`` folder beside the SQLite database file, else ``<data dir>/registry-blobs``;
- ``s3://bucket`` or ``s3://bucket/prefix``: :class:`S3BlobStore` (see :func:`s3_settings` for the
  endpoint, region and credentials: from the environment or a file, never from the URL);
- any other scheme: the factory registered for it, with
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import parse_qs, quote, urlparse

import sqlalchemy as sa
from sqlalchemy import Engine

from lair.errors import Invalid, NotFound
from lair.registry.db.schema import Blob
from lair.registry.service.outage import unavailable

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

__all__ = [
    "BlobStore",
    "DbBlobStore",
    "FileBlobStore",
    "S3BlobStore",
    "S3Settings",
    "blob_store",
    "is_key",
    "register_blob_store",
    "report_key",
    "s3_settings",
]

_KEY = re.compile(r"^[A-Za-z0-9%][A-Za-z0-9._%-]*(/[A-Za-z0-9%][A-Za-z0-9._%-]*)*$")
"""A key: ASCII path segments; ``%`` for the percent-encoded UTF-8 of a report file's non-ASCII name."""
ENTRY_POINTS = "lair.registry.blob_stores"
BLOBS = cast(sa.Table, Blob.__table__)


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing what was there."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under ``key``; a missing key raises ``NotFound`` (404)."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix/`` (nothing there is no error)."""
        ...


StoreFactory = Callable[[str, Engine | None], BlobStore]
_FACTORIES: dict[str, StoreFactory] = {}  # s3 is added below its class


def report_key(report_id: str, name: str) -> str:
    """The key of report ``report_id``'s file ``name`` (``logs/server.log``): its path, each
    non-ASCII character as its percent-encoded UTF-8 (an ASCII name is its own key)."""
    return f"reports/{report_id}/" + quote(name, safe="/")


def is_key(key: str) -> bool:
    """Whether ``key`` is a key every store accepts (relative, no ``..``, plain characters)."""
    return bool(_KEY.fullmatch(key)) and ".." not in key.split("/")


def _checked(key: str) -> str:
    if not is_key(key):
        raise NotFound(f"no such file: {key}")
    return key


def _missing(key: str) -> NotFound:
    return NotFound(f"no such file: {key}")


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


@dataclass(frozen=True)
class S3Settings:
    """Where an :class:`S3BlobStore` connects. ``endpoint`` None: AWS itself; the credentials are
    not here: boto3 finds them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, the file named by
    ``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_PROFILE``, an instance role)."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 15.0
    attempts: int = 3


def s3_settings(url: str, env: Mapping[str, str]) -> S3Settings:
    """``s3://bucket/prefix[?endpoint=URL&region=NAME]`` with ``LAIR_REGISTRY_S3_ENDPOINT`` and
    ``LAIR_REGISTRY_S3_REGION`` (then ``AWS_REGION``) as defaults. A URL that carries a user or a
    password is refused: command lines are visible to every user of the machine."""
    parsed = urlparse(url)
    if parsed.username or parsed.password:
        raise Invalid(
            "an s3:// blob store URL must not carry credentials",
            hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE instead",
        )
    if not parsed.hostname:
        raise Invalid(f"{url}: no bucket", hint="give s3://BUCKET or s3://BUCKET/PREFIX")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = sorted(set(query) - {"endpoint", "region"})
    if unknown:
        raise Invalid(f"{url}: unknown parameter {unknown[0]!r}", hint="endpoint, region")
    prefix = parsed.path.strip("/")
    if prefix and not _KEY.fullmatch(prefix):
        raise Invalid(f"{url}: the prefix {prefix!r} is no key path")
    return S3Settings(
        bucket=parsed.hostname,
        prefix=prefix,
        endpoint=query.get("endpoint") or env.get("LAIR_REGISTRY_S3_ENDPOINT") or None,
        region=query.get("region") or env.get("LAIR_REGISTRY_S3_REGION") or env.get("AWS_REGION") or None,
    )


class S3BlobStore:
    """Blobs as objects ``<prefix>/<key>`` of one bucket. A ``put`` is one PUT of the whole body
    (with its checksum, which the store verifies): the object is replaced whole or not at all. The
    client is thread-safe and made once; its outages (connection refused, timeouts, 5xx) become
    :class:`~.outage.Unavailable`, a missing object a 404."""

    def __init__(self, settings: S3Settings) -> None:
        import boto3
        from botocore.config import Config

        self.settings = settings
        config = Config(
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            retries={"total_max_attempts": settings.attempts, "mode": "standard"},
            s3={"addressing_style": "path" if settings.endpoint else "auto"},
        )
        self.client: S3Client = boto3.session.Session().client(
            "s3", endpoint_url=settings.endpoint, region_name=settings.region, config=config
        )

    def _name(self, key: str) -> str:
        return f"{self.settings.prefix}/{key}" if self.settings.prefix else key

    def _call(self, fn: Callable[..., Any], **kw: Any) -> Any:
        try:
            return fn(Bucket=self.settings.bucket, **kw)
        except Exception as exc:
            if (outage := unavailable(exc)) is not None:
                raise outage from exc
            raise

    def put(self, key: str, data: bytes) -> None:
        self._call(self.client.put_object, Key=self._name(_checked(key)), Body=data)

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            body = self._call(self.client.get_object, Key=self._name(_checked(key)))["Body"]
            return cast(bytes, body.read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise _missing(key) from None
            raise
        except Exception as exc:  # the body's stream cut off mid-read
            if (outage := unavailable(exc)) is not None:
                raise outage from exc
            raise

    def _listed(self, prefix: str) -> Iterator[list[str]]:
        token: dict[str, str] = {}
        while True:
            page = self._call(self.client.list_objects_v2, Prefix=prefix, **token)
            yield [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def delete_prefix(self, prefix: str) -> None:
        for names in self._listed(self._name(_checked(prefix)) + "/"):
            if names:  # a page is at most 1,000 keys, as many as one DeleteObjects takes
                objects: Any = [{"Key": n} for n in names]
                self._call(self.client.delete_objects, Delete={"Objects": objects, "Quiet": True})

    def check(self) -> None:
        """The bucket answers (``lair serve`` asks before it starts): a 422 for a bucket that is not
        there or not ours, a 503 when the store cannot be reached."""
        from botocore.exceptions import ClientError, NoCredentialsError

        try:
            self._call(self.client.head_bucket)
        except NoCredentialsError:
            raise Invalid(
                f"s3://{self.settings.bucket}: no credentials for the object store",
                hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE",
            ) from None
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            raise Invalid(
                f"s3://{self.settings.bucket}: the bucket answered {status}",
                hint="check the bucket's name and the credentials (404: no such bucket; 403: not allowed)",
            ) from None


def _s3(url: str, engine: Engine | None) -> BlobStore:
    try:
        import boto3  # noqa: F401
    except ImportError:
        raise Invalid("the s3:// blob store needs boto3", hint="pip install 'lair[s3]'") from None
    return S3BlobStore(s3_settings(url, os.environ))


def register_blob_store(scheme: str, factory: StoreFactory) -> None:
    """Make ``blob_store("<scheme>://...")`` build its store with ``factory(url, engine)``."""
    _FACTORIES[scheme] = factory


register_blob_store("s3", _s3)


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
    if not spec:
        return FileBlobStore(_default_root(db_url))
    if spec == "db":
        if engine is None:
            raise Invalid("the db blob store needs the registry's database")
        return DbBlobStore(engine)
    parsed = urlparse(spec)
    if parsed.scheme in ("", "file"):
        return FileBlobStore(parsed.path if parsed.scheme else spec)
    factory = _factory(parsed.scheme)
    if factory is None:
        raise Invalid(
            f"no blob store for {parsed.scheme}:// URLs",
            hint=f"give a folder, a file:// URL or db; or install a package with a {ENTRY_POINTS!r} "
            f"entry point named {parsed.scheme!r}",
        )
    return factory(spec, engine)
