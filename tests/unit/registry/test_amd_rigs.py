"""A report fingerprinted on AMD GPUs (the names amd-smi prints, :mod:`lair.report.fingerprint`) is
held to their catalog roofline as an NVIDIA one is, through the real upload route on SQLite and
PostgreSQL: above it refused, under it verified when its certificate holds an energy figure. A run on
AMD as lair's bench records it today (no GPU telemetry: it samples NVIDIA GPUs only) is accepted and
rated, but not verified, and not refused for the telemetry it cannot have. The ceiling is computed by
hand from Llama 3.1 8B's shapes (as in test_verified_physics) and AMD's MI300X bandwidth (5.3 TB/s)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient
from test_verified_physics import KV_BYTES_AT_2K, LLAMA_SLUG, WEIGHT_BYTES, World, _report, _rows, _upload

from lair.registry.service.canonical import parse_recipe
from lair.registry.service.report_view import rig_summary
from lair.registry.service.verify import _ratings, _roofline

MI300X_CEILING = 5300e9 / (WEIGHT_BYTES + KV_BYTES_AT_2K)  # 346.9 tok/s per stream on one MI300X
# what the fingerprint reads from amd-smi on an MI300X (ROCm 7 spelling; ROCm 6.2-6.3 printed MI300X-O)
MI300X = {"vendor": "amd", "count": 1, "models": ["AMD Instinct MI300X"], "memory": ["196592 MB"]}


@pytest.fixture
def world(llama_client: tuple[TestClient, Engine, str]) -> World:
    client, engine, token = llama_client
    return World(client, engine, {"alice": token})


def _pct(decode: float) -> float:
    return 100 * decode / MI300X_CEILING


@pytest.mark.parametrize("name", ["AMD Instinct MI300X", "MI300X-O", "AMD Instinct MI300X VF"])
def test_the_upload_check_rates_cells_on_the_mi300x_roofline(name: str) -> None:
    recipe = parse_recipe(LLAMA.read_text())  # meta.hardware: one RTX 4090, never read here
    cell = {"context": 2048, "prompt_tokens": 2048, "concurrency": 1, "decode_tok_s_per_stream": 300.0}
    (rate,), why = _ratings(*_roofline(recipe, {"gpus": MI300X | {"models": [name]}}), [cell])
    assert why == "" and rate["gpus"] == "1x AMD Instinct MI300X"
    # 86.5%; on the recipe's 4090 it would be 455%
    assert not rate["implausible"] and abs(rate["decode_pct"] - _pct(300.0)) < 0.2


def test_above_the_mi300x_roofline_is_refused_and_under_it_verified(world: World) -> None:
    over = _upload(world, _report(world, LLAMA_SLUG, 20_000.0, MI300X, contexts=(2048,), ttft_ms=100.0))
    assert over.status_code == 422, over.text
    (reason,) = [x for x in over.json()["error"]["reasons"] if "roofline" in x]
    ceiling = float(re.search(r"ceiling ([0-9,.]+)", reason).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert abs(ceiling - MI300X_CEILING) / MI300X_CEILING < 0.005
    files = _report(world, LLAMA_SLUG, 0.9 * MI300X_CEILING, MI300X, contexts=(2048,), ttft_ms=100.0)
    ok = _upload(world, files)  # a certificate with an energy figure (300 W: within 30 to 825 W)
    assert ok.status_code == 201, ok.text
    (row,) = ok.json()["rows"]
    assert (row["provenance"], row["note"]) == ("verified", "")
    assert abs(row["roofline"]["decode_pct"] - 90.0) < 0.5
    assert row["roofline"]["gpus"] == "1x AMD Instinct MI300X"


def _on_gpus(files: dict[str, bytes], gpus: dict[str, Any]) -> dict[str, bytes]:
    """The report of a run without GPU telemetry, its fingerprint naming ``gpus``."""
    doc = json.loads(files["results.json"])
    doc["fingerprint"]["gpus"] = gpus
    return files | {
        "results.json": json.dumps(doc).encode(),
        "fingerprint.json": json.dumps(doc["fingerprint"]).encode(),
    }


def test_an_amd_run_without_gpu_telemetry_is_rated_not_verified(world: World) -> None:
    """What lair's bench writes on an AMD rig: telemetry "none", no GPU samples, no energy, no CUDA."""
    cpu_run = _report(world, LLAMA_SLUG, 0.9 * MI300X_CEILING, None, contexts=(2048,), ttft_ms=100.0)
    r = _upload(world, _on_gpus(cpu_run, MI300X))
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "reported-by-report"
    assert "no energy figure" in row["note"] and "1x AMD Instinct MI300X" in row["note"]
    assert abs(row["roofline"]["decode_pct"] - 90.0) < 0.5
    (shown,) = _rows(world, LLAMA_SLUG)
    assert shown["tier"] == "reported-by-report"
    over = _report(world, LLAMA_SLUG, 20_000.0, None, contexts=(2048,), run_name="over")
    assert _upload(world, _on_gpus(over, MI300X)).status_code == 422  # still held to the roofline


def test_the_report_page_gives_an_amd_rig_s_rocm_version_not_cuda() -> None:
    rig = dict(rig_summary({"gpus": MI300X | {"driver": "6.18.3", "rocm": "7.0.2"}}))
    assert (rig["GPUs"], rig["driver"], rig["ROCm"]) == ("1x AMD Instinct MI300X", "6.18.3", "7.0.2")
    assert "CUDA" not in rig


def test_an_nvidia_run_without_gpu_telemetry_is_still_refused(world: World) -> None:
    h100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
    cpu_run = _report(world, LLAMA_SLUG, 100.0, None, contexts=(2048,))
    r = _upload(world, _on_gpus(cpu_run, h100))
    assert r.status_code == 422, r.text
    assert any("no GPU telemetry" in x for x in r.json()["error"]["reasons"])


def test_a_fingerprint_saying_amd_beside_nvidia_names_is_held_to_nvidias_telemetry(world: World) -> None:
    """vendor "amd" lets a run off the GPU-telemetry check only when amd-smi names every GPU: an H100
    report that says "amd" is refused for the telemetry it lacks, as without the word."""
    h100 = {"vendor": "amd", "count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
    cpu_run = _report(world, LLAMA_SLUG, 100.0, None, contexts=(2048,))
    r = _upload(world, _on_gpus(cpu_run, h100))
    assert r.status_code == 422, r.text
    assert any("no GPU telemetry" in x for x in r.json()["error"]["reasons"])
