"""Accounts and community writes on SQLite and PostgreSQL: the authorization matrix of every write
endpoint, exact concurrent votes and gapless concurrent revisions, publish with located errors and
refused secrets, diffs, forks, retraction."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service import community
from lair.registry.service.accounts import create_session, create_token, create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import add_revision, publish
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import tgz, unsafe_routes

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]


def _recipe(slug: str, title: str = "A recipe") -> str:
    head = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n'
    return head + f'[meta]\ntitle = "{title}"\nslug = "{slug}"\n'


@dataclass
class World:
    client: TestClient
    tokens: dict[str, str]
    measurement: int
    second_measurement: int = 0
    quality: tuple[int, int] = (0, 0)
    owner_token_id: int = 0
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)  # name: (cookie, CSRF token)


@pytest.fixture
def world(engine: Engine, db_url: str) -> Iterator[World]:
    reset_limits()
    tokens, sessions = {}, {}
    with engine.begin() as conn:
        for name, admin in (("owner", False), ("other", False), ("admin", True)):
            uid = create_user(conn, name, admin=admin)
            tokens[name] = create_token(conn, uid)
            sessions[name] = create_session(conn, Actor(uid, name, admin))
        publish(conn, LLAMA.read_text(), owner="owner")
        publish(conn, SEED_000.read_text(), owner="owner")  # it has quality rows
        mids = conn.execute(sa.text("SELECT id FROM measurements ORDER BY id LIMIT 2")).scalars().all()
        qids = (
            conn.execute(sa.text("SELECT id FROM quality_measurements ORDER BY id LIMIT 2")).scalars().all()
        )
        tid = conn.execute(sa.text("SELECT min(id) FROM api_tokens")).scalar_one()  # the owner's
    with TestClient(create_app(db_url), raise_server_exceptions=False) as client:
        yield World(client, tokens, mids[0], mids[1], (qids[0], qids[1]), int(tid), sessions)


def _headers(world: World, who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {world.tokens[who]}"} if who != "anonymous" else {}


ACTORS = ["anonymous", "other", "owner", "admin"]
MATRIX = {  # endpoint: expected status for anonymous, another user, the owner, an admin
    "publish": (401, 201, 201, 201),
    "revise": (401, 403, 201, 201),
    "fork": (401, 201, 201, 201),
    "vote": (401, 200, 200, 200),
    "unvote": (401, 200, 200, 200),
    "retract": (401, 403, 200, 200),  # the owner and the admin each retract a different row
    "retract-quality": (401, 403, 200, 200),
    "hide": (401, 403, 403, 200),
    "unhide": (401, 403, 403, 200),  # the recipe was hidden by an admin first
    "hide-user": (401, 403, 403, 200),  # the user hidden is "owner": the owner column hides itself
    "unhide-user": (401, 403, 403, 200),
    # signed-in uploaders pass authorization; the minimal archive is then refused (no raw timings)
    "submit-report": (401, 422, 422, 422),
    "create-token": (401, 201, 201, 201),
    # the token is the owner's: another user, and an admin too, get the 404 of a token not theirs
    "revoke-token": (401, 404, 200, 404),
    # each signs out their own browser session (the anonymous one has none: a no-op)
    "sign-out": (200, 200, 200, 200),
}
ROUTES = {  # endpoint: the route it exercises (the guard test below compares with the app's table)
    "publish": ("POST", "/api/v1/recipes"),
    "revise": ("POST", "/api/v1/recipes/{slug}/revisions"),
    "fork": ("POST", "/api/v1/recipes/{slug}/fork"),
    "vote": ("PUT", "/api/v1/recipes/{slug}/vote"),
    "unvote": ("DELETE", "/api/v1/recipes/{slug}/vote"),
    "retract": ("POST", "/api/v1/measurements/{id}/retract"),
    "retract-quality": ("POST", "/api/v1/quality/{id}/retract"),
    "hide": ("PUT", "/api/v1/recipes/{slug}/hidden"),
    "unhide": ("DELETE", "/api/v1/recipes/{slug}/hidden"),
    "hide-user": ("PUT", "/api/v1/users/{name}/hidden"),
    "unhide-user": ("DELETE", "/api/v1/users/{name}/hidden"),
    "submit-report": ("POST", "/api/v1/reports"),
    "create-token": ("POST", "/api/v1/tokens"),
    "revoke-token": ("DELETE", "/api/v1/tokens/{id}"),
    "sign-out": ("DELETE", "/api/v1/session"),
}
# writes anyone may call (they make an account or a session); CSRF's origin check guards them
UNAUTHENTICATED = {("POST", "/api/v1/users"), ("POST", "/api/v1/session")}


def _retract(world: World, endpoint: str, who: str) -> int:
    c, h, body = world.client, _headers(world, who), {"reason": "broken driver"}
    if endpoint == "retract":
        mid = world.second_measurement if who == "admin" else world.measurement
        return c.post(f"/api/v1/measurements/{mid}/retract", json=body, headers=h).status_code
    qid = world.quality[1] if who == "admin" else world.quality[0]
    return c.post(f"/api/v1/quality/{qid}/retract", json=body, headers=h).status_code


def _sign_out(world: World, who: str) -> int:
    """``DELETE /api/v1/session`` with the actor's session cookie and CSRF token; the session is dead
    afterwards (its cookie no longer authenticates)."""
    if who == "anonymous":
        return world.client.delete("/api/v1/session").status_code
    cookie, csrf = world.sessions[who]
    browser = TestClient(world.client.app, cookies={"lair_session": cookie})
    assert browser.get("/api/v1/tokens").status_code == 200
    status = browser.delete("/api/v1/session", headers={"x-csrf-token": csrf}).status_code
    again = TestClient(world.client.app, cookies={"lair_session": cookie})
    assert again.get("/api/v1/tokens").status_code == 401
    return status


def _call(world: World, endpoint: str, who: str) -> int:
    c, h = world.client, _headers(world, who)
    if endpoint == "publish":
        return c.post("/api/v1/recipes", json={"toml": _recipe(f"new-{who}")}, headers=h).status_code
    if endpoint == "revise":
        body = {"toml": LLAMA.read_text().replace("bf16", "bf16-b"), "notes": "edit"}
        return c.post(f"/api/v1/recipes/{SLUG}/revisions", json=body, headers=h).status_code
    if endpoint == "fork":
        return c.post(f"/api/v1/recipes/{SLUG}/fork", headers=h).status_code
    if endpoint in ("vote", "unvote"):
        method = c.put if endpoint == "vote" else c.delete
        return method(f"/api/v1/recipes/{SLUG}/vote", headers=h).status_code
    if endpoint in ("retract", "retract-quality"):
        return _retract(world, endpoint, who)
    if endpoint in ("hide-user", "unhide-user"):
        method = c.put if endpoint == "hide-user" else c.delete
        return method("/api/v1/users/owner/hidden", headers=h).status_code
    if endpoint == "submit-report":
        body, gz = tgz({"results.json": b"{}"}), {"content-type": "application/gzip"}
        return c.post("/api/v1/reports", content=body, headers=h | gz).status_code
    if endpoint == "create-token":
        return c.post("/api/v1/tokens", json={"name": "ci", "scope": "read"}, headers=h).status_code
    if endpoint == "revoke-token":
        return c.delete(f"/api/v1/tokens/{world.owner_token_id}", headers=h).status_code
    if endpoint == "sign-out":
        return _sign_out(world, who)
    method = c.delete if endpoint == "unhide" else c.put
    return method(f"/api/v1/recipes/{SLUG}/hidden", headers=h).status_code


@pytest.mark.parametrize("endpoint", list(MATRIX))
def test_authorization_matrix(world: World, endpoint: str) -> None:
    if endpoint == "unhide":
        assert world.client.put(f"/api/v1/recipes/{SLUG}/hidden", headers=_headers(world, "admin")).is_success
    got = [_call(world, endpoint, who) for who in ACTORS]
    violations = [(who, g, w) for who, g, w in zip(ACTORS, got, MATRIX[endpoint], strict=True) if g != w]
    assert violations == []
    if endpoint in ("retract", "retract-quality"):  # a row already struck: a conflict, for an admin too
        assert _retract(world, endpoint, "admin") == 409


def test_the_matrix_covers_every_write_route(tmp_path: Path) -> None:
    """Every POST, PUT, PATCH and DELETE under /api/v1 in the app's own route table has a row in the
    matrix (the page forms post to the same service functions; test_csrf.py enumerates those)."""
    routes = {r for r in unsafe_routes(create_app(f"sqlite:///{tmp_path}/r.sqlite3")) if "/api/" in r[1]}
    assert set(ROUTES) == set(MATRIX)
    assert routes - set(ROUTES.values()) - UNAUTHENTICATED == set(), "add a matrix row for each new write"
    assert set(ROUTES.values()) - routes == set(), "a matrix row for a route the app no longer has"


def test_errors_of_writes_are_in_the_envelope(world: World) -> None:
    h = _headers(world, "owner")
    cases = [
        (world.client.post("/api/v1/recipes", json={"toml": 'engine = "vllm"\nmodle = 1\n'}, headers=h), 422),
        (world.client.post("/api/v1/recipes", json={"toml": LLAMA.read_text()}, headers=h), 409),
        (world.client.post("/api/v1/recipes", content=b"x" * 400_000, headers=h), 413),
        (world.client.post("/api/v1/recipes", content=b"not json", headers=h), 422),
        (world.client.post("/api/v1/recipes/nope/fork", headers=h), 404),
        (
            world.client.post(
                "/api/v1/recipes", json={"toml": "x"}, headers={"authorization": "Bearer nope"}
            ),
            401,
        ),
    ]
    for resp, status in cases:
        body = resp.json()
        assert resp.status_code == status and body["ok"] is False and body["error"]["status"] == status
    located = cases[0][0].json()["error"]["errors"]
    (typo,) = [e for e in located if "modle" in e["path"] + e["message"]]
    assert typo["line"] == 2 and len(located) == 2  # and the image a docker recipe lacks, in the same run


def test_read_scope_token_cannot_publish(engine: Engine, world: World) -> None:
    with engine.begin() as conn:
        uid = conn.execute(sa.text("SELECT id FROM users WHERE name = 'other'")).scalar_one()
        token = create_token(conn, uid, "ro", ("read",))
    r = world.client.post(
        "/api/v1/recipes", json={"toml": _recipe("ro")}, headers={"authorization": f"Bearer {token}"}
    )
    assert r.status_code == 403 and "publish" in r.json()["error"]["message"]


def test_read_scope_token_cannot_vote(engine: Engine, world: World) -> None:
    """A vote changes a recipe's count and order: it needs the publish scope, as every write."""
    with engine.begin() as conn:
        uid = conn.execute(sa.text("SELECT id FROM users WHERE name = 'other'")).scalar_one()
        token = create_token(conn, uid, "ro", ("read",))
    h = {"authorization": f"Bearer {token}"}
    for method in (world.client.put, world.client.delete):
        body = method(f"/api/v1/recipes/{SLUG}/vote", headers=h).json()
        assert body["ok"] is False and body["error"]["status"] == 403 and body["error"]["code"] == "forbidden"
        assert "'publish' scope" in body["error"]["message"]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM votes")).scalar_one() == 0
    assert world.client.get(f"/api/v1/recipes/{SLUG}.json").json()["votes"] == 0


