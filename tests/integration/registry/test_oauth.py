"""Sign in with GitHub and Hugging Face against real local authorization servers (authlib's grants,
:mod:`lair.testing.oauth_provider`), through a real ``lair serve`` over HTTP (httpx, and Chromium for
the page flow): configured by its flags, the client secrets from a file and the environment. Each
httpx client talks from a loopback address of its own, so one test's sign-ins do not spend another's
rate limit."""

from __future__ import annotations

import html
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from starlette.testclient import TestClient

from lair.registry.oauth import load_providers
from lair.registry.serve import prepare
from lair.registry.web.app import create_app
from lair.testing.oauth_provider import OAuthProvider, oauth_provider
from lair.testing.registry import free_port, serve_process

pytestmark = pytest.mark.integration

GH_SECRET = "gh-secret-" + secrets.token_urlsafe(24)
HF_SECRET = "hf-secret-" + secrets.token_urlsafe(24)
PASSWORD = "dora-long-password"


@dataclass
class Site:
    base: str
    gh: OAuthProvider
    hf: OAuthProvider
    db: Path
    log: Path
    pages: list[str] = field(default_factory=list)
    clients: list[httpx.Client] = field(default_factory=list)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("oauth")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    secret_file = tmp / "github-secret"
    secret_file.write_text(GH_SECRET + "\n")
    secret_file.chmod(0o600)
    db = tmp / "registry.sqlite3"
    prepare(f"sqlite:///{db}", seed=False)
    with (
        oauth_provider("github", "gh-client", GH_SECRET, [f"{base}/auth/github/callback"]) as gh,
        oauth_provider("oidc", "hf-client", HF_SECRET, [f"{base}/auth/huggingface/callback"]) as hf,
    ):
        args = [
            "--github-client-id", "gh-client", "--github-secret-file", str(secret_file),
            "--github-authorize-url", gh.url("authorize"), "--github-token-url", gh.url("token"),
            "--github-userinfo-url", gh.url("user"),
            "--huggingface-client-id", "hf-client", "--huggingface-issuer", hf.base_url,
        ]  # fmt: skip
        env = {"LAIR_REGISTRY_HUGGINGFACE_CLIENT_SECRET": HF_SECRET}
        with serve_process(f"sqlite:///{db}", port=port, log=tmp / "serve.log", args=args, env=env):
            s = Site(base, gh, hf, db, tmp / "serve.log")
            yield s
            for c in s.clients:
                c.close()


_ADDRESSES = iter(range(2, 250))


def client(site: Site) -> httpx.Client:
    """A cookie jar that follows redirects, from a loopback address of its own; keeps every page seen."""
    transport = httpx.HTTPTransport(local_address=f"127.0.0.{next(_ADDRESSES)}")

    def keep(resp: httpx.Response) -> None:
        resp.read()
        site.pages.append(resp.text)

    c = httpx.Client(transport=transport, follow_redirects=True, timeout=20, event_hooks={"response": [keep]})
    site.clients.append(c)
    return c


def me(page: str) -> str | None:
    marker = '<span id="me">'
    if 'id="form-error"' in page:
        return "error: " + form_error(page)
    return page.split(marker, 1)[1].split("<", 1)[0] if marker in page else None


def form_error(page: str) -> str:
    return html.unescape(page.split('id="form-error">', 1)[1].split("</p>", 1)[0])


def users(site: Site) -> list[tuple[str, str, str]]:
    with sqlite3.connect(site.db) as conn:
        return conn.execute(
            "SELECT u.name, i.provider, i.subject FROM external_identities i"
            " JOIN users u ON u.id = i.user_id ORDER BY i.id"
        ).fetchall()


def test_sign_in_page_offers_both_providers(site: Site) -> None:
    page = client(site).get(site.base + "/signin").text
    assert 'id="oauth-github" href="/auth/github/login">Sign in with GitHub' in page
    assert 'id="oauth-huggingface" href="/auth/huggingface/login">Sign in with Hugging Face' in page
    assert client(site).get(site.base + "/auth/gitlab/login").status_code == 404


