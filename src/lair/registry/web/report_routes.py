"""Routes of uploaded run reports: ``POST /api/v1/reports`` and each report's page, JSON and raw files.

An upload is a write like any other: a signed-in actor (an API token with the ``publish`` scope, or a
session with its CSRF token), under the write rate limit; the actor becomes the rows' submitter, who
may retract them.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from lair.errors import RegistryError
from lair.registry.service import reports
from lair.registry.service.accounts import Actor
from lair.registry.service.archive import MAX_ARCHIVE_BYTES, refuse
from lair.registry.web.auth import actor_of, check_csrf, limit
from lair.registry.web.render import html, json_response
from lair.registry.web.writes import write_limit

__all__ = ["report_file", "report_json", "report_page", "submit"]

_TEXT = {"json": "application/json", "md": "text/markdown"}
"""Media types of the raw files; JSON Lines (timings, per-sample records) are text/plain, so a browser
shows them where application/x-ndjson would be downloaded."""


def _uploader(request: Request, actor: Actor | None) -> Actor:
    check_csrf(request, actor)
    if actor is None:
        raise RegistryError(
            401, "unauthorized", "sign in first", hint="lair login URL --token T (an API token with publish)"
        )
    if not actor.can("publish"):
        raise RegistryError(403, "forbidden", "this token lacks the 'publish' scope")
    limit(write_limit(), "write", actor.name)
    return actor


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_ARCHIVE_BYTES:
        raise refuse(
            413, "too_large", [f"archive of {int(length):,} bytes; the limit is {MAX_ARCHIVE_BYTES:,}"]
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_ARCHIVE_BYTES:
            raise refuse(413, "too_large", [f"archive over {MAX_ARCHIVE_BYTES:,} bytes"])
        chunks.append(chunk)
    return b"".join(chunks)


async def submit(request: Request) -> Response:
    with request.app.state.engine.connect() as conn:
        actor = _uploader(request, actor_of(request, conn))  # early, before reading a body of up to 16 MiB
    data = await _body(request)
    with request.app.state.engine.begin() as conn:
        out = reports.submit_report(conn, data, actor=actor, store=request.app.state.blobs)
    out["url"] = f"/recipes/{out['slug']}"
    out["report_url"] = f"/reports/{out['id']}"
    return json_response(out, status=201, cacheable=False)


def _report(request: Request) -> tuple[dict[str, Any], str | None]:
    name: str = request.path_params["name"]
    stem, dot, ext = name.rpartition(".")
    rid, ext_or_none = (stem, ext) if dot else (name, None)
    if ext_or_none not in (None, "json"):
        raise RegistryError(404, "not_found", f"no such format: .{ext_or_none}", hint="use .json")
    with request.app.state.engine.connect() as conn:
        return reports.get_report(conn, rid), ext_or_none


async def report_json(request: Request) -> Response:
    doc, _ = _report(request)
    return json_response(doc)


async def report_page(request: Request) -> Response:
    doc, ext = _report(request)
    if ext == "json":
        return json_response(doc)
    return html("report.html", {"r": doc})


async def report_file(request: Request) -> Response:
    rid, name = request.path_params["rid"], request.path_params["path"]
    with request.app.state.engine.connect() as conn:
        body = reports.read_report_file(conn, request.app.state.blobs, rid, name)
    media = _TEXT.get(name.rpartition(".")[2], "text/plain")
    headers = {"x-content-type-options": "nosniff", "content-disposition": "inline", "x-lair-cache": "1"}
    headers["cache-control"] = "no-cache"
    return Response(body, 200, headers, media_type=f"{media}; charset=utf-8")
