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


@pytest.fixture(scope="module")
def api_schema(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch
) -> Iterator[object]:
    url = connect_url(str(tmp_path_factory.mktemp("schemathesis") / "registry.sqlite3"))
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        uid = create_user(conn, "tester", admin=True)
        TOKEN.append(create_token(conn, uid))
        publish(conn, LLAMA.read_text(), owner="tester")
    engine.dispose()
    monkeypatch_module.setenv("LAIR_REGISTRY_WRITE_LIMIT", "100000/minute")
    yield schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app(url))


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
WRITES = ["publishRecipe", "createRevision", "forkRecipe", "vote", "unvote", "retractMeasurement"]


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
def test_authenticated_writes_conform(api_schema: Any, operation_id: str) -> None:
    """Writes with a valid admin token: no 5xx, every answer documented and in its schema (a generated
    body is rarely a valid recipe, so 4xx answers are expected and checked against the error schema)."""
    operation = api_schema.find_operation_by_id(operation_id)
    seen: list[int] = []
    headers = {"authorization": f"Bearer {TOKEN[0]}"}

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def run(case: schemathesis.Case) -> None:
        seen.append(
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance]).status_code
        )

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
