"""schemathesis against the OpenAPI document the app serves: every operation, generated and explicit
inputs; no 5xx, statuses, content types and bodies conform to the document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
from lair.registry.db.tables import MEASUREMENTS, QUALITY, RECIPES, REPORTS, REVISIONS
from lair.registry.db.version import now
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.archive import MAX_ARCHIVE_BYTES
from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import COOKIE, UNSAFE_METHODS
from lair.testing.registry import gzip_serializer, rendered, tgz, unsafe_routes


def _schema(tmp: Path) -> Any:
    url = connect_url(str(tmp / "registry.sqlite3"))
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        uid = create_user(conn, "tester", admin=True)
        TOKEN[:] = [create_token(conn, uid)]  # the same name and token in both databases' fixtures
        publish(conn, LLAMA.read_text(), owner="tester")
        _store_report(conn, FileBlobStore(tmp / "blobs"), uid)
    engine.dispose()
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app(url, blobs=str(tmp / "blobs")))


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _schema(tmp_path_factory.mktemp("schemathesis"))


@pytest.fixture(scope="module")
def write_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("schemathesis-writes")


@pytest.fixture(scope="module")
def write_schema(write_db: Path, monkeypatch_module: pytest.MonkeyPatch) -> Any:
    """A database of its own: the generated writes (hides included) leave the read tests' data alone."""
    monkeypatch_module.setenv("LAIR_REGISTRY_WRITE_LIMIT", "100000/minute")
    schema = _schema(write_db)

    @schema.auth()
    class AdminToken:
        """The admin's bearer token as schemathesis' own auth: its auth checks know to take it away."""

        def get(self, case: schemathesis.Case, ctx: Any) -> str:
            return TOKEN[0]

        def set(self, case: schemathesis.Case, data: str, ctx: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    return schema


REPORT_ID = "0123456789abcdef"
REPORT_FILES = {
    "fingerprint.json": json.dumps(
        {"gpus": {"count": 1, "models": ["NVIDIA H100 80GB HBM3"]}, "ram_bytes": 1 << 36}
    ),
    "results.json": json.dumps({"kind": "lair.run_report", "bench": {"cells": []}}),
    "requests.jsonl": '{"ttft_ms": 20.5}\n{"ttft_ms": 21.0}\n',
    "report.md": "# run\n",
    "llama31-8b.recipe.toml": 'engine = "sglang"\n',
    "logs/engine.log": "ready\n",
    "eval_samples.jsonl": '{"suite": "gsm8k", "doc_id": 0, "score": 1.0, "verdict": "pass"}\n',
}


def _store_report(conn: sa.Connection, store: FileBlobStore, uid: int) -> None:
    """A stored report, as an accepted upload leaves it: its row, its raw files in the blob store and
    a verified speed row and a verified quality row of the Llama recipe that link to them."""
    rec, rev = conn.execute(
        sa.select(RECIPES.c.id, REVISIONS.c.id)
        .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
        .where(RECIPES.c.slug == "llama31-8b-rtx4090-sglang")
    ).one()
    for name, text in REPORT_FILES.items():
        store.put(f"reports/{REPORT_ID}/{name}", text.encode())
    ids = {"recipe_id": rec, "revision_id": rev, "rig_fingerprint": "f" * 64, "submitted_by": uid}
    conn.execute(
        sa.insert(REPORTS).values(
            id=REPORT_ID,
            digest="d" * 64,
            fingerprint=REPORT_FILES["fingerprint.json"],
            files=json.dumps(sorted(REPORT_FILES)),
            run_name="llama31-8b",
            created_at=now(),
            **ids,
        )
    )
    conn.execute(
        sa.insert(MEASUREMENTS).values(
            context=2048, concurrency=1, decode_tok_s=120.0, provenance="verified", report_id=REPORT_ID,
            created_at=now(), **ids,
        )
    )  # fmt: skip
    conn.execute(
        sa.insert(QUALITY).values(
            suite="gsm8k", metric="exact_match,strict-match", score=100.0, n=1, repeats=1, spread_min=100.0,
            spread_max=100.0, flips=0, provenance="verified", report_id=REPORT_ID, created_at=now(), **ids,
        )
    )  # fmt: skip
    rendered(conn, "llama31-8b-rtx4090-sglang")  # as the upload's write renders its documents


OPERATIONS = [
    "listRecipes",
    "getRecipe",
    "getRecipeToml",
    "getRecipeYaml",
    "getRevision",
    "listGpus",
    "listEfficiencies",
    "diffRevisions",
    "getReport",
    "getReportById",
    "getReportFile",
    "getReportLog",
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
    "submitReport",
    "createToken",
]

PUBLIC_WRITES = ["signUp", "signIn", "signOut"]  # they make or end a session: no credentials needed
UNRUN_WRITES = ["revokeToken"]  # generated ids would revoke the admin token the other writes run with


TOKEN: list[str] = []

gzip_serializer()
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

    examples = 60 if operation_id == "submitReport" else 40  # random bytes as a report archive

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
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
    skip = [positive_data_acceptance] if operation_id == "listRecipes" or "Report" in operation_id else []

    # the documented examples (slug tiny-cpu, revision 1) are drawn alongside the generated inputs:
    # schemathesis mixes them into generated cases only now and then, which left "200 in seen" to luck
    cases = st.one_of(operation.as_strategy(), *operation.get_strategies_from_examples())

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=cases)
    def run(case: schemathesis.Case) -> None:
        seen.append(case.call_and_validate(excluded_checks=skip).status_code)

    run()
    assert seen and all(s < 500 for s in seen)
    if operation_id in ("getRecipe", "listRecipes", "listGpus", "listEfficiencies"):
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
    public = {k: op for k, op in writes.items() if op.get("security") == []}  # stated: no credentials
    assert sorted(op["operationId"] for op in public.values()) == sorted(PUBLIC_WRITES)
    writes = {k: op for k, op in writes.items() if k not in public}
    for (method, path), op in writes.items():
        assert op.get("security"), f"{method} {path} declares no security"
        assert {"bearer": []} in op["security"] and {"session": [], "csrf": []} in op["security"]
        assert all(req and set(req) <= set(schemes) for req in op["security"]), f"{method} {path}"
        assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"
    assert sorted(op["operationId"] for op in writes.values()) == sorted([*WRITES, *UNRUN_WRITES])
    assert set(writes) | set(public) <= unsafe_routes(create_app(connect_url(str(tmp_path / "r.sqlite3"))))
    reads = [op for item in doc["paths"].values() for m, op in item.items() if m == "get"]
    signed_in = ("getMe", "listTokens")  # an account's own: a token's or a session's
    assert all("security" not in op for op in reads if op["operationId"] not in signed_in)  # reads are public
    me = doc["paths"]["/api/v1/me"]["get"]  # who am I: a token's or a session's own account
    assert {"bearer": []} in me["security"] and "401" in me["responses"]


