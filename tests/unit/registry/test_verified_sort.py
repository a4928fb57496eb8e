"""Sorting by verified numbers only (``sort=decode&verified=1``) on SQLite and PostgreSQL, through the
JSON API and the list page, with hand-set rows whose reported numbers rank the recipes the other way
round from their verified ones; a retraction (through the API) and a new revision re-rank them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.engine import make_engine, migrate
from lair.registry.db.tables import MEASUREMENTS, RECIPES
from lair.registry.db.version import now
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import add_revision, publish
from lair.registry.web.app import create_app
from lair.testing.registry import add_verified_row

REPORTED = {"a": 500.0, "b": 400.0, "c": 300.0, "d": 200.0}  # at ctx 2048, typed by the authors
VERIFIED = {  # (context, decode tok/s) of each recipe's verified rows; "d" has none
    "a": [(2048, 50.0)],
    "b": [(2048, 100.0), (4096, 250.0)],
    "c": [(2048, 150.0), (2048, 1000.0)],  # the 1000 is retracted in the test that says so
}


def _text(name: str, decode: float) -> str:
    return f"""engine = "vllm"
docker_image = "img/x:1"
model = "org/model-{name}"
[meta]
title = "Recipe {name}"
slug = "v-{name}"
summary = "recipe {name}"
[meta.hardware]
gpu_model = "H200"
gpu_count = 1
[[meta.performance]]
context = 2048
decode_tok_s = {decode}
"""


@dataclass
class World:
    client: TestClient
    engine: Engine
    token: str
    fast_row: int  # c's verified 1000 tok/s row


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    engine = make_engine(db_url)
    migrate(engine)
    with engine.begin() as conn:
        uid = create_user(conn, "rig-owner")
        token = create_token(conn, uid, "cli")
        for name, decode in REPORTED.items():
            publish(conn, _text(name, decode), owner="author")
        rows = {
            (n, ctx, d): add_verified_row(conn, f"v-{n}", context=ctx, decode_tok_s=d, submitted_by=uid)
            for n, cells in VERIFIED.items()
            for ctx, d in cells
        }
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield World(c, engine, token, rows[("c", 2048, 1000.0)])
    engine.dispose()


def _api(w: World, **params: Any) -> list[str]:
    r = w.client.get("/api/v1/recipes", params=params)
    assert r.status_code == 200, r.text
    return [i["slug"].removeprefix("v-") for i in r.json()["items"]]


def _page(w: World, **params: Any) -> list[str]:
    html = w.client.get("/recipes", params=params).text
    return [s.removeprefix("v-") for s in re.findall(r'data-slug="([^"]+)"', html)]


def _retract_fast_row(w: World) -> None:
    r = w.client.post(
        f"/api/v1/measurements/{w.fast_row}/retract",
        json={"reason": "cache was warm"},
        headers={"authorization": f"Bearer {w.token}"},
    )
    assert r.status_code == 200, r.text


def test_reported_and_verified_numbers_rank_the_recipes_differently(world: World) -> None:
    # any tier: the best current row of any tier (c's verified 1000 counts too)
    assert _api(world, sort="decode") == ["c", "a", "b", "d"]  # 1000, 500, 400, 200
    assert _api(world, sort="decode", context=2048) == ["c", "a", "b", "d"]
    # verified only: d (no verified row) drops out and the reported 500/400/300 never count
    assert _api(world, sort="decode", verified=1) == ["c", "b", "a"]  # 1000, 250 (at 4096), 50
    assert _api(world, sort="decode", verified=1, context=2048) == ["c", "b", "a"]  # 1000, 100, 50
    # b 250; a and c have no row there: last, newest recipe first (the id tie-break)
    assert _api(world, sort="decode", verified=1, context=4096) == ["b", "c", "a"]
    body = world.client.get("/api/v1/recipes", params={"sort": "decode", "verified": 1}).json()
    speeds = {i["slug"]: (i["best_decode_tok_s"], i["best_verified_decode_tok_s"]) for i in body["items"]}
    assert speeds == {"v-c": (1000.0, 1000.0), "v-b": (400.0, 250.0), "v-a": (500.0, 50.0)}


def test_the_page_sorts_like_its_json_twin_and_shows_the_verified_speed(world: World) -> None:
    for params in ({"sort": "decode"}, {"sort": "decode", "verified": "1", "context": "2048"}):
        assert _page(world, **params) == _api(world, **params)
    html = world.client.get("/recipes", params={"sort": "decode", "verified": "1"}).text
    assert re.search(r'name="verified" value="1" checked', html)
    assert re.search(r'name="context" type="number"', html)
    item = html[html.index('data-slug="v-a"') :]
    assert re.search(r'class="verified-speed">verified 50(\.0)? tok/s<', item[: item.index("</li>")])


def test_a_retracted_verified_row_stops_ranking(world: World) -> None:
    _retract_fast_row(world)
    assert _api(world, sort="decode", verified=1) == ["b", "c", "a"]  # 250, 150, 50
    assert _api(world, sort="decode", verified=1, context=2048) == ["c", "b", "a"]  # 150, 100, 50
    assert _api(world, sort="decode") == ["a", "b", "c", "d"]  # 500, 400, 300 (c's reported), 200
    with world.engine.connect() as conn:
        counts = {r.slug: r.verified_rows for r in conn.execute(sa.select(RECIPES))}
    assert counts == {"v-a": 1, "v-b": 2, "v-c": 1, "v-d": 0}


def test_a_new_revision_keeps_the_verified_rows_of_earlier_ones(world: World) -> None:
    with world.engine.begin() as conn:
        add_revision(conn, "v-b", _text("b", 10.0), author="author", notes="slower")
    # b's latest reported row is 10 tok/s, but its verified 250 (revision 1) still counts, above d's 200
    assert _api(world, sort="decode") == ["c", "a", "b", "d"]
    assert _api(world, sort="decode", verified=1) == ["c", "b", "a"]


def test_cursor_pages_of_the_verified_sort_visit_each_recipe_once(world: World) -> None:
    seen, cursor = [], None
    while True:
        params = {"sort": "decode", "verified": 1, "limit": 1} | ({"cursor": cursor} if cursor else {})
        body = world.client.get("/api/v1/recipes", params=params).json()
        seen += [i["slug"].removeprefix("v-") for i in body["items"]]
        if not (cursor := body["next_cursor"]):
            break
    assert seen == ["c", "b", "a"]
    first = world.client.get("/api/v1/recipes", params={"sort": "decode", "verified": 1, "limit": 1})
    other = world.client.get(
        "/api/v1/recipes", params={"sort": "decode", "limit": 1, "cursor": first.json()["next_cursor"]}
    )
    assert other.status_code == 422 and other.json()["error"]["message"].startswith("query parameter cursor")


def test_migration_0005_fills_the_speeds_of_rows_stored_before_it(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine, "0004")
    with engine.begin() as conn:
        uid = create_user(conn, "rig-owner")
        for name in ("a", "c"):
            publish(conn, _text(name, REPORTED[name]), owner="author")
        rows = [
            add_verified_row(conn, f"v-{n}", context=ctx, decode_tok_s=d, submitted_by=uid, refresh=False)
            for n, cells in VERIFIED.items()
            if n != "b"
            for ctx, d in cells
        ]
        conn.execute(sa.update(MEASUREMENTS).where(MEASUREMENTS.c.id == rows[-1]).values(retracted_at=now()))
    migrate(engine)
    with engine.connect() as conn:
        got = {
            r.slug: (r.best_verified_decode_tok_s, r.verified_rows)
            for r in conn.execute(
                sa.select(RECIPES.c.slug, RECIPES.c.best_verified_decode_tok_s, RECIPES.c.verified_rows)
            )
        }
    assert got == {"v-a": (50.0, 1), "v-c": (150.0, 1)}  # c's 1000 was retracted before the upgrade
    engine.dispose()
