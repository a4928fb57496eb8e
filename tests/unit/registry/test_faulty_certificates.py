"""A GPU rig's certificate that is faulty in one way is refused with that one reason, and no row of it
is stored, let alone verified (:func:`lair.registry.service.recompute.check_certificate`).

The report is one H200 run as the registry receives it: cells computed from their raw timings by the
bench's own definitions (:func:`lair.testing.forged_reports.made_up_report`), a fingerprint naming one
``NVIDIA H200`` as nvidia-smi prints it, and the GPU window, driver, CUDA and NVML versions that NVML
measured on a real H200 (``benchmarks/results/gpu_telemetry_h200.json``: 228 samples under an fp16
matmul load, 542 W average, power-capped). Its cache is proven cold as vLLM's is: an engine hit
counter whose deltas are 0 and responses with 0 cached tokens. As measured it is verified; each case
edits one field of its certificate and expects the registry's reason word for word (the reasons
are the ones ``docs/registry-reports.md`` lists). The refusal comes before anything is stored, so the
cases share one registry on SQLite (the rules are the same on PostgreSQL: nothing reaches it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, ROOT
from starlette.testclient import TestClient

from lair.registry.db.engine import connect_url, make_engine, migrate
from lair.registry.db.tables import RECIPES, REVISIONS
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import tgz

SLUG = "llama31-8b-rtx4090-sglang"
H200_RUN = json.loads((ROOT / "benchmarks" / "results" / "gpu_telemetry_h200.json").read_text())["nvml"]
H200 = {"count": 1, "models": H200_RUN["info"]["gpus"], "memory": ["143771 MiB"]}
CELL = "cell ctx 2048 x1"
REPEATS = 2


@dataclass
class World:
    client: TestClient
    token: str
    toml: str
    sha: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    reset_limits()
    root = tmp_path_factory.mktemp("registry")
    url = connect_url(str(root / "registry.sqlite3"))
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        token = create_token(conn, create_user(conn, "alice"), "cli")
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == SLUG)
        ).one()
    engine.dispose()
    with TestClient(create_app(url, blobs=str(root / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, token, str(toml), str(sha))


def _as_measured(files: dict[str, bytes]) -> dict[str, Any]:
    """results.json with the H200's measured window, its energy over the cell's own span at the
    window's average and peak watts, its software versions and a cold engine hit counter."""
    doc = json.loads(files["results.json"])
    window, info = H200_RUN["window"], H200_RUN["info"]
    (cell,) = doc["bench"]["cells"]
    cert = cell["certificate"]
    seconds = cert["energy"]["seconds"]
    out, prompt = cert["energy"]["output_tokens"], cert["energy"]["prompt_tokens"]
    joules = window["avg_w"] * seconds
    cert["gpu"] = dict(window)
    cert["energy"] |= {
        "energy_j": joules, "avg_w": window["avg_w"], "peak_w": window["peak_w"],
        "j_per_output_token": joules / out, "j_per_prompt_token": joules / prompt,
        "output_tokens_per_kwh": out / (joules / 3.6e6),
    }  # fmt: skip
    cell["engine_metrics"] = [{"prefix_cache_hits_delta": 0.0, "counters_delta": {}}] * REPEATS
    cert["cache"] |= {
        "metric": "vllm:prefix_cache_hits_total", "hits_before": [4096.0, 4096.0],
        "hits_after": [4096.0, 4096.0], "counter_hit_tokens": 0.0,
        "proven_by": ["engine-counter", "responses"],
    }  # fmt: skip
    doc["bench"]["certificate"]["software"] |= {k: info[k] for k in ("driver", "cuda", "nvml", "gpus")}
    return dict(doc)


def _report(w: World, name: str, edit: Callable[[dict[str, Any]], object] | None = None) -> dict[str, bytes]:
    files = made_up_report(
        w.toml, w.sha, decode_tok_s=100.0, gpus=H200, contexts=(2048,), ttft_ms=100.0, run_name=name
    )  # 100 tok/s a stream and 100 ms to the first token: under the H200's roofline for Llama 3.1 8B
    doc = _as_measured(files)
    if edit is not None:
        edit(doc)
    return files | {"results.json": json.dumps(doc).encode()}


def _post(w: World, files: dict[str, bytes]) -> Any:
    headers = {"authorization": f"Bearer {w.token}", "content-type": "application/gzip"}
    return w.client.post("/api/v1/reports", content=tgz(files), headers=headers)


def _stored(w: World) -> list[tuple[str, str]]:
    doc = w.client.get(f"/api/v1/recipes/{SLUG}.json").json()
    return [(m["report_id"], m["tier"]) for m in doc["measurements"] if m["report_id"]]


def _cell(doc: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], doc["bench"]["cells"][0])


def _run(doc: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], doc["bench"]["certificate"])


