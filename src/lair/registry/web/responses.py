"""Responses: orjson bodies, Jinja2 pages (autoescaped), the error envelope and HTML error pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from starlette.responses import Response

from lair.registry.service.templates import page_env
from lair.registry.service.timefmt import http_date

__all__ = ["envelope", "error_response", "html", "json_response", "page_env", "text", "wants_json"]

CACHE = {"x-lair-cache": "1"}
JSON_TYPE = "application/json"


def _headers(cacheable: bool, modified: datetime | None) -> dict[str, str]:
    h = dict(CACHE) if cacheable else {}
    h["cache-control"] = "no-cache" if cacheable else "no-store"
    if modified is not None:
        h["last-modified"] = http_date(modified)
    return h


def json_response(
    data: Any, *, status: int = 200, cacheable: bool = True, modified: datetime | None = None
) -> Response:
    body = orjson.dumps(data)
    return Response(body, status, _headers(cacheable and status == 200, modified), media_type=JSON_TYPE)


def html(
    template: str,
    ctx: dict[str, Any],
    *,
    status: int = 200,
    cacheable: bool = True,
    modified: datetime | None = None,
) -> Response:
    body = page_env().get_template(template).render(**ctx)
    return Response(body, status, _headers(cacheable and status == 200, modified), media_type="text/html")


def text(
    body: str, media_type: str, *, filename: str | None = None, modified: datetime | None = None
) -> Response:
    h = _headers(True, modified)
    if filename:
        h["content-disposition"] = f'inline; filename="{filename}"'
    return Response(body, 200, h, media_type=media_type)


def envelope(status: int, code: str, message: str, extra: dict[str, Any] | None = None) -> Response:
    err = {"code": code, "message": message, "status": status} | (extra or {})
    return Response(
        orjson.dumps({"ok": False, "error": err}), status, {"cache-control": "no-store"}, media_type=JSON_TYPE
    )


def wants_json(path: str) -> bool:
    return path.startswith("/api/") or path.endswith((".json", ".toml", ".yaml"))


def error_response(
    path: str, status: int, code: str, message: str, extra: dict[str, Any] | None = None
) -> Response:
    """The error envelope on the API and JSON/raw twins, the HTML error page everywhere else."""
    if wants_json(path):
        return envelope(status, code, message, extra)
    ctx = {"status": status, "code": code, "message": message, "extra": extra or {}}
    return html("error.html", ctx, status=status, cacheable=False)
