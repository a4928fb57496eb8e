"""Replicated needs two accounts, through the real upload route on SQLite and PostgreSQL: one account
uploading verified reports from two rig fingerprints (a fingerprint is the uploader's own word) stays
verified, on the recipe's JSON and page and in the tier a sort sees; a second account on a third rig,
agreeing within 10%, makes every row replicated. The speeds are 90% and 92% of the H100 SXM's decode
ceiling for Llama 3.1 8B at 2K, computed by hand (test_verified_physics)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient
from test_verified_physics import H100, H100_CEILING, LLAMA_SLUG, World, _report, _upload

from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits


@pytest.fixture
def world(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[World]:
    reset_limits()
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
        tokens = {who: create_token(conn, create_user(conn, who), "cli") for who in ("alice", "bob")}
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, engine, tokens)


def _send(w: World, who: str, rig_cpu: str, share: float) -> None:
    files = _report(
        w, LLAMA_SLUG, share * H100_CEILING, H100, contexts=(2048,), ttft_ms=100.0,
        cpu_model=rig_cpu, run_name=f"{who}-{rig_cpu}",
    )  # fmt: skip
    r = _upload(w, files, who)
    assert r.status_code == 201, r.text
    assert r.json()["rows"][0]["provenance"] == "verified"


def _tiers(w: World) -> list[tuple[str, str, int, int]]:
    body = w.client.get(f"/api/v1/recipes/{LLAMA_SLUG}.json").json()
    rows = [m for m in body["measurements"] if m["report_id"]]
    return [(m["submitted_by"], m["tier"], m["rigs"], m["accounts"]) for m in rows]


def _page_tiers(w: World) -> list[str]:
    page = w.client.get(f"/recipes/{LLAMA_SLUG}").text
    return re.findall(r'<td class="tier" data-tier="([\w-]+)">', page)


def test_one_account_with_two_fingerprints_never_replicates_itself(world: World) -> None:
    _send(world, "alice", "AMD EPYC 9654", 0.90)
    _send(world, "alice", "Intel(R) Xeon(R) Platinum 8480+", 0.91)  # another rig fingerprint
    assert _tiers(world) == [("alice", "verified", 2, 1), ("alice", "verified", 2, 1)]
    assert _page_tiers(world).count("replicated") == 0


def test_two_accounts_on_two_rigs_replicate(world: World) -> None:
    _send(world, "alice", "AMD EPYC 9654", 0.90)
    _send(world, "alice", "Intel(R) Xeon(R) Platinum 8480+", 0.91)
    _send(world, "bob", "AMD EPYC 7763", 0.92)  # spread (0.92 - 0.90) / 0.91 = 2.2%: they agree
    got: list[Any] = _tiers(world)
    assert sorted(got) == [("alice", "replicated", 3, 2)] * 2 + [("bob", "replicated", 3, 2)]
    assert _page_tiers(world).count("replicated") == 3
    assert "2 accounts" in world.client.get(f"/recipes/{LLAMA_SLUG}").text
