"""An upload unpacks, verifies and puts its blobs before its write transaction opens, and a replication
upload fetches its target's blobs before it too (SQLite and PostgreSQL): the blob store below records
each call in one log with the engine's own events (each connection's BEGIN and statements), and the
write transaction, the connection that inserts the report's row, begins after the last blob call.
A store that fails on the second file (a full disk) leaves neither blobs nor rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine, event
from upload_site import Site, make_site

from lair.registry.db.tables import REPORTS
from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.recompute import check_cells
from lair.registry.web.auth import reset_limits
from lair.testing.uploads import encode, tar_gz


def _slowed(files: dict[str, Any], factor: float) -> dict[str, Any]:
    """``files`` with every time after the send stretched by ``factor``, the cell recomputed."""
    for row in files["requests.jsonl"]:
        row["chunk_ms"] = [round(t * factor, 3) for t in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return files


class RecordingStore:
    """A folder store that logs each call (and, with ``fail_at``, refuses that put as a full disk)."""

    def __init__(self, root: Path, log: list[tuple[str, Any]], fail_at: int | None = None) -> None:
        self.inner, self.log, self.fail_at, self.puts = FileBlobStore(root), log, fail_at, 0

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        if self.puts == self.fail_at:
            raise OSError(28, "No space left on device")
        self.log.append(("put", key))
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        self.log.append(("get", key))
        return self.inner.get(key)

    def delete_prefix(self, prefix: str) -> None:
        self.log.append(("delete", prefix))
        self.inner.delete_prefix(prefix)


@pytest.fixture
def site(db_url: str, engine: Engine, tmp_path: Path) -> Iterator[tuple[Site, list[tuple[str, Any]]]]:
    log: list[tuple[str, Any]] = []

    def begin(conn: Any) -> None:
        log.append(("begin", id(conn)))

    def statement(conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        log.append(("sql", (id(conn), " ".join(sql.split()[:3]).lower())))

    for s in make_site(db_url, engine):
        state = s.client.app.app.state  # type: ignore[attr-defined]
        state.blobs = RecordingStore(tmp_path / "blobs", log)
        event.listen(state.engine, "begin", begin)
        event.listen(state.engine, "before_cursor_execute", statement)
        yield s, log


def _write_begins(log: list[tuple[str, Any]]) -> int:
    """Where the transaction that inserted the report's row began in ``log``."""
    (at,) = [i for i, (k, v) in enumerate(log) if k == "sql" and v[1] == "insert into reports"]
    writer = log[at][1][0]
    return max(i for i in range(at) if log[i] == ("begin", writer))


def _last(log: list[tuple[str, Any]], kind: str) -> int:
    return max(i for i, (k, _) in enumerate(log) if k == kind)


def test_the_blobs_are_put_before_the_write_transaction_begins(site: tuple[Site, list[Any]]) -> None:
    s, log = site
    res = s.upload(s.report())
    assert res.status_code == 201, res.text
    rid = res.json()["id"]
    files = s.client.get(f"/api/v1/reports/{rid}.json").json()["files"]
    assert sorted(v for k, v in log if k == "put") == sorted(f"reports/{rid}/{f}" for f in files)
    assert _last(log, "put") < _write_begins(log)


def test_a_replication_fetches_its_targets_blobs_before_the_write_transaction(
    site: tuple[Site, list[Any]],
) -> None:
    s, log = site
    first = s.upload(s.report())
    assert first.status_code == 201, first.text
    doc = s.client.get("/api/v1/recipes/tiny-cpu.json").json()
    (row,) = [m["row_id"] for m in doc["measurements"] if m["report_id"] == first.json()["id"]]
    log.clear()
    reset_limits()
    headers = {"content-type": "application/gzip", "authorization": f"Bearer {s.other}"}
    body = tar_gz(encode(_slowed(s.report(), 1.01)))
    again = s.client.post("/api/v1/reports", content=body, headers=headers, params={"replicates": row})
    assert again.status_code == 201, again.text
    assert again.json()["replication"][0]["outcome"] == "replicated"  # 1 % slower: within the band
    gets = [v for k, v in log if k == "get"]
    assert gets == [
        f"reports/{first.json()['id']}/results.json",
        f"reports/{first.json()['id']}/requests.jsonl",
    ]
    assert max(_last(log, "get"), _last(log, "put")) < _write_begins(log)


def test_a_store_that_fails_midway_leaves_neither_blobs_nor_rows(
    site: tuple[Site, list[Any]], tmp_path: Path, engine: Engine
) -> None:
    s, log = site
    state = s.client.app.app.state  # type: ignore[attr-defined]
    state.blobs = RecordingStore(tmp_path / "blobs", log, fail_at=2)
    res = s.upload(s.report())
    assert res.status_code == 503, res.text
    assert res.json()["error"]["code"] == "unavailable"  # the full disk is an outage: 503, Retry-After
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(REPORTS)).scalar_one() == 0
    assert not any(k == "sql" and v[1].startswith("insert into reports") for k, v in log)
