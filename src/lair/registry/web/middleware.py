"""Bare-ASGI front of the app: serves cached responses (and 304s) without entering Starlette.

A route marks a response cacheable with the ``x-lair-cache`` header; the middleware strips it, adds
an ETag (a hash of the body, so every process agrees) and stores the response under the data version
read before the route ran.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from email.utils import parsedate_to_datetime
from typing import Any

from starlette.responses import Response

from lair.registry.service.outage import Unavailable, unavailable
from lair.registry.web.auth import SECURITY_HEADERS, cross_site
from lair.registry.web.cache import Entry, ResponseCache, Versions, etag_of
from lair.registry.web.hosts import HEALTH_PATH, refuse_host
from lair.registry.web.render import error_response

__all__ = ["CACHE_HEADER", "HEALTH_PATH", "CacheMiddleware", "data_version", "refuse_cross_site"]

CACHE_HEADER = b"x-lair-cache"
Scope = dict[str, Any]


def unavailable_response(path: str, u: Unavailable) -> Response:
    """The 503 envelope (an HTML page off the API) with ``Retry-After``."""
    extra = {"hint": u.hint, "retry_after": u.retry_after}
    resp = error_response(path, 503, u.code, u.message, extra)
    resp.headers["retry-after"] = str(u.retry_after)
    return resp


async def data_version(versions: Versions, scope: Scope, receive: Any, send: Any) -> int | None:
    """The current data version; None once a 503 was sent because the database is unavailable."""
    try:
        return await versions.current()
    except Exception as exc:
        u = unavailable(exc)
        if u is None:
            raise
        await unavailable_response(scope["path"], u)(scope, receive, _SecureSend(send))
        return None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return bytes(v)
    return None


def _personal(scope: Scope) -> bool:
    """A signed-in request (token or session cookie): never served from, nor stored in, the cache."""
    return any(
        k == b"authorization" or (k == b"cookie" and b"lair_session=" in v) for k, v in scope["headers"]
    )


def _secured(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    have = {k for k, _ in headers}
    return headers + [(k, v) for k, v in SECURITY_HEADERS if k not in have]


def _not_modified(scope: Scope, e: Entry) -> bool:
    inm = _header(scope, b"if-none-match")
    if inm is not None:
        return e.etag in [t.strip().removeprefix(b"W/") for t in inm.split(b",")] or inm.strip() == b"*"
    ims = _header(scope, b"if-modified-since")
    if ims is not None and e.last_modified is not None:
        try:
            return parsedate_to_datetime(e.last_modified.decode()) <= parsedate_to_datetime(ims.decode())
        except (TypeError, ValueError):
            return False
    return False


class CacheMiddleware:
    def __init__(self, app: Any, versions: Versions, cache: ResponseCache) -> None:
        self.app, self.versions, self.cache = app, versions, cache

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and await refuse_host(scope, receive, _SecureSend(send), self.app):
            return
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:  # health reports the database itself
            await self.app(scope, receive, _SecureSend(send) if scope["type"] == "http" else send)
            return
        if scope["method"] not in ("GET", "HEAD") or _personal(scope):
            if await refuse_cross_site(scope, receive, send, self.app):
                return
            if (current := await data_version(self.versions, scope, receive, send)) is None:
                return
            scope.setdefault("state", {})["data_version"] = current
            await self.app(scope, receive, _SecureSend(send))
            return
        version = await data_version(self.versions, scope, receive, send)
        if version is None:
            return
        key = b"%s\x00%s?%s" % (_header(scope, b"host") or b"", scope["raw_path"], scope["query_string"])
        hit = self.cache.get(key)
        if hit is not None and hit.version == version:
            await self._send(scope, send, hit)
            return
        scope.setdefault("state", {})["data_version"] = version
        await self.app(scope, receive, _Capture(self, scope, send, key, version))

    async def _send(self, scope: Scope, send: Any, e: Entry) -> None:
        if _not_modified(scope, e):
            keep = [
                (k, v) for k, v in e.headers if k in (b"etag", b"last-modified", b"cache-control", b"vary")
            ]
            await send({"type": "http.response.start", "status": 304, "headers": keep})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": e.status, "headers": e.headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else e.body})


class _Capture:
    """The send of one cache miss: passes through, or buffers a cacheable response and stores it."""

    def __init__(self, mw: CacheMiddleware, scope: Scope, send: Any, key: bytes, version: int) -> None:
        self.mw, self.scope, self.send, self.key, self.version = mw, scope, send, key, version
        self.start: dict[str, Any] | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if any(k == CACHE_HEADER for k, _ in headers) and message["status"] == 200:
                self.start = message | {"headers": [(k, v) for k, v in headers if k != CACHE_HEADER]}
                return
            await self.send(
                message | {"headers": _secured([(k, v) for k, v in headers if k != CACHE_HEADER])}
            )
            return
        if self.start is None or message["type"] != "http.response.body":
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            await self._finish()

    async def _finish(self) -> None:
        assert self.start is not None
        body = b"".join(self.chunks)
        etag = etag_of(body)
        headers = [(k, v) for k, v in self.start["headers"] if k != b"content-length"]
        headers += [(b"content-length", str(len(body)).encode()), (b"etag", etag)]
        headers = _secured(headers)
        lm = next((v for k, v in headers if k == b"last-modified"), None)
        entry = Entry(self.version, self.start["status"], headers, body, etag, lm)
        if self.scope["method"] == "GET":
            self.mw.cache.put(self.key, entry)
        await self.mw._send(self.scope, self.send, entry)


async def refuse_cross_site(scope: Scope, receive: Any, send: Any, app: Any) -> bool:
    """Answer a cross-site state-changing request to ``app`` with 403 before any route runs; True if
    it was one."""
    if not cross_site(scope, app.state.public_url):
        return False
    hint = {"hint": "submit the form from this site's own page"}
    resp = error_response(scope["path"], 403, "csrf", "cross-site request refused", hint)
    await resp(scope, receive, _SecureSend(send))
    return True


class _SecureSend:
    def __init__(self, send: Any) -> None:
        self.send = send

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": _secured(list(message.get("headers", [])))}
        await self.send(message)
