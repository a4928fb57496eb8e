"""Bare-ASGI front of the app: serves stored documents and cached responses (and 304s) without
entering Starlette.

A recipe's JSON, page and revisions are read from the documents its writes stored (one indexed
SELECT, :func:`stored_key` names the row a path serves); a recipe without stored rows, any recipe
while the rows are stale (an older release wrote without rendering them, during an upgrade), and a
signed-in visitor's recipe page, go to the route. Otherwise a route marks a response cacheable with the
``x-lair-cache`` header; the middleware strips it, adds an ETag (a hash of the body, so every process
agrees) and keeps the response under the version read before the route ran: the list version for
lists and searches (:data:`LIST_PATHS`), the data version for the rest.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, MutableMapping
from email.utils import parsedate_to_datetime
from typing import Any

from starlette.responses import Response

from lair.registry.service.outage import Unavailable, unavailable
from lair.registry.service.stored import with_base
from lair.registry.web.auth import SECURITY_HEADERS, cross_site
from lair.registry.web.cache import VOTE_TTL_S, Document, Entry, ResponseCache, Ver, Versions, etag_of
from lair.registry.web.hosts import HEALTH_PATH, refuse_host
from lair.registry.web.lists import kept
from lair.registry.web.responses import error_response

__all__ = [
    "CACHE_HEADER",
    "HEALTH_PATH",
    "LIST_PATHS",
    "CacheMiddleware",
    "data_version",
    "refuse_cross_site",
    "stored_key",
]

CACHE_HEADER = b"x-lair-cache"
LIST_PATHS = frozenset({"/", "/recipes", "/recipes.json", "/api/v1/recipes"})
Scope = dict[str, Any]
StoredKey = tuple[str, str, int]
_TYPES = {"json": b"application/json", "page": b"text/html; charset=utf-8"}


def _revision(raw: str, kind: str) -> tuple[str, int] | None:
    stem, dot, ext = raw.rpartition(".")
    if dot:
        if ext != "json":
            return None
        raw, kind = stem, "json"
    if not raw.isdigit() or raw[0] == "0" or len(raw) > 9:
        return None  # the route answers odd numbers (01, 10**10) as it always has
    return kind, int(raw)


def _recipe(name: str, personal: bool) -> StoredKey | None:
    stem, dot, ext = name.rpartition(".")
    if not dot:
        return None if personal else (name, "page", 0)  # a signed-in page has the viewer's buttons
    return (stem, "json", 0) if ext == "json" and stem else None


def stored_key(path: str, personal: bool) -> StoredKey | None:
    """(slug, kind, revision) of the stored document that ``path`` serves, or None."""
    parts = path.split("/")
    if len(parts) == 3 and parts[1] == "recipes" and parts[2]:
        return _recipe(parts[2], personal)
    if len(parts) == 5 and parts[1:4] == ["api", "v1", "recipes"]:
        return (parts[4][:-5], "json", 0) if parts[4].endswith(".json") and len(parts[4]) > 5 else None
    if len(parts) == 5 and parts[1] == "recipes" and parts[3] == "revisions" and parts[2]:
        rev = _revision(parts[4], "page")
    elif len(parts) == 7 and parts[1:4] == ["api", "v1", "recipes"] and parts[5] == "revisions" and parts[4]:
        rev = _revision(parts[4 + 2], "json")
        parts = parts[2:]
    else:
        return None
    return None if rev is None else (parts[2], *rev)


def base_of(scope: Scope, state: Any) -> str:
    """The request's base URL, as :func:`~lair.registry.web.hosts.base_url` has it."""
    if state.public_url:
        return str(state.public_url)
    if state.allowed_hosts:
        return f"{scope['scheme']}://{(_header(scope, b'host') or b'').decode('latin-1')}"
    return ""


def _document_entry(doc: Document, kind: str, base: str) -> Entry:
    body, etag, modified = doc
    body = with_base(body, kind, base)
    if base:
        etag = hashlib.blake2b(f"{etag} {base}".encode(), digest_size=12).hexdigest()
    tag = b'"' + etag.encode() + b'"'
    lm = modified.encode()
    headers = [(b"content-type", _TYPES[kind]), (b"cache-control", b"no-cache"), (b"last-modified", lm),
               (b"content-length", str(len(body)).encode()), (b"etag", tag)]  # fmt: skip
    return Entry(None, 200, _secured(headers), body, tag, lm)


def _fresh(hit: Entry, current: Ver, listing: bool) -> bool:
    if not listing:
        return bool(hit.version == current.n)
    lists, votes, foreign = hit.version
    return bool(
        lists == current.lists
        and foreign == current.foreign
        and (votes == current.votes or time.monotonic() - hit.born < VOTE_TTL_S)
    )


