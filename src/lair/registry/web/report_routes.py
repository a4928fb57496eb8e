"""Routes of uploaded run reports: ``POST /api/v1/reports`` and each report's page, JSON and raw files.

The upload's archive is unpacked, verified and stored on a worker thread of an upload limiter of
its own (``UPLOAD_THREADS``), never on the event loop, so ``/health`` and every page keep answering
while a hostile archive is refused (:mod:`lair.registry.service.archive` bounds its time and memory).

``?replicates=SLUG@REV#ROW`` makes the upload a replication attempt of that row
(:mod:`lair.registry.service.attempts`; a malformed or unknown row id is 422).

An upload is a write like any other: a signed-in actor (an API token with the ``publish`` scope, or a
session with its CSRF token), under the write rate limit; the actor becomes the rows' submitter, who
may retract them.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response

from lair.errors import NotFound, RateLimited
from lair.registry.service import reports
from lair.registry.service.actor import Actor
from lair.registry.service.archive import MAX_ARCHIVE_BYTES, refuse
from lair.registry.service.attempts import parse_replicates
from lair.registry.service.outage import Unavailable
from lair.registry.service.permissions import ensure
from lair.registry.web.auth import actor_of, check_csrf, limit, write_limit
from lair.registry.web.responses import html, json_response
from lair.registry.web.writes import committed
from lair.replication import RowRef

__all__ = ["report_file", "report_json", "report_page", "submit"]

_TEXT = {"json": "application/json", "md": "text/markdown"}
"""Media types of the raw files; JSON Lines (timings, per-sample records) are text/plain, so a browser
shows them where application/x-ndjson would be downloaded."""


def _uploader(request: Request, actor: Actor | None) -> Actor:
    check_csrf(request, actor)
    actor = ensure(actor, "upload-report")  # before the body is read: 401 or 403 with the reason
    limit(request, write_limit(request), "write", actor.name)
    return actor


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_ARCHIVE_BYTES:
        raise refuse("too_large", [f"archive of {int(length):,} bytes; the limit is {MAX_ARCHIVE_BYTES:,}"])
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_ARCHIVE_BYTES:
            raise refuse("too_large", [f"archive over {MAX_ARCHIVE_BYTES:,} bytes"])
        chunks.append(chunk)
    return b"".join(chunks)


UPLOAD_THREADS = 2
"""Uploads unpacked and verified at once per process, each on a worker thread of its own limiter
(never the event loop: other requests keep their latency while an upload is checked or refused)."""
UPLOAD_QUEUE_S = 30.0
"""How long an upload waits for one of those threads before it is answered 503."""
BUSY_RETRY_S = 30
"""What that 503 tells the client to wait (``Retry-After``)."""
UPLOADS_PER_ACCOUNT = 1
"""Uploads of one account checked or waiting at once per process: a second is answered 429 at once,
so one account never holds (or queues for) every upload thread while others wait."""
_LIMITERS: dict[int, anyio.CapacityLimiter] = {}
_IN_FLIGHT: dict[str, int] = {}
"""Uploads of each account in this process, checked or waiting (the event loop's own: no lock)."""


def _limiter() -> anyio.CapacityLimiter:
    """The upload limiter of the running event loop (a limiter belongs to one loop)."""
    import asyncio

    key = id(asyncio.get_running_loop())
    if key not in _LIMITERS:
        _LIMITERS.clear()  # a new loop (a test client, a reloaded worker): the old limiter is dead
        _LIMITERS[key] = anyio.CapacityLimiter(UPLOAD_THREADS)
    return _LIMITERS[key]


def _accept(state: State, data: bytes, actor: Actor, replicates: RowRef | None = None) -> dict[str, Any]:
    """The blocking part, run on a worker thread: unpack, verify and fetch what a replication
    compares with (reads only), put the blobs, and only then the write transaction, which holds
    SQLite's write lock for the inserts alone."""
    with state.engine.connect() as conn:
        checked = reports.check_report(conn, data, actor=actor, store=state.blobs, replicates=replicates)
    reports.put_blobs(state.blobs, checked)
    days = state.settings.new_account_days  # an account younger than this is shown as new
    out: dict[str, Any] | None = None
    try:
        with committed(state) as conn:
            out = reports.record_report(conn, state.blobs, checked, new_account_days=days)
    except BaseException:
        if out is None:  # the transaction never opened (a failed commit deletes them itself)
            reports.discard_blobs(state.blobs, checked)
        raise
    return out


async def _off_loop(
    request: Request, data: bytes, actor: Actor, replicates: RowRef | None = None
) -> dict[str, Any]:
    if _IN_FLIGHT.get(actor.name, 0) >= UPLOADS_PER_ACCOUNT:
        raise RateLimited(
            f"{UPLOADS_PER_ACCOUNT} upload of yours is being checked already",
            hint="send the next when it is answered",
        )
    _IN_FLIGHT[actor.name] = _IN_FLIGHT.get(actor.name, 0) + 1
    try:
        return await _checked(request, data, actor, replicates)
    finally:
        _IN_FLIGHT[actor.name] -= 1
        if not _IN_FLIGHT[actor.name]:
            del _IN_FLIGHT[actor.name]


async def _checked(request: Request, data: bytes, actor: Actor, replicates: RowRef | None) -> dict[str, Any]:
    limiter = _limiter()
    with anyio.move_on_after(UPLOAD_QUEUE_S) as waiting:
        await limiter.acquire()
    if waiting.cancelled_caught:  # only the wait is timed: a started upload is never abandoned
        raise Unavailable(
            f"{UPLOAD_THREADS} uploads are being checked already",
            retry_after=BUSY_RETRY_S,
            hint=f"try again in {BUSY_RETRY_S} s",
            code="busy",
        )
    try:
        return await anyio.to_thread.run_sync(_accept, request.app.state, data, actor, replicates)
    finally:
        limiter.release()


def _signed_uploader(request: Request) -> Actor:
    with request.app.state.engine.connect() as conn:
        return _uploader(request, actor_of(request, conn))


async def submit(request: Request) -> Response:
    # the actor early, before reading a body of up to 16 MiB; its lookup on a worker thread
    actor = await anyio.to_thread.run_sync(_signed_uploader, request)
    replicates = parse_replicates(request.query_params.get("replicates"))  # a bad row id: 422 before the body
    data = await _body(request)
    out = await _off_loop(request, data, actor, replicates)
    out["url"] = f"/recipes/{out['slug']}"
    out["report_url"] = f"/reports/{out['id']}"
    return json_response(out, status=201, cacheable=False)


def _report(request: Request) -> tuple[dict[str, Any], str | None]:
    name: str = request.path_params["name"]
    stem, dot, ext = name.rpartition(".")
    rid, ext_or_none = (stem, ext) if dot else (name, None)
    if ext_or_none not in (None, "json"):
        raise NotFound(f"no such format: .{ext_or_none}", hint="use .json")
    with request.app.state.engine.connect() as conn:
        return reports.get_report(conn, rid), ext_or_none


def report_json(request: Request) -> Response:
    doc, _ = _report(request)
    return json_response(doc)


def report_page(request: Request) -> Response:
    doc, ext = _report(request)
    if ext == "json":
        return json_response(doc)
    from lair.registry.service.report_view import report_view

    with request.app.state.engine.connect() as conn:
        view = report_view(conn, doc["id"])
    return html("report.html", {"r": view})


def report_file(request: Request) -> Response:
    rid, name = request.path_params["rid"], request.path_params["path"]
    with request.app.state.engine.connect() as conn:
        body = reports.read_report_file(conn, request.app.state.blobs, rid, name)
    media = _TEXT.get(name.rpartition(".")[2], "text/plain")
    headers = {"x-content-type-options": "nosniff", "content-disposition": "inline", "x-lair-cache": "1"}
    headers["cache-control"] = "no-cache"
    return Response(body, 200, headers, media_type=f"{media}; charset=utf-8")
