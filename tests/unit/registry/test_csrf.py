"""CSRF on every state-changing route, enumerated from the app's own route table (a new POST, PUT,
PATCH or DELETE route without a case here fails the first test).

Each route is sent, with a signed-in session cookie, as a forged cross-site request would come: an
``Origin`` of another site (with and without the session's real token), a ``Referer`` of another site,
``Origin: null``, another origin of the same site (another port: SameSite cookies are sent there), and
for routes that act as the session, no token or a forged one without any origin header. Each must be
refused with 403 ``csrf`` (the envelope on the API, the error page on pages) and leave every table of
the database as it was. The same request from the site itself with the session's token then succeeds
and changes the database, so a refusal is the CSRF check's doing and the snapshot can see a change.
Bearer-token requests are exempt (see ``lair.registry.web.auth``): the last test shows one from a
foreign ``Origin`` goes through. SQLite only: the checks run before any query of the route.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000
from starlette.testclient import TestClient

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service import community
from lair.registry.service.accounts import create_session, create_token, create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import db_snapshot, unsafe_routes

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
PASSWORD = "victim-long-password"
NEW = (
    'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n[meta]\ntitle = "New"\nslug = "brand-new"\n'
)
EDITED = LLAMA.read_text().replace("max_context = 32768", "max_context = 16384")


@dataclass
class World:
    db: str
    app: Any
    cookie: str
    csrf: str
    victim: Actor
    measurement: int
    quality_row: int
    token_id: int
    engine: sa.Engine = field(repr=False)


@dataclass(frozen=True)
class Case:
    """One route: its concrete path, body, the status of the legitimate request, and whether the
    route acts as the session (sign-in and sign-up make one, so they need no token: only the origin
    check guards them, as it does every route)."""

    path: str
    body: dict[str, str] = field(default_factory=dict)
    ok: int = 200
    acts_as_session: bool = True
    setup: Callable[[World], None] | None = None


def _voted(w: World) -> None:
    with w.engine.begin() as conn:
        community.vote(conn, w.victim, SLUG, True)


def _hidden_recipe(w: World) -> None:
    with w.engine.begin() as conn:
        community.hide_recipe(conn, w.victim, SLUG, True)


def _hidden_user(w: World) -> None:
    with w.engine.begin() as conn:
        community.hide_user(conn, w.victim, "other", True)


SIGN_IN = {"name": "victim", "password": PASSWORD}
SIGN_UP = {"name": "newcomer", "password": "newcomer-long-password"}
CASES: dict[tuple[str, str], Case] = {
    ("POST", "/signup"): Case("/signup", SIGN_UP, 303, acts_as_session=False),
    ("POST", "/signin"): Case("/signin", SIGN_IN, 303, acts_as_session=False),
    ("POST", "/signout"): Case("/signout", {}, 303),
    ("POST", "/publish"): Case("/publish", {"toml": NEW, "notes": "n"}, 303),
    ("POST", "/recipes/{slug}/edit"): Case(f"/recipes/{SLUG}/edit", {"toml": EDITED, "notes": "16K"}, 303),
    ("POST", "/recipes/{slug}/fork"): Case(f"/recipes/{SLUG}/fork", {}, 303),
    ("POST", "/recipes/{slug}/vote"): Case(f"/recipes/{SLUG}/vote", {"vote": "on"}, 303),
    ("POST", "/measurements/{id}/retract"): Case("/measurements/{mid}/retract", {"reason": "bad PSU"}, 303),
    ("POST", "/quality/{id}/retract"): Case("/quality/{qid}/retract", {"reason": "bad PSU"}, 303),
    ("POST", "/recipes/{slug}/hide"): Case(f"/recipes/{SLUG}/hide", {}, 303),
    ("POST", "/users/{name}/hide"): Case("/users/other/hide", {}, 303),
    ("POST", "/api/v1/recipes"): Case("/api/v1/recipes", {"toml": NEW}, 201),
    ("POST", "/api/v1/recipes/{slug}/revisions"): Case(
        f"/api/v1/recipes/{SLUG}/revisions", {"toml": EDITED, "notes": "16K"}, 201
    ),
    ("POST", "/api/v1/recipes/{slug}/fork"): Case(f"/api/v1/recipes/{SLUG}/fork", {}, 201),
    ("PUT", "/api/v1/recipes/{slug}/vote"): Case(f"/api/v1/recipes/{SLUG}/vote"),
    ("DELETE", "/api/v1/recipes/{slug}/vote"): Case(f"/api/v1/recipes/{SLUG}/vote", setup=_voted),
    ("PUT", "/api/v1/recipes/{slug}/hidden"): Case(f"/api/v1/recipes/{SLUG}/hidden"),
    ("DELETE", "/api/v1/recipes/{slug}/hidden"): Case(f"/api/v1/recipes/{SLUG}/hidden", setup=_hidden_recipe),
    ("PUT", "/api/v1/users/{name}/hidden"): Case("/api/v1/users/other/hidden"),
    ("DELETE", "/api/v1/users/{name}/hidden"): Case("/api/v1/users/other/hidden", setup=_hidden_user),
    ("POST", "/api/v1/measurements/{id}/retract"): Case(
        "/api/v1/measurements/{mid}/retract", {"reason": "bad PSU"}
    ),
    ("POST", "/api/v1/quality/{id}/retract"): Case("/api/v1/quality/{qid}/retract", {"reason": "bad PSU"}),
    ("POST", "/api/v1/users"): Case("/api/v1/users", SIGN_UP, 201, acts_as_session=False),
    ("POST", "/api/v1/session"): Case("/api/v1/session", SIGN_IN, acts_as_session=False),
    ("DELETE", "/api/v1/session"): Case("/api/v1/session"),
    ("DELETE", "/api/v1/tokens/{id}"): Case("/api/v1/tokens/{tid}"),
    ("POST", "/api/v1/tokens"): Case("/api/v1/tokens", {"name": "ci", "scope": "read"}, 201),
    ("POST", "/account/tokens"): Case("/account/tokens", {"name": "ci", "scope": "publish"}),
    ("POST", "/account/tokens/{id}/revoke"): Case("/account/tokens/{tid}/revoke", {}, 303),
    # a report upload is a gzipped tar of a real run (tests/integration/verify); an empty body gets past
    # CSRF and the actor checks to the archive's validation, which refuses it and writes nothing
    ("POST", "/api/v1/reports"): Case("/api/v1/reports", ok=422),
}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    reset_limits()
    db = connect_url(str(tmp_path / "registry.sqlite3"))
    engine = make_engine(db)
    migrate(engine)
    with engine.begin() as conn:
        uid = create_user(conn, "victim", PASSWORD, admin=True)  # may do everything: the owner and an admin
        create_user(conn, "other")
        victim = Actor(uid, "victim", True)
        create_token(conn, uid, "cli")
        publish(conn, LLAMA.read_text(), owner="victim")
        publish(conn, SEED_000.read_text(), owner="victim")  # it has quality rows
        mid = conn.execute(sa.text("SELECT min(id) FROM measurements")).scalar_one()
        qid = conn.execute(sa.text("SELECT min(id) FROM quality_measurements")).scalar_one()
        tid = conn.execute(sa.text("SELECT id FROM api_tokens")).scalar_one()
        cookie, csrf = create_session(conn, victim)
    w = World(db, create_app(db), cookie, csrf, Actor(uid, "victim", True, csrf=csrf), mid, qid, tid, engine)
    yield w
    engine.dispose()


def _send(w: World, method: str, template: str, headers: dict[str, str], token: str | None) -> Any:
    case = CASES[(method, template)]
    path = case.path.format(mid=w.measurement, qid=w.quality_row, tid=w.token_id)
    client = TestClient(w.app, cookies={"lair_session": w.cookie}, raise_server_exceptions=False)
    if path.startswith("/api/"):
        h = headers | ({"x-csrf-token": token} if token is not None else {})
        kw: dict[str, Any] = {"json": case.body} if case.body else {}
        return client.request(method, path, headers=h, follow_redirects=False, **kw)
    data = case.body | ({"csrf": token} if token is not None else {})
    return client.request(method, path, headers=headers, data=data, follow_redirects=False)


EVIL = "https://evil.example"
SAME_SITE = "http://testserver:8443"  # another origin of this site: the session cookie goes there too


def _attacks(case: Case, real: str) -> list[tuple[str, dict[str, str], str | None]]:
    out = [
        ("foreign Origin, no token", {"origin": EVIL}, None),
        ("foreign Origin, the real token", {"origin": EVIL}, real),
        ("foreign Referer, forged token", {"referer": EVIL + "/attack.html"}, "forged"),
        ("Origin: null, no token", {"origin": "null"}, None),
        ("another origin of the same site, the real token", {"origin": SAME_SITE}, real),
    ]
    if case.acts_as_session:
        out += [("no origin headers, no token", {}, None), ("no origin headers, forged token", {}, "forged")]
    return out


def _assert_refused(resp: Any, api: bool, what: str) -> None:
    assert resp.status_code == 403, f"{what}: {resp.text}"
    if api:
        body = resp.json()
        assert body["ok"] is False and body["error"]["code"] == "csrf" and body["error"]["status"] == 403
    else:
        assert resp.headers["content-type"].startswith("text/html")
        assert 'data-error="csrf"' in resp.text, what  # the error page, or the form with its error


def test_every_state_changing_route_has_a_case(tmp_path: Path) -> None:
    routes = unsafe_routes(create_app(connect_url(str(tmp_path / "r.sqlite3"))))
    assert routes - set(CASES) == set(), "add a CSRF case for each new state-changing route"
    assert set(CASES) - routes == set(), "a case for a route the app no longer has"


@pytest.mark.parametrize(("method", "template"), sorted(CASES), ids=[f"{m} {p}" for m, p in sorted(CASES)])
def test_a_cross_site_request_is_refused_and_changes_nothing(
    world: World, method: str, template: str
) -> None:
    case = CASES[(method, template)]
    if case.setup is not None:
        case.setup(world)
    before = db_snapshot(world.db)
    for what, headers, token in _attacks(case, world.csrf):
        resp = _send(world, method, template, headers, token)
        _assert_refused(resp, template.startswith("/api/"), what)
        assert db_snapshot(world.db) == before, f"{what}: the database changed"
    own = _send(world, method, template, {"origin": "http://testserver"}, world.csrf)
    assert own.status_code == case.ok, own.text
    if case.ok < 400:
        assert db_snapshot(world.db) != before


def test_a_bearer_token_write_is_not_subject_to_csrf(world: World) -> None:
    with world.engine.begin() as conn:
        token = create_token(conn, world.victim.id, "agent")
    client = TestClient(world.app)
    h = {"authorization": f"Bearer {token}", "origin": EVIL}
    assert client.put(f"/api/v1/recipes/{SLUG}/vote", headers=h).json() == {"ok": True, "votes": 1}


def test_the_public_url_is_this_site_and_the_uncached_app_checks_too(world: World) -> None:
    """Behind a TLS-terminating proxy the browser's Origin is the public URL, not the request's own
    scheme and host; the app without its response cache runs the same check."""
    app = create_app(world.db, public_url="https://registry.example/", cache_bytes=0)
    client = TestClient(
        app, "http://registry.example", cookies={"lair_session": world.cookie}
    )  # the proxy's Host
    vote, token = f"/api/v1/recipes/{SLUG}/vote", {"x-csrf-token": world.csrf}
    public = client.put(vote, headers=token | {"origin": "https://registry.example"})
    assert public.json() == {"ok": True, "votes": 1}
    refused = client.put(vote, headers=token | {"referer": EVIL + "/x"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf"
