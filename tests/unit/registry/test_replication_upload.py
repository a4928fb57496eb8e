"""Replication attempts through ``POST /api/v1/reports?replicates=SLUG@REV#ROW`` (SQLite and
PostgreSQL): a malformed, unknown or mismatched row id is 422 naming the parameter with nothing
stored; an accepted attempt is linked to its row with the registry's verdict, and the recipe's JSON
and page (the stored documents) show it at once. Every attempt here is the row's own account's, on its
own rig (one uploader, one CPU): shown with its verdict, never counted (test_bought_numbers has the
attempts that count). Expected figures are worked by hand from the
synthetic report's timings (:func:`lair.testing.uploads.report_files`): repeat 0 decodes 3 tokens in
30 ms (100 tok/s), repeat 1 in 31 ms (96.774 tok/s), so the row's decode is their p50, 98.387 tok/s,
and its band [96.774 x 0.95, 100 x 1.05] = [91.94, 105.0]."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from upload_site import Site, make_site

from lair.registry.service.attempts import OWN_ACCOUNT
from lair.registry.service.publish import add_revision
from lair.registry.service.recompute import check_cells
from lair.testing.uploads import encode, report_files, tar_gz

THEIRS_DECODE = (100.0 + 3 / 0.031) / 2
_SELECT = 'title="click once to select the command"'


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[Site]:
    yield from make_site(db_url, engine)


def _slowed(site: Site, factor: float) -> dict[str, Any]:
    """The site's report with every time after the send stretched by ``factor``, its cell recomputed."""
    return _stretched(site.report(), factor)


def _stretched(files: dict[str, Any], factor: float) -> dict[str, Any]:
    for row in files["requests.jsonl"]:
        row["chunk_ms"] = [round(t * factor, 3) for t in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return files


def _post(site: Site, files: dict[str, Any], replicates: str | None = None) -> Any:
    from lair.registry.web.auth import reset_limits

    reset_limits()
    params = {"replicates": replicates} if replicates is not None else None
    headers = {"content-type": "application/gzip"}
    return site.client.post("/api/v1/reports", content=tar_gz(encode(files)), headers=headers, params=params)


def _original(site: Site) -> tuple[int, str]:
    res = site.upload(site.report())
    assert res.status_code == 201, res.text
    doc = site.client.get("/api/v1/recipes/tiny-cpu.json").json()
    (row,) = [m for m in doc["measurements"] if m["report_id"] == res.json()["id"]]
    return row["id"], row["row_id"]


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_a_row_has_a_stable_id_and_is_pending_until_an_attempt(site: Site) -> None:
    mid, rid = _original(site)
    assert rid == f"tiny-cpu@1#{mid}"
    (row,) = [
        m for m in site.client.get("/api/v1/recipes/tiny-cpu.json").json()["measurements"] if m["id"] == mid
    ]
    assert row["replication"] == {
        "status": "pending", "replicated": 0, "not_reproduced": 0, "not_counted": 0,
        "replicated_by_new_accounts": 0, "attempts": [],
    }  # fmt: skip
    page = site.client.get("/recipes/tiny-cpu").text
    assert f'id="row-{mid}"' in page
    assert f'<code class="reproduce" {_SELECT}>lair reproduce {rid}</code>' in page
    assert f'<a class="row-link" href="#row-{mid}"' in page
    assert "replication: pending (no attempt yet)" in page


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("tiny-cpu", "a row id is SLUG@REVISION#ROW"),
        ("tiny-cpu@1#abc", "#abc names no row"),
        ("Tiny CPU@1#3", "a row id is SLUG@REVISION#ROW"),
        ("tiny-cpu@0#3", "a row id is SLUG@REVISION#ROW"),
        ("tiny-cpu@1#999999", "no row tiny-cpu@1#999999"),
        ("tiny-cpu@7#1", "no row tiny-cpu@7#1"),
    ],
)
def test_a_bad_row_id_is_422_naming_the_parameter_and_stores_nothing(
    site: Site, engine: Engine, raw: str, why: str
) -> None:
    before = _count(engine, "reports")
    res = _post(site, _slowed(site, 1.01), raw)
    assert res.status_code == 422, res.text
    err = res.json()["error"]
    assert err["message"].startswith("query parameter replicates: ") and why in err["message"]
    assert err["reasons"][0].startswith("query.replicates: ")
    assert _count(engine, "reports") == before and _count(engine, "replication_attempts") == 0


def test_a_report_of_another_recipe_is_422(site: Site, engine: Engine) -> None:
    with engine.connect() as conn:
        slug, number, mid = conn.execute(
            sa.text(
                "SELECT r.slug, v.number, m.id FROM measurements m JOIN recipes r ON r.id = m.recipe_id "
                "JOIN revisions v ON v.id = m.revision_id WHERE r.slug != 'tiny-cpu' ORDER BY m.id LIMIT 1"
            )
        ).one()
    res = _post(site, _slowed(site, 1.01), f"{slug}@{number}#{mid}")
    assert res.status_code == 422, res.text
    assert f"the report is of tiny-cpu@1; {slug}@{number}#{mid} is a row of {slug}@{number}" in res.text
    assert _count(engine, "replication_attempts") == 0


