"""Routes of uploaded run reports: ``POST /api/v1/reports`` and each report's page, JSON and raw files.

The uploader is whoever the request's authentication says (``request.scope["user"]``, Starlette's
authentication convention: an object with ``is_authenticated`` and ``username``); an anonymous
upload is stored without an uploader, since a report is checked on its own evidence.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from lair.errors import RegistryError
from lair.registry.service import reports
from lair.registry.service.archive import MAX_ARCHIVE_BYTES, refuse
from lair.registry.web.render import html, json_response

__all__ = ["report_file", "report_page", "submit", "uploader"]

_TEXT = {"json": "application/json", "jsonl": "application/x-ndjson", "md": "text/markdown"}


def uploader(request: Request) -> str | None:
    """The authenticated user's name, or None for an anonymous request."""
    user: Any = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        return str(getattr(user, "username", "") or getattr(user, "display_name", "")) or None
    return None


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
    data = await _body(request)
    with request.app.state.engine.begin() as conn:
        out = reports.submit_report(conn, data, user=uploader(request), store=request.app.state.blobs)
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


__all__ += ["report_json"]
