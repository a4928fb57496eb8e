"""A real ``lair serve`` over a PostgreSQL of the test's own that goes away and comes back: while it
is down every read, every write and ``/api/v1/health`` answers 503 with ``Retry-After`` (the JSON
envelope on the API, an HTML page for a page), never a 500 or a plain-text error; once the same
server is started again, the registry recovers on its own with the writes made before the outage."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.outage import DATABASE_RETRY_S
from lair.testing.postgres import PgServer, pg_server
from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]

SLUG = "tiny-cpu"  # a bundled example, seeded


@dataclass
class Site:
    pg: PgServer
    http: httpx.Client
    token: str

    def vote(self, on: bool) -> httpx.Response:
        method = "PUT" if on else "DELETE"
        auth = {"authorization": f"Bearer {self.token}"}
        return self.http.request(method, f"/api/v1/recipes/{SLUG}/vote", headers=auth)


@pytest.fixture
def site() -> Iterator[Site]:
    with pg_server() as pg:
        url, added = prepare(pg.url)
        assert SLUG in added
        engine = make_engine(url)
        with engine.begin() as conn:
            token = create_token(conn, create_user(conn, "voter"))
        engine.dispose()
        with serve_process(pg.url, seed=False) as base, httpx.Client(base_url=base, timeout=30) as http:
            yield Site(pg, http, token)


def _unavailable(r: httpx.Response, *, page: bool = False) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == str(DATABASE_RETRY_S)
    if page:
        assert r.headers["content-type"].startswith("text/html")
        assert "database is unavailable" in r.text
        return
    body = r.json()
    assert body["ok"] is False
    err = body["error"]
    assert (err["status"], err["code"], err["retry_after"]) == (503, "unavailable", DATABASE_RETRY_S)
    assert "127.0.0.1" not in err["message"] and "postgres" not in err["message"]  # no driver text


def _health(site: Site) -> httpx.Response:
    return site.http.get("/api/v1/health")


def test_reads_writes_and_health_are_503_while_postgresql_is_down_then_recover(site: Site) -> None:
    ok = _health(site)
    assert ok.status_code == 200 and ok.json()["ok"] is True and ok.json()["database"] == "ok"
    assert site.vote(True).json()["votes"] == 1
    assert site.http.get(f"/api/v1/recipes/{SLUG}.json").status_code == 200  # now in the response cache

    site.pg.stop()
    down = _health(site)
    _unavailable(down)
    assert down.json()["database"] == "unavailable" and down.json()["retry_after"] == DATABASE_RETRY_S
    for path in (f"/api/v1/recipes/{SLUG}.json", "/api/v1/recipes?q=tiny", f"/api/v1/recipes/{SLUG}.toml"):
        _unavailable(site.http.get(path))
    for path in (f"/recipes/{SLUG}", "/", "/llms.txt"):
        _unavailable(site.http.get(path), page=True)
    _unavailable(site.vote(False))

    site.pg.start()
    deadline = time.monotonic() + 30
    while (r := _health(site)).status_code != 200:
        _unavailable(r)
        assert time.monotonic() < deadline, "the registry did not recover within 30 s"
        time.sleep(0.1)
    assert r.json() == {"ok": True, "database": "ok", "version": r.json()["version"]}
    doc = site.http.get(f"/api/v1/recipes/{SLUG}.json")
    assert doc.status_code == 200 and doc.json()["votes"] == 1  # the vote before the outage was kept
    assert site.vote(False).json()["votes"] == 0
