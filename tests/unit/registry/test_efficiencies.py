"""``/api/v1/efficiencies`` on SQLite and PostgreSQL: each verified row the registry can rate, as its
measured speed over the roofline of the GPUs its report's fingerprint names (worked out by hand from the
model's bytes per token and the H100 SXM's datasheet bandwidth); reported rows, retracted rows and a
CPU-only rig's rows are left out."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.tables import MEASUREMENTS, RECIPES, REPORTS, REVISIONS
from lair.registry.db.version import now
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app

SLUG = "llama31-8b-rtx4090-sglang"  # engine sglang; a reported row of 30 tok/s at 2K

# Llama 3.1 8B in bf16: per layer q and o 4096x4096, k and v 4096x1024, the MLP 3x 4096x14336, and the lm
# head 128256x4096, 2 bytes a weight; the KV of 2,048 tokens: 32 layers x 8 heads x 128 x (K, V) x 2 bytes
WEIGHT_BYTES = 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096)
KV_BYTES_AT_2K = 2048 * (32 * 8 * 128 * 2 * 2)
H100_SXM = 3350e9  # bytes/s, NVIDIA H100 datasheet
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"], "driver": "570.0"}


def _report(conn: sa.Connection, rid: str, gpus: dict[str, Any] | None, decode: float, **row: Any) -> int:
    recipe_id, revision_id = conn.execute(
        sa.select(RECIPES.c.id, REVISIONS.c.id)
        .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
        .where(RECIPES.c.slug == SLUG)
    ).one()
    fp = {"cpu": {"model": "x", "count": 2, "arch": "x86_64"}, "ram_bytes": 1 << 34, "gpus": gpus}
    ids = {"recipe_id": recipe_id, "revision_id": revision_id, "rig_fingerprint": f"rig-{rid}"}
    conn.execute(
        sa.insert(REPORTS).values(
            id=rid, digest=rid * 4, fingerprint=json.dumps(fp), files="[]", created_at=now(), **ids
        )
    )
    values = {"context": 2048, "concurrency": 1, "provenance": "verified", "report_id": rid} | row
    return int(
        conn.execute(
            sa.insert(MEASUREMENTS)
            .values(decode_tok_s=decode, created_at=now(), **ids, **values)
            .returning(MEASUREMENTS.c.id)
        ).scalar_one()
    )


@pytest.fixture
def answer(engine: Engine, db_url: str) -> tuple[dict[str, Any], int]:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
        kept = _report(conn, "a1" * 8, H100, 150.0)
        _report(conn, "b2" * 8, H100, 140.0, retracted_at=now(), retracted_reason="wrong")
        _report(conn, "c3" * 8, None, 20.0)  # a CPU-only rig: no roofline
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        res = c.get("/api/v1/efficiencies")
    assert res.status_code == 200
    return res.json(), kept


def test_a_verified_row_is_its_speed_over_its_fingerprints_roofline(
    answer: tuple[dict[str, Any], int],
) -> None:
    doc, kept = answer
    assert doc["ok"] is True and doc["count"] == 1
    (row,) = doc["rows"]
    assert row["id"] == f"{SLUG}@1#{kept}" and row["link"] == f"/recipes/{SLUG}#row-{kept}"
    assert (row["engine"], row["model_class"], row["weight_format"]) == ("sglang", "dense", "bf16")
    ceiling = H100_SXM / (WEIGHT_BYTES + KV_BYTES_AT_2K)  # 219.4 tok/s
    assert row["decode"] == pytest.approx(150.0 / ceiling, abs=0.0005)  # 0.684, rated to 0.1%
    assert row["decode_tok_s"] == 150.0 and row["decode_roofline_tok_s"] == pytest.approx(ceiling, abs=0.05)
    assert row["prefill"] is None and row["gpu"] == "1x NVIDIA H100 SXM" and row["source"] == "registry"
    assert (row["context"], row["concurrency"]) == (2048, 1)


def test_the_fit_widget_predicts_from_the_rows_of_the_recipes_engine(engine: Engine, db_url: str) -> None:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
        kept = _report(conn, "a1" * 8, H100, 150.0)
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        doc = c.get(f"/recipes/{SLUG}/fit.json?gpu=H100&context=2048").json()
        page = c.get(f"/recipes/{SLUG}/fit?gpu=H100&context=2048").text
    p = doc["prediction"]
    assert p["key"] == {"engine": "sglang", "model_class": "dense", "weight_format": "bf16"}
    eff = p["decode_efficiency"]  # one verified sglang row: too few for a band, so the default one
    assert eff["basis"] == "default" and eff["rows"] == 1 and eff["row_ids"] == [f"{SLUG}@1#{kept}"]
    ceiling = H100_SXM / (WEIGHT_BYTES + KV_BYTES_AT_2K)
    assert p["decode_per_stream_tok_s"]["expected"] == round(0.50 * ceiling, 1)  # 109.7
    assert '<li id="predicted">predicted decode (sglang, dense, bf16):' in page
    assert "the default band (1 matching row; a band needs 3)" in page
