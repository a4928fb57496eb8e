"""No route runs SQL on the event loop (SQLite and PostgreSQL): every statement the app's engine
executes, and every connection it hands out, while each route of the app's route table is asked
below happens on a worker thread, never on the thread running the loop, so a slow statement, a
search waiting for one of the pool's connections, a render or argon2 never holds up the requests
served meanwhile. The table of requests must name every route of the app (a route added without a
request here fails the test). Each URL is asked once, so no cached answer hides a route; the
requests are signed in (a cookie session, API calls with a bearer token), so the stored documents
of the ASGI front are passed to the routes, and a revision is asked as ``01``, which the front
leaves to its route."""

from __future__ import annotations

import asyncio
import copy
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine, event
from starlette.routing import Match, Route
from starlette.testclient import TestClient

from lair.registry.db.tables import MEASUREMENTS, QUALITY
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import seed_examples
from lair.registry.service.recompute import check_cells
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.uploads import encode, report_files, tar_gz

SLUG = "tiny-cpu"
PASSWORD = "correct horse battery"


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass
class Site:
    client: TestClient
    app: Any
    bearer: dict[str, str]
    report: bytes
    on_loop: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def ask(self, method: str, url: str, status: int, *, api: bool = False, **kw: Any) -> Any:
        reset_limits()  # many writes by one account: the rate limits are not under test here
        headers = (self.bearer if api else {}) | kw.pop("headers", {})
        resp = self.client.request(method, url, headers=headers, follow_redirects=False, **kw)
        assert resp.status_code == status, (method, url, resp.status_code, resp.text[:300])
        self.asked.append((method, url.split("?")[0]))
        return resp


def _report(engine: Engine) -> bytes:
    """An upload of tiny-cpu's first revision that the registry accepts (its cell recomputed)."""
    with engine.connect() as conn:
        toml, sha = conn.execute(
            sa.text(
                "SELECT v.toml, v.sha256 FROM revisions v JOIN recipes r ON r.id = v.recipe_id "
                "WHERE r.slug = :s AND v.number = 1"
            ),
            {"s": SLUG},
        ).one()
    files = copy.deepcopy(report_files(toml, sha))
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return tar_gz(encode(files))


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[Site]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        token = create_token(conn, create_user(conn, "alice", PASSWORD, admin=True), "cli")
        create_user(conn, "bob", PASSWORD)
    app = create_app(db_url)
    with TestClient(app) as client:
        s = Site(client, app, {"authorization": f"Bearer {token}"}, _report(engine))

        def seen(*_: object) -> None:
            if _on_loop():
                s.on_loop.append("".join(traceback.format_stack(limit=14)))

        event.listen(app.app.state.engine, "checkout", seen)
        event.listen(app.app.state.engine, "before_cursor_execute", seen)
        yield s


def _accounts(s: Site) -> str:
    """Sign-up and sign-in, by form and by API; the last signs alice in (cookie). Her CSRF token."""
    s.ask("GET", "/signup", 200)
    s.ask("GET", "/signin", 200)
    s.ask("POST", "/api/v1/users", 201, json={"name": "dave", "password": PASSWORD})
    s.ask("POST", "/signup", 303, data={"name": "carol", "password": PASSWORD})
    s.ask("POST", "/api/v1/session", 200, json={"name": "alice", "password": PASSWORD})
    s.ask("DELETE", "/api/v1/session", 200, api=True)
    assert (
        s.ask("POST", "/signin", 303, data={"name": "alice", "password": PASSWORD}).headers["location"] == "/"
    )
    csrf = re.search(r'name="csrf" value="([^"]+)"', s.ask("GET", f"/recipes/{SLUG}", 200).text)
    assert csrf is not None
    return csrf.group(1)


def _reads(s: Site) -> None:
    r, api = f"/recipes/{SLUG}", f"/api/v1/recipes/{SLUG}"
    for url in (
        "/", "/recipes", "/recipes.json", "/api/v1/recipes", f"{r}/revisions/01", f"{api}/revisions/01.json",
        f"{r}/placeholders", f"{r}/placeholders.json", f"{r}/fit", f"{r}/fit.json?gpu=H100", f"{r}/cost",
        f"{r}/cost.json", f"{r}/matrix", f"{r}/matrix.json", "/models/tiny/matrix",
        "/models/tiny/matrix.json",
        f"{r}/compare", f"{r}/edit", f"{api}/diff?from=1&to=1", f"{api}.toml", f"{api}/placeholders",
        f"{api}/fit?gpu=H100", f"{api}/cost", "/publish", "/account", "/api/v1/me", "/api/v1/tokens",
        "/api/v1/gpus", "/api/v1/health", "/api/v1/openapi.json", "/llms.txt", "/api/v1/efficiencies",
    ):  # fmt: skip
        s.ask("GET", url, 200, api=url.startswith("/api/"))
    s.ask("HEAD", "/api/v1/recipes?q=tiny", 200, api=True)


