"""API tokens made by a signed-in user: the account page's form (cookie + CSRF) and
``POST /api/v1/tokens``; the value shown once, stored only as its sha256, usable as a bearer for a
publish, listed with its last use, revocable from the page. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_token, create_user
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

PASSWORD = "a-long-enough-password"
RECIPE = (
    'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n[meta]\ntitle = "T"\nslug = "by-token"\n'
)
TOKEN_RE = re.compile(r'<code id="token-value">(lair_[A-Za-z0-9_-]+)</code>')


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    reset_limits()  # ``engine`` made the schema
    with TestClient(create_app(db_url)) as c:
        yield c


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def _signed_up(client: TestClient, name: str = "alice") -> str:
    """Sign up through the page form; the account page's CSRF token."""
    r = client.post("/signup", data={"name": name, "password": PASSWORD}, follow_redirects=False)
    assert r.status_code == 303 and "lair_session" in r.cookies
    page = client.get("/account")
    assert page.status_code == 200 and 'id="new-token-form"' in page.text
    return _csrf(page.text)


def _stored(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT * FROM api_tokens"))]


def test_a_token_made_on_the_page_is_shown_once_publishes_and_is_revoked(
    client: TestClient, engine: Engine
) -> None:
    csrf = _signed_up(client)
    made = client.post("/account/tokens", data={"name": "laptop", "scope": "publish", "csrf": csrf})
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    token = TOKEN_RE.findall(made.text)
    assert len(token) == 1 and made.text.count(token[0]) == 1
    value = token[0]
    # stored only as its sha256 (computed here with hashlib), never in clear
    rows = _stored(engine)
    assert len(rows) == 1 and hashlib.sha256(value.encode()).hexdigest() in rows[0]
    assert value not in repr(rows)
    # a bearer for a publish, without the cookie
    bearer = TestClient(client.app).post(
        "/api/v1/recipes", json={"toml": RECIPE}, headers={"authorization": f"Bearer {value}"}
    )
    assert bearer.status_code == 201 and bearer.json()["slug"] == "by-token"
    # never shown again: the account page and the JSON list show its name and last use, not the value
    page = client.get("/account").text
    assert value not in page and "laptop" in page and "never" not in page
    listed = client.get("/api/v1/tokens").json()["tokens"]
    assert [(t["name"], t["scopes"], t["revoked"]) for t in listed] == [
        ("laptop", ["read", "publish"], False)
    ]
    assert listed[0]["last_used_at"] and value not in str(listed)
    # revoked from the page: the bearer stops working
    tid = listed[0]["id"]
    assert f'action="/account/tokens/{tid}/revoke"' in page
    r = client.post(f"/account/tokens/{tid}/revoke", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/account"
    again = TestClient(client.app).get("/api/v1/tokens", headers={"authorization": f"Bearer {value}"})
    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthorized"
    assert "revoked" in client.get("/account").text


def test_a_read_token_from_the_page_cannot_publish(client: TestClient) -> None:
    csrf = _signed_up(client, "reader")
    made = client.post("/account/tokens", data={"name": "ro", "scope": "read", "csrf": csrf})
    (value,) = TOKEN_RE.findall(made.text)
    h = {"authorization": f"Bearer {value}"}
    r = TestClient(client.app).post("/api/v1/recipes", json={"toml": RECIPE}, headers=h)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


def test_the_page_form_shows_located_errors_and_needs_csrf(client: TestClient, engine: Engine) -> None:
    csrf = _signed_up(client)
    bad = client.post("/account/tokens", data={"name": "x", "scope": "admin", "csrf": csrf})
    assert bad.status_code == 422 and 'data-error="invalid"' in bad.text and "scope: one of" in bad.text
    empty = client.post("/account/tokens", data={"name": "  ", "scope": "read", "csrf": csrf})
    assert empty.status_code == 422 and "name: 1-100 characters" in empty.text
    forged = client.post("/account/tokens", data={"name": "x", "scope": "read", "csrf": "forged"})
    assert forged.status_code == 403 and 'data-error="csrf"' in forged.text
    assert _stored(engine) == [] and not TOKEN_RE.search(bad.text + empty.text + forged.text)
    anonymous = TestClient(client.app).post("/account/tokens", data={"name": "x", "scope": "read"})
    assert anonymous.status_code == 401 and 'data-error="unauthorized"' in anonymous.text
    assert TestClient(client.app).get("/account", follow_redirects=False).headers["location"] == "/signin"


def test_the_api_makes_tokens_for_a_session_or_a_publish_token(client: TestClient, engine: Engine) -> None:
    signed = client.post("/api/v1/users", json={"name": "bob", "password": PASSWORD})
    csrf = signed.json()["csrf"]
    body = {"name": "ci", "scope": "read"}
    no_csrf = client.post("/api/v1/tokens", json=body)
    assert no_csrf.status_code == 403 and no_csrf.json()["error"]["code"] == "csrf"
    r = client.post("/api/v1/tokens", json=body, headers={"x-csrf-token": csrf})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["ok"] and made["token"].startswith("lair_") and made["scope"] == "read" and made["id"] > 0
    anon = TestClient(client.app)
    read = {"authorization": f"Bearer {made['token']}"}
    refused = anon.post("/api/v1/tokens", json={"name": "up", "scope": "publish"}, headers=read)
    assert refused.status_code == 403 and refused.json()["error"]["status"] == 403  # no escalation
    with engine.begin() as conn:
        uid = conn.execute(sa.text("SELECT id FROM users WHERE name = 'bob'")).scalar_one()
        publish_token = create_token(conn, uid, "cli", ("read", "publish"))
    pub = {"authorization": f"Bearer {publish_token}"}
    second = anon.post("/api/v1/tokens", json={"name": "agent", "scope": "publish"}, headers=pub)
    assert second.status_code == 201 and second.json()["token"] not in (made["token"], publish_token)
    assert anon.post("/api/v1/tokens", json=body).status_code == 401
    bad = anon.post("/api/v1/tokens", json={"name": "x", "scope": "root"}, headers=pub).json()
    assert bad["ok"] is False and bad["error"]["status"] == 422 and "scope" in bad["error"]["message"]
    names = [t["name"] for t in anon.get("/api/v1/tokens", headers=pub).json()["tokens"]]
    assert names == ["ci", "cli", "agent"]


def test_another_users_token_cannot_be_revoked_from_the_page(client: TestClient, engine: Engine) -> None:
    with engine.begin() as conn:
        create_token(conn, create_user(conn, "mallory-victim"), "theirs")
        tid = conn.execute(sa.text("SELECT id FROM api_tokens")).scalar_one()
    csrf = _signed_up(client)
    r = client.post(f"/account/tokens/{tid}/revoke", data={"csrf": csrf})
    assert r.status_code == 404
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT revoked_at FROM api_tokens")).scalar_one() is None