def test_a_stored_report_and_its_raw_files_answer_200_in_their_schemas(api_schema: Any) -> None:
    """Explicit cases with the stored report's id (a generated id is a 404): every check, the 200
    path included, and the bodies are the stored files."""
    find = api_schema.find_operation_by_id
    for op in ("getReport", "getReportById"):
        r = find(op).Case(path_parameters={"id": REPORT_ID}).call_and_validate()
        assert r.status_code == 200, r.text
        doc = r.json()
        assert (doc["id"], doc["slug"], doc["files"]) == (
            REPORT_ID,
            "llama31-8b-rtx4090-sglang",
            sorted(REPORT_FILES),
        )
        assert doc["fingerprint"] == json.loads(REPORT_FILES["fingerprint.json"])
    media = {"json": "application/json", "md": "text/markdown"}  # the rest (JSON Lines too): text/plain
    for name, text in REPORT_FILES.items():
        if name.startswith("logs/"):
            op, params = "getReportLog", {"log": name.removeprefix("logs/")}
        else:
            op, params = "getReportFile", {"name": name}
        r = find(op).Case(path_parameters={"id": REPORT_ID} | params).call_and_validate()
        assert r.status_code == 200 and r.text == text, (name, r.status_code)
        kind = r.headers["content-type"][0].split(";")[0]
        assert kind == media.get(name.rpartition(".")[2], "text/plain"), (name, kind)
    row = (
        find("getRecipe")
        .Case(path_parameters={"slug": "llama31-8b-rtx4090-sglang"})
        .call_and_validate()
        .json()
    )
    (verified,) = [m for m in row["measurements"] if m["tier"] == "verified"]
    assert verified["links"]["fingerprint"] == f"/reports/{REPORT_ID}/files/fingerprint.json"
    assert verified["links"]["logs"] == f"/reports/{REPORT_ID}/files/logs/engine.log"
    (quality,) = [q for q in row["quality"] if q["tier"] == "verified"]
    assert quality["links"]["samples"] == f"/reports/{REPORT_ID}/files/eval_samples.jsonl"


def test_the_document_describes_the_report_routes(api_schema: object) -> None:
    paths = api_schema.raw_schema["paths"]  # type: ignore[attr-defined]
    assert {"/api/v1/reports/{id}", "/api/v1/reports/{id}.json", "/reports/{id}/files/{name}"} <= set(paths)
    ok = paths["/reports/{id}/files/{name}"]["get"]["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/markdown", "text/plain"}


def test_report_upload_refusals_answer_in_the_error_schema(write_schema: Any, write_db: Path) -> None:
    """Explicit bodies for each documented refusal of ``POST /api/v1/reports``: every check (the
    response schemas included) and the reason the envelope gives."""
    op = write_schema.find_operation_by_id("submitReport")
    engine = make_engine(connect_url(str(write_db / "registry.sqlite3")))
    with engine.begin() as conn:
        uid = create_user(conn, "uploader")
        tokens = {s: create_token(conn, uid, "cli", (s,)) for s in ("read", "publish")}
    engine.dispose()

    def send(body: bytes, status: int, needle: str, token: str | None = tokens["publish"]) -> None:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        case = op.Case(body=body, media_type="application/gzip", headers=auth)
        r = case.call_and_validate(excluded_checks=[positive_data_acceptance, ignored_auth])
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["status"] == status and needle in error["message"], error

    send(b"\x1f\x8b not really gzip", 422, "corrupt archive")
    send(tgz({"run/notes.txt": b"hello"}), 422, "results.json")
    send(tgz({"../escape.json": b"{}"}), 422, "path traversal")
    send(b"\0" * (MAX_ARCHIVE_BYTES + 1), 413, "the limit is 16,777,216")
    send(tgz({"results.json": b"{}"}), 401, "sign in first", token=None)
    send(tgz({"results.json": b"{}"}), 403, "'publish' scope", token=tokens["read"])
