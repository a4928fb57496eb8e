"""The generated OpenAPI document against the app's own route table: every ``/api/`` route (each of
its methods) is documented and every documented operation is a route the app dispatches its path to;
each operation's typed errors are documented under their class's status in the error envelope."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.routing import Match, Route
from starlette.testclient import TestClient

from lair.errors import NotFound, TooLarge, Unauthorized
from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.web.app import create_app


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    url = connect_url(str(tmp_path_factory.mktemp("openapi") / "registry.sqlite3"))
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    app = create_app(url)
    with TestClient(app) as client:
        r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    return app.app, r.json()


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), path, op) for path, item in doc["paths"].items() for m, op in item.items()]


def test_every_api_route_is_documented_and_every_operation_is_a_route(served: tuple[Any, Any]) -> None:
    app, doc = served
    routes = [r for r in app.routes if isinstance(r, Route)]
    api = {(m, r.path) for r in routes if r.path.startswith("/api/") for m in r.methods or () if m != "HEAD"}
    documented = {(m, op["x-route"]) for m, _, op in _operations(doc)}
    assert api - documented == set()  # an API route the document does not name
    assert documented - {(m, r.path) for r in routes for m in r.methods or ()} == set()  # no such route
    for method, path, op in _operations(doc):
        concrete = re.sub(r"\{[^}]+\}", "x1", path)
        scope = {"type": "http", "method": method, "path": concrete}
        first = next(r for r in routes if r.matches(scope)[0] == Match.FULL)
        assert first.path == op["x-route"], (method, path)  # the route the app dispatches it to


def test_each_operation_documents_its_typed_errors(served: tuple[Any, Any]) -> None:
    _, doc = served
    ops = {op["operationId"]: op for _, _, op in _operations(doc)}
    error = {"$ref": "#/components/schemas/Error"}
    upload = ops["submitReport"]["responses"]
    assert upload[str(TooLarge.status)]["content"]["application/json"]["schema"] == error
    assert "404" not in upload  # a missing revision is a 422 with that reason
    assert ops["getMe"]["responses"]["401"]["description"] == (Unauthorized.__doc__ or "").split("\n")[0]
    file_404 = ops["getReportFile"]["responses"][str(NotFound.status)]["content"]
    assert set(file_404) == {"text/html", "application/json"}  # outside /api/v1 an error is a page
    schemas = doc["components"]["schemas"]
    assert schemas["Error"]["required"] == ["ok", "error"]
    assert set(schemas["ErrorBody"]["required"]) == {"code", "message", "status"}
    for name, schema in schemas.items():
        for ref in re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', str(schema).replace("'", '"')):
            assert ref in schemas, (name, ref)
