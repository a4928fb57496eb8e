"""Who a request acts as, CSRF, rate limits and the security headers every response carries.

- ``Authorization: Bearer <token>`` (the CLI, agents) or the ``lair_session`` cookie (HttpOnly,
  SameSite=Lax; Secure over https or when the public URL is https, i.e. behind a TLS proxy).
- CSRF, two layers. (1) :func:`cross_site`, applied by the ASGI front to every POST/PUT/PATCH/DELETE
  before any route runs (so no route can forget it): an ``Origin`` (or, without one, a ``Referer``)
  naming another origin, or ``Origin: null``, is refused with 403. Browsers send ``Origin`` on every
  cross-origin POST, so this also stops login CSRF on the sign-in and sign-up forms, which have no
  session yet. (2) :func:`check_csrf`: a cookie-authenticated write must carry the session's CSRF
  token (form field ``csrf`` or header ``X-CSRF-Token``).
- Requests with ``Authorization: Bearer`` are exempt from both: a browser attaches that header only
  when a script sets it, and a cross-origin script may do so only after a CORS preflight, which this
  server never grants (it sends no ``Access-Control-Allow-*`` headers). A forged cross-site request
  therefore never carries a token, and a token holder is not a browser riding on ambient cookies.
- Rate limits use the ``limits`` library, one limiter per app (:class:`RateLimits`, built by
  ``create_app`` from its settings): in memory, or Redis when the ``redis`` setting is given, so several
  processes share one count. The in-memory store is not thread-safe and form posts count on worker
  threads: its hits take a lock. A key is at most :data:`MAX_KEY_CHARS` (a longer one is counted by
  its sha256), and routes check a user name's shape before it becomes a key.
- The client address a limit counts is the socket's peer, or, when that peer is one of the
  ``forwarded_allow_ips`` proxies, the address it forwarded (``X-Forwarded-For``, read by granian's
  proxy-headers wrapper in ``create_app``): behind nginx every client is not one address, and a
  client's own ``X-Forwarded-For`` counts for nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection
from starlette.requests import Request

from lair.errors import Forbidden, RateLimited, Unauthorized
from lair.registry.service.accounts import session_actor, token_actor
from lair.registry.service.actor import Actor
from lair.registry.service.outage import unavailable

__all__ = ["COOKIE", "SECURITY_HEADERS", "UNSAFE_METHODS", "actor_of", "check_csrf", "cross_site", "limit"]

COOKIE = "lair_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'none'; object-src 'none'; style-src 'self'; img-src 'self' data:; "
     b"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
]  # fmt: skip


def actor_of(request: Request, conn: Connection) -> Actor | None:
    auth = request.headers.get("authorization", "")
    if auth:
        scheme, _, token = auth.partition(" ")
        actor = token_actor(conn, token.strip()) if scheme.lower() == "bearer" else None
        if actor is None:
            raise Unauthorized("invalid or revoked token", hint="lair registry user add NAME")
        return actor
    return session_actor(conn, request.cookies.get(COOKIE))


def _bearer(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"authorization", b"")[:7].lower() == b"bearer "


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def cross_site(scope: dict[str, Any], public_url: str = "") -> bool:
    """Whether a state-changing request (ASGI ``scope``) comes from a page of another origin than the
    request's own (scheme and ``Host``) or the site's public URL (behind a TLS-terminating proxy)."""
    if scope["method"] not in UNSAFE_METHODS:
        return False
    headers: dict[bytes, bytes] = {bytes(k): bytes(v) for k, v in scope["headers"]}
    if _bearer(headers):
        return False  # not a browser's ambient credentials: see the module docstring
    own = {f"{scope.get('scheme', 'http')}://{headers.get(b'host', b'').decode('latin-1')}"}
    own |= {_origin_of(public_url)} if public_url else set()
    origin = headers.get(b"origin")
    if origin is not None:
        return origin.decode("latin-1").rstrip("/") not in own  # "null" (sandboxed, opaque) too
    referer = headers.get(b"referer")
    return referer is not None and _origin_of(referer.decode("latin-1")) not in own


def check_csrf(request: Request, actor: Actor | None, form_token: str | None = None) -> None:
    """A cookie session must show its CSRF token (the origin was checked by :func:`cross_site`
    before the route ran); bearer tokens need not (see the module docstring)."""
    if actor is None or request.headers.get("authorization"):
        return
    given = form_token or request.headers.get("x-csrf-token") or ""
    if not actor.csrf or not hmac.compare_digest(given, actor.csrf):
        raise Forbidden("missing or wrong CSRF token", code="csrf", hint="reload the page and submit again")


MAX_KEY_CHARS = 128
"""A rate limit's key part longer than this is counted by its sha256 (bounded memory per key)."""


def _bounded(key: str) -> str:
    return key if len(key) <= MAX_KEY_CHARS else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class RateLimits:
    """One app's moving-window limiter (memory, or Redis at ``redis_url``)."""

    def __init__(self, redis_url: str = "") -> None:
        from limits import storage, strategies

        self.storage = storage.storage_from_string(redis_url) if redis_url else storage.MemoryStorage()
        self.limiter = strategies.MovingWindowRateLimiter(self.storage)
        # Redis counts atomically on the server; the memory store's window is a plain list
        self._lock: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if redis_url else threading.Lock()
        )
        _LIVE.add(self)

    def hit(self, rule: str, *keys: str) -> bool:
        """Count one hit; a store that is down is a 503 (:func:`~.outage.unavailable`), never a pass."""
        from limits import parse

        try:
            with self._lock:
                return bool(self.limiter.hit(parse(rule), "lair", *map(_bounded, keys)))
        except Exception as exc:
            if (outage := unavailable(exc)) is not None:
                raise outage from exc
            raise

    def reset(self) -> None:
        with self._lock:
            self.storage.reset()


_LIVE: weakref.WeakSet[RateLimits] = weakref.WeakSet()


def limit(request: Request, rule: str, *keys: str) -> None:
    """Raise 429 when ``rule`` (e.g. ``"10/minute"``) is exceeded for ``keys`` on this app."""
    if not request.app.state.limits.hit(rule, *keys):
        raise RateLimited(f"too many requests (limit {rule})", hint="wait a minute")


def write_limit(request: Request) -> str:
    """The write rate limit of this app's settings."""
    return str(request.app.state.settings.write_limit)


def reset_limits() -> None:
    """Forget every live app's counts (tests that make many writes through one app)."""
    for limits in list(_LIVE):
        limits.reset()


__all__ += ["MAX_KEY_CHARS", "RateLimits", "reset_limits", "write_limit"]
