"""The blob store contract, passed by the files store, the database store and the S3 store (over HTTP
against moto's server) alike, each over SQLite and PostgreSQL; and how ``blob_store`` picks a store
from a URL (``--blobs``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from lair.errors import RegistryError
from lair.registry.service.blobs import (
    BlobStore,
    DbBlobStore,
    FileBlobStore,
    blob_store,
    register_blob_store,
)
from lair.registry.settings import Settings

BINARY = bytes(range(256)) * 3 + b"\x00\r\n"


@pytest.fixture(params=["file", "db", "s3"])
def store(request: pytest.FixtureRequest, engine: Engine, db_url: str, tmp_path: Path) -> Iterator[BlobStore]:
    """The store ``--blobs`` would give: a file:// folder, ``db`` on the registry's database, or an
    ``s3://`` bucket."""
    spec = {"file": f"file://{tmp_path / 'blobs'}", "db": "db"}.get(request.param)
    spec = spec or request.getfixturevalue("s3_url")
    yield blob_store(spec, db_url=db_url, engine=engine)


def _missing(store: BlobStore, key: str) -> str:
    with pytest.raises(RegistryError) as exc:
        store.get(key)
    assert exc.value.status == 404 and exc.value.code == "not_found"
    return exc.value.message


def test_put_then_get_gives_the_same_bytes_and_put_replaces(store: BlobStore) -> None:
    store.put("reports/a1/requests.jsonl", BINARY)
    store.put("reports/a1/logs/engine.log", b"")
    assert store.get("reports/a1/requests.jsonl") == BINARY
    assert store.get("reports/a1/logs/engine.log") == b""
    store.put("reports/a1/requests.jsonl", b"second")
    assert store.get("reports/a1/requests.jsonl") == b"second"


def test_a_missing_key_is_not_found(store: BlobStore) -> None:
    store.put("reports/a1/report.md", b"# run")
    assert _missing(store, "reports/a1/results.json") == "no such file: reports/a1/results.json"
    assert _missing(store, "reports/a1") == "no such file: reports/a1"  # a prefix is no file


def test_delete_prefix_removes_that_report_only(store: BlobStore) -> None:
    for key in ("reports/a1/x.json", "reports/a1/logs/e.log", "reports/a10/x.json", "reports/a_1/x.json"):
        store.put(key, key.encode())
    store.delete_prefix("reports/a1")
    _missing(store, "reports/a1/x.json")
    _missing(store, "reports/a1/logs/e.log")
    assert store.get("reports/a10/x.json") == b"reports/a10/x.json"  # the same letters, another report
    assert store.get("reports/a_1/x.json") == b"reports/a_1/x.json"  # _ is no wildcard
    store.delete_prefix("reports/none")  # nothing there: no error


@pytest.mark.parametrize("key", ["../x", "reports/../../etc/passwd", "/etc/passwd", "a//b", "", "a/./b"])
def test_keys_outside_the_store_are_refused_by_every_call(store: BlobStore, key: str) -> None:
    with pytest.raises(RegistryError) as exc:
        store.put(key, b"x")
    assert exc.value.status == 404
    _missing(store, key)
    with pytest.raises(RegistryError):
        store.delete_prefix(key)


def test_the_db_store_keeps_blobs_in_the_registry_database(engine: Engine, db_url: str) -> None:
    store = blob_store("db", db_url=db_url, engine=engine)
    assert isinstance(store, DbBlobStore)
    store.put("reports/b2/fingerprint.json", b'{"gpus": null}')
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT key, size FROM blobs")).all()
    assert [tuple(r) for r in rows] == [("reports/b2/fingerprint.json", 14)]


def test_urls_pick_the_store(tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAIR_REGISTRY_BLOBS", raising=False)
    by_url = blob_store(f"file://{tmp_path}/x")
    by_path = blob_store(str(tmp_path / "y"))
    assert isinstance(by_url, FileBlobStore) and by_url.root == tmp_path / "x"
    assert isinstance(by_path, FileBlobStore) and by_path.root == tmp_path / "y"
    beside = blob_store(None, db_url=f"sqlite:///{tmp_path}/reg.sqlite3")
    assert isinstance(beside, FileBlobStore) and beside.root == tmp_path / "reg-blobs"
    monkeypatch.setenv("LAIR_REGISTRY_BLOBS", "db")  # read by the settings table, not by blob_store
    assert isinstance(blob_store(Settings.from_env().blobs, engine=engine), DbBlobStore)
    with pytest.raises(RegistryError) as exc:
        blob_store("gs://bucket/prefix")
    assert exc.value.status == 422 and "no blob store for gs:// URLs" in exc.value.message
    assert "lair.registry.blob_stores" in (exc.value.hint or "")


def test_a_registered_scheme_builds_its_store(tmp_path: Path, engine: Engine) -> None:
    """How an S3-compatible store plugs in: a factory for its scheme gets the URL and the engine."""
    seen: list[tuple[str, Engine | None]] = []

    def factory(url: str, eng: Engine | None) -> BlobStore:
        seen.append((url, eng))
        return FileBlobStore(tmp_path / url.split("://", 1)[1])

    register_blob_store("bucket-test", factory)
    store = blob_store("bucket-test://reports-bucket", engine=engine)
    store.put("reports/c3/report.md", b"# ok")
    assert seen == [("bucket-test://reports-bucket", engine)]
    assert (tmp_path / "reports-bucket" / "reports" / "c3" / "report.md").read_bytes() == b"# ok"


def test_lair_serve_refuses_a_blob_store_url_nothing_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lair.cli import main

    rc = main(["serve", "--db", str(tmp_path / "r.sqlite3"), "--blobs", "gs://bucket/reports", "--no-seed"])
    err = capsys.readouterr().err
    assert rc != 0 and "no blob store for gs:// URLs" in err and "lair.registry.blob_stores" in err
