"""A real report of the tiny-cpu example whose engine log holds ``HF_TOKEN=hf_...`` and a
``Bearer ghp_...`` header is accepted with the log redacted in place: the served log, every row of
every table (the ``db`` blob store's rows included), the blob files and the SQLite file itself hold
no token. The same token in results.json refuses the report and stores nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.client import pack_report
from lair.testing.registry import db_snapshot

pytestmark = [pytest.mark.integration]

# built here so this file holds no secret-looking literal
HF = "hf_" + "Pq9" * 12
GHP = "ghp_" + "Mn8Lk7Jh" * 4 + "Gf6d"
LEAK = f"INFO starting with HF_TOKEN={HF}\nDEBUG sent Authorization: Bearer {GHP}\nINFO done\n"


def _post(c: TestClient, data: bytes) -> Any:
    return c.post("/api/v1/reports", content=data, headers={"content-type": "application/gzip"})


def _leaky(report: Path) -> bytes:
    log = report / "logs" / "engine.log"
    log.parent.mkdir(exist_ok=True)
    before = log.read_bytes() if log.exists() else b""
    log.write_bytes(before + LEAK.encode())
    return before


def _clean(db_url: str, *places: Path) -> None:
    dump = repr(db_snapshot(db_url))
    assert HF not in dump and GHP not in dump
    for where in places:
        for p in where.rglob("*") if where.is_dir() else [where]:
            if p.is_file():
                data = p.read_bytes()
                assert HF.encode() not in data and GHP.encode() not in data, p


def _db_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _served_log(c: TestClient, report_id: str) -> str:
    r = c.get(f"/reports/{report_id}/files/logs/engine.log")
    assert r.status_code == 200
    return r.text


def test_a_token_in_the_engine_log_is_redacted_before_it_is_stored(
    site: tuple[TestClient, Engine, Path], report_copy: Path
) -> None:
    c, engine, blobs = site
    before = _leaky(report_copy)
    r = _post(c, pack_report(report_copy))
    assert r.status_code == 201, r.text
    served = _served_log(c, r.json()["id"])
    assert served == before.decode() + (
        "INFO starting with HF_TOKEN=[REDACTED:Hugging Face Token]\n"
        "DEBUG sent Authorization: Bearer [REDACTED:Bearer credential]\n"
        "INFO done\n"
    )
    db = Path(engine.url.database or "")  # SQLite: the file, its WAL and shared memory, as written
    db_files = sorted(db.parent.glob(db.name + "*")) if engine.dialect.name == "sqlite" else []
    assert db_files or engine.dialect.name != "sqlite"
    _clean(_db_url(engine), blobs, *db_files)


def test_the_db_blob_store_keeps_the_redacted_log_only(
    db_blobs_site: tuple[TestClient, Engine], report_copy: Path
) -> None:
    c, engine = db_blobs_site
    _leaky(report_copy)
    r = _post(c, pack_report(report_copy))
    assert r.status_code == 201, r.text
    assert "[REDACTED:Hugging Face Token]" in _served_log(c, r.json()["id"])
    _clean(_db_url(engine))


def test_the_same_token_in_results_json_refuses_the_report(
    site: tuple[TestClient, Engine, Path], report_copy: Path
) -> None:
    c, engine, blobs = site
    doc = json.loads((report_copy / "results.json").read_text())
    doc["run_name"] = f"run with {HF}"
    (report_copy / "results.json").write_text(json.dumps(doc))
    before = db_snapshot(_db_url(engine))
    r = _post(c, pack_report(report_copy))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "secret" and HF not in r.text
    assert any(x.startswith("results.json:1:") for x in r.json()["error"]["reasons"])
    assert db_snapshot(_db_url(engine)) == before
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))
