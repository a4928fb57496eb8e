"""The certificate behind each speed row, its energy and $/Mtok at the viewer's price, and the row's
``lair reproduce`` command, through the real app on SQLite and PostgreSQL.

Reports are made up by a forger's script (:func:`lair.testing.forged_reports.made_up_report`) and edited
here: the verified cell's certificate is given energy figures chosen for the test (0.42 J per output
token, 0.021 J per prompt token, 312 W average, 350 W peak, from the energy counter), a seed of 4242
and an image digest, so every figure the page and JSON show is one this file wrote. Expected $/Mtok
is worked by hand: J/output token x 10^6 / 3.6 x 10^6 J/kWh x price."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.tables import RECIPES, REVISIONS
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.service.stored import BASE, DOCUMENTS, render_documents, with_base
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import charts_drawn, tgz

SLUG = "llama31-8b-rtx4090-sglang"
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
FAKE_GPU = {"count": 1, "models": ["NVIDIA FAKE 9000"], "memory": ["97887 MiB"]}
J_OUT, J_PROMPT, AVG_W, PEAK_W = 0.42, 0.021, 312.0, 350.0
SEED = 4242
DIGEST = "sha256:" + "ab" * 32


@dataclass
class World:
    client: TestClient
    engine: Engine
    tokens: dict[str, str]


@pytest.fixture
def world(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[World]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        tokens = {who: create_token(conn, create_user(conn, who), "cli") for who in ("alice", "bob")}
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, engine, tokens)


def _revision(w: World) -> tuple[str, str]:
    with w.engine.connect() as conn:
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == SLUG)
        ).one()
    return str(toml), str(sha)


def _with_energy(files: dict[str, bytes]) -> dict[str, bytes]:
    """The report with this file's energy figures, seed and image digest in its certificate."""
    doc = json.loads(files["results.json"])
    cert = doc["bench"]["cells"][0]["certificate"]
    cert["energy"] |= {"j_per_output_token": J_OUT, "j_per_prompt_token": J_PROMPT, "avg_w": AVG_W,
                       "peak_w": PEAK_W, "energy_source": "counter"}  # fmt: skip
    doc["bench"]["certificate"]["seed"] = SEED
    doc["bench"]["certificate"]["software"]["image_digest"] = DIGEST
    return files | {"results.json": json.dumps(doc).encode()}


def _upload(w: World, who: str, gpus: dict[str, Any], *, ctx: int, name: str, **kw: Any) -> dict[str, Any]:
    toml, sha = _revision(w)
    files = made_up_report(
        toml, sha, decode_tok_s=100.0, gpus=gpus, contexts=(ctx,), run_name=name, ttft_ms=100.0, **kw
    )  # 100 ms to the first token: a prefill under the H100's ceiling
    if kw.get("certified", True):
        files = _with_energy(files)
    headers = {"authorization": f"Bearer {w.tokens[who]}", "content-type": "application/gzip"}
    r = w.client.post("/api/v1/reports", content=tgz(files), headers=headers)
    assert r.status_code == 201, r.text
    return dict(r.json())


def _rows(w: World, path: str = f"/api/v1/recipes/{SLUG}.json") -> dict[int, dict[str, Any]]:
    doc = w.client.get(path).json()
    return {m["id"]: m for m in doc["measurements"]}


def _tr(page: str, mid: int) -> str:
    """The speed row of measurement ``mid`` on a page: its <tr> and the full-width <tr> under it that
    holds its replication and certificate."""
    row = r'<tr [^>]*>(?:(?!</tr>).)*</tr>\s*<tr class="row-detail">(?:(?!</tr>).)*</tr>'
    found = [tr for tr in re.findall(row, page, re.S) if f'id="row-{mid}"' in tr]
    assert len(found) == 1, f"no single row {mid}"
    return found[0]


def _usd(price: float) -> float:
    return J_OUT * 1e6 / 3.6e6 * price  # J/token x 10^6 tokens / (3.6 x 10^6 J per kWh) x $ per kWh


def _by_report(rows: dict[int, dict[str, Any]], report: dict[str, Any]) -> dict[str, Any]:
    (row,) = [m for m in rows.values() if m["report_id"] == report["id"]]
    return row