def test_github_sign_in_creates_the_account_then_signs_it_in_again(site: Site) -> None:
    site.gh.add_user(583231, "Octo.Cat", "The Octocat")
    site.gh.login = "Octo.Cat"
    first = client(site)
    resp = first.get(site.base + "/auth/github/login")
    assert resp.url == site.base + "/" and me(resp.text) == "octo-cat"
    assert [r.status_code for r in resp.history] == [302, 302, 303]  # to GitHub, back with a code, home
    # what lair sent, as the provider saw it: state and an S256 challenge, then the secret and verifier
    auth = next(p for m, path, p in site.gh.requests if path == "/login/oauth/authorize")
    token = next(p for m, path, p in site.gh.requests if path == "/login/oauth/access_token")
    assert auth["code_challenge_method"] == "S256" and auth["state"] and auth["scope"] == "read:user"
    assert token["client_secret"] == GH_SECRET and token["code_verifier"]
    assert users(site) == [("octo-cat", "github", "583231")]

    old = first.cookies["lair_session"]
    again = first.get(site.base + "/auth/github/login")  # signing in again rotates the session
    assert me(again.text) == "octo-cat" and first.cookies["lair_session"] != old
    stale = client(site)
    stale.cookies.set("lair_session", old, domain="127.0.0.1")
    assert me(stale.get(site.base + "/").text) is None
    other = client(site).get(site.base + "/auth/github/login")  # another browser, the same account
    assert me(other.text) == "octo-cat"
    assert users(site) == [("octo-cat", "github", "583231")]


def test_a_taken_name_gets_a_suffix_and_a_signed_in_user_is_linked(site: Site) -> None:
    b = client(site)
    assert b.post(
        site.base + "/api/v1/users", json={"name": "alice", "password": "alice-password"}
    ).is_success
    site.gh.add_user(77, "alice")
    site.gh.login = "alice"
    stranger = client(site).get(site.base + "/auth/github/login")
    assert me(stranger.text) == "alice-2"  # GitHub's alice is not our alice
    site.hf.add_user(9001, "alice-hf")
    site.hf.login = "alice-hf"
    assert me(b.get(site.base + "/auth/huggingface/login").text) == "alice"  # linked to the signed-in one
    assert ("alice-2", "github", "77") in users(site) and ("alice", "huggingface", "9001") in users(site)


def test_hugging_face_openid_connect_sign_in(site: Site) -> None:
    site.hf.add_user(4242, "Julien_C")
    site.hf.login = "Julien_C"
    b = client(site)
    resp = b.get(site.base + "/auth/huggingface/login")
    assert me(resp.text) == "julien-c"
    auth = [p for m, path, p in site.hf.requests if path == "/oauth/authorize"][-1]
    assert auth["scope"] == "openid profile" and auth["nonce"] and auth["code_challenge_method"] == "S256"
    paths = [path for _, path, _ in site.hf.requests]
    assert "/.well-known/openid-configuration" in paths and "/oauth/jwks" in paths
    assert ("julien-c", "huggingface", "4242") in users(site)
    assert me(client(site).get(site.base + "/auth/huggingface/login").text) == "julien-c"


def _code_for(b: httpx.Client, site: Site, provider: str) -> str:
    """Start a sign-in and take the provider's redirect back, without following it."""
    to_provider = b.get(site.base + f"/auth/{provider}/login", follow_redirects=False)
    assert to_provider.status_code == 302
    back = b.get(to_provider.headers["location"], follow_redirects=False)
    assert back.status_code == 302
    return str(back.headers["location"])


def _refused(resp: httpx.Response, status: int, text: str) -> None:
    assert resp.status_code == status, resp.text[:500]
    assert resp.url.path.startswith("/auth/") and text in form_error(resp.text), form_error(resp.text)
    assert 'id="signin"' in resp.text  # the sign-in form, to try again
    assert "lair_session" not in resp.headers.get("set-cookie", "")