def unavailable_response(path: str, u: Unavailable) -> Response:
    """The 503 envelope (an HTML page off the API) with ``Retry-After``."""
    extra = {"hint": u.hint, "retry_after": u.retry_after}
    resp = error_response(path, 503, u.code, u.message, extra)
    resp.headers["retry-after"] = str(u.retry_after)
    return resp


async def data_version(
    versions: Versions, scope: Scope, receive: Any, send: Any, on_stale: Callable[[], None] | None = None
) -> Ver | None:
    """The current versions (``on_stale`` called when they say the stored documents are stale); None
    once a 503 was sent because the database is unavailable."""
    try:
        current = await versions.current()
    except Exception as exc:
        await _unavailable(exc, scope, receive, send)
        return None
    if on_stale is not None and current.stale:
        on_stale()
    return current


async def _unavailable(exc: Exception, scope: Scope, receive: Any, send: Any) -> None:
    u = unavailable(exc)
    if u is None:
        raise exc
    await unavailable_response(scope["path"], u)(scope, receive, _SecureSend(send))


async def stored_document(versions: Versions, scope: Scope, receive: Any, send: Any, key: StoredKey) -> Any:
    """The stored document ``key`` (None when there is none; False once a 503 was sent)."""
    try:
        return await versions.document(*key)
    except Exception as exc:
        await _unavailable(exc, scope, receive, send)
        return False


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
    """``cache`` None (``LAIR_REGISTRY_CACHE_MB=0``): stored documents are still served, every other
    response is rendered by its route. ``on_stale`` is called when a request finds the stored
    documents stale (a write of an older release: :func:`~lair.registry.service.stored.refresh_stale`);
    until they are rendered again the routes render each read."""

    def __init__(
        self,
        app: Any,
        versions: Versions,
        cache: ResponseCache | None,
        on_stale: Callable[[], None] | None = None,
    ) -> None:
        self.app, self.versions, self.cache, self.on_stale = app, versions, cache, on_stale
        self.priority = app.state.priority

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and await refuse_host(scope, receive, _SecureSend(send), self.app):
            return
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:  # health reports the database itself
            await self.app(scope, receive, _SecureSend(send) if scope["type"] == "http" else send)
            return
        personal, read = _personal(scope), scope["method"] in ("GET", "HEAD")
        if read:
            self.priority.step_aside()  # a write on a thread goes first, for a moment
        if read and (key := stored_key(scope["path"], personal)) is not None:
            doc = await stored_document(self.versions, scope, receive, send, key)
            if doc is False:
                return
            if doc is not None:
                await self._send(scope, send, _document_entry(doc, key[1], base_of(scope, self.app.state)))
                return
        if not read:  # no counter read: a write waits for nothing it does not use (an outage is a 503
            # from the app's catch point, as for every route)
            if not await refuse_cross_site(scope, receive, send, self.app):
                await self.app(scope, receive, _SecureSend(send))
            return
        if personal or self.cache is None:
            if (current := await data_version(self.versions, scope, receive, send, self.on_stale)) is None:
                return
            scope.setdefault("state", {})["data_version"] = current
            await self.app(scope, receive, _SecureSend(send))
            return
        await self._cached(scope, receive, send, self.cache)

    async def _cached(self, scope: Scope, receive: Any, send: Any, cache: ResponseCache) -> None:
        current = await data_version(self.versions, scope, receive, send, self.on_stale)
        if current is None:
            return
        listing = scope["path"] in LIST_PATHS
        key = b"%s\x00%s?%s" % (_header(scope, b"host") or b"", scope["raw_path"], scope["query_string"])
        hit = cache.get(key)
        if hit is not None and _fresh(hit, current, listing):
            await self._send(scope, send, hit)
            return
        if hit is not None and listing and (same := await self._kept(hit, current)) is not None:
            cache.put(key, same)  # no write since changed it: kept, counters moved on
            await self._send(scope, send, same)
            return
        scope.setdefault("state", {})["data_version"] = current
        version = (current.lists, current.votes, current.foreign) if listing else current.n
        await self.app(scope, receive, _Capture(self, scope, send, key, version))

    async def _kept(self, hit: Entry, current: Ver) -> Entry | None:
        state = self.app.state
        changes = getattr(state, "changes", None)
        return None if changes is None else await kept(state.engine, changes, hit, current)

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

    def __init__(self, mw: CacheMiddleware, scope: Scope, send: Any, key: bytes, version: Any) -> None:
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
        listing = self.scope.get("state", {}).get("listing")  # a list's query and page: lists.kept
        entry = Entry(self.version, self.start["status"], headers, body, etag, lm, listing=listing)
        if self.scope["method"] == "GET" and self.mw.cache is not None:
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
