"""The sign-up rate limit (per address, in memory and in Redis) and the session cookie's flags:
HttpOnly and SameSite=Lax always, Secure over https and behind a TLS proxy (an https public URL).
Cookies are read back with the standard library's own Set-Cookie parser."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from http.cookies import Morsel, SimpleCookie

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

PASSWORD = "a-long-enough-password"


@pytest.fixture
def app(engine: Engine, db_url: str) -> Iterator[object]:
    reset_limits()  # ``engine`` made the schema
    with TestClient(create_app(db_url)) as lifespan:  # closes the app's connections at the end
        yield lifespan.app
    reset_limits()


def _address() -> str:
    """An address of this run only (Redis counters outlive a test)."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"


def _users(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM users")).scalar_one())


@pytest.mark.parametrize("storage", ["memory", "redis"])
def test_sign_up_is_limited_to_five_a_minute_per_address(
    app: object, engine: Engine, storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if storage == "redis":
        monkeypatch.setenv("LAIR_REGISTRY_REDIS", "redis://127.0.0.1:6379/0")
    reset_limits()
    tag = secrets.token_hex(3)
    client = TestClient(app, client=(_address(), 40000))
    got = [
        client.post("/api/v1/users", json={"name": f"u{tag}-{i}", "password": PASSWORD}).status_code
        for i in range(6)
    ]
    assert got == [201] * 5 + [429]
    refused = client.post("/api/v1/users", json={"name": f"u{tag}-x", "password": PASSWORD}).json()
    assert refused["ok"] is False and refused["error"]["code"] == "rate_limited"
    assert refused["error"]["status"] == 429 and "5/minute" in refused["error"]["message"]
    page = client.post("/signup", data={"name": f"u{tag}-page", "password": PASSWORD})
    assert page.status_code == 429 and 'id="form-error"' in page.text and "too many requests" in page.text
    other = TestClient(app, client=(_address(), 40000))  # the limit is per address
    assert other.post("/api/v1/users", json={"name": f"u{tag}-b", "password": PASSWORD}).status_code == 201
    assert _users(engine) == 6  # the refused sign-ups made no account


def _session_morsel(resp: object) -> Morsel[str]:
    jar: SimpleCookie = SimpleCookie()
    for header in resp.headers.get_list("set-cookie"):  # type: ignore[attr-defined]
        jar.load(header)
    return jar["lair_session"]


def _sign_up_in_out(client: TestClient, name: str) -> list[Morsel[str]]:
    up = client.post("/api/v1/users", json={"name": name, "password": PASSWORD})
    signed = client.post("/api/v1/session", json={"name": name, "password": PASSWORD})
    out = client.delete("/api/v1/session", headers={"x-csrf-token": signed.json()["csrf"]})
    assert (up.status_code, signed.status_code, out.status_code) == (201, 200, 200)
    return [_session_morsel(r) for r in (up, signed, out)]


@pytest.mark.parametrize(
    ("base_url", "public_url", "secure"),
    [
        ("http://testserver", None, False),
        ("https://testserver", None, True),  # TLS to this server
        ("http://registry.example", "https://registry.example", True),  # a TLS-terminating proxy in front
        ("http://registry.example", "http://registry.example", False),
    ],
)
def test_the_session_cookie_is_secure_behind_https(
    engine: Engine, db_url: str, base_url: str, public_url: str | None, secure: bool
) -> None:
    reset_limits()
    with TestClient(create_app(db_url, public_url=public_url), base_url=base_url) as client:
        morsels = _sign_up_in_out(client, f"c{secrets.token_hex(3)}")
    for morsel in morsels:
        assert bool(morsel["secure"]) is secure
        assert morsel["httponly"] and morsel["samesite"].lower() == "lax" and morsel["path"] == "/"
    reset_limits()


def test_the_page_sign_in_and_out_cookies_are_secure_behind_a_proxy(engine: Engine, db_url: str) -> None:
    reset_limits()
    with TestClient(
        create_app(db_url, public_url="https://registry.example"), "http://registry.example"
    ) as client:
        up = client.post("/signup", data={"name": "pager", "password": PASSWORD}, follow_redirects=False)
        csrf = client.get("/publish").text.split('name="csrf" value="')[1].split('"')[0]
        out = client.post("/signout", data={"csrf": csrf}, follow_redirects=False)
    assert (up.status_code, out.status_code) == (303, 303)
    made, ended = _session_morsel(up), _session_morsel(out)
    assert made["secure"] and made["httponly"] and made.value
    assert ended["secure"] and ended.value == "" and ended["max-age"] == "0"
    reset_limits()