def test_tampered_state_and_a_callback_from_another_browser_are_refused(site: Site) -> None:
    site.gh.login = "Octo.Cat"
    b = client(site)
    callback = _code_for(b, site, "github")
    state = parse_qs(urlsplit(callback).query)["state"][0]
    _refused(b.get(callback.replace(state, state[:-2] + "xx")), 400, "state mismatch")
    _refused(b.get(callback), 400, "state mismatch")  # the failed attempt ended that flow
    # login CSRF: a code and state from the attacker's browser, opened in the victim's
    _refused(client(site).get(_code_for(client(site), site, "github")), 400, "state mismatch")
    assert me(b.get(site.base + "/").text) is None


def test_denied_consent_is_shown_on_the_sign_in_page(site: Site) -> None:
    site.hf.consent = "deny"
    try:
        _refused(client(site).get(site.base + "/auth/huggingface/login"), 403, "access was not granted")
    finally:
        site.hf.consent = "allow"


def test_a_bad_code_and_a_provider_outage_end_on_the_sign_in_page(site: Site) -> None:
    b = client(site)
    callback = _code_for(b, site, "github")
    code = parse_qs(urlsplit(callback).query)["code"][0]
    _refused(b.get(callback.replace(code, "not-" + code)), 502, "invalid_grant")  # GitHub's 200 + error
    site.gh.token_status = 503
    try:
        _refused(b.get(_code_for(b, site, "github")), 502, "is unavailable (HTTPStatusError)")
    finally:
        site.gh.token_status = None
    callback = _code_for(b, site, "huggingface")
    site.hf.stop()
    try:
        _refused(b.get(callback), 502, "is unavailable (ConnectError)")
    finally:
        site.hf.start()
    assert me(b.get(site.base + "/").text) is None


def test_an_id_token_without_a_user_name_is_completed_from_the_user_endpoint(site: Site) -> None:
    site.hf.add_user(5151, "lean-token")
    site.hf.login, site.hf.lean_id_token = "lean-token", True
    try:
        assert me(client(site).get(site.base + "/auth/huggingface/login").text) == "lean-token"
        assert site.hf.requests[-1][1] == "/oauth/userinfo"
        site.hf.forge = "userinfo"  # and it must name the token's user
        resp = client(site).get(site.base + "/auth/huggingface/login")
        _refused(resp, 502, "the user endpoint names another user than the token")
    finally:
        site.hf.lean_id_token, site.hf.forge = False, None


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        ("key", "bad_signature"),
        ("audience", "Missing claim: 'azp'"),  # an audience without this client needs azp naming it
        ("issuer", "Invalid claim: 'iss'"),
        ("nonce", "Invalid claim: 'nonce'"),
    ],
)
def test_a_forged_id_token_is_refused(site: Site, forge: str, why: str) -> None:
    site.hf.add_user(4343, "forged")
    site.hf.login, site.hf.forge = "forged", forge
    try:
        resp = client(site).get(site.base + "/auth/huggingface/login")
    finally:
        site.hf.forge = None
    _refused(resp, 502, "the identity token was refused")
    assert why in form_error(resp.text)
    assert "forged" not in [name for name, _, _ in users(site)]


def test_in_chromium_github_with_consent_a_denial_and_a_password(
    browser: Any, site: Site, artifacts: Path
) -> None:
    """The sign-in page's buttons in a real browser, the provider's own consent page, and a password
    sign-in through the page's form."""
    site.gh.add_user(31337, "chromium-user")
    site.gh.login, site.gh.consent, site.hf.consent = "chromium-user", "page", "page"
    assert (
        client(site).post(site.base + "/api/v1/users", json={"name": "dora", "password": PASSWORD}).is_success
    )
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(site.base + "/signin")
        page.screenshot(path=str(artifacts / "oauth-signin.png"), full_page=True)
        page.click("#oauth-github")
        assert page.locator("#provider-user").inner_text() == "chromium-user"  # GitHub's consent page
        page.click("#allow")
        page.wait_for_url(site.base + "/")
        assert page.locator("#me").inner_text() == "chromium-user"
        page.screenshot(path=str(artifacts / "oauth-signed-in.png"), full_page=True)
        page.click("#signout")
        page.wait_for_url(site.base + "/")
        assert page.locator("#me").count() == 0

        page.goto(site.base + "/signin")
        page.click("#oauth-huggingface")
        page.click("#deny")
        assert "access was not granted (access_denied" in page.locator("#form-error").inner_text()
        assert page.locator("#me").count() == 0
        page.screenshot(path=str(artifacts / "oauth-denied.png"), full_page=True)

        page.fill("#signin input[name=name]", "dora")
        page.fill("#signin input[name=password]", "not-" + PASSWORD)
        page.click("#signin button[type=submit]")
        assert page.locator("#form-error").inner_text() == "wrong user name or password"
        page.fill("#signin input[name=name]", "dora")
        page.fill("#signin input[name=password]", PASSWORD)
        page.click("#signin button[type=submit]")
        page.wait_for_url(site.base + "/")
        assert page.locator("#me").inner_text() == "dora"
        page.screenshot(path=str(artifacts / "password-signed-in.png"), full_page=True)
    finally:
        site.gh.consent = site.hf.consent = "allow"
        ctx.close()