def test_secrets_are_refused(world: World) -> None:
    h = _headers(world, "owner")
    leaked = _recipe("leak") + '[env]\nHF_TOKEN = "hf_' + "a" * 34 + '"\n'
    r = world.client.post("/api/v1/recipes", json={"toml": leaked}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "secret"
    arg = _recipe("leak2").replace("[meta]", 'args = ["--api-key", "sk-' + "b" * 30 + '"]\n[meta]')
    assert world.client.post("/api/v1/recipes", json={"toml": arg}, headers=h).status_code == 422


def _jwt() -> str:
    import base64
    import json

    def part(d: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return part({"alg": "HS256", "typ": "JWT"}) + "." + part({"sub": "1234567890"}) + "." + "s1gnature" * 4


# real-format samples, built here so this file holds no secret-looking literal, with the kind the
# refusal names (detect-secrets' own plugin names, or lair's for formats detect-secrets lacks)
TOKENS = {
    "AWS Access Key": lambda: "AKIA" + "IOSFODNN7" + "EXAMPLE",
    "GitHub Token": lambda: "ghp_" + "A1b2C3d4" * 4 + "E5f6",
    "Slack Token": lambda: "xoxb-" + "1234567890-1234567890-" + "aBcD" * 6,
    "Stripe Access Key": lambda: "sk_" + "live_" + "aB1" * 8,
    "Private Key": lambda: "-----BEGIN " + "RSA PRIVATE KEY-----",
    "JSON Web Token": _jwt,
    "Hugging Face Token": lambda: "hf_" + "a" * 34,
    "lair API token": lambda: "lair_" + "x" * 43,
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_detect_secrets_agrees_on_the_samples(kind: str) -> None:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    with default_settings():
        found = {s.type for s in scan_line("token " + TOKENS[kind]())}
    assert (kind in found) == (kind not in ("Hugging Face Token", "lair API token")), found


def _refused(r: httpx.Response, field: str, line: int, col: int, kind: str, secret: str) -> None:
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "secret" and f"{field}:{line}:{col}: a {kind} is written here" in err["message"]
    assert {"file": field, "line": line, "col": col} == {
        k: err["errors"][0][k] for k in ("file", "line", "col")
    }
    assert secret not in r.text


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_token_in_the_notes_is_refused_with_its_line(world: World, kind: str) -> None:
    tok, h = TOKENS[kind](), _headers(world, "owner")
    col = 15 if kind == "Private Key" else 10  # that plugin's match starts at BEGIN, past the dashes
    body = {"toml": _recipe("clean"), "notes": "first line\nmy token " + tok}
    _refused(world.client.post("/api/v1/recipes", json=body, headers=h), "notes", 2, col, kind, tok)
    assert world.client.get("/api/v1/recipes/clean.json").status_code == 404  # nothing was stored


def test_a_token_in_any_submitted_field_is_refused(world: World) -> None:
    c, h, tok = world.client, _headers(world, "owner"), TOKENS["GitHub Token"]()
    summary = _recipe("sum").replace("[meta]\n", f'[meta]\nsummary = "see {tok}"\n')
    _refused(
        c.post("/api/v1/recipes", json={"toml": summary}, headers=h),
        "recipe.toml",
        4,
        16,
        "GitHub Token",
        tok,
    )
    body = {"toml": LLAMA.read_text(), "notes": tok}
    r = c.post(f"/api/v1/recipes/{SLUG}/revisions", json=body, headers=h)
    _refused(r, "notes", 1, 1, "GitHub Token", tok)
    r = c.post(f"/api/v1/measurements/{world.measurement}/retract", json={"reason": "x " + tok}, headers=h)
    _refused(r, "reason", 1, 3, "GitHub Token", tok)
    rows = c.get(f"/api/v1/recipes/{SLUG}.json").json()
    assert rows["revision"] == 1 and not any(m["retracted"] for m in rows["measurements"])


def test_a_fork_refuses_to_copy_a_revision_holding_a_token(engine: Engine, world: World) -> None:
    tok = TOKENS["Slack Token"]()
    with engine.begin() as conn:  # stored before its format was known: the service layer's publish
        publish(conn, _recipe("old") + f'[env]\nX = "{tok}"\n', owner="owner")
        stored = conn.execute(sa.text("SELECT toml FROM revisions ORDER BY id DESC")).scalars().first()
    line = next(n for n, text in enumerate(str(stored).splitlines(), 1) if tok in text)  # canonical TOML
    r = world.client.post("/api/v1/recipes/old/fork", headers=_headers(world, "other"))
    _refused(r, "recipe.toml", line, len('X = "') + 1, "Slack Token", tok)


def test_the_publish_form_locates_a_token_in_the_notes(world: World) -> None:
    c, tok = world.client, TOKENS["Hugging Face Token"]()
    r = c.post("/api/v1/users", json={"name": "dora", "password": "correct horse battery"})
    form = {"csrf": r.json()["csrf"], "toml": _recipe("formleak"), "notes": "ok\nok\n  " + tok}
    page = c.post("/publish", data=form)
    assert page.status_code == 422 and 'data-error="secret"' in page.text
    assert "line 3:3: notes: a Hugging Face Token is written here" in page.text
    assert tok not in page.text and 'value="ok\nok\n  [secret removed]"' in page.text


def test_fork_diff_and_retraction_are_visible(world: World) -> None:
    c, h = world.client, _headers(world, "other")
    fork = c.post(f"/api/v1/recipes/{SLUG}/fork", headers=h).json()
    assert fork["slug"] == f"{SLUG}-other" and fork["upstream"] == SLUG
    doc = c.get(f"/api/v1/recipes/{fork['slug']}.json").json()
    assert doc["owner"] == "other" and doc["upstream"] == SLUG and doc["upstream_revision"] == 1
    edited = LLAMA.read_text().replace("max_context = 32768", "max_context = 16384")
    r = c.post(f"/api/v1/recipes/{fork['slug']}/revisions", json={"toml": edited, "notes": "16K"}, headers=h)
    assert r.status_code == 201 and r.json()["revision"] == 2
    resp = c.get(f"/api/v1/recipes/{fork['slug']}/diff", params={"from": 1, "to": 2})
    assert resp.status_code == 200, resp.text
    d = resp.json()["diff"]
    assert "-max_context = 32768" in d and "+max_context = 16384" in d
    owner = _headers(world, "owner")
    assert (
        c.post(
            f"/api/v1/measurements/{world.measurement}/retract", json={"reason": "bad PSU"}, headers=owner
        ).status_code
        == 200
    )
    rows = c.get(f"/api/v1/recipes/{SLUG}.json").json()["measurements"]
    struck = [m for m in rows if m["id"] == world.measurement]
    assert struck[0]["retracted"] and struck[0]["retracted_reason"] == "bad PSU"
    assert "bad PSU" in c.get(f"/recipes/{SLUG}").text


def test_security_headers_on_every_response(world: World) -> None:
    for url in ("/", f"/recipes/{SLUG}", f"/api/v1/recipes/{SLUG}.json", "/nope", "/api/v1/nope"):
        for _ in range(2):  # a miss, then a cache hit
            r = world.client.get(url)
            csp = r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'none'" in csp
            assert (
                r.headers["referrer-policy"] == "same-origin"
                and r.headers["x-content-type-options"] == "nosniff"
            )


def test_50_concurrent_votes_and_50_concurrent_revisions(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")
        actors = [Actor(create_user(conn, f"u{i}", admin=True), f"u{i}", True) for i in range(50)]
    text = LLAMA.read_text()

    def vote(a: Actor) -> int:
        with engine.begin() as conn:
            return community.vote(conn, a, SLUG, True)

    def revise(a: Actor) -> int:
        with engine.begin() as conn:
            return community.revise(
                conn, a, SLUG, text.replace("bf16", f"bf16-{a.name}"), f"by {a.name}"
            ).revision

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(vote, actors + actors[:10]))  # ten of them vote twice: still one vote each
        numbers = sorted(pool.map(revise, actors))
    assert numbers == list(range(2, 52))
    with engine.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT votes FROM recipes WHERE slug = :s"), {"s": SLUG}).scalar_one() == 50
        )
        revs = conn.execute(sa.text("SELECT number, notes FROM revisions ORDER BY number")).all()
    assert [r.number for r in revs] == list(range(1, 52))
    assert sorted(r.notes for r in revs[1:]) == sorted(f"by u{i}" for i in range(50))


def test_direct_revision_numbers_stay_gapless_without_the_community_layer(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")

    def one(i: int) -> int:
        with engine.begin() as conn:
            return add_revision(conn, SLUG, LLAMA.read_text(), author=f"a{i}", notes=str(i)).revision

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(20))) == list(range(2, 22))


def test_sign_up_sign_in_rotates_the_session_csrf_and_sign_out(world: World) -> None:
    c = world.client
    r = c.post("/api/v1/users", json={"name": "carol", "password": "correct horse battery"})
    assert r.status_code == 201
    cookie = r.headers["set-cookie"]
    assert (
        "lair_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")
    )
    first, csrf = c.cookies["lair_session"], r.json()["csrf"]
    assert c.put(f"/api/v1/recipes/{SLUG}/vote").status_code == 403  # a cookie without the CSRF token
    assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers={"x-csrf-token": csrf}).json()["votes"] == 1
    evil = {"x-csrf-token": csrf, "origin": "https://evil.example"}
    assert c.delete(f"/api/v1/recipes/{SLUG}/vote", headers=evil).status_code == 403
    again = c.post("/api/v1/session", json={"name": "carol", "password": "correct horse battery"})
    assert again.status_code == 200 and c.cookies["lair_session"] != first  # rotated
    csrf2 = again.json()["csrf"]
    old = TestClient(c.app, cookies={"lair_session": first})
    assert old.delete(f"/api/v1/recipes/{SLUG}/vote", headers={"x-csrf-token": csrf}).status_code == 401
    assert c.delete("/api/v1/session", headers={"x-csrf-token": csrf2}).status_code == 200
    assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers={"x-csrf-token": csrf2}).status_code == 401
    wrong = c.post("/api/v1/session", json={"name": "carol", "password": "wrong password!"})
    assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "wrong user name or password"
    nobody = c.post("/api/v1/session", json={"name": "nobody", "password": "wrong password!"})
    assert nobody.json()["error"]["message"] == wrong.json()["error"]["message"]


