"""Who a request acts as, CSRF, rate limits and the security headers every response carries.

- ``Authorization: Bearer <token>`` (the CLI, agents) or the ``lair_session`` cookie (HttpOnly,
  SameSite=Lax, Secure behind https); a cookie-authenticated write must carry the session's CSRF token
  (form field ``csrf`` or header ``X-CSRF-Token``), and a cross-site ``Origin`` is refused.
- Rate limits use the ``limits`` library: in memory, or Redis when ``LAIR_REGISTRY_REDIS`` is set.
"""

from __future__ import annotations

import hmac
import os
from functools import cache
from typing import Any

from sqlalchemy import Connection
from starlette.requests import Request

from lair.errors import RegistryError
from lair.registry.service.accounts import Actor, session_actor, token_actor

__all__ = ["COOKIE", "SECURITY_HEADERS", "actor_of", "check_csrf", "limit"]

COOKIE = "lair_session"
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
            raise RegistryError(
                401, "unauthorized", "invalid or revoked token", hint="lair registry user add NAME"
            )
        return actor
    return session_actor(conn, request.cookies.get(COOKIE))


def check_csrf(request: Request, actor: Actor | None, form_token: str | None = None) -> None:
    """Cookie sessions must prove the request came from our own page; bearer tokens need not."""
    if actor is None or request.headers.get("authorization"):
        return
    origin = request.headers.get("origin")
    if origin and origin.rstrip("/") != f"{request.url.scheme}://{request.url.netloc}":
        raise RegistryError(403, "csrf", "cross-site request refused")
    given = form_token or request.headers.get("x-csrf-token") or ""
    if not actor.csrf or not hmac.compare_digest(given, actor.csrf):
        raise RegistryError(
            403, "csrf", "missing or wrong CSRF token", hint="reload the page and submit again"
        )


@cache
def _limiter() -> Any:
    from limits import storage, strategies

    url = os.environ.get("LAIR_REGISTRY_REDIS")
    store = storage.storage_from_string(url) if url else storage.MemoryStorage()
    return strategies.MovingWindowRateLimiter(store)


def limit(rule: str, *keys: str) -> None:
    """Raise 429 when ``rule`` (e.g. ``"10/minute"``) is exceeded for ``keys``."""
    from limits import parse

    item = parse(rule)
    if not _limiter().hit(item, "lair", *keys):
        raise RegistryError(429, "rate_limited", f"too many requests (limit {rule})", hint="wait a minute")


def reset_limits() -> None:
    """Forget the limiter (tests switch storages through the environment)."""
    _limiter.cache_clear()


__all__ += ["reset_limits"]