def test_sign_in_callbacks_are_rate_limited(site: Site) -> None:
    b = client(site)
    for _ in range(10):
        assert b.get(site.base + "/auth/github/callback?code=x&state=y").status_code == 400
    _refused(b.get(site.base + "/auth/github/callback?code=x&state=y"), 429, "too many requests")


def test_the_client_secrets_are_in_no_page_log_or_database(site: Site) -> None:
    assert len(site.pages) > 20 and any(me(p) for p in site.pages)  # the flows above ran
    for secret in (GH_SECRET, HF_SECRET):
        assert not [p for p in site.pages if secret in p]
        assert secret.encode() not in site.log.read_bytes()
        for f in site.db.parent.glob("registry.sqlite3*"):  # the database, its WAL and shared memory
            assert secret.encode() not in f.read_bytes(), f
    assert "sign-in with github, huggingface" in site.log.read_text()


def test_a_provider_that_is_down_at_sign_in_start_is_an_error_on_the_page(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        "LAIR_REGISTRY_HUGGINGFACE_CLIENT_ID": "hf",
        "LAIR_REGISTRY_HUGGINGFACE_CLIENT_SECRET": "hf-secret",
        "LAIR_REGISTRY_HUGGINGFACE_ISSUER": dead,
    }
    url, _ = prepare(str(tmp_path / "r.sqlite3"), seed=False)
    with TestClient(create_app(url, oauth=load_providers(env), allowed_hosts=["testserver"])) as c:
        resp = c.get("/auth/huggingface/login", follow_redirects=False)
    assert resp.status_code == 502
    assert "Hugging Face sign-in failed: Hugging Face is unavailable (ConnectError)" in resp.text
    assert 'id="oauth-huggingface"' in resp.text and "set-cookie" not in resp.headers


def test_a_sign_in_started_on_one_process_finishes_on_another(tmp_path: Path) -> None:
    """Two apps over one database stand for two workers (or machines): the state cookie one signs,
    the other verifies, since both derive its key from the same client secret."""
    url, _ = prepare(str(tmp_path / "r.sqlite3"), seed=False)
    with oauth_provider("github", "gh", GH_SECRET, ["http://testserver/auth/github/callback"]) as gh:
        gh.add_user(5, "two-workers")
        env = {
            "LAIR_REGISTRY_GITHUB_CLIENT_ID": "gh",
            "LAIR_REGISTRY_GITHUB_CLIENT_SECRET": GH_SECRET,
            "LAIR_REGISTRY_GITHUB_AUTHORIZE_URL": gh.url("authorize"),
            "LAIR_REGISTRY_GITHUB_TOKEN_URL": gh.url("token"),
            "LAIR_REGISTRY_GITHUB_USERINFO_URL": gh.url("user"),
        }
        with (
            TestClient(create_app(url, oauth=load_providers(env), allowed_hosts=["testserver"])) as one,
            TestClient(create_app(url, oauth=load_providers(env), allowed_hosts=["testserver"])) as two,
            httpx.Client() as outside,
        ):
            to_provider = one.get("/auth/github/login", follow_redirects=False)
            callback = outside.get(to_provider.headers["location"]).headers["location"]
            two.cookies = one.cookies
            done = two.get(callback.removeprefix("http://testserver"))
    assert me(done.text) == "two-workers"
