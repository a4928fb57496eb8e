"""Responses: orjson bodies, Jinja2 pages (autoescaped), the error envelope and HTML error pages."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.responses import Response

from lair.registry.service.page import fmt_tokens
from lair.registry.service.timefmt import http_date
from lair.vocabulary import attempt_word, tiers_phrase

__all__ = ["envelope", "error_response", "html", "json_response", "page_env", "text", "wants_json"]

TEMPLATES = Path(__file__).parent / "templates"
CACHE = {"x-lair-cache": "1"}
JSON_TYPE = "application/json"


def _num(v: Any) -> str:
    if v is None or v == "":
        return "—"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


def _sig(v: Any) -> str:
    """A figure with three significant digits (0.391, 9.38, 312), thousands separated above 1,000."""
    if v is None or v == "":
        return "—"
    x = float(v)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 1e-4 else f"{x:.2e}"


@cache
def page_env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True))
    env.filters["num"] = _num
    env.filters["sig"] = _sig
    env.filters["tokens"] = fmt_tokens
    env.filters["tiers"] = tiers_phrase  # lair.vocabulary: the one set of words for tiers
    env.filters["attempt"] = attempt_word
    env.trim_blocks = env.lstrip_blocks = True
    return env


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
