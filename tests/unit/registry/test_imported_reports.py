"""A report made by ``lair import-results`` from a peer's result file goes through the real upload
route on SQLite and PostgreSQL: accepted, every row stored reported-by-report (never verified) with
its provenance (tool, version, the file's sha256) in the note, shown on the recipe page; the same
file imported twice is one report."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, ROOT
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.client.api import pack_report
from lair.interop.imported_report import write_imported_report
from lair.interop.peer_results import read_results
from lair.registry.db.tables import RECIPES, REVISIONS
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

SLUG = "llama31-8b-rtx4090-sglang"
RESULTS = ROOT / "tests" / "data" / "interop" / "results"


@pytest.fixture
def client(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, Path, str]]:
    reset_limits()
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
        token = create_token(conn, create_user(conn, "alice"), "cli")
        toml = conn.execute(
            sa.select(REVISIONS.c.toml)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == SLUG)
        ).scalar_one()
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(str(toml))
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield c, recipe, token


def _upload(c: tuple[TestClient, Path, str], folder: Path) -> Any:
    headers = {"authorization": f"Bearer {c[2]}", "content-type": "application/gzip"}
    return c[0].post("/api/v1/reports", content=pack_report(folder), headers=headers)


def test_an_imported_report_is_stored_reported_with_its_provenance(
    client: tuple[TestClient, Path, str], tmp_path: Path
) -> None:
    peer = RESULTS / "llama-bench.json"
    sha = hashlib.sha256(peer.read_bytes()).hexdigest()  # the file's own bytes
    folder = write_imported_report(read_results("llama-bench", peer), client[1], tmp_path / "report")
    r = _upload(client, folder)
    assert r.status_code == 201, r.text
    rows = r.json()["rows"]
    assert [(x["context"], x["prefill_tok_s"], x["decode_tok_s_per_stream"]) for x in rows] == [
        (512, 1520.5, None), (1, None, 45.25), (4096, None, 41.0),
    ]  # fmt: skip
    assert {x["provenance"] for x in rows} == {"reported-by-report"}
    note = rows[0]["note"]
    assert note.startswith(f"imported from llama-bench b7012 (6c7b0d1) (file sha256 {sha}; its figures)")
    assert "not verified" in note
    page = client[0].get(f"/api/v1/recipes/{SLUG}.json").json()
    shown = [m for m in page["measurements"] if m["report_id"] == r.json()["id"]]
    assert len(shown) == 3 and {m["tier"] for m in shown} == {"reported-by-report"}
    assert all(sha in m["note"] for m in shown)
    again = _upload(
        client, write_imported_report(read_results("llama-bench", peer), client[1], tmp_path / "r2")
    )
    assert again.status_code == 409, again.text


def test_recomputed_rows_are_not_verified_either(
    client: tuple[TestClient, Path, str], tmp_path: Path
) -> None:
    run = read_results("vllm-bench", RESULTS / "vllm-bench-detailed.json", "0.32.0")
    assert run.recomputed
    r = _upload(client, write_imported_report(run, client[1], tmp_path / "report"))
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "reported-by-report"
    assert (
        "vllm-bench 0.32.0" in row["note"]
        and "recomputed by lair from its per-request timings" in row["note"]
    )
