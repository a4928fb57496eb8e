"""Routes of the matrix and speed history (:mod:`lair.registry.service.matrix`): per recipe at
``/recipes/<slug>/matrix`` and per model at ``/models/<model id>/matrix``, each page with its JSON
twin at the same path plus ``.json``. Query: ``context`` and ``concurrency`` (the cell shown),
``unchecked=1`` (add the reported-by-report rows)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from lair.registry.service.matrix import matrix
from lair.registry.service.search import parse_int
from lair.registry.web.responses import html, json_response

__all__ = ["model_matrix", "model_matrix_json", "recipe_matrix", "recipe_matrix_json"]


def _flag(raw: str | None) -> bool:
    from lair.errors import Invalid

    if raw in (None, "", "0", "false"):
        return False
    if raw in ("1", "true"):
        return True
    raise Invalid("must be 0 or 1", location="query parameter unchecked")


def _query(request: Request) -> dict[str, Any]:
    q = request.query_params
    return {
        "unchecked": _flag(q.get("unchecked")),
        "context": parse_int(q.get("context"), "context", 1, 10**9),
        "concurrency": parse_int(q.get("concurrency"), "concurrency", 1, 1 << 20),
    }


async def _doc(request: Request, **which: Any) -> dict[str, Any]:
    query = _query(request)

    def read() -> dict[str, Any]:
        with request.app.state.engine.connect() as conn:
            return matrix(conn, **which, **query)

    return await anyio.to_thread.run_sync(read)


async def recipe_matrix(request: Request) -> Response:
    doc = await _doc(request, slug=request.path_params["slug"])
    return html("matrix.html", {"m": doc, "here": f"/recipes/{doc['slug']}/matrix"})


async def recipe_matrix_json(request: Request) -> Response:
    return json_response(await _doc(request, slug=request.path_params["slug"]))


async def model_matrix(request: Request) -> Response:
    doc = await _doc(request, model=request.path_params["model"])
    return html("matrix.html", {"m": doc, "here": f"/models/{doc['model']}/matrix"})


async def model_matrix_json(request: Request) -> Response:
    return json_response(await _doc(request, model=request.path_params["model"]))
