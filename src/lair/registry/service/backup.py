"""``lair registry backup`` / ``restore``: the whole registry in one archive, taken while it serves.

The archive is a ``.tar.gz`` of

- ``manifest.json``: :class:`Manifest` (the database's kind and schema revision, the rows of every
  table, each blob's key, size and sha256, the database file's sha256);
- ``database.sqlite3`` (SQLite's online backup API: a consistent copy while writers go on) or
  ``database.pgdump`` (``pg_dump`` in its custom format);
- ``blobs/<key>``: every raw file of every stored report, read from the blob store.

Consistency: the rows are counted and the reports listed inside the same snapshot the database
copy is: the copy itself on SQLite, the exported snapshot ``pg_dump --snapshot`` reads on
PostgreSQL. A report's blobs are written before its row commits and never change after, so every
report in the snapshot has all its blobs in the store when they are read.

``restore`` needs an empty database (no table) of the same kind and a blob store; before it writes
anything it walks every tar header itself (bounded pax headers; links and other non-regular members
refused: :mod:`lair.registry.service.tarscan`), checks that the archive holds exactly the members
the manifest names, every blob key a report file's, and each member's sha256 against the manifest.
It loads the database (SQLite: the backup API; PostgreSQL: the dump's rows only, into the schema
lair's own migrations create, never the dump's SQL: :mod:`lair.registry.service.pgload`), writes the
blobs, compares the restored rows with the manifest's counts, upgrades the schema to this version's
head (a backup of an older version restores into a newer one) and runs ``ANALYZE``, so the planner
has statistics from the first query on.

Errors: :class:`~lair.errors.Invalid` (422 ``invalid``) (not a backup, a member damaged, a database not empty,
a backup of the other kind, a link, a dump holding anything but lair's tables and rows),
:class:`~lair.errors.Internal` (500 ``backup_failed``) with the tail of ``pg_dump``'s stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from alembic.util import CommandError
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from lair.errors import Internal, Invalid
from lair.registry.db.engine import connect_url, dialect_of, make_engine, migrate, sqlite_path
from lair.registry.service.blobs import BlobStore, is_key, report_key
from lair.registry.service.pgload import load_pg
from lair.registry.service.tarscan import Header, walk

__all__ = ["BlobEntry", "Manifest", "backup", "restore"]

FORMAT = "lair.registry_backup"
MANIFEST = "manifest.json"
DB_MEMBER = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BlobEntry(_Strict):
    key: str = Field(description="the blob's key in the store (reports/<id>/<file>)")
    size: int = Field(description="bytes")
    sha256: str = Field(description="hex digest of its bytes")


class Manifest(_Strict):
    format: str = Field(FORMAT, description="always lair.registry_backup")
    version: int = Field(1, description="layout version of the archive")
    created_at: str = Field(description="when the snapshot was taken (UTC, ISO 8601)")
    database: str = Field(description="sqlite or postgresql")
    revision: str | None = Field(description="the schema's Alembic revision at the snapshot")
    tables: dict[str, int] = Field(description="rows of every table at the snapshot")
    database_sha256: str = Field(description="hex digest of the database member")
    blobs: list[BlobEntry] = Field(description="every blob of every stored report")


def _failed(tool: str, done: subprocess.CompletedProcess[bytes]) -> Internal:
    tail = done.stderr.decode(errors="replace").strip()[-800:]
    return Internal(f"{tool} exited with {done.returncode}: {tail}", code="backup_failed")


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """The URL pg_dump and pg_restore take, and the environment with its password (never argv)."""
    u = make_url(connect_url(url))
    env = {**os.environ} | ({"PGPASSWORD": u.password} if u.password else {})
    plain = u.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    return plain, env


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise Internal(f"{name} not found", code="backup_failed", hint="install PostgreSQL's client tools")
    return found


def _snapshot_facts(conn: Connection) -> tuple[str | None, dict[str, int], list[str]]:
    """(schema revision, rows per table, every blob key) as ``conn`` sees the data."""
    names = sorted(sa.inspect(conn).get_table_names())
    tables = {n: int(conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one()) for n in names}
    revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    keys = [
        report_key(rid, name)
        for rid, files in conn.execute(sa.text("SELECT id, files FROM reports ORDER BY id"))
        for name in json.loads(files)
    ]
    return revision, tables, keys


def _sqlite_copy(url: str, out: Path) -> tuple[str | None, dict[str, int], list[str]]:
    src = sqlite3.connect(sqlite_path(url))
    dst = sqlite3.connect(out)
    try:
        src.backup(dst)  # online: pages copied while other connections keep writing
    finally:
        dst.close()
        src.close()
    engine = sa.create_engine(f"sqlite:///{out}")
    try:
        with engine.connect() as conn:
            return _snapshot_facts(conn)
    finally:
        engine.dispose()


def _pg_copy(url: str, out: Path) -> tuple[str | None, dict[str, int], list[str]]:
    engine = make_engine(url)
    plain, env = _libpq(url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
            snapshot = conn.execute(sa.text("SELECT pg_export_snapshot()")).scalar_one()
            argv = [
                _tool("pg_dump"),
                "--format=custom",
                f"--snapshot={snapshot}",
                "-f",
                str(out),
                "-d",
                plain,
            ]
            done = subprocess.run(argv, env=env, capture_output=True, timeout=3600, check=False)
            if done.returncode != 0:
                raise _failed("pg_dump", done)
            facts = _snapshot_facts(conn)
            conn.rollback()
            return facts
    finally:
        engine.dispose()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(datetime.now(UTC).timestamp()), 0o600
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def _private(path: Path) -> Iterator[IO[bytes]]:
    """``path`` created new with mode 0600 (password hashes and tokens' hashes are inside): a stale
    one is removed first, so no umask and no earlier file ever leaves it readable by others."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        yield f


def backup(db_url: str, store: BlobStore, out: str | Path) -> Manifest:
    """Write the archive of the registry at ``db_url`` and its blobs in ``store`` to ``out``
    (atomically: a temporary file beside it, mode 0600 from its creation, renamed when complete)."""
    url, out = connect_url(db_url), Path(out)
    kind = dialect_of(url)
    with tempfile.TemporaryDirectory(prefix="lair-backup-") as tmp:
        db_file = Path(tmp) / DB_MEMBER[kind]
        created = datetime.now(UTC).isoformat(timespec="seconds")
        revision, tables, keys = (_sqlite_copy if kind == "sqlite" else _pg_copy)(url, db_file)
        entries: list[BlobEntry] = []
        part = out.with_name(f".{out.name}.part")
        with _private(part) as f, tarfile.open(fileobj=f, mode="w:gz", compresslevel=6) as tar:
            tar.add(db_file, DB_MEMBER[kind])
            for key in keys:
                data = store.get(key)
                entries.append(BlobEntry(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
                _add(tar, f"blobs/{key}", data)
            manifest = Manifest(
                created_at=created, database=kind, revision=revision, tables=tables,
                database_sha256=_sha256(db_file), blobs=entries,
            )  # fmt: skip
            _add(tar, MANIFEST, manifest.model_dump_json(indent=2).encode())
        os.replace(part, out)
    return manifest


def _invalid(where: str, message: str, hint: str = "") -> Invalid:
    return Invalid(message, location=where, hint=hint)


def _read_manifest(tar: tarfile.TarFile, where: str) -> Manifest:
    try:
        member = tar.extractfile(MANIFEST)
        doc = json.loads(member.read()) if member else None
    except (KeyError, json.JSONDecodeError):
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _invalid(where, "not a lair registry backup (no manifest.json of format lair.registry_backup)")
    try:
        return Manifest.model_validate(doc)
    except ValueError as exc:
        raise _invalid(f"{where}:{MANIFEST}", str(exc).splitlines()[0]) from None


@contextlib.contextmanager
def _members(path: Path) -> Iterator[tuple[Manifest, tarfile.TarFile, list[Header]]]:
    headers = walk(path, str(path))  # bounded, links refused: before tarfile parses any header
    try:
        tar = tarfile.open(path, "r:gz")  # noqa: SIM115 - closed by the with below
    except (OSError, tarfile.TarError) as exc:
        raise _invalid(str(path), f"cannot be read as .tar.gz ({exc})") from None
    with tar:
        yield _read_manifest(tar, str(path)), tar, headers


def _member_bytes(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str, sha256: str) -> bytes:
    f = tar.extractfile(members[name]) if name in members else None
    if f is None:
        raise _invalid(str(tar.name), f"{name} is missing from the archive")
    data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _invalid(str(tar.name), f"{name}: sha256 differs from the manifest's (the archive is damaged)")
    return data


def _blobs(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], m: Manifest
) -> Iterator[tuple[str, bytes]]:
    """Each blob (key, checked bytes), one in memory at a time."""
    for b in m.blobs:
        yield b.key, _member_bytes(tar, members, f"blobs/{b.key}", b.sha256)


def _check_names(m: Manifest, headers: list[Header], where: str) -> None:
    """Every blob key is a store key, named once, and the archive holds nothing the manifest does
    not name (a member nothing reads is not what lair wrote)."""
    keys = [b.key for b in m.blobs]
    if bad := [k for k in keys if not is_key(k) or not k.startswith("reports/")]:
        raise _invalid(f"{where}:{MANIFEST}", f"blob keys that are not report file keys: {bad[:5]}")
    if len(set(keys)) != len(keys):
        raise _invalid(f"{where}:{MANIFEST}", "a blob key is named twice")
    expected = {MANIFEST, DB_MEMBER[m.database], *(f"blobs/{k}" for k in keys)}
    if extra := sorted({h.name for h in headers} - expected):
        raise _invalid(where, f"members the manifest does not name: {extra[:5]}")


def _empty(engine: Engine, where: str) -> None:
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
    if names:
        raise _invalid(
            where,
            f"the database is not empty ({len(names)} tables)",
            hint="restore into a new database (createdb NAME, or a new SQLite path)",
        )


def _sqlite_objects(path: Path) -> set[tuple[str, str]]:
    """(type, name) of every object in the SQLite file at ``path`` but SQLite's own (``sqlite_*``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite^_%' ESCAPE '^'")
        return {(str(t), str(n)) for t, n in rows}
    finally:
        conn.close()


def _refuse_sqlite_extras(db: Path, revision: str | None, tmp: Path, where: str) -> None:
    """Refuse a SQLite backup holding any object (a trigger, a view, a table, an index) that lair's
    migrations do not create at its revision: a trigger would run on every later write (one that
    made each new account an admin was restored as it was)."""
    scratch = make_engine(f"sqlite:///{tmp / 'expected.sqlite3'}")
    try:
        migrate(scratch, revision or "head")
    except CommandError as exc:
        raise _invalid(where, f"schema revision {revision!r} is not known here ({exc})") from None
    finally:
        scratch.dispose()
    try:
        extra = sorted(_sqlite_objects(db) - _sqlite_objects(tmp / "expected.sqlite3"))
    except sqlite3.DatabaseError as exc:
        raise _invalid(where, f"the database file cannot be read ({exc})") from None
    if extra:
        shown = "; ".join(f"{t} {n}" for t, n in extra[:10])
        raise _invalid(where, f"the database file holds what is not lair's registry: {shown}")


def _load_sqlite(url: str, engine: Engine, m: Manifest, data: bytes, tmp: Path, where: str) -> None:
    (tmp / "db").write_bytes(data)
    _refuse_sqlite_extras(tmp / "db", m.revision, tmp, f"{where}:{DB_MEMBER['sqlite']}")
    src, dst = sqlite3.connect(tmp / "db"), sqlite3.connect(sqlite_path(url))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _load_pg(url: str, engine: Engine, m: Manifest, data: bytes, tmp: Path, where: str) -> None:
    """The dump's rows into lair's own schema (:mod:`lair.registry.service.pgload`): nothing of the
    dump's SQL runs, so a tampered backup cannot run a function or a program."""
    (tmp / "db").write_bytes(data)
    if m.revision is None:
        raise _invalid(f"{where}:{MANIFEST}", "the manifest names no schema revision")
    load_pg(engine, tmp / "db", m.revision, _tool("pg_restore"), f"{where}:{DB_MEMBER['postgresql']}")


def _restored_counts(engine: Engine, manifest: Manifest, where: str) -> None:
    with engine.connect() as conn:
        _rev, tables, _keys = _snapshot_facts(conn)
    wrong = {n: (c, tables.get(n)) for n, c in manifest.tables.items() if n != "alembic_version"}
    wrong = {n: v for n, v in wrong.items() if v[0] != v[1]}
    if wrong:
        raise Internal(f"{where}: restored row counts differ: {wrong}", code="backup_failed")


def _analyze(engine: Engine) -> None:
    """Planner statistics for every table, as they are after the load: the load writes none
    (autovacuum gathers them later, or never where it is off: a filtered search then took 15 ms
    instead of 0.5), and a SQLite copy has only the source's, if any. SQLite's ``PRAGMA optimize``
    would not do: before 3.46 it looks only at the tables this connection has queried."""
    with engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")


def restore(path: str | Path, db_url: str, store: BlobStore) -> Manifest:
    """Load the archive at ``path`` into the empty database ``db_url`` and the blob store ``store``.
    Every member is checked (its kind, its name, its sha256) before anything is written."""
    url, path = connect_url(db_url), Path(path)
    kind, where = dialect_of(url), str(path)
    with _members(path) as (manifest, tar, headers):
        if manifest.database != kind:
            raise _invalid(where, f"a backup of a {manifest.database} registry cannot restore into {kind}")
        _check_names(manifest, headers, where)
        members = {m.name: m for m in tar.getmembers()}
        engine = make_engine(url)
        try:
            _empty(engine, where)
            db = _member_bytes(tar, members, DB_MEMBER[kind], manifest.database_sha256)
            for _blob in _blobs(tar, members, manifest):
                pass  # every member checked before anything is written
            with tempfile.TemporaryDirectory(prefix="lair-restore-") as tmp:
                (_load_sqlite if kind == "sqlite" else _load_pg)(url, engine, manifest, db, Path(tmp), where)
            for key, data in _blobs(tar, members, manifest):
                store.put(key, data)
            _restored_counts(engine, manifest, where)
            migrate(engine)
            _analyze(engine)
        finally:
            engine.dispose()
    return manifest


def summary(manifest: Manifest, file: str) -> dict[str, Any]:
    """What the CLI prints: the file, the database, the rows of the main tables, the blobs."""
    return {
        "ok": True, "file": file, "database": manifest.database, "revision": manifest.revision,
        "tables": manifest.tables, "blobs": len(manifest.blobs),
        "blob_bytes": sum(b.size for b in manifest.blobs), "created_at": manifest.created_at,
    }  # fmt: skip


__all__ += ["summary"]
