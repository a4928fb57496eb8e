"""A cell whose answers fail the bench's validity gate is never verified, through the real upload
route (SQLite and PostgreSQL): the same report verifies with valid answers and is stored
reported-by-report, its note naming the problem, when a row's verdict or the cell's certificate says
``invalid-output``; the token bounds are recomputed from the rows' completion-token counts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.tables import RECIPES, REVISIONS
from lair.registry.service.output_gate import invalid_output_reasons
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import tgz

SLUG = "llama31-8b-rtx4090-sglang"
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
REPEATED = "one unit repeated for the whole answer: 'tok'"


@pytest.fixture
def client(llama_client: tuple[TestClient, Engine, str]) -> tuple[TestClient, Engine, str]:
    return llama_client


def _report(c: tuple[TestClient, Engine, str], name: str, bad_row: bool, bad_cert: bool) -> dict[str, bytes]:
    with c[1].connect() as conn:
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == SLUG)
        ).one()
    files = made_up_report(
        str(toml), str(sha), decode_tok_s=150.0, gpus=H100, contexts=(2048,), ttft_ms=100.0, run_name=name
    )
    rows = [json.loads(line) for line in files["requests.jsonl"].decode().splitlines()]
    for row in rows:
        row["output_check"] = REPEATED if bad_row else ""
    files["requests.jsonl"] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    doc = json.loads(files["results.json"])
    example = {"repeat": 0, "index": 0, "problem": REPEATED, "text": " tok tok"}
    doc["bench"]["cells"][0]["certificate"]["output"] = {
        "checked": len(rows), "invalid": len(rows) if bad_cert else 0,
        "examples": [example] if bad_cert else [], "token_bounds": [29, 35], "valid": not bad_cert,
    }  # fmt: skip
    files["results.json"] = json.dumps(doc).encode()
    return files


def _upload(c: tuple[TestClient, Engine, str], files: dict[str, bytes]) -> Any:
    headers = {"authorization": f"Bearer {c[2]}", "content-type": "application/gzip"}
    return c[0].post("/api/v1/reports", content=tgz(files), headers=headers)


def test_invalid_answers_are_reported_by_report_with_the_reason(
    client: tuple[TestClient, Engine, str],
) -> None:
    good = _upload(client, _report(client, "good", bad_row=False, bad_cert=False))
    assert good.status_code == 201, good.text
    assert [(r["provenance"], r["note"]) for r in good.json()["rows"]] == [("verified", "")]
    for name, bad_row, bad_cert in (("rows", True, False), ("cert", False, True)):
        bad = _upload(client, _report(client, name, bad_row=bad_row, bad_cert=bad_cert))
        assert bad.status_code == 201, bad.text
        (row,) = bad.json()["rows"]
        assert (row["provenance"], row["note"]) == (
            "reported-by-report",
            f"cell ctx 2048 x1: invalid-output: {REPEATED}",
        )


def test_token_bounds_are_recomputed_from_the_rows() -> None:
    cell = {"context": 256, "concurrency": 2, "flags": [], "certificate": {}}
    rows = [
        {"context": 256, "concurrency": 2, "status": 200, "error": "", "completion_tokens": n}
        for n in (32, 28, 36, 29)
    ] + [{"context": 256, "concurrency": 2, "status": 500, "error": "HTTP 500", "completion_tokens": 0}]
    # 0.9 x 32 = 28.8 -> 29 at least, 1.1 x 32 = 35.2 -> 35 at most
    assert invalid_output_reasons(cell, rows, {"decode_tokens": 32, "force_output": True}) == [
        "cell ctx 256 x2: invalid-output: 28 completion tokens, 32 asked (allowed 29-35)",
        "cell ctx 256 x2: invalid-output: 36 completion tokens, 32 asked (allowed 29-35)",
    ]
    assert invalid_output_reasons(cell, rows, {"decode_tokens": 32, "force_output": False}) == []