def test_a_verified_row_shows_its_certificate_energy_and_cost(world: World) -> None:
    rep = _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    rows = _rows(world)
    row = _by_report(rows, rep)
    assert (row["tier"], row["note"]) == ("verified", "")
    c = row["certificate"]
    assert c["cache"] == {"metric": None, "counter_hit_tokens": None, "response_cached_tokens": 0,
                          "proven_by": ["responses"], "cold": True}  # fmt: skip
    assert c["client"]["bound"] is False and c["client"]["cpu_fraction_max"] == 0.1
    assert c["client"]["loop_lag_p99_ms_max"] == 0.5
    assert c["order"] | {"started_s": None} == {"position": 0, "order": "shuffled", "seed": SEED,
                                                "started_s": None, "duration_s": 2.0}  # fmt: skip
    assert (c["warmup_requests"], c["idle_gap_s"]) == (1, 0.0)
    assert c["telemetry"] == {"backend": "nvml", "note": ""}
    g = c["gpu"]
    assert (g["samples"], g["avg_w"], g["peak_w"], g["temp_c_max"], g["throttle_reasons"]) == (
        20, 300.0, 350.0, 55.0, [])  # fmt: skip
    assert g["sm_clock_mhz"] == {"min": 1980.0, "max": 1980.0}
    sw = c["software"]
    assert (sw["engine_version"], sw["image_digest"], sw["driver"], sw["cuda"]) == (
        "b6500", DIGEST, "580.159.04", "13.0")  # fmt: skip
    e = row["energy"]
    assert (e["j_per_output_token"], e["j_per_prompt_token"], e["avg_w"], e["peak_w"]) == (
        J_OUT, J_PROMPT, AVG_W, PEAK_W)  # fmt: skip
    assert e["energy_source"] == "counter" and e["output_tokens_per_kwh"] == pytest.approx(3.6e6 / J_OUT)
    assert row["cost"]["price_kwh"] == 0.15
    assert row["cost"]["usd_per_mtok_energy"] == pytest.approx(_usd(0.15), rel=1e-12)
    # the page's twin at /recipes/<slug>.json is the same document
    assert _rows(world, f"/recipes/{SLUG}.json")[row["id"]] == row

    tr = _tr(world.client.get(f"/recipes/{SLUG}").text, row["id"])
    details = r'<details class="certificate" data-row="(\d+)" data-present="yes">(.*?)</details>'
    cert = re.search(details, tr, re.S)
    assert cert and int(cert.group(1)) == row["id"]
    text = re.sub(r"<[^>]+>", "", cert.group(2))
    shown = (
        f"seed {SEED}", "position 0 of the run (shuffled", "20 samples of 1 GPU", "300 W avg", "350 W peak",
        "SM clock 1,980–1,980 MHz", "up to 55 °C", "throttle reasons: none", "not client-bound",
        "cold (seen by responses)", "0 cached tokens in the responses", "1 request before the first cell",
        "driver 580.159.04", "CUDA 13.0", DIGEST, "engine llama.cpp b6500 (abc1234)", "0.42 J/output token",
        "0.021 J/prompt token",
    )  # fmt: skip
    for figure in shown:
        assert figure in text, figure
    energy = re.search(r'<td class="energy">(.*?)</td>', tr, re.S)
    assert energy and "0.42 J/output token" in energy.group(1) and "312 W avg" in energy.group(1)
    cost = re.search(r'<td class="cost" data-price-kwh="0.15"><span class="usd">\$([0-9.]+)</span>', tr)
    assert cost and float(cost.group(1)) == pytest.approx(_usd(0.15), rel=5e-3)  # three digits shown


def test_cost_at_the_viewers_price_matches_a_hand_computation(world: World) -> None:
    rep = _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    mid = _by_report(_rows(world), rep)["id"]
    for price in (0.31, 10.0, 0.0001):
        got = world.client.get(f"/recipes/{SLUG}/cost.json", params={"price_kwh": str(price)})
        assert got.status_code == 200, got.text
        (row,) = [r for r in got.json()["rows"] if r["id"] == mid]
        assert row["cost"]["usd_per_mtok_energy"] == pytest.approx(_usd(price), rel=1e-12)
        assert row["link"].endswith(f"/recipes/{SLUG}#row-{mid}")
        page = world.client.get(f"/recipes/{SLUG}/cost", params={"price_kwh": str(price)})
        assert page.status_code == 200
        cell = re.search(rf'<td class="cost" data-price-kwh="{price}"><span class="usd">\$([0-9.e-]+)</span>',
                         _tr(page.text, mid))  # fmt: skip
        assert cell and float(cell.group(1)) == pytest.approx(_usd(price), rel=5e-3)
    # 0.31 $/kWh: 0.42 J/token -> 0.42e6 J per million tokens = 0.11667 kWh -> $0.036167
    assert _usd(0.31) == pytest.approx(0.036167, abs=1e-6)
    # the recipe page's form asks for the price and sends it there, with no script
    page = world.client.get(f"/recipes/{SLUG}").text
    assert re.search(rf'<form id="price" class="price" action="/recipes/{SLUG}/cost" method="get">', page)
    assert 'name="price_kwh"' in page and "<script" not in page


