"""``lair registry backup`` / ``restore`` round trip, on SQLite and on PostgreSQL: a registry filled
through its real API (recipes published and revised, votes by two accounts, a fork, three reports
uploaded, a measurement retracted) is backed up from the command line, restored into a fresh
database and a blob store of another kind (S3), and then every row of every table and every
report's blob bytes are the same, the restored tables have planner statistics (ANALYZE ran), and
the restored site serves the same recipe JSON and files.
A damaged archive and a database that is not empty are refused before anything is written."""

from __future__ import annotations

import copy
import io
import json
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient
from upload_site import Site, make_site

from lair.cli import main
from lair.registry.db.engine import connect_url, make_engine
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.blobs import blob_store
from lair.registry.service.recompute import check_cells
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import charts_drawn, pg_database
from lair.testing.uploads import encode, tar_gz

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]


def variant(base: dict[str, Any], n: int) -> dict[str, Any]:
    """The report run again, its chunks ``n``/2 ms later: other raw timings (another digest), its cell
    recomputed from them the way the registry checks it."""
    files = copy.deepcopy(base)
    for row in files["requests.jsonl"]:
        row["chunk_ms"] = [c + 0.5 * n for c in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    files["results.json"]["run_name"] = f"run {n}"
    return files


def _ok(r: Any, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json()


def _fill(site: Site) -> list[str]:
    """Write through the API as users do; the ids of the reports stored."""
    c = site.client
    _ok(c.post("/api/v1/recipes", json={"toml": LLAMA.read_text(), "notes": "first"}), 201)
    for n in (2, 3):
        edited = LLAMA.read_text().replace("max_context = 32768", f"max_context = {1000 * n}")
        _ok(c.post(f"/api/v1/recipes/{SLUG}/revisions", json={"toml": edited, "notes": f"r{n}"}), 201)
    with site.engine.begin() as conn:
        other = create_token(conn, create_user(conn, "voter"))
    for token in (c.headers["authorization"], f"Bearer {other}"):
        for slug in ("tiny-cpu", SLUG):
            reset_limits()
            _ok(c.put(f"/api/v1/recipes/{slug}/vote", headers={"authorization": token}))
    reset_limits()
    _ok(c.post(f"/api/v1/recipes/{SLUG}/fork", headers={"authorization": f"Bearer {other}"}), 201)
    ids = [_ok(site.post(tar_gz(encode(variant(site.report(), n)))), 201)["id"] for n in range(3)]
    mid = _ok(c.get("/api/v1/recipes/tiny-cpu.json"))["measurements"][0]["id"]
    reset_limits()
    _ok(c.post(f"/api/v1/measurements/{mid}/retract", json={"reason": "a noisy neighbour"}))
    charts_drawn(c.app)  # what the writes left to the chart drawer is stored before the backup
    return ids


@pytest.fixture
def source(
    db_url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Site, str]]:
    monkeypatch.setenv("LAIR_REGISTRY_BLOBS", str(tmp_path / "blobs"))
    for site in make_site(db_url, engine):
        yield site, db_url


@pytest.fixture
def fresh(db_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the same kind as the source's."""
    if db_url.startswith("sqlite"):
        yield connect_url(str(tmp_path / "restored.sqlite3"))
        return
    with pg_database() as url:
        yield connect_url(url)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    rc = main(["registry", *argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return dict(json.loads(out))


def _tables(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table the database holds (as the database lists them), in a stable order."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            seen = sa.inspect(conn)
            out = {}
            for n in sorted(set(seen.get_table_names()) - {"alembic_version"}):
                cols = ", ".join(f'"{c["name"]}"' for c in seen.get_columns(n))
                out[n] = [
                    tuple(r) for r in conn.execute(sa.text(f'SELECT {cols} FROM "{n}" ORDER BY {cols}'))
                ]
            return out
    finally:
        engine.dispose()


def _planner_rows(url: str) -> dict[str, int]:
    """The rows the planner's statistics count in each table that has them: PostgreSQL's
    ``pg_class.reltuples`` of the tables ``pg_stats`` holds columns of (ANALYZE alone fills it;
    ``CREATE INDEX`` sets reltuples too), SQLite's ``sqlite_stat1`` (an index's first number)."""
    if url.startswith("sqlite"):
        sql = "SELECT tbl, max(CAST(stat AS INTEGER)) FROM sqlite_stat1 GROUP BY tbl"
    else:
        sql = (
            "SELECT c.relname, c.reltuples::bigint FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname IN"
            " (SELECT tablename FROM pg_stats WHERE schemaname = current_schema())"
        )
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if url.startswith("sqlite") and not sa.inspect(conn).has_table("sqlite_stat1"):
                return {}
            return {name: int(rows) for name, rows in conn.execute(sa.text(sql))}
    finally:
        engine.dispose()


def test_a_backup_restores_every_row_blob_and_document(
    source: tuple[Site, str], fresh: str, s3_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site, url = source
    ids = _fill(site)
    archive = tmp_path / "backup.tar.gz"
    made = _cli(capsys, "backup", str(archive), "--db", url, "--blobs", str(tmp_path / "blobs"))
    with site.engine.connect() as conn:  # the manifest's counts, against the source's own
        for table in ("recipes", "revisions", "votes", "measurements", "reports"):
            assert made["tables"][table] == conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()
    assert (
        made["tables"]["reports"] == 3 and made["tables"]["votes"] == 4 and made["tables"]["revisions"] >= 4
    )

    restored = _cli(capsys, "restore", str(archive), "--db", fresh, "--blobs", s3_url)
    assert restored["tables"] == made["tables"] and restored["blobs"] == made["blobs"]
    assert _tables(fresh) == _tables(url)  # every row of every table
    stats = _planner_rows(fresh)  # analyzed after the load: the planner knows the tables' sizes
    for table in ("recipes", "revisions", "votes", "measurements", "reports"):
        assert stats.get(table) == made["tables"][table], (table, stats)

    before, after = blob_store(str(tmp_path / "blobs")), blob_store(s3_url)
    keys = [
        f"reports/{rid}/{name}"
        for rid in ids
        for name in site.client.get(f"/api/v1/reports/{rid}").json()["files"]
    ]
    assert len(keys) == made["blobs"] and keys
    assert all(after.get(k) == before.get(k) for k in keys)

    with TestClient(create_app(fresh, blobs=s3_url), raise_server_exceptions=False) as again:
        for slug in [i["slug"] for i in site.client.get("/api/v1/recipes").json()["items"]]:
            assert (
                again.get(f"/api/v1/recipes/{slug}.json").json()
                == site.client.get(f"/api/v1/recipes/{slug}.json").json()
            )
        file = f"/reports/{ids[0]}/files/requests.jsonl"
        assert again.get(file).content == site.client.get(file).content != b""


def test_a_damaged_archive_or_a_database_in_use_is_refused_and_nothing_written(
    source: tuple[Site, str], fresh: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site, url = source
    _fill(site)
    archive = tmp_path / "backup.tar.gz"
    _cli(capsys, "backup", str(archive), "--db", url, "--blobs", str(tmp_path / "blobs"))
    damaged = tmp_path / "damaged.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(damaged, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()  # type: ignore[union-attr]
            if m.name.endswith("requests.jsonl"):
                data = data.replace(b"200", b"500", 1)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    target = tmp_path / "target-blobs"
    rc = main(["registry", "restore", str(damaged), "--db", fresh, "--blobs", str(target)])
    err = capsys.readouterr().err
    assert rc != 0 and "sha256 differs from the manifest's" in err and "requests.jsonl" in err
    assert _tables(fresh) == {}  # nothing loaded
    assert not target.exists()
    rc = main(["registry", "restore", str(archive), "--db", url, "--blobs", str(target)])
    err = capsys.readouterr().err
    assert rc != 0 and "the database is not empty" in err and "hint: restore into a new database" in err
