""" "Verified" means physically checked, through the real upload route on SQLite and PostgreSQL: made-up
reports whose raw timings agree with their cells (a forger's script) are never verified. On a CPU-only
rig, on a GPU name nvidia-smi never prints, or for a model whose facts the registry lacks, a report is
accepted as reported-by-report with the reason in the recipe's JSON and on its page, and it never ranks
under ``verified=1``; above the roofline of a real GPU it is refused (422); negative times are refused.
Rooflines are computed by hand from Llama 3.1 8B's shapes and the datasheet bandwidths."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.fit import find_device_by_smi_name
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import tgz

LLAMA_SLUG = "llama31-8b-rtx4090-sglang"
# Llama 3.1 8B in bf16: bytes a decode step reads at ctx 2048, concurrency 1 (as in test_roofline_basis):
# the layers' and lm head's weights (the input embedding is a lookup) and the KV cache of 2048 tokens
WEIGHT_BYTES = 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096)
KV_BYTES_AT_2K = 2048 * (32 * 8 * 128 * 2 * 2)
H100_CEILING = 3350e9 / (WEIGHT_BYTES + KV_BYTES_AT_2K)  # 219.3 tok/s per stream on the H100 SXM
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
FORGED_GPUS = ["none", "NVIDIA RTX PRO 6000 Blackwell", "NVIDIA FAKE 9000"]


@dataclass
class World:
    client: TestClient
    engine: Engine
    tokens: dict[str, str]


@pytest.fixture
def world(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[World]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        tokens = {who: create_token(conn, create_user(conn, who), "cli") for who in ("alice", "bob")}
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, engine, tokens)


def _revision(w: World, slug: str) -> tuple[str, str]:
    with w.engine.connect() as conn:
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == slug)
        ).one()
    return str(toml), str(sha)


def _upload(w: World, files: dict[str, bytes], who: str = "alice") -> Any:
    headers = {"authorization": f"Bearer {w.tokens[who]}", "content-type": "application/gzip"}
    return w.client.post("/api/v1/reports", content=tgz(files), headers=headers)


def _report(w: World, slug: str, decode: float, gpus: dict[str, Any] | None, **kw: Any) -> dict[str, bytes]:
    toml, sha = _revision(w, slug)
    return made_up_report(toml, sha, decode_tok_s=decode, gpus=gpus, **kw)


def _gpus(name: str) -> dict[str, Any]:
    return {"count": 1, "models": [name], "memory": ["97887 MiB"]}


def _rows(w: World, slug: str) -> list[dict[str, Any]]:
    r = w.client.get(f"/api/v1/recipes/{slug}.json")
    assert r.status_code == 200, r.text
    return [m for m in r.json()["measurements"] if m["report_id"]]


def _verified_slugs(w: World) -> list[str]:
    r = w.client.get("/api/v1/recipes", params={"sort": "decode", "verified": 1})
    return [i["slug"] for i in r.json()["items"]]


def test_nvidia_smi_names_and_only_those_name_catalog_gpus() -> None:
    assert find_device_by_smi_name("NVIDIA H100 80GB HBM3").id == "h100-sxm"  # type: ignore[union-attr]
    assert find_device_by_smi_name("NVIDIA GeForce RTX 4090").id == "rtx-4090"  # type: ignore[union-attr]
    rtx_pro = find_device_by_smi_name("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    assert rtx_pro is not None and rtx_pro.id == "rtx-pro-6000"
    assert find_device_by_smi_name("NVIDIA H200").id == "h200"  # type: ignore[union-attr]  # on an H200 host
    # the catalog's own display name, a shorthand, a part of a name and made-up names are no nvidia-smi name
    for name in (*FORGED_GPUS, "RTX 4090", "H100", "NVIDIA H100", "NVIDIA GeForce RTX 40", ""):
        assert find_device_by_smi_name(name) is None, name


def test_the_tiny_recipe_at_50000_tok_s_on_a_cpu_rig_is_reported_by_report(world: World) -> None:
    r = _upload(world, _report(world, "tiny-cpu", 50_000.0, None))
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "reported-by-report"
    assert row["note"] == "no roofline: the fingerprint names no GPU"
    (shown,) = _rows(world, "tiny-cpu")
    assert (shown["tier"], shown["provenance"], shown["note"]) == (
        "reported-by-report",
        "reported-by-report",
        "no roofline: the fingerprint names no GPU",
    )
    assert abs(shown["decode_tok_s"] - 50_000.0) < 50  # the report's word, kept as said
    page = world.client.get("/recipes/tiny-cpu").text
    cell = re.search(r'<td class="tier" data-tier="reported-by-report">(.*?)</td>', page, re.S)
    assert cell and "not verified: no roofline: the fingerprint names no GPU" in cell.group(1)
    assert "tiny-cpu" not in _verified_slugs(world)


@pytest.mark.parametrize("gpu", FORGED_GPUS)
def test_the_seed_recipe_at_20000_tok_s_is_never_verified(world: World, gpu: str) -> None:
    """dsv41-flash-exl3-2x names no model the registry has facts for: whatever GPU the fingerprint
    says, nothing can hold its rows to a roofline."""
    r = _upload(world, _report(world, "dsv41-flash-exl3-2x", 20_000.0, _gpus(gpu), contexts=(2048,)))
    assert r.status_code == 201, r.text
    (shown,) = _rows(world, "dsv41-flash-exl3-2x")
    assert shown["tier"] == "reported-by-report" and shown["note"].startswith("model facts unknown")
    assert "dsv41-flash-exl3-2x" not in _verified_slugs(world)
    page = world.client.get("/recipes/dsv41-flash-exl3-2x").text
    assert "not verified: model facts unknown" in page


@pytest.mark.parametrize("gpu", FORGED_GPUS)
def test_a_known_model_on_a_gpu_nvidia_smi_never_names_is_reported_by_report(world: World, gpu: str) -> None:
    r = _upload(world, _report(world, LLAMA_SLUG, 20_000.0, _gpus(gpu), contexts=(2048,)))
    assert r.status_code == 201, r.text
    (shown,) = _rows(world, LLAMA_SLUG)
    assert shown["tier"] == "reported-by-report"
    assert shown["note"] == f"no roofline: no catalog GPU is called {gpu!r} by nvidia-smi or amd-smi"
    assert LLAMA_SLUG not in _verified_slugs(world)


def test_above_the_roofline_of_a_real_gpu_is_refused_and_under_it_verified(world: World) -> None:
    over = _upload(world, _report(world, LLAMA_SLUG, 20_000.0, H100, contexts=(2048,), ttft_ms=100.0))
    assert over.status_code == 422, over.text
    (reason,) = [x for x in over.json()["error"]["reasons"] if "roofline" in x]
    # the 20,000 tok/s per stream against the hand-computed ceiling of the H100 SXM
    ceiling = float(re.search(r"ceiling ([0-9,.]+)", reason).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert reason.startswith("cell ctx 2048 x1: above 100% of the roofline (decode 20,000.0 tok/s")
    assert abs(ceiling - H100_CEILING) / H100_CEILING < 0.005
    ok = _upload(world, _report(world, LLAMA_SLUG, 0.9 * H100_CEILING, H100, contexts=(2048,), ttft_ms=100.0))
    assert ok.status_code == 201, ok.text
    (row,) = ok.json()["rows"]
    assert (row["provenance"], row["note"]) == ("verified", "")
    assert abs(row["roofline"]["decode_pct"] - 90.0) < 0.5
    assert _rows(world, LLAMA_SLUG)[0]["tier"] == "verified"
    assert LLAMA_SLUG in _verified_slugs(world)


def test_negative_times_are_refused_with_their_place(world: World) -> None:
    files = _report(world, "tiny-cpu", 1000.0, None)
    lines = files["requests.jsonl"].decode().splitlines()
    lines[1] = lines[1].replace('"send_ms": 0.0', '"send_ms": -1e15')
    files["requests.jsonl"] = ("\n".join(lines) + "\n").encode()
    r = _upload(world, files)
    assert r.status_code == 422, r.text
    reasons = r.json()["error"]["reasons"]
    assert any("requests.jsonl" in x and "line 2" in x and "send_ms" in x for x in reasons), reasons
    with world.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(MEASUREMENTS).where(
            MEASUREMENTS.c.report_id.is_not(None))).scalar_one() == 0  # fmt: skip
