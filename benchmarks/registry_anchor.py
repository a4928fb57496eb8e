"""The inline anchor of benchmarks/registry_load.py: a 30-line Starlette + sqlite3 route serving a
recipe's JSON (its row, latest revision and measurements) from the registry's own SQLite file.

    LAIR_ANCHOR_DB=/path/registry.sqlite3 granian --interface asgi --factory benchmarks.registry_anchor:app
"""

from __future__ import annotations

import os
import sqlite3

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

DB = sqlite3.connect(os.environ.get("LAIR_ANCHOR_DB", "registry.sqlite3"), check_same_thread=False)
DB.row_factory = sqlite3.Row
RECIPE = "SELECT * FROM recipes WHERE slug = ? AND hidden = 0"
REVISION = "SELECT number, sha256, notes, toml, created_at FROM revisions WHERE recipe_id = ? AND number = ?"
ROWS = "SELECT * FROM measurements WHERE recipe_id = ? ORDER BY context, concurrency, id"


async def recipe(request: Request) -> Response:
    row = DB.execute(RECIPE, (request.path_params["slug"],)).fetchone()
    if row is None:
        return Response(b'{"ok":false}', 404, media_type="application/json")
    doc = dict(row) | {"revision": dict(DB.execute(REVISION, (row["id"], row["latest_revision"])).fetchone())}
    doc["measurements"] = [dict(m) for m in DB.execute(ROWS, (row["id"],))]
    return Response(orjson.dumps(doc), media_type="application/json")


def app() -> Starlette:
    return Starlette(routes=[Route("/api/v1/recipes/{slug}.json", recipe)])