def test_replicated_rows_are_costed_and_reported_by_report_ones_are_not(world: World) -> None:
    a = _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    b = _upload(world, "bob", H100, ctx=2048, name="bob-h100", cpu_model="Intel Xeon")  # another rig
    fake = _upload(world, "alice", FAKE_GPU, ctx=4096, name="alice-fake")
    bare = _upload(world, "bob", H100, ctx=1024, name="bob-bare", certified=False)
    rows = _rows(world)
    for rep in (a, b):
        row = _by_report(rows, rep)
        assert row["tier"] == "replicated"
        assert row["cost"]["usd_per_mtok_energy"] == pytest.approx(_usd(0.15), rel=1e-12)
    unverified = _by_report(rows, fake)
    assert unverified["tier"] == "reported-by-report"
    assert unverified["energy"]["j_per_output_token"] == J_OUT  # the report's word, in its certificate
    assert unverified["cost"] == {"price_kwh": 0.15, "usd_per_mtok_energy": None,
        "why_none": "not verified: no $/Mtok from a row the registry did not physically check"}  # fmt: skip
    priced = world.client.get(f"/recipes/{SLUG}/cost.json", params={"price_kwh": "0.31"}).json()["rows"]
    assert [r["cost"]["usd_per_mtok_energy"] for r in priced if r["id"] == unverified["id"]] == [None]
    page = world.client.get(f"/recipes/{SLUG}").text
    tr = _tr(page, unverified["id"])
    assert re.search(r'<td class="cost" data-price-kwh="0.15"><span class="na" title="not verified', tr)
    assert not re.search(r'<td class="energy"><span class="j-per-token">', tr)
    # a report without a certificate, and the rows typed by the author, say they have none
    nocert = _by_report(rows, bare)
    assert nocert["certificate"] is None and nocert["energy"] is None
    assert nocert["certificate_missing"] == "its report has no certificate (written before lair recorded one)"
    assert "No certificate: its report has no certificate" in _tr(page, nocert["id"])
    typed = [m for m in rows.values() if m["provenance"] == "reported"]
    assert typed, "the recipe's own rows"
    for m in typed:
        assert m["cost"]["usd_per_mtok_energy"] is None and m["certificate"] is None
        assert "No certificate: typed by the recipe&#39;s author" in _tr(page, m["id"])


@pytest.mark.parametrize("raw", ["-1", "0", "1e999", "inf", "nan", "abc", "10.5", "9" * 10_000, " ", "0x1"])
def test_a_hostile_price_is_a_located_422_never_a_500(world: World, raw: str) -> None:
    _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    if not raw.strip():  # empty: the default price
        assert world.client.get(f"/recipes/{SLUG}/cost", params={"price_kwh": raw}).status_code == 200
        return
    page = world.client.get(f"/recipes/{SLUG}/cost", params={"price_kwh": raw})
    assert page.status_code == 422, page.text[:300]
    err = re.search(r'<p class="error" id="price-error" role="alert">(.*?)</p>', page.text, re.S)
    assert err and err.group(1).startswith("query parameter price_kwh: ")
    assert len(page.text) < 2 * len(world.client.get(f"/recipes/{SLUG}/cost").text)  # not echoed 10k times
    got = world.client.get(f"/recipes/{SLUG}/cost.json", params={"price_kwh": raw})
    assert got.status_code == 422
    body = got.json()
    assert body["ok"] is False and body["error"]["reasons"][0].startswith("query.price_kwh: ")


def test_each_row_has_its_reproduce_command_and_anchor(world: World) -> None:
    rep = _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    row = _by_report(_rows(world), rep)
    assert row["row_id"] == f"{SLUG}@1#{row['id']}"
    tr = _tr(world.client.get(f"/recipes/{SLUG}").text, row["id"])
    assert f'<a class="row-link" href="#row-{row["id"]}"' in tr
    assert re.search(rf'<code class="reproduce"[^>]*>lair reproduce {re.escape(row["row_id"])}</code>', tr)
    css = world.client.get("/static/style.css").text
    assert re.search(r"code\.reproduce \{[^}]*user-select: all", css)


def test_stored_documents_equal_a_fresh_render_after_the_uploads(world: World) -> None:
    _upload(world, "alice", H100, ctx=2048, name="alice-h100")
    _upload(world, "alice", FAKE_GPU, ctx=4096, name="alice-fake")
    charts_drawn(world.client.app)  # the new rows' chart: drawn after the writes, then stored
    with world.engine.connect() as conn:
        fresh = {(r["kind"], r["revision"]): r["body"] for r in render_documents(conn, SLUG)}
        d = DOCUMENTS.c
        stored = {
            (r.kind, r.revision): bytes(r.body)
            for r in conn.execute(sa.select(d.kind, d.revision, d.body).where(d.slug == SLUG))
        }
    assert stored == fresh
    assert b'data-present="yes"' in stored[("page", 0)] and b'"certificate":{' in stored[("json", 0)]
    served = world.client.get(f"/recipes/{SLUG}")
    assert served.content == with_base(stored[("page", 0)], "page", "")
    assert BASE not in served.text
