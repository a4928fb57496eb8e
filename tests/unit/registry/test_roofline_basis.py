"""% of roofline on the recipe page, on SQLite and PostgreSQL: a reported row is rated on the recipe's
declared GPUs (one RTX 4090), a verified row on the GPU its report's fingerprint names (an H100 SXM),
a verified row from a CPU-only rig is not rated; each cell says which. Expected percentages are
computed by hand from the model's bytes per token and the GPUs' datasheet bandwidths."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
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
from lair.testing.registry import rendered

SLUG = "llama31-8b-rtx4090-sglang"  # meta.hardware: 1x RTX 4090; reported 30 tok/s at 2K

# Llama 3.1 8B in bf16 (config.json): per layer q and o 4096x4096, k and v 4096x1024, the MLP 3x 4096x14336;
# the lm head 128256x4096 (the input embedding is a lookup: one row read per token); 2 bytes a weight.
WEIGHT_BYTES = 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096)
KV_BYTES_AT_2K = 2048 * (32 * 8 * 128 * 2 * 2)  # 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes
H100_SXM = 3350e9  # bytes/s, NVIDIA H100 datasheet (SXM: 3.35 TB/s)
RTX_4090 = 1008e9  # bytes/s, NVIDIA RTX 4090 specifications (1,008 GB/s)


def _pct(decode: float, bandwidth: float) -> float:
    return 100 * decode / (bandwidth / (WEIGHT_BYTES + KV_BYTES_AT_2K))


def _report(conn: sa.Connection, rid: str, gpus: dict[str, object] | None, decode: float) -> None:
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
    conn.execute(
        sa.insert(MEASUREMENTS).values(
            context=2048, concurrency=1, decode_tok_s=decode, provenance="verified", report_id=rid,
            created_at=now(), **ids,
        )
    )  # fmt: skip
    rendered(conn, SLUG)  # as an accepted upload's write renders the recipe's documents


@pytest.fixture
def page(engine: Engine, db_url: str) -> Iterator[str]:
    h100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"], "driver": "570.0"}
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
        _report(conn, "a1" * 8, h100, 150.0)  # 150 tok/s: above a 4090's ceiling, fine on an H100
        _report(conn, "c2" * 8, None, 20.0)  # a CPU-only rig
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield c.get(f"/recipes/{SLUG}").text


def _cells(page: str) -> list[tuple[str, str, str]]:
    rows = re.findall(r'<tr class="[^"]*" data-provenance="(\w+)">(.*?)</tr>', page, re.S)
    out = []
    for tier, row in rows:
        cell = re.search(r'<td class="roofline" data-basis="(\w*)">(.*?)</td>', row, re.S)
        assert cell, row
        speed = re.search(r"<td>([0-9.,]+) tok/s</td>\s*<td>", row)
        out.append((tier, speed.group(1) if speed else "", cell.group(1) + "|" + cell.group(2)))
    return out


def test_verified_rows_are_rated_on_their_fingerprint_gpu_reported_on_the_recipes(page: str) -> None:
    cells = {(tier, speed): cell for tier, speed, cell in _cells(page)}
    reported, verified = cells[("reported", "30")], cells[("verified", "150")]
    assert (
        reported.startswith("recipe|") and "on 1x NVIDIA GeForce RTX 4090 (the recipe&#39;s GPUs)" in reported
    )
    assert (
        verified.startswith("fingerprint|")
        and "on 1x NVIDIA H100 SXM (the report&#39;s fingerprint)" in verified
    )
    got = {
        k: float(re.search(r"decode ([0-9.]+)%", c).group(1)) for k, c in (("r", reported), ("v", verified))
    }  # type: ignore[union-attr]
    assert abs(got["r"] - _pct(30, RTX_4090)) < 0.2  # 45.5%
    assert abs(got["v"] - _pct(150, H100_SXM)) < 0.2  # 68.4%; on the recipe's 4090 it would be 227%
    assert "implausible" not in verified


def test_a_verified_row_from_a_cpu_rig_has_no_roofline_and_says_why(page: str) -> None:
    cpu = {(tier, speed): cell for tier, speed, cell in _cells(page)}[("verified", "20")]
    assert cpu == 'fingerprint|<span title="no roofline: the fingerprint names no GPU">—</span>'
    assert "% of roofline: no roofline: the fingerprint names no GPU." in page


def test_the_upload_check_rates_cells_on_the_fingerprint_gpu_not_the_recipes() -> None:
    """The same cell of the same recipe (declared: one RTX 4090) passes on an H100 fingerprint and is
    above the roofline on a 4090 one: the check reads the fingerprint, never meta.hardware."""
    from lair.registry.service.canonical import parse_recipe
    from lair.registry.service.verify import _ratings, _roofline

    def rated(fp: dict[str, Any]) -> tuple[list[Any], str]:
        return _ratings(*_roofline(recipe, fp), [cell])

    recipe = parse_recipe(LLAMA.read_text())
    cell = {"context": 2048, "prompt_tokens": 2048, "concurrency": 1, "decode_tok_s_per_stream": 150.0}
    on = {
        n: {"gpus": {"count": 1, "models": [n]}} for n in ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090")
    }
    (h100,), _ = rated(on["NVIDIA H100 80GB HBM3"])
    (rtx,), _ = rated(on["NVIDIA GeForce RTX 4090"])
    assert not h100["implausible"] and abs(h100["decode_pct"] - _pct(150, H100_SXM)) < 0.2
    assert rtx["implausible"] and abs(rtx["decode_pct"] - _pct(150, RTX_4090)) < 0.5  # 227%
    assert rated({"gpus": None}) == ([None], "no roofline: the fingerprint names no GPU")
