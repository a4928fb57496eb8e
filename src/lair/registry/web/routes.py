"""Routes: parse the request, call one service function, render. Every page has a JSON twin.

Every handler that reads the database or renders is a plain function, which Starlette's dispatch
runs on its thread pool (``anyio``'s worker threads): no statement, pool checkout or render ever runs
on the event loop, so a slow one (a search waiting for one of the pool's connections, an older
revision's page drawing its chart, llms.txt over every recipe) never holds up the requests served
meanwhile. The stored documents are read before any route, in the ASGI front
(:mod:`~lair.registry.web.middleware`), without blocking the loop (SQLite: one indexed read on the
loop's own connection; PostgreSQL: async psycopg). Lists and searches ran on the loop until
``benchmarks/registry_loop_ab.py`` measured both (results/registry_loop_ab.md, PostgreSQL, 2,000
recipes): with the pool's 8 connections held by searches, a stored recipe JSON took 2.7 s on the loop
and 3 ms with the searches on the thread pool; filtered searches at 10 writes/s 2,885 -> 3,541 req/s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from starlette.requests import Request
from starlette.responses import Response

from lair.errors import Invalid, NotFound, RegistryError
from lair.recipe import export_text
from lair.registry.service import read, search
from lair.registry.service.document import cost_document, recipe_document, revision_document
from lair.registry.service.energy import DEFAULT_PRICE_KWH, PARAM, parse_price
from lair.registry.service.fitting import fit_for, gpu_choices
from lair.registry.service.llms import llms_txt
from lair.registry.service.outage import unavailable
from lair.registry.service.page import recipe_page
from lair.registry.service.rig_values import render_with
from lair.registry.web.auth import actor_of
from lair.registry.web.cache import VERSION_SQL
from lair.registry.web.hosts import base_url
from lair.registry.web.lists import Listing
from lair.registry.web.openapi import openapi_document
from lair.registry.web.responses import html, json_response, text

__all__ = [
    "api_list",
    "api_recipe",
    "api_revision",
    "cost",
    "cost_json",
    "efficiencies",
    "fit",
    "fit_json",
    "gpus",
    "health",
    "home",
    "llms",
    "openapi",
    "placeholders",
    "placeholders_json",
    "recipe",
    "revision",
]

TEXT_TYPES = {"toml": "application/toml", "yaml": "application/yaml"}


@contextmanager
def _conn(request: Request) -> Iterator[Connection]:
    with request.app.state.engine.connect() as conn:
        yield conn


def _voted(request: Request, user_id: int, recipe_id: int) -> bool:
    from lair.registry.service.community import has_voted

    with _conn(request) as conn:
        return has_voted(conn, user_id, recipe_id)


def _base(request: Request) -> str:
    return base_url(request)  # never the Host header on its own word (:mod:`~lair.registry.web.hosts`)


def _split(name: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    stem, dot, ext = name.rpartition(".")
    if not dot:
        return name, None
    if ext not in allowed:
        raise NotFound(f"no such format: .{ext}", hint="use " + ", ".join("." + a for a in allowed))
    return stem, ext


def _revision_number(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 10**9:
        raise NotFound(f"no revision {raw!r}", hint="revisions are numbered 1, 2, ...")
    return int(raw)


def _search(request: Request) -> search.SearchResult:
    params = search.parse_params(request.query_params, request.query_params.getlist("tag"))
    with _conn(request) as conn:
        res = search.search(conn, params)
    request.state.listing = Listing(params, frozenset(res.ids), res.end)  # what a write may change
    return res


def _list_doc(request: Request, res: search.SearchResult) -> dict[str, Any]:
    base = _base(request)
    items = [
        i | {"url": f"{base}/recipes/{i['slug']}", "api_url": f"{base}/api/v1/recipes/{i['slug']}.json"}
        for i in res.items
    ]
    return {"ok": True, "items": items, "count": len(items), "next_cursor": res.next_cursor}


def home(request: Request) -> Response:
    res = _search(request)
    q = request.query_params
    ctx: dict[str, Any] = {
        "result": _list_doc(request, res),
        "q": q,
        "tags": q.getlist("tag"),
        "query": str(request.url.query),
    }
    with _conn(request) as conn:
        ctx["me"] = actor_of(request, conn)
    if res.next_cursor:
        keep = [(k, v) for k, v in q.multi_items() if k != "cursor"] + [("cursor", res.next_cursor)]
        ctx["next_href"] = "?" + urlencode(keep)
    return html("list.html", ctx, cacheable=ctx["me"] is None)


def api_list(request: Request) -> Response:
    return json_response(_list_doc(request, _search(request)))


def _recipe_export(rec: read.RecipeRecord, slug: str, ext: str) -> Response:
    if ext == "toml":
        return text(rec.revision.toml, TEXT_TYPES[ext], filename=f"{slug}.toml", modified=rec.updated_at)
    return text(
        export_text(rec.recipe, ext), TEXT_TYPES[ext], filename=f"{slug}.{ext}", modified=rec.updated_at
    )


def recipe(request: Request) -> Response:
    slug, ext = _split(request.path_params["name"], ("json",))
    with _conn(request) as conn:
        rec = read.get_recipe(conn, slug)
        me = actor_of(request, conn) if ext is None else None
    if ext == "json":
        return json_response(recipe_document(rec, _base(request)), modified=rec.updated_at)
    ctx = {
        "p": recipe_page(rec, _base(request)),
        "me": me,
        "voted": me is not None and _voted(request, me.id, rec.id),
    }
    return html("recipe.html", ctx, modified=rec.updated_at, cacheable=me is None)


def api_recipe(request: Request) -> Response:
    slug, ext = _split(request.path_params["name"], ("json", "toml", "yaml"))
    if ext is None:
        raise NotFound("name a format", hint=f"/api/v1/recipes/{slug}.json")
    with _conn(request) as conn:
        rec = read.get_recipe(conn, slug)
    if ext == "json":
        return json_response(recipe_document(rec, _base(request)), modified=rec.updated_at)
    return _recipe_export(rec, slug, ext)


def _get_revision(request: Request, allowed: tuple[str, ...]) -> tuple[read.RecipeRecord, str | None]:
    stem, ext = _split(request.path_params["name"], allowed)
    with _conn(request) as conn:
        return read.get_revision(conn, request.path_params["slug"], _revision_number(stem)), ext


def revision(request: Request) -> Response:
    rec, ext = _get_revision(request, ("json",))
    if ext == "json":
        return json_response(revision_document(rec, _base(request)), modified=rec.revision.created_at)
    ctx = {"p": recipe_page(rec, _base(request)), "toml": rec.revision.toml}
    return html("revision.html", ctx, modified=rec.revision.created_at)


def api_revision(request: Request) -> Response:
    rec, ext = _get_revision(request, ("json", "toml", "yaml"))
    if ext in (None, "json"):
        return json_response(revision_document(rec, _base(request)), modified=rec.revision.created_at)
    return _recipe_export(rec, rec.slug, ext)


def _placeholders(request: Request) -> tuple[read.RecipeRecord, Any]:
    with _conn(request) as conn:
        rec = read.get_recipe(conn, request.path_params["slug"])
    given = {k: v for k, v in request.query_params.items() if k in rec.recipe.placeholders}
    return rec, render_with(rec.recipe, given)


def placeholders(request: Request) -> Response:
    rec, out = _placeholders(request)
    submitted = any(k in rec.recipe.placeholders for k in request.query_params)
    ctx = {"p": recipe_page(rec, _base(request)), "r": out, "submitted": submitted}
    return html("placeholders.html", ctx, status=200 if out.ok or not submitted else 422)


def placeholders_json(request: Request) -> Response:
    _, out = _placeholders(request)
    if not out.ok:
        raise Invalid(
            "some placeholder values are not valid",
            hint="; ".join(f"{k}: {v}" for k, v in out.errors.items()),
        )
    return json_response(out.as_dict())


def _fit(request: Request) -> tuple[read.RecipeRecord, dict[str, Any] | None]:
    from lair.fit.efficiencies import bundled_rows
    from lair.registry.service.efficiencies import efficiency_rows

    q = request.query_params
    with _conn(request) as conn:
        rec = read.get_recipe(conn, request.path_params["slug"])
        if not q.get("gpu"):
            return rec, None
        rows = [*bundled_rows(), *efficiency_rows(conn, engine=rec.recipe.engine)]
    count = search.parse_int(q.get("gpus") or "1", "gpus", 1, 1024) or 1
    context = search.parse_int(q.get("context"), "context", 1, 10**9)
    return rec, fit_for(rec.recipe, q["gpu"], count, context, efficiencies=rows)


def fit(request: Request) -> Response:
    rec, out = _fit(request)
    return html("fit.html", {"p": recipe_page(rec, _base(request)), "f": out, "q": request.query_params})


def fit_json(request: Request) -> Response:
    _, out = _fit(request)
    if out is None:
        raise Invalid("required", location="query parameter gpu", hint="e.g. ?gpu=H200&gpus=2")
    return json_response(out)


def _cost(request: Request) -> tuple[read.RecipeRecord, float, RegistryError | None]:
    """The recipe, the price of ``?price_kwh=`` (the default when it is bad) and the error, if any."""
    with _conn(request) as conn:
        rec = read.get_recipe(conn, request.path_params["slug"])
    try:
        return rec, parse_price(request.query_params.get(PARAM)), None
    except RegistryError as exc:
        return rec, DEFAULT_PRICE_KWH, exc


def cost(request: Request) -> Response:
    """The performance section with $/Mtok (energy) at the viewer's price; a bad price is the page
    at the default price with the located error beside the form (422)."""
    rec, price, error = _cost(request)
    ctx = {"p": recipe_page(rec, _base(request), price), "error": error}
    return html("cost.html", ctx, status=error.status if error else 200)


def cost_json(request: Request) -> Response:
    rec, price, error = _cost(request)
    if error is not None:
        raise error
    return json_response(cost_document(rec, _base(request), price), modified=rec.updated_at)


async def gpus(request: Request) -> Response:
    return json_response({"ok": True, "gpus": gpu_choices()})


def efficiencies(request: Request) -> Response:
    """The verified rows as efficiencies (what ``lair fit --predict --registry`` learns from)."""
    from lair.registry.service.efficiencies import efficiency_rows

    with _conn(request) as conn:
        rows = [r.as_dict() for r in efficiency_rows(conn)]
    return json_response({"ok": True, "count": len(rows), "rows": rows})


def _health(engine: Engine) -> Response:
    try:
        with engine.connect() as conn:
            version = int(conn.execute(sa.text(VERSION_SQL)).scalar_one())
    except Exception as exc:
        u = unavailable(exc)
        if u is None:
            raise
        body = {"ok": False, "database": "unavailable", "retry_after": u.retry_after, "error": u.as_dict()}
        resp = json_response(body, status=503, cacheable=False)
        resp.headers["retry-after"] = str(u.retry_after)
        return resp
    return json_response({"ok": True, "database": "ok", "version": version}, cacheable=False)


async def health(request: Request) -> Response:
    """``{"ok", "database", "version"}``; 503 with ``Retry-After`` while the database is down. Its
    own query on a worker thread: a stalled database never holds the event loop."""
    return await anyio.to_thread.run_sync(_health, request.app.state.engine)


async def openapi(request: Request) -> Response:
    return json_response(openapi_document(_base(request) or "/"))  # "/": relative to this document


def llms(request: Request) -> Response:
    with _conn(request) as conn:
        body = llms_txt(conn, _base(request))
    return text(body, "text/plain; charset=utf-8")
