"""schemathesis against the OpenAPI document the app serves: every operation, generated and explicit
inputs; no 5xx, statuses, content types and bodies conform to the document."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from registry_paths import LLAMA
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import COOKIE, UNSAFE_METHODS
from lair.testing.registry import unsafe_routes


def _schema(tmp: Path) -> Any:
    url = connect_url(str(tmp / "registry.sqlite3"))
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        uid = create_user(conn, "tester", admin=True)
        TOKEN[:] = [create_token(conn, uid)]  # the same name and token in both databases' fixtures
        publish(conn, LLAMA.read_text(), owner="tester")
    engine.dispose()
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app(url))


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _schema(tmp_path_factory.mktemp("schemathesis"))


@pytest.fixture(scope="module")
def write_schema(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch) -> Any:
    """A database of its own: the generated writes (hides included) leave the read tests' data alone."""
    monkeypatch_module.setenv("LAIR_REGISTRY_WRITE_LIMIT", "100000/minute")
    schema = _schema(tmp_path_factory.mktemp("schemathesis-writes"))

    @schema.auth()
    class AdminToken:
        """The admin's bearer token as schemathesis' own auth: its auth checks know to take it away."""

        def get(self, case: schemathesis.Case, ctx: Any) -> str:
            return TOKEN[0]

        def set(self, case: schemathesis.Case, data: str, ctx: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    return schema


OPERATIONS = [
    "listRecipes",
    "getRecipe",
    "getRecipeToml",
    "getRecipeYaml",
    "getRevision",
    "listGpus",
    "diffRevisions",
    "getReport",
]
WRITES = [
    "publishRecipe",
    "createRevision",
    "forkRecipe",
    "vote",
    "unvote",
    "retractMeasurement",
    "retractQualityRow",
    "hideRecipe",
    "showRecipe",
    "hideUser",
    "showUser",
]


TOKEN: list[str] = []
WRITE_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("operation_id", WRITES)
def test_authenticated_writes_conform(write_schema: Any, operation_id: str) -> None:
    """Writes with a valid admin token: no 5xx, every answer documented and in its schema (a generated
    body is rarely a valid recipe, so 4xx answers are expected and checked against the error schema);
    ``ignored_auth`` resends a 2xx case without the token and with a wrong one and wants them refused."""
    operation = write_schema.find_operation_by_id(operation_id)
    seen: list[int] = []

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def run(case: schemathesis.Case) -> None:
        seen.append(case.call_and_validate(excluded_checks=[positive_data_acceptance]).status_code)

    run()
    assert seen and all(s < 500 for s in seen)


@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_api_conforms_to_its_openapi_document(api_schema: Any, operation_id: str) -> None:
    """Hypothesis drives schemathesis' strategy for the operation (its pytest plugin does not load
    under this pytest); every case is sent to the app and checked with schemathesis' checks."""
    operation = api_schema.find_operation_by_id(operation_id)
    seen: list[int] = []
    # a cursor is opaque: only one the API returned is valid, so a generated one is rightly a 422
    # and a report id is only valid when a report was uploaded under it
    skip = [positive_data_acceptance] if operation_id in ("listRecipes", "getReport") else []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def run(case: schemathesis.Case) -> None:
        seen.append(case.call_and_validate(excluded_checks=skip).status_code)

    run()
    assert seen and all(s < 500 for s in seen)
    if operation_id in ("getRecipe", "listRecipes", "listGpus"):
        assert 200 in seen


def test_the_document_names_every_read_route(api_schema: object, tmp_path: Path) -> None:
    paths = set(api_schema.raw_schema["paths"])  # type: ignore[attr-defined]
    assert {
        "/api/v1/recipes",
        "/api/v1/recipes/{slug}.json",
        "/api/v1/recipes/{slug}/revisions/{n}.json",
    } <= paths


def test_every_write_operation_declares_security(api_schema: Any, tmp_path: Path) -> None:
    """Each documented write names its security (a bearer token, or the session cookie with the CSRF
    header, as the app reads them), documents 401 and 403, exists in the app's route table, and is
    run by schemathesis above."""
    doc = api_schema.raw_schema
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == schemes["bearer"] | {"type": "http", "scheme": "bearer"}
    assert (schemes["session"]["in"], schemes["session"]["name"]) == ("cookie", COOKIE)
    assert (schemes["csrf"]["in"], schemes["csrf"]["name"].lower()) == ("header", "x-csrf-token")
    writes = {
        (method.upper(), path): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method.upper() in UNSAFE_METHODS
    }
    for (method, path), op in writes.items():
        assert op.get("security"), f"{method} {path} declares no security"
        assert {"bearer": []} in op["security"] and {"session": [], "csrf": []} in op["security"]
        assert all(req and set(req) <= set(schemes) for req in op["security"]), f"{method} {path}"
        assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"
    assert sorted(op["operationId"] for op in writes.values()) == sorted(WRITES)
    assert set(writes) <= unsafe_routes(create_app(connect_url(str(tmp_path / "r.sqlite3"))))
    reads = [op for item in doc["paths"].values() for m, op in item.items() if m == "get"]
    assert all("security" not in op for op in reads)  # reads are public
