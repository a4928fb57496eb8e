"""Two ``lair serve`` processes over one database (PostgreSQL, and a SQLite file): every write goes over
HTTP through process A's JSON API with a bearer token (publish, revise, vote, unvote, fork, retract,
hide), and is read through process B's API and page right after A answered, many requests at once.

B's response cache is warm before each write. That it really serves from the cache is shown by a
change made behind the app's back (a row updated without bumping the version row): B keeps serving
the old page. The next write through A bumps the version row and B serves the new data at once.
A page whose chart changed shows a placeholder until A's chart drawer has drawn it (a drawing
later): a burst may see both, each with the new data."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.testing.registry import charts_drawn, pg_database, serve_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
TITLE = tomllib.loads(LLAMA.read_text())["meta"]["title"]


@dataclass(frozen=True)
class Pair:
    db: str
    a: str  # the process written through (2 workers)
    b: str  # the process read through (1 worker: its one cache is the one proven warm)
    tokens: dict[str, str]


def _user_add(db: str, name: str, *admin: str) -> str:
    """An account made the way an operator makes one: ``lair registry user add`` prints the token."""
    argv = [sys.executable, "-m", "lair", "registry", "user", "add", name, *admin, "--db", db, "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["token"])


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> Iterator[Pair]:
    sqlite = f"sqlite:///{tmp_path_factory.mktemp('two') / 'registry.sqlite3'}"
    with pg_database() if request.param == "postgresql" else contextlib.nullcontext(sqlite) as url:
        prepare(url, seed=False)
        tokens = {n: _user_add(url, n) for n in ("alice", "bob")} | {
            "root": _user_add(url, "root", "--admin")
        }
        logs = artifacts / f"two-{request.param}"
        with (
            serve_process(url, seed=False, workers=2, log=logs.with_suffix(".a.log")) as a,
            serve_process(url, seed=False, log=logs.with_suffix(".b.log")) as b,
        ):
            yield Pair(url, a, b, tokens)


def _call(
    method: str, url: str, token: str | None = None, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {token}"} if token else {})
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    return status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()


def _get(url: str) -> tuple[int, Any]:
    return _call("GET", url)


def _burst(urls: list[str], n: int = 16) -> list[tuple[int, Any]]:
    """``n`` concurrent GETs of each URL."""
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(_get, urls * n))


def _warm(p: Pair, slug: str) -> None:
    for _ in range(3):
        for url in (f"/api/v1/recipes/{slug}.json", f"/recipes/{slug}", "/api/v1/recipes"):
            assert _get(p.b + url)[0] == 200


def _doc(p: Pair, slug: str) -> dict[str, Any]:
    """The recipe JSON from B, the same in every one of a burst of requests."""
    got = _burst([f"{p.b}/api/v1/recipes/{slug}.json"])
    assert {s for s, _ in got} == {200}
    docs = {json.dumps(d, sort_keys=True) for _, d in got}
    assert len(docs) == 1, "B answered a burst with different documents"
    return dict(json.loads(docs.pop()))


def _page(p: Pair, slug: str, shows: str) -> None:
    """Every page of a burst from B shows ``shows`` at once. A write that changes a chart stores the
    page with a placeholder and A's drawer stores it again with the chart a drawing later (see
    ``service/drawer.py``), so a burst may straddle that; once the drawers are done, a burst from B
    is one page."""
    got = _burst([f"{p.b}/recipes/{slug}"], 8)
    assert {s for s, _ in got} == {200} and all(shows in b for _, b in got), shows
    charts_drawn(p.db)
    got = _burst([f"{p.b}/recipes/{slug}"], 8)
    assert {s for s, _ in got} == {200} and len({b for _, b in got}) == 1 and shows in got[0][1]


def _listed(p: Pair) -> set[str]:
    """The slugs B lists on the URL ``_warm`` caches."""
    return {i["slug"] for i in _get(p.b + "/api/v1/recipes")[1]["items"]}


def _version(base: str) -> int:
    return int(_get(base + "/api/v1/health")[1]["version"])


def test_every_write_through_a_is_read_through_b_at_once(pair: Pair) -> None:
    _publish_and_revise(pair)
    _cache_proof_and_votes(pair)
    _fork_retract_and_hide(pair)


def _publish_and_revise(p: Pair) -> None:
    alice = p.tokens["alice"]
    assert _get(p.b + "/api/v1/recipes")[1]["count"] == 0  # warm: an empty list, cached
    status, made = _call(
        "POST", p.a + "/api/v1/recipes", alice, {"toml": LLAMA.read_text(), "notes": "first"}
    )
    assert status == 201 and made["slug"] == SLUG and made["revision"] == 1
    assert _listed(p) == {SLUG} and _version(p.b) == _version(p.a)
    assert _doc(p, SLUG)["owner"] == "alice"
    _page(p, SLUG, TITLE)

    text = LLAMA.read_text()
    for n in (2, 3, 4):
        _warm(p, SLUG)
        edited = text.replace("max_context = 32768", f"max_context = {1000 * n}")
        body = {"toml": edited, "notes": f"context {1000 * n}"}
        status, rev = _call("POST", f"{p.a}/api/v1/recipes/{SLUG}/revisions", alice, body)
        assert status == 201 and rev["revision"] == n
        doc = _doc(p, SLUG)
        assert doc["revision"] == n and doc["recipe"]["meta"]["max_context"] == 1000 * n
        _page(p, SLUG, f"context {1000 * n}")
        assert _get(f"{p.b}/api/v1/recipes?min_context={1000 * n}")[1]["count"] == 1


def _cache_proof_and_votes(p: Pair) -> None:
    bob = p.tokens["bob"]
    _warm(p, SLUG)
    before = _doc(p, SLUG)
    engine = make_engine(p.db)
    with engine.begin() as conn:  # behind the app's back: no version bump
        conn.execute(sa.text("UPDATE recipes SET votes = 99 WHERE slug = :s"), {"s": SLUG})
    engine.dispose()
    assert _doc(p, SLUG)["votes"] == before["votes"] == 0  # the cached document, not the row
    status, voted = _call("PUT", f"{p.a}/api/v1/recipes/{SLUG}/vote", bob)
    assert status == 200 and voted["votes"] == 1  # the count of votes, recomputed
    assert _doc(p, SLUG)["votes"] == 1
    _page(p, SLUG, '<span class="count" id="votes">1</span>')
    _warm(p, SLUG)
    assert _call("DELETE", f"{p.a}/api/v1/recipes/{SLUG}/vote", bob) == (200, {"ok": True, "votes": 0})
    assert _doc(p, SLUG)["votes"] == 0
    _page(p, SLUG, '<span class="count" id="votes">0</span>')


def _fork_retract_and_hide(p: Pair) -> None:
    alice, bob, root = p.tokens["alice"], p.tokens["bob"], p.tokens["root"]
    _warm(p, SLUG)
    status, fork = _call("POST", f"{p.a}/api/v1/recipes/{SLUG}/fork", bob)
    assert status == 201
    forked = _doc(p, fork["slug"])
    assert forked["owner"] == "bob" and forked["upstream"] == SLUG and fork["slug"] in _listed(p)
    _page(p, fork["slug"], f'Forked from <a href="/recipes/{SLUG}">{SLUG}</a>')

    _warm(p, SLUG)
    mid = _doc(p, SLUG)["measurements"][0]["id"]
    status, _ = _call(
        "POST", f"{p.a}/api/v1/measurements/{mid}/retract", alice, {"reason": "bad riser cable"}
    )
    assert status == 200
    row = next(m for m in _doc(p, SLUG)["measurements"] if m["id"] == mid)
    assert row["retracted"] and row["retracted_reason"] == "bad riser cable"
    _page(p, SLUG, "bad riser cable")

    _warm(p, fork["slug"])
    assert _call("PUT", f"{p.a}/api/v1/users/bob/hidden", root)[0] == 200
    assert {
        s for s, _ in _burst([f"{p.b}/api/v1/recipes/{fork['slug']}.json", f"{p.b}/recipes/{fork['slug']}"])
    } == {404}
    assert fork["slug"] not in _listed(p) and SLUG in _listed(p)
    assert _call("PUT", f"{p.a}/api/v1/recipes/{SLUG}/hidden", root)[0] == 200
    assert {s for s, _ in _burst([f"{p.b}/api/v1/recipes/{SLUG}.json", f"{p.b}/recipes/{SLUG}"])} == {404}
    assert _listed(p) == set()
    assert _call("DELETE", f"{p.a}/api/v1/recipes/{SLUG}/hidden", root)[0] == 200
    assert _doc(p, SLUG)["slug"] == SLUG and _listed(p) == {SLUG}
    _page(p, SLUG, TITLE)
    assert _call("DELETE", f"{p.a}/api/v1/users/bob/hidden", root)[0] == 200
    assert _doc(p, fork["slug"])["owner"] == "bob" and _listed(p) == {SLUG, fork["slug"]}
