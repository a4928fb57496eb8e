"""``lair registry restore`` against tampered backups: a PostgreSQL dump whose function runs a
program is refused and nothing of it runs; links, extended headers over the bounds, members the
manifest does not name and blob keys that are no report keys are refused before anything is loaded;
a backup is written mode 0600 (password hashes are inside)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lair.cli import main
from lair.errors import RegistryError
from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service.accounts import create_user
from lair.registry.service.backup import backup, restore
from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.pgload import parse_data, refuse_toc
from lair.testing.registry import pg_database

EVIL = (
    "CREATE TABLE pwned (who text)",
    "CREATE FUNCTION evil() RETURNS int LANGUAGE plpgsql VOLATILE AS"
    " $$BEGIN COPY pwned FROM PROGRAM 'id -un'; RETURN 1; END$$",
    # evaluated for every row loaded into registry_version: pg_restore called evil() as it copied
    "ALTER TABLE registry_version ADD CONSTRAINT evil_check CHECK (evil() = 1)",
)


def _registry(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate(engine)
        with engine.begin() as conn:
            create_user(conn, "alice", password="correct horse battery staple")
    finally:
        engine.dispose()


@pytest.fixture
def pg_pair() -> Iterator[tuple[str, str]]:
    with pg_database() as source, pg_database() as target:
        yield connect_url(source), connect_url(target)


def _scalar(url: str, query: str) -> Any:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(query)).scalar()
    finally:
        engine.dispose()


def test_a_pg_dump_whose_function_runs_a_program_is_refused_and_nothing_runs(
    pg_pair: tuple[str, str], tmp_path: Path
) -> None:
    source, target = pg_pair
    _registry(source)
    engine = make_engine(source)
    with engine.begin() as conn:
        for stmt in EVIL:
            conn.execute(sa.text(stmt))
    engine.dispose()
    assert _scalar(source, "SELECT who FROM pwned") == "postgres"  # the function does run a program
    archive = tmp_path / "tampered.tar.gz"
    backup(source, FileBlobStore(tmp_path / "blobs"), archive)

    with pytest.raises(RegistryError) as refused:
        restore(archive, target, FileBlobStore(tmp_path / "restored"))
    assert refused.value.status == 422
    assert f"{archive}:database.pgdump: the database dump holds what is not lair's registry" in str(
        refused.value
    )
    assert "FUNCTION public.evil()" in str(refused.value) and "TABLE public.pwned" in str(refused.value)
    assert _scalar(target, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0
    assert _scalar(target, "SELECT count(*) FROM pg_proc WHERE proname = 'evil'") == 0


def test_a_pg_restore_loads_rows_into_lairs_own_schema_only(pg_pair: tuple[str, str], tmp_path: Path) -> None:
    """A constraint the dump adds to one of lair's tables is not restored: the schema is the one
    lair's migrations create, the rows and sequences are the dump's."""
    source, target = pg_pair
    _registry(source)
    engine = make_engine(source)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE users ADD CONSTRAINT odd_check CHECK (length(name) < 100)"))
    engine.dispose()
    archive = tmp_path / "backup.tar.gz"
    backup(source, FileBlobStore(tmp_path / "blobs"), archive)
    restore(archive, target, FileBlobStore(tmp_path / "restored"))
    assert _scalar(target, "SELECT name FROM users") == "alice"
    assert _scalar(target, "SELECT count(*) FROM pg_constraint WHERE conname = 'odd_check'") == 0
    next_id = _scalar(target, "SELECT nextval(pg_get_serial_sequence('users', 'id'))")
    assert next_id == _scalar(source, "SELECT max(id) FROM users") + 1  # the sequence came along


@pytest.mark.parametrize(
    "line",
    [
        "COPY public.users (id) TO PROGRAM 'id';",
        "SELECT public.evil();",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        "COPY public.users (id) FROM PROGRAM 'id';",
    ],
)
def test_a_data_script_with_any_statement_but_rows_is_refused(line: str) -> None:
    script = f"SET client_encoding = 'UTF8';\n\nCOPY public.users (id, name) FROM stdin;\n1\ta\n\\.\n{line}\n"
    with pytest.raises(RegistryError) as refused:
        parse_data(script.encode(), "database.pgdump")
    assert refused.value.status == 422 and "line 6 of the database dump is not a row" in refused.value.message


@pytest.mark.parametrize(
    "entry",
    [
        "201; 3079 16384 EXTENSION - plpython3u",
        "202; 2615 16385 SCHEMA - other postgres",
        "203; 1259 16386 TABLE other users postgres",
        "204; 2620 16387 TRIGGER public users t postgres",
        "205; 1259 16388 VIEW public v postgres",
    ],
)
def test_a_table_of_contents_with_anything_but_lairs_tables_is_refused(entry: str) -> None:
    toc = "; comment\n100; 1259 17123 TABLE public users postgres\n" + entry + "\n"
    own = "100; 1259 17123 TABLE public users postgres\n101; 0 0 ACL - SCHEMA public pg_database_owner\n"
    refuse_toc(own, {"users"}, "x")  # lair's own, and a grant (never applied): fine
    with pytest.raises(RegistryError) as refused:
        refuse_toc(toc, {"users"}, "x")
    assert "holds what is not lair's registry" in refused.value.message


def test_a_sqlite_backup_with_a_trigger_is_refused_and_nothing_loads(tmp_path: Path) -> None:
    url = connect_url(str(tmp_path / "source.sqlite3"))
    _registry(url)
    with sqlite3.connect(tmp_path / "source.sqlite3") as conn:
        conn.execute(
            "CREATE TRIGGER evil AFTER INSERT ON users"
            " BEGIN UPDATE users SET is_admin = 1 WHERE id = NEW.id; END"
        )
        conn.execute("CREATE VIEW everyone AS SELECT name, password_hash FROM users")
    engine = make_engine(url)
    with engine.begin() as c:  # the trigger works: every new account is an admin
        create_user(c, "mallory", password="correct horse battery staple")
        assert c.execute(sa.text("SELECT is_admin FROM users WHERE name = 'mallory'")).scalar() == 1
    engine.dispose()
    archive = tmp_path / "tampered.tar.gz"
    backup(url, FileBlobStore(tmp_path / "blobs"), archive)

    target = tmp_path / "restored.sqlite3"
    with pytest.raises(RegistryError) as refused:
        restore(archive, connect_url(str(target)), FileBlobStore(tmp_path / "restored"))
    assert refused.value.status == 422
    assert "database.sqlite3: the database file holds what is not lair's registry" in str(refused.value)
    assert "trigger evil" in str(refused.value) and "view everyone" in str(refused.value)
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


# ---------------------------------------------------------------------------------------------
# the archive's members (on SQLite: they are checked before either kind of database is touched)


@pytest.fixture
def sqlite_backup(tmp_path: Path) -> Path:
    url = connect_url(str(tmp_path / "source.sqlite3"))
    _registry(url)
    archive = tmp_path / "backup.tar.gz"
    backup(url, FileBlobStore(tmp_path / "blobs"), archive)
    return archive


def _rewrite(
    src: Path, dst: Path, extra: list[tuple[tarfile.TarInfo, bytes]], blobs: list[dict[str, Any]]
) -> Path:
    """The archive ``src`` (this test's own) again, with ``extra`` members and ``blobs`` entries in
    its manifest (their sha256 right: the tamperer can compute them too)."""
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(dst, "w:gz", format=tarfile.PAX_FORMAT) as out:
        for info, data in members:
            if info.name == "manifest.json":
                doc = json.loads(data)
                doc["blobs"] += blobs
                data = json.dumps(doc).encode()
                info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        for info, data in extra:
            out.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return dst


def _member(name: str, data: bytes = b"", **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    return info, data


def _entry(key: str, data: bytes) -> dict[str, Any]:
    return {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _refused(archive: Path, tmp_path: Path) -> None:
    target, blobs = tmp_path / "restored.sqlite3", tmp_path / "restored-blobs"
    argv = ["restore", str(archive), "--db", connect_url(str(target)), "--blobs", str(blobs)]
    rc = main(["registry", *argv])
    assert rc != 0
    assert not blobs.exists()
    if target.exists():  # nothing loaded
        with sqlite3.connect(target) as conn:
            assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


LOG = b"engine log\n"
KEY = "reports/r1/logs/server.log"


@pytest.mark.parametrize(
    "member",
    [
        _member(f"blobs/{KEY}", type=tarfile.SYMTYPE, linkname="/etc/shadow"),
        _member(f"blobs/{KEY}", type=tarfile.LNKTYPE, linkname="database.sqlite3"),
    ],
    ids=["symlink", "hardlink"],
)
def test_a_link_member_is_refused_with_its_name_before_anything_loads(
    member: tuple[tarfile.TarInfo, bytes],
    sqlite_backup: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive = _rewrite(sqlite_backup, tmp_path / "links.tar.gz", [member], [_entry(KEY, LOG)])
    _refused(archive, tmp_path)
    err = capsys.readouterr().err
    kind = "a symbolic link" if member[0].issym() else "a hard link"
    assert f"blobs/{KEY} is {kind} (a backup holds only regular files)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("pax", "needle"),
    [
        ({"LAIR.big": "x" * 200_000}, "an extended header of 200,"),
        ({f"LAIR.k{i}": "v" for i in range(100)}, "pax header of more than 64 records"),
    ],
    ids=["200 KB pax header", "100 pax records"],
)
def test_an_extended_header_over_the_bounds_is_refused_before_tarfile_reads_it(
    pax: dict[str, str], needle: str, sqlite_backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    member = _member(f"blobs/{KEY}", LOG, pax_headers=pax)
    archive = _rewrite(sqlite_backup, tmp_path / "pax.tar.gz", [member], [_entry(KEY, LOG)])
    _refused(archive, tmp_path)
    assert needle in capsys.readouterr().err


def test_a_blob_key_that_is_no_report_key_is_refused_before_the_database_loads(
    sqlite_backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "reports/../../outside"
    archive = _rewrite(
        sqlite_backup, tmp_path / "keys.tar.gz", [_member(f"blobs/{bad}", LOG)], [_entry(bad, LOG)]
    )
    _refused(archive, tmp_path)
    assert "blob keys that are not report file keys: ['reports/../../outside']" in capsys.readouterr().err


def test_a_member_the_manifest_does_not_name_is_refused(
    sqlite_backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _rewrite(sqlite_backup, tmp_path / "extra.tar.gz", [_member("blobs/reports/r9/x.log", LOG)], [])
    _refused(archive, tmp_path)
    assert "members the manifest does not name: ['blobs/reports/r9/x.log']" in capsys.readouterr().err


def test_the_archive_unchanged_restores(sqlite_backup: Path, tmp_path: Path) -> None:
    """The refusals above are about what was added: the same archive with a real blob restores."""
    archive = _rewrite(
        sqlite_backup, tmp_path / "ok.tar.gz", [_member(f"blobs/{KEY}", LOG)], [_entry(KEY, LOG)]
    )
    restored = tmp_path / "restored-blobs"
    restore(archive, connect_url(str(tmp_path / "restored.sqlite3")), FileBlobStore(restored))
    assert (restored / KEY).read_bytes() == LOG


def test_a_backup_is_written_0600_whatever_the_umask_or_a_stale_part_file(tmp_path: Path) -> None:
    url = connect_url(str(tmp_path / "source.sqlite3"))
    _registry(url)
    out = tmp_path / "backup.tar.gz"
    stale = out.with_name(f".{out.name}.part")
    stale.write_bytes(b"left by a killed run")
    stale.chmod(0o644)
    old = os.umask(0)
    try:
        backup(url, FileBlobStore(tmp_path / "blobs"), out)
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o600
    assert not stale.exists()
