"""A noisy cell is never verified, through the real upload route on SQLite and PostgreSQL: a report
that is verified with a quiet machine certificate (under the H100's roofline) is stored as
reported-by-report, its note beginning with the certificate's reason, when its cell says ``noisy``;
a malformed machine certificate is a located 422."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.bench import definitions as d
from lair.bench.results import MachineCertificate
from lair.registry.db.tables import RECIPES, REVISIONS
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import tgz

SLUG = "llama31-8b-rtx4090-sglang"
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
DECODE = 150.0  # under the H100 SXM's 219 tok/s ceiling at 2048 (test_verified_physics' hand computation)


@pytest.fixture
def client(llama_client: tuple[TestClient, Engine, str]) -> tuple[TestClient, Engine, str]:
    return llama_client


def _machine(other_cores: float) -> dict[str, Any]:
    """A cell's machine certificate as the bench writes it, other processes at ``other_cores`` of 2."""
    cpu = {
        "cpus": 2, "window_s": 2.0, "system_busy_cores": 0.3 + other_cores, "steal_fraction": 0.0,
        "client_cpu_cores": 0.05, "engine_cpu_cores": 0.25, "other_cpu_cores": other_cores,
        "other_cpu_fraction": other_cores / 2, "run_queue_max": 2,
    }  # fmt: skip
    reasons = d.noise_reasons(cpu, {})
    cert = MachineCertificate(
        cpu=cpu, engine_cpu="process tree of 4242 (1 processes)",
        gpu_processes={"checked": True, "processes": []}, repeat_spread={}, noisy=bool(reasons),
        reasons=reasons, limits=dict(d.NOISE_LIMITS),
    )  # fmt: skip
    return asdict(cert)


def _report(c: tuple[TestClient, Engine, str], name: str, machine: dict[str, Any]) -> dict[str, bytes]:
    with c[1].connect() as conn:
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == SLUG)
        ).one()
    files = made_up_report(
        str(toml), str(sha), decode_tok_s=DECODE, gpus=H100, contexts=(2048,), ttft_ms=100.0, run_name=name
    )
    doc = json.loads(files["results.json"])
    doc["bench"]["cells"][0]["certificate"]["machine"] = machine
    files["results.json"] = json.dumps(doc).encode()
    return files


def _upload(c: tuple[TestClient, Engine, str], files: dict[str, bytes]) -> Any:
    headers = {"authorization": f"Bearer {c[2]}", "content-type": "application/gzip"}
    return c[0].post("/api/v1/reports", content=tgz(files), headers=headers)


def test_a_noisy_cell_is_reported_by_report_with_its_reason(client: tuple[TestClient, Engine, str]) -> None:
    quiet = _upload(client, _report(client, "quiet", _machine(0.01)))
    assert quiet.status_code == 201, quiet.text
    assert [(r["provenance"], r["note"]) for r in quiet.json()["rows"]] == [("verified", "")]
    noisy = _upload(client, _report(client, "noisy", _machine(1.7)))
    assert noisy.status_code == 201, noisy.text
    (row,) = noisy.json()["rows"]
    # 1.7 of 2 cores = 85%, over the 25% limit: the bench's own words, located by the cell
    assert (row["provenance"], row["note"]) == (
        "reported-by-report",
        "cell ctx 2048 x1: noisy: other processes used 1.70 of 2 cores (85%, limit 25%)",
    )
    page = client[0].get(f"/api/v1/recipes/{SLUG}.json").json()
    (shown,) = [m for m in page["measurements"] if m["report_id"] == noisy.json()["id"]]
    assert shown["tier"] == "reported-by-report" and shown["note"].startswith("cell ctx 2048 x1: noisy:")


def test_a_malformed_machine_certificate_is_a_located_422(client: tuple[TestClient, Engine, str]) -> None:
    bad = _machine(1.7) | {"noisy": "yes"}
    r = _upload(client, _report(client, "bad", bad))
    assert r.status_code == 422, r.text
    assert any("machine.noisy" in x for x in r.json()["error"]["reasons"]), r.json()["error"]["reasons"]
