"""Sign in with GitHub or Hugging Face: the OAuth 2 authorization-code flow through authlib's Starlette
client, mounted at ``/auth`` when a provider is configured (:mod:`lair.registry.oauth`).

- ``GET /auth/<provider>/login`` redirects to the provider with a random ``state``, a PKCE (S256)
  challenge and, for OpenID Connect, a ``nonce``; they wait in a signed, HttpOnly, SameSite=Lax cookie
  scoped to ``/auth`` that lives ten minutes (Starlette's session middleware), so the callback must
  come back to the browser that started the flow.
- ``GET /auth/<provider>/callback`` checks the state, exchanges the code (with the client secret and
  the PKCE verifier), reads who signed in (GitHub's ``/user``; the OIDC ``id_token``, verified against
  the provider's JWKS, its issuer, audience, expiry and nonce), and signs that account in with a new
  session, as a password sign-in does. Every failure ends on the sign-in page with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread
import httpx2  # authlib's HTTP client for the calls to the provider
from authlib.integrations.starlette_client import OAuth, OAuthError
from joserfc.errors import JoseError
from sqlalchemy.exc import IntegrityError
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router

from lair.errors import BadGateway, Conflict, NotFound, RegistryError, Unavailable
from lair.registry.oauth import Provider, state_key
from lair.registry.service.accounts import rotate_session, session_actor
from lair.registry.service.identities import Identity, sign_in_external
from lair.registry.web.auth import COOKIE, limit
from lair.registry.web.hosts import base_url
from lair.registry.web.pages import account_page
from lair.registry.web.writes import SIGNIN_LIMITS, _address, _session_cookie, committed

__all__ = ["STATE_COOKIE", "oauth_app"]

STATE_COOKIE = "lair_oauth"
STATE_SECONDS = 600


def oauth_app(providers: Mapping[str, Provider], *, https: bool) -> Any:
    """The ``/auth`` sub-application for ``providers``."""
    oauth = OAuth()
    for p in providers.values():
        oauth.register(**p.register_kwargs())
    router = Router([Route("/{provider}/login", login), Route("/{provider}/callback", callback)])
    app = SessionMiddleware(
        router,
        secret_key=state_key(providers),
        session_cookie=STATE_COOKIE,
        max_age=STATE_SECONDS,
        path="/auth",
        same_site="lax",
        https_only=https,
    )
    return _WithClients(app, oauth, dict(providers))


class _WithClients:
    """Puts the authlib registry and the providers into the request scope of ``/auth``."""

    def __init__(self, app: Any, oauth: OAuth, providers: dict[str, Provider]) -> None:
        self.app, self.oauth, self.providers = app, oauth, providers

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["lair_oauth"] = (self.oauth, self.providers)
        await self.app(scope, receive, send)


def _provider(request: Request) -> tuple[Any, Provider]:
    oauth, providers = request.scope["lair_oauth"]
    name = request.path_params["provider"]
    if name not in providers:
        raise NotFound(f"no sign-in provider {name[:40]!r} is configured here")
    return oauth.create_client(name), providers[name]


def _callback_url(request: Request, name: str) -> str:
    base = base_url(request)  # the public URL, or a checked host name: never an unchecked Host
    if not base:
        raise Unavailable(
            "sign-in with a provider needs this registry's own address",
            code="misconfigured",
            retry_after=None,
            hint="start it with --public-url URL or --allowed-host NAME",
        )
    return f"{base}/auth/{name}/callback"


def _failed(request: Request, p: Provider, message: str, status: int) -> Response:
    request.session.clear()
    return account_page(request, "signin", f"{p.title} sign-in failed: {message}", status)


async def login(request: Request) -> Response:
    client, p = _provider(request)
    try:
        request.session.clear()  # one flow at a time per browser
        resp: Response = await client.authorize_redirect(request, _callback_url(request, p.name))
        return resp
    except (httpx2.HTTPError, ValueError, RuntimeError) as exc:  # unreachable, or no usable discovery
        return _failed(request, p, f"{p.title} is unavailable ({type(exc).__name__})", 502)


async def callback(request: Request) -> Response:
    client, p = _provider(request)
    try:
        limit(request, SIGNIN_LIMITS[0], "signin", _address(request), p.name)
        limit(request, SIGNIN_LIMITS[1], "signin", _address(request))
        who = await _identity(client, p, request)
        sid = await anyio.to_thread.run_sync(_sign_in, request, who)  # its statements off the loop
    except RegistryError as exc:
        return _failed(request, p, exc.message, exc.status)
    except OAuthError as exc:
        return _failed(request, p, *_oauth_message(exc))
    except JoseError as exc:
        why = exc.error + (f": {exc.description[:200]}" if exc.description else "")
        return _failed(request, p, f"the identity token was refused ({why})", 502)
    except (httpx2.HTTPError, ValueError, RuntimeError) as exc:
        return _failed(request, p, f"{p.title} is unavailable ({type(exc).__name__})", 502)
    resp = RedirectResponse("/", status_code=303)
    _session_cookie(resp, request, sid)
    return resp


def _oauth_message(exc: OAuthError) -> tuple[str, int]:
    if exc.error == "mismatching_state":
        return "this sign-in did not start in this browser or has expired (state mismatch); start again", 400
    detail = f"{exc.error}" + (f": {exc.description[:200]}" if exc.description else "")
    return (f"access was not granted ({detail})", 403) if exc.error == "access_denied" else (detail, 502)


async def _identity(client: Any, p: Provider, request: Request) -> Identity:
    token = await client.authorize_access_token(request)
    if p.oidc:
        claims = dict(token.get("userinfo") or {})
        if not claims:
            raise BadGateway("no identity token came with the access token")
        if not claims.get("preferred_username"):
            info = dict(await client.userinfo(token=token))
            if str(info.get("sub")) != str(claims.get("sub")):
                raise BadGateway("the user endpoint names another user than the token")
            claims |= info
        return Identity(p.name, str(claims["sub"]), str(claims.get("preferred_username") or ""))
    resp = await client.get(p.userinfo_url, token=token)
    resp.raise_for_status()
    user = resp.json()
    if not isinstance(user, dict) or not isinstance(user.get("id"), int | str):
        raise BadGateway("the user endpoint sent no user id")
    return Identity(p.name, str(user["id"]), str(user.get("login") or ""))


def _sign_in(request: Request, who: Identity) -> str:
    old = request.cookies.get(COOKIE)
    try:
        with committed(request.app.state) as conn:
            actor = sign_in_external(conn, who, session_actor(conn, old))
            sid, _ = rotate_session(conn, actor, old)
    except IntegrityError:
        raise Conflict("signed in twice at once; try again") from None
    return sid