@pytest.mark.parametrize("storage", ["memory", "redis"])
def test_sign_in_brute_force_is_rate_limited(world: World, storage: str, db_url: str) -> None:
    from lair.registry.settings import Settings

    if storage == "memory":
        _brute_force(world.client.app, redis=False)
        return
    # an app of its own: the limiter is the app's, made from its settings
    env = {"LAIR_REGISTRY_DB": db_url, "LAIR_REGISTRY_REDIS": "redis://127.0.0.1:6379/0"}
    with TestClient(create_app(settings=Settings.from_env(env))) as started:
        _brute_force(started.app, redis=True)


def _brute_force(app: object, redis: bool) -> None:
    import secrets

    reset_limits()
    name = f"victim-{secrets.token_hex(4)}"  # Redis keys outlive the test: a name and address of this run
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
    client = TestClient(app, client=(address, 40000))
    statuses = [
        client.post("/api/v1/session", json={"name": name, "password": f"guess-{i:04d}"}).status_code
        for i in range(12)
    ]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    last = client.post("/api/v1/session", json={"name": name, "password": "x" * 12})
    assert last.json()["error"]["code"] == "rate_limited"
    if redis:
        import redis as redis_client

        keys = redis_client.Redis.from_url("redis://127.0.0.1:6379/0").keys(f"*{name}*")
        assert keys  # the counter really lives in Redis
    reset_limits()