def _reports(s: Site) -> tuple[int, int]:
    """An upload, its pages and a raw file; the id of its measurement, and of a quality row."""
    gz = {"content-type": "application/gzip"}
    out = s.ask("POST", "/api/v1/reports", 201, api=True, content=s.report, headers=gz).json()
    for url in (
        f"/api/v1/reports/{out['id']}",
        f"/reports/{out['id']}",
        f"/reports/{out['id']}/files/results.json",
    ):
        s.ask("GET", url, 200)
    with s.app.app.state.engine.connect() as conn:
        m = conn.execute(
            sa.select(MEASUREMENTS.c.id).where(MEASUREMENTS.c.report_id == out["id"])
        ).scalar_one()
        q = conn.execute(sa.select(sa.func.min(QUALITY.c.id))).scalar_one()  # a seeded example's
    return int(m), int(q)


def _api_writes(s: Site, row: int) -> None:
    api = f"/api/v1/recipes/{SLUG}"
    text = LLAMA.read_text()
    made = s.ask("POST", "/api/v1/recipes", 201, api=True, json={"toml": text}).json()["slug"]
    s.ask("POST", f"/api/v1/recipes/{made}/revisions", 201, api=True, json={"toml": text, "notes": "again"})
    s.ask("POST", f"{api}/fork", 201, api=True)
    s.ask("PUT", f"{api}/vote", 200, api=True)
    s.ask("DELETE", f"{api}/vote", 200, api=True)
    s.ask("PUT", f"/api/v1/recipes/{made}/hidden", 200, api=True)
    s.ask("DELETE", f"/api/v1/recipes/{made}/hidden", 200, api=True)
    s.ask("PUT", "/api/v1/users/bob/hidden", 200, api=True)
    s.ask("DELETE", "/api/v1/users/bob/hidden", 200, api=True)
    tid = s.ask("POST", "/api/v1/tokens", 201, api=True, json={"name": "ci", "scope": "read"}).json()["id"]
    s.ask("DELETE", f"/api/v1/tokens/{tid}", 200, api=True)
    s.ask("POST", f"/api/v1/measurements/{row}/retract", 200, api=True, json={"reason": "a typo"})
    s.ask(
        "POST", "/api/v1/quality/999999/retract", 404, api=True, json={"reason": "none"}
    )  # looked up, not there


def _form_writes(s: Site, csrf: str, quality: int) -> None:
    form = {"csrf": csrf}
    r = f"/recipes/{SLUG}"
    s.ask("POST", f"{r}/vote", 303, data=form)
    s.ask("POST", f"{r}/fork", 303, data=form)
    s.ask(
        "POST", f"{r}/edit", 303, data=form | {"toml": s.ask("GET", f"/api/v1/recipes/{SLUG}.toml", 200).text}
    )
    tokens = s.ask("POST", "/account/tokens", 200, data=form | {"name": "ci2", "scope": "publish"}).text
    tid = re.findall(r"/account/tokens/(\d+)/revoke", tokens)[-1]
    s.ask("POST", f"/account/tokens/{tid}/revoke", 303, data=form)
    other = LLAMA.read_text().replace('slug = "llama31-8b-rtx4090-sglang"', 'slug = "llama-b"', 1)
    assert (
        s.ask("POST", "/publish", 303, data=form | {"toml": other}).headers["location"] == "/recipes/llama-b"
    )
    s.ask("POST", "/measurements/999999/retract", 404, data=form | {"reason": "none"})
    s.ask("POST", f"/quality/{quality}/retract", 303, data=form | {"reason": "a typo"})
    s.ask("POST", "/users/bob/hide", 303, data=form)
    s.ask("POST", f"{r}/hide", 303, data=form)
    s.ask("POST", "/signout", 303, data=form)


def _routes_asked(app: Any, asked: list[tuple[str, str]]) -> set[int]:
    """The index in the route table of the route each request was dispatched to."""
    routes = app.app.router.routes
    out = set()
    for method, path in asked:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        out.add(next(i for i, route in enumerate(routes) if route.matches(scope)[0] == Match.FULL))
    return out


def test_every_route_runs_its_sql_off_the_event_loop(site: Site) -> None:
    csrf = _accounts(site)
    _reads(site)
    row, quality = _reports(site)
    _api_writes(site, row)
    _form_writes(site, csrf, quality)
    routes = site.app.app.router.routes
    missing = [
        f"{sorted(r.methods or [])} {r.path}"
        for i, r in enumerate(routes)
        if isinstance(r, Route) and i not in _routes_asked(site.app, site.asked)
    ]
    assert missing == [], f"routes not asked: {missing}"
    assert site.on_loop == [], (
        f"{len(site.on_loop)} statements or checkouts on the event loop:\n{site.on_loop[0]}"
    )
