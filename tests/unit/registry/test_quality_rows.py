"""Quality rows in the database on SQLite and PostgreSQL: the published ``meta.quality`` figures as
reported rows (at publish and backfilled by migration 0004), their retraction (struck, still shown),
and the tiers of measured rows (replication by distinct rigs within the stated spread)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from registry_paths import SEED_000
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.engine import migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish
from lair.registry.service.quality_rows import annotate_quality
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

SLUG_000 = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
SEED_ROWS = [("GSM8K-200 (thinking off)", 98.5, "reported"), ("HumanEval pass@1", 97.0, "reported")]


def _rows(engine: Engine) -> list[tuple[str, float, str]]:
    with engine.connect() as conn:
        q = "SELECT suite, score, provenance FROM quality_measurements ORDER BY id"
        return [tuple(r) for r in conn.execute(sa.text(q))]  # type: ignore[misc]


def test_migration_0004_backfills_published_quality_figures(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, SEED_000.read_text(), owner="author")
    assert _rows(engine) == SEED_ROWS
    migrate(engine, "0003")  # the table goes; the revisions (and their meta.quality) stay
    assert "quality_measurements" not in sa.inspect(engine).get_table_names()
    migrate(engine)
    assert _rows(engine) == SEED_ROWS


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    reset_limits()
    with engine.begin() as conn:
        tokens = {n: create_token(conn, create_user(conn, n)) for n in ("author", "other")}
        publish(conn, SEED_000.read_text(), owner="author")
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield c, tokens


def test_a_retracted_quality_row_stays_struck(client: tuple[TestClient, dict[str, str]]) -> None:
    c, tokens = client
    row = c.get(f"/api/v1/recipes/{SLUG_000}.json").json()["quality"][0]
    url, body = f"/api/v1/quality/{row['id']}/retract", {"reason": "template bug"}
    assert c.post(url, json=body).status_code == 401
    other = c.post(url, json=body, headers={"authorization": f"Bearer {tokens['other']}"})
    assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"
    auth = {"authorization": f"Bearer {tokens['author']}"}
    assert c.post(url, json={"reason": " "}, headers=auth).status_code == 422
    assert c.post(url, json=body, headers=auth).json() == {"ok": True, "retracted": row["id"]}
    assert c.post(url, json=body, headers=auth).status_code == 409
    assert c.post("/api/v1/quality/999999/retract", json=body, headers=auth).status_code == 404
    rows = c.get(f"/api/v1/recipes/{SLUG_000}.json").json()["quality"]
    assert [(q["suite"], q["retracted"], q["retracted_reason"]) for q in rows] == [
        ("GSM8K-200 (thinking off)", True, "template bug"),
        ("HumanEval pass@1", False, None),
    ]
    page = c.get(f"/recipes/{SLUG_000}").text
    assert '<s>reported</s> <span class="retracted-reason">(retracted: template bug)</span>' in page


def _measured(i: int, rig: str, score: float, **kw: object) -> dict[str, object]:
    row = {"id": i, "revision": 1, "suite": "lair_arith", "metric": "exact_match,first-integer", "n": 36}
    row |= {"score": score, "provenance": "verified", "retracted": False, "report_id": f"r{i}", "rig": rig}
    return row | kw


def test_replicated_needs_two_rigs_within_two_points() -> None:
    rows = [
        _measured(1, "rig-a", 50.0, submitted_by="alice"),
        _measured(
            2, "rig-a", 80.0, submitted_by="alice"
        ),  # the same rig again: its median (65.0) counts once
        _measured(3, "rig-b", 66.5, submitted_by="bob"),  # 1.5 points from rig-a's 65.0: replicated
        _measured(4, "rig-c", 90.0, n=20),  # another sample count: a group of its own
        _measured(5, "rig-d", 91.0, n=20, retracted=True),  # struck: never counts
        {**_measured(6, "rig-e", 65.0), "provenance": "reported-by-report"},
    ]
    got = [(r["id"], r["tier"], r["rigs"], r["spread"]) for r in annotate_quality(rows)]
    assert got == [
        (1, "replicated", 2, 1.5),
        (2, "replicated", 2, 1.5),
        (3, "replicated", 2, 1.5),
        (4, "verified", 1, None),
        (5, "verified", 1, None),
        (6, "reported-by-report", None, None),
    ]
    far = annotate_quality([_measured(1, "rig-a", 60.0, submitted_by="a"), _measured(2, "rig-b", 62.5)])
    assert [(r["tier"], r["spread"]) for r in far] == [("verified", 2.5), ("verified", 2.5)]
    assert annotate_quality([_measured(1, "rig-a", 60.0)])[0]["links"]["samples"] == (
        "/reports/r1/files/eval_samples.jsonl"
    )


def test_one_account_on_two_rigs_never_replicates_its_own_quality_rows() -> None:
    """Two fingerprints that agree, both uploaded by one account: still only verified; the same
    scores from a second account replicate."""
    alone = [
        _measured(1, "rig-a", 65.0, submitted_by="mallory"),
        _measured(2, "rig-b", 65.5, submitted_by="mallory"),
    ]
    assert [r["tier"] for r in annotate_quality(alone)] == ["verified", "verified"]
    anonymous = [
        _measured(1, "rig-a", 65.0),
        _measured(2, "rig-b", 65.5),
    ]  # no submitter: one unknown account
    assert [r["tier"] for r in annotate_quality(anonymous)] == ["verified", "verified"]
    two = [
        _measured(1, "rig-a", 65.0, submitted_by="mallory"),
        _measured(2, "rig-b", 65.5, submitted_by="bob"),
    ]
    assert [r["tier"] for r in annotate_quality(two)] == ["replicated", "replicated"]