def test_write_rate_limit(world: World, db_url: str) -> None:
    from lair.registry.settings import Settings

    env = {"LAIR_REGISTRY_DB": db_url, "LAIR_REGISTRY_WRITE_LIMIT": "3/minute"}  # the app's own setting
    h = _headers(world, "other")
    with TestClient(create_app(settings=Settings.from_env(env))) as c:
        got = [c.put(f"/api/v1/recipes/{SLUG}/vote", headers=h).status_code for _ in range(4)]
    assert got == [200, 200, 200, 429]


def test_tokens_are_listed_without_values_and_revocable(world: World) -> None:
    c, h = world.client, _headers(world, "other")
    assert c.get("/api/v1/tokens").status_code == 401
    assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers=h).status_code == 200
    listed = c.get("/api/v1/tokens", headers=h).json()["tokens"]
    assert len(listed) == 1 and listed[0]["last_used_at"] and listed[0]["scopes"] == ["read", "publish"]
    assert world.tokens["other"] not in str(listed)
    owner = _headers(world, "owner")
    assert c.delete(f"/api/v1/tokens/{listed[0]['id']}", headers=owner).status_code == 404  # not the owner's
    assert c.delete(f"/api/v1/tokens/{listed[0]['id']}", headers=h).status_code == 200
    assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers=h).status_code == 401  # revoked