def _set(
    where: Callable[[dict[str, Any]], dict[str, Any]], path: str, value: Any
) -> Callable[[dict[str, Any]], None]:
    """An edit that sets ``path`` (dotted, under ``where(doc)``) to ``value``; ``...`` deletes it."""

    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        d = where(doc)
        for p in parents:
            d = d[p]
        if value is ...:
            del d[last]
        else:
            d[last] = value

    return edit


def _client_bound_unflagged(doc: dict[str, Any]) -> None:
    """The certificate's own figures say the client was the bottleneck (95% of a core), its flag
    says it was not; the results' cell keeps the idle client."""
    _cell(doc)["certificate"]["client"] |= {"cpu_fraction_max": 0.95, "bound": False}


FAULTS = {
    "no GPU samples": (
        _set(_cell, "certificate.gpu.samples", 0),
        f"{CELL}: the fingerprint names 1 GPU(s) but the certificate holds no GPU samples",
    ),
    "no GPU window": (
        _set(_cell, "certificate.gpu", None),
        f"{CELL}: the fingerprint names 1 GPU(s) but the certificate holds no GPU samples",
    ),
    "no energy figure": (
        _set(_cell, "certificate.energy", None),
        f"{CELL}: the fingerprint names 1 GPU(s) but the certificate has no energy figure",
    ),
    "no driver or CUDA": (
        lambda doc: [_run(doc)["software"].pop(k) for k in ("driver", "cuda")],
        "certificate: software.driver and software.cuda missing on a rig with GPUs",
    ),
    "no CUDA": (
        _set(_run, "software.cuda", None),
        "certificate: software.cuda missing on a rig with GPUs",
    ),
    "telemetry none": (
        lambda doc: _run(doc).update(
            telemetry="none", telemetry_note="no GPU telemetry: nvml: NVML Shared Library Not Found"
        ),
        "certificate: the fingerprint names 1 GPU(s) but the run had no GPU telemetry "
        "(no GPU telemetry: nvml: NVML Shared Library Not Found)",
    ),
    "telemetry none without a note": (
        lambda doc: _run(doc).update(telemetry="none", telemetry_note=""),
        "certificate: the fingerprint names 1 GPU(s) but the run had no GPU telemetry (no reason given)",
    ),
    "cells_in_order names another cell": (
        _set(_run, "cells_in_order", [[4096, 1]]),
        "certificate: cells_in_order does not list the report's cells",
    ),
    "cells_in_order empty": (
        _set(_run, "cells_in_order", []),
        "certificate: cells_in_order does not list the report's cells",
    ),
    "client bound by its figures, flagged not bound": (
        _client_bound_unflagged,
        f"{CELL}: certificate shows a client-bound run (the bench limited the numbers: cpu_fraction_max "
        "0.95, loop_lag_p99_ms_max 0.5, batched_lag_p99_ms_max 0.5)",
    ),
    "engine counter disagrees with the metrics": (
        _set(_cell, "certificate.cache.counter_hit_tokens", 64.0),
        f"{CELL}: certificate counts 64 hit tokens; the engine metrics' deltas add to 0",
    ),
    "responses' cached tokens disagree with the cell": (
        _set(_cell, "certificate.cache.response_cached_tokens", 16),
        f"{CELL}: certificate has 16 cached tokens in the responses; the cell has 0",
    ),
    "cache not proven cold": (
        lambda doc: _cell(doc)["certificate"]["cache"].update(cold=False, proven_by=[]),
        f"{CELL}: certificate shows a cold cache not proven (0 hit tokens): a warm-cache number",
    ),
    "no run certificate": (
        lambda doc: doc["bench"].pop("certificate"),
        "certificate: the run's certificate is missing",
    ),
    "no cell certificate": (
        lambda doc: _cell(doc).pop("certificate"),
        f"{CELL}: no certificate",
    ),
}


def test_the_h200_run_as_measured_is_verified(world: World) -> None:
    r = _post(world, _report(world, "h200-as-measured"))
    assert r.status_code == 201, r.text
    rep = r.json()
    (row,) = rep["rows"]
    assert row["provenance"] == "verified"
    assert row["note"] == "GPU power throttling during the cell (sw_power_cap)"
    assert (rep["id"], "verified") in _stored(world)


def test_a_fingerprint_json_other_than_the_one_in_results_json_is_refused(world: World) -> None:
    files = _report(world, "h200-two-fingerprints")
    two = H200 | {"count": 2, "models": H200["models"] * 2, "memory": H200["memory"] * 2}
    fp = json.loads(files["fingerprint.json"]) | {"gpus": two}
    before = _stored(world)
    r = _post(world, files | {"fingerprint.json": json.dumps(fp).encode()})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["reasons"] == ["fingerprint.json differs from the fingerprint in results.json"]
    assert _stored(world) == before


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_faulty_gpu_certificate_is_refused_with_its_reason(world: World, fault: str) -> None:
    edit, reason = FAULTS[fault]
    before = _stored(world)
    r = _post(world, _report(world, f"h200-{fault}", edit))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["reasons"]) == ("report_refused", [reason])
    assert _stored(world) == before  # no row of it, verified or not