def test_a_report_of_another_revision_of_the_same_recipe_is_422(site: Site, engine: Engine) -> None:
    _, rid = _original(site)
    with engine.begin() as conn:
        toml = conn.execute(
            sa.text(
                "SELECT v.toml FROM revisions v JOIN recipes r ON r.id = v.recipe_id "
                "WHERE r.slug = 'tiny-cpu' AND v.number = 1"
            )
        ).scalar_one()
        assert "ready_timeout_s = 60" in toml
        second = add_revision(
            conn, "tiny-cpu", toml.replace("ready_timeout_s = 60", "ready_timeout_s = 90"), author="uploader",
            notes="a longer ready timeout",
        )  # fmt: skip
    assert second.revision == 2
    files = _stretched(
        report_files(toml.replace("ready_timeout_s = 60", "ready_timeout_s = 90"), second.sha256), 1.01
    )
    res = _post(site, files, rid)
    assert res.status_code == 422, res.text
    assert f"the report is of tiny-cpu@2; {rid} is a row of tiny-cpu@1" in res.json()["error"]["message"]
    assert _count(engine, "replication_attempts") == 0
    assert _post(site, files).status_code == 201  # the same report, no attempt: accepted


def test_an_attempt_within_the_band_is_replicated_and_shown_as_the_row_s_own(site: Site) -> None:
    """The same account on the same rig: the verdict is shown, and never counts (test_bought_numbers)."""
    mid, rid = _original(site)
    res = _post(site, _slowed(site, 1.01), rid)  # 1% slower: inside every band
    assert res.status_code == 201, res.text
    (link,) = res.json()["replication"]
    assert link["row"] == mid and link["outcome"] == "replicated"
    assert (link["counted"], link["not_counted"]) == (False, OWN_ACCOUNT)
    assert link["delta_pct"] == pytest.approx(100 * (1 / 1.01 - 1), abs=0.05)
    decode = next(f for f in link["figures"] if f["metric"] == "decode_tok_s")
    assert decode["theirs"] == pytest.approx(THEIRS_DECODE, rel=1e-3)
    assert decode["band"]["low"] == pytest.approx(3 / 0.031 * 0.95, rel=1e-3)
    assert decode["band"]["high"] == pytest.approx(105.0, rel=1e-3)
    doc = site.client.get("/api/v1/recipes/tiny-cpu.json").json()
    (row,) = [m for m in doc["measurements"] if m["id"] == mid]
    assert row["replication"]["status"] == "pending" and row["replication"]["replicated"] == 0
    assert row["replication"]["not_counted"] == 1
    (a,) = row["replication"]["attempts"]
    assert a["submitted_by"] == "uploader" and a["rig"] == "CPU AMD EPYC (2 threads)"
    assert a["report_id"] == res.json()["id"] and a["outcome"] == "replicated" and a["counted"] is False
    page = site.client.get("/recipes/tiny-cpu").text
    assert 'data-outcome="replicated" data-counted="no"' in page
    shown = f'<strong>reproduced here</strong> <span class="not-counted">(not counted: {OWN_ACCOUNT})</span>'
    assert f"{shown} on CPU AMD EPYC" in page


def test_a_slower_attempt_is_not_reproduced_with_its_delta(site: Site) -> None:
    mid, rid = _original(site)
    res = _post(site, _slowed(site, 3.0), rid)  # a third of the speed
    assert res.status_code == 201, res.text
    (link,) = res.json()["replication"]
    assert link["outcome"] == "not-reproduced"
    assert link["delta_pct"] == pytest.approx(-200 / 3, abs=0.05)  # 98.387 -> 32.796 tok/s
    outside = {f["label"] for f in link["figures"] if f["inside"] is False}
    assert {"decode tok/s", "decode tok/s/stream", "TTFT ms", "prefill tok/s"} == outside
    page = site.client.get("/recipes/tiny-cpu").text
    assert 'data-outcome="not-reproduced"' in page and "decode -66.7%" in page
    assert "outside the band: prefill tok/s, decode tok/s, decode tok/s/stream, TTFT ms" in page
    doc = site.client.get("/api/v1/recipes/tiny-cpu.json").json()
    (row,) = [m for m in doc["measurements"] if m["id"] == mid]
    assert row["replication"]["status"] == "pending"  # its own account's attempt never counts


def test_a_report_id_links_every_row_of_that_report(site: Site) -> None:
    res = site.upload(site.report())
    assert res.status_code == 201, res.text
    res2 = _post(site, _slowed(site, 1.01), f"tiny-cpu@1#report-{res.json()['id']}")
    assert res2.status_code == 201, res2.text
    assert [x["outcome"] for x in res2.json()["replication"]] == ["replicated"]
