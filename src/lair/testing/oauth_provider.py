"""A real OAuth 2 authorization server on 127.0.0.1 for sign-in tests: authlib's own server-side grants
(authorization code, PKCE, OpenID Connect's ``id_token``) behind a small threaded HTTP server.

Two shapes:

- ``github``: plain OAuth 2 at GitHub's paths (``/login/oauth/authorize``, ``/login/oauth/access_token``,
  ``/user``). As GitHub does, the token endpoint answers form-encoded unless asked for JSON, and
  answers a refused code with 200 and an ``error`` field; the client authenticates in the body.
- ``oidc``: OpenID Connect as Hugging Face serves it: ``/.well-known/openid-configuration``,
  ``/oauth/authorize``, ``/oauth/token`` (HTTP Basic or body), ``/oauth/userinfo``, ``/oauth/jwks``;
  ``id_token`` signed RS256 with a key made at start.

Both require PKCE (S256), check the client secret, the registered redirect URI and the state round
trip, and use a code once. ``consent`` picks what the authorize endpoint does: ``"allow"`` redirects back
with a code for the user ``login``, ``"deny"`` with ``error=access_denied``, ``"page"`` shows a form with
Authorize / Deny buttons (for browsers). ``token_status`` makes the token endpoint fail with that
status (a provider having an outage); ``forge`` (``"key"``, ``"audience"``, ``"issuer"``, ``"nonce"``)
issues ``id_token``s a client must refuse: signed by a key not in the JWKS, or with that claim wrong
(``"userinfo"``: the user endpoint names another ``sub``); ``lean_id_token`` leaves the profile claims
out of the ``id_token`` (only ``sub``); ``requests`` records (method, path, parameters) of every call.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit

from authlib.oauth2 import AuthorizationServer, OAuth2Error
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Request
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import AuthorizationCodeMixin, OpenIDCode, UserInfo
from joserfc.jwk import RSAKey

__all__ = ["OAuthProvider", "ProviderUser", "oauth_provider"]

CODE_SECONDS = 600
PATHS = {
    "github": {"authorize": "/login/oauth/authorize", "token": "/login/oauth/access_token", "user": "/user"},
    "oidc": {"authorize": "/oauth/authorize", "token": "/oauth/token", "user": "/oauth/userinfo"},
}


@dataclass(frozen=True)
class ProviderUser:
    id: int
    login: str
    name: str = ""


@dataclass
class _Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str
    redirect_uris: list[str]
    auth_methods: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return scope

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(client_secret.encode(), self.client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in self.auth_methods

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class _Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: ProviderUser
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time


class _Request(OAuth2Request):  # type: ignore[misc]
    def __init__(self, method: str, uri: str, headers: Any, data: dict[str, str]) -> None:
        super().__init__(method, uri, headers=headers)
        self.payload = BasicOAuth2Payload(data)
        self._data = data

    @property
    def args(self) -> dict[str, str]:
        return self._data

    @property
    def form(self) -> dict[str, str]:
        return self._data


class OAuthProvider:
    """The server: ``start()`` binds a free port (``base_url``); ``stop()`` closes it (refused)."""

    def __init__(self, kind: str, client_id: str, client_secret: str, redirect_uris: list[str]) -> None:
        assert kind in PATHS, kind
        self.kind, self.paths = kind, PATHS[kind]
        methods = (
            ("client_secret_post",) if kind == "github" else ("client_secret_basic", "client_secret_post")
        )
        self.client = _Client(client_id, client_secret, redirect_uris, methods)
        self.users: dict[str, ProviderUser] = {}
        self.login = ""
        self.consent = "allow"
        self.token_status: int | None = None
        self.forge: str | None = None
        self.lean_id_token = False
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.codes: dict[str, _Code] = {}
        self.tokens: dict[str, ProviderUser] = {}
        self.nonces: set[str] = set()
        self.key = RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8), "use": "sig"})
        self.lock = threading.Lock()
        self.port = 0
        self._http: ThreadingHTTPServer | None = None
        self.server = _server(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add_user(self, id: int, login: str, name: str = "") -> ProviderUser:
        self.users[login] = ProviderUser(id, login, name or login)
        self.login = self.login or login
        return self.users[login]

    def url(self, what: str) -> str:
        return self.base_url + self.paths[what]

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"provider": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def discovery(self) -> dict[str, Any]:
        b = self.base_url
        return {
            "issuer": b,
            "authorization_endpoint": self.url("authorize"),
            "token_endpoint": self.url("token"),
            "userinfo_endpoint": self.url("user"),
            "jwks_uri": b + "/oauth/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile"],
            "token_endpoint_auth_methods_supported": list(self.client.auth_methods),
            "code_challenge_methods_supported": ["S256"],
        }


def _server(p: OAuthProvider) -> AuthorizationServer:
    class CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
        TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = list(p.client.auth_methods)

        def save_authorization_code(self, code: str, request: Any) -> None:
            d = request.payload.data
            if d.get("nonce"):
                p.nonces.add(d["nonce"])
            p.codes[code] = _Code(
                code, p.client.client_id, d.get("redirect_uri"), request.scope or "", request.user,
                d.get("nonce"), d.get("code_challenge"), d.get("code_challenge_method"),
            )  # fmt: skip

        def query_authorization_code(self, code: str, client: Any) -> _Code | None:
            c = p.codes.get(code)
            if c is None or time.time() - c.auth_time > CODE_SECONDS:
                return None
            return c if c.client_id == client.get_client_id() else None

        def delete_authorization_code(self, code: _Code) -> None:
            p.codes.pop(code.code, None)

        def authenticate_user(self, code: _Code) -> ProviderUser:
            return code.user

    class IdToken(OpenIDCode):  # type: ignore[misc]
        def resolve_client_private_key(self, client: Any) -> RSAKey:
            return RSAKey.generate_key(2048) if p.forge == "key" else p.key

        def get_client_claims(self, client: Any) -> dict[str, Any]:
            aud = "another-client" if p.forge == "audience" else client.get_client_id()
            return {"iss": p.base_url + ("/other" if p.forge == "issuer" else ""), "aud": [aud]}

        def get_authorization_code_claims(self, code: _Code) -> dict[str, Any]:
            claims: dict[str, Any] = super().get_authorization_code_claims(code)
            return claims | ({"nonce": "another-nonce"} if p.forge == "nonce" else {})

        def get_encode_header(self, client: Any) -> dict[str, str]:
            return {"alg": "RS256", "kid": str(p.key.kid)}

        def exists_nonce(self, nonce: str, request: Any) -> bool:
            return nonce in p.nonces  # a nonce that a code was issued for already: a replay

        def generate_user_info(self, user: ProviderUser, scope: str) -> UserInfo:
            if p.lean_id_token:
                return UserInfo(sub=str(user.id))
            return UserInfo(sub=str(user.id), preferred_username=user.login, name=user.name)

    class Server(AuthorizationServer):  # type: ignore[misc]
        def query_client(self, client_id: str) -> _Client | None:
            return p.client if client_id == p.client.client_id else None

        def save_token(self, token: dict[str, Any], request: Any) -> None:
            p.tokens[token["access_token"]] = request.user

        def create_oauth2_request(self, request: Any) -> Any:
            return request

        def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, Any, Any]:
            return status, body, headers

        def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
            pass

    server = Server(scopes_supported=["read:user"] if p.kind == "github" else ["openid", "profile"])
    server.register_token_generator(
        "default", BearerTokenGenerator(lambda *a, **k: secrets.token_urlsafe(24))
    )
    ext: list[Any] = [CodeChallenge(required=True)] + (
        [IdToken(require_nonce=True)] if p.kind == "oidc" else []
    )
    server.register_grant(CodeGrant, ext)
    return server


class _Handler(BaseHTTPRequestHandler):
    provider: OAuthProvider

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _params(self) -> dict[str, str]:
        query = dict(parse_qsl(urlsplit(self.path).query))
        if self.command == "POST":
            n = int(self.headers.get("content-length") or 0)
            query |= dict(parse_qsl(self.rfile.read(n).decode()))
        return query

    def _send(self, status: int, body: str | bytes, ctype: str, headers: Any = ()) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-type", "content-length"):
                self.send_header(k, v)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, data: Any, headers: Any = ()) -> None:
        self._send(status, json.dumps(data), "application/json", headers)

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _route(self) -> None:
        p, path = self.provider, urlsplit(self.path).path
        params = self._params()
        with p.lock:
            p.requests.append((self.command, path, params))
            if path == p.paths["authorize"]:
                self._authorize(params)
            elif path == p.paths["token"]:
                self._token(params)
            elif path == p.paths["user"]:
                self._user()
            elif p.kind == "oidc" and path == "/.well-known/openid-configuration":
                self._json(200, p.discovery())
            elif p.kind == "oidc" and path == "/oauth/jwks":
                self._json(200, {"keys": [p.key.as_dict(private=False)]})
            else:
                self._json(404, {"message": "Not Found"})

    def _request(self, params: dict[str, str]) -> _Request:
        return _Request(self.command, self.provider.base_url + self.path, self.headers, params)

    def _authorize(self, params: dict[str, str]) -> None:
        p = self.provider
        req = self._request(params)
        try:
            grant = p.server.get_consent_grant(req)
        except OAuth2Error as exc:
            self._send(
                400,
                f"<h1>{html.escape(exc.error)}</h1><p>{html.escape(exc.description or '')}</p>",
                "text/html",
            )
            return
        decision = params.get("decision") or p.consent
        if decision == "page" and self.command == "GET":
            self._send(200, _consent_page(p, params), "text/html")
            return
        user = p.users[p.login] if decision == "allow" else None
        status, body, headers = p.server.create_authorization_response(req, grant_user=user, grant=grant)
        self._send(status, body if isinstance(body, str) else json.dumps(body), "text/html", headers)

    def _token(self, params: dict[str, str]) -> None:
        p = self.provider
        if p.token_status:
            self._send(p.token_status, "<h1>unavailable</h1>", "text/html")
            return
        status, body, headers = p.server.create_token_response(self._request(params))
        if p.kind == "github":
            status = 200  # GitHub answers a refused code with 200 and an error field
            if "json" not in (self.headers.get("accept") or ""):
                self._send(status, urlencode(body), "application/x-www-form-urlencoded", headers)
                return
        self._json(status, body, headers)

    def _user(self) -> None:
        p = self.provider
        scheme, _, token = (self.headers.get("authorization") or "").partition(" ")
        user = p.tokens.get(token) if scheme.lower() in ("bearer", "token") else None
        if user is None:
            self._json(401, {"message": "Bad credentials"})
        elif p.kind == "github":
            self._json(200, {"id": user.id, "login": user.login, "name": user.name, "type": "User"})
        else:
            sub = str(user.id + 1 if p.forge == "userinfo" else user.id)
            self._json(200, {"sub": sub, "preferred_username": user.login, "name": user.name})


def _consent_page(p: OAuthProvider, params: dict[str, str]) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in params.items()
    )
    return (
        f"<!doctype html><title>Authorize</title><h1>Authorize {html.escape(p.client.client_id)}?</h1>"
        f"<p>Signed in as <b id='provider-user'>{html.escape(p.login)}</b></p>"
        f'<form method="post" action="{p.paths["authorize"]}">{hidden}'
        '<button id="allow" name="decision" value="allow">Authorize</button> '
        '<button id="deny" name="decision" value="deny">Deny</button></form>'
    )


@contextmanager
def oauth_provider(
    kind: str, client_id: str, client_secret: str, redirect_uris: list[str]
) -> Iterator[OAuthProvider]:
    """An :class:`OAuthProvider`, started; stopped on exit."""
    p = OAuthProvider(kind, client_id, client_secret, redirect_uris)
    p.start()
    try:
        yield p
    finally:
        p.stop()
