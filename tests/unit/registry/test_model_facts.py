"""Model facts carried by a recipe (``[meta.model_facts]``) on the registry, SQLite and PostgreSQL:

- the fit widget and reported rows use the recipe's own facts before the registry's table;
- an uploaded report is checked only against the registry's table: a recipe whose model the table
  lacks stays reported-by-report whatever facts its author typed, and a known model is verified
  against the table's facts, not the recipe's;
- absurd facts are refused with a located error (``lair check`` and the publish API alike);
- the seed-003 page lists the flags of its ``entrypoint``/``args``, the command its launch fields
  start and its hardware (2 nodes x 1 GPU, TP2) as derived; its card line says what it is;
- a report's page has the table of its rows and the rig's summary from the fingerprint.

Expected numbers are computed by hand from the shapes in the recipes (Llama 3.1 8B: 32 layers,
8 KV heads of 128; the seed-003 launch fields as written in examples/dsv41-flash-exl3-2x)."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.recipe import check_text
from lair.registry.db.tables import RECIPES, REVISIONS
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import tgz

ROOT = Path(__file__).resolve().parents[3]
SEED_003 = ROOT / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"
LLAMA_SLUG = "llama31-8b-rtx4090-sglang"
DIGEST = "lmsysorg/sglang@sha256:" + "b" * 64
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
# Llama 3.1 8B (bf16) as its config.json counts: the registry's own table has the same model
LLAMA_FACTS = """
[meta.model_facts]
name = "meta-llama/Llama-3.1-8B-Instruct"
architecture = "llama"
n_layers = {layers}
hidden_size = 4096
n_heads = 32
n_kv_heads = 8
head_dim = 128
vocab_size = 128256
intermediate_size = 14336
total_params = 8030261248
active_params = 8030261248
weight_bytes = 16060522496
embedding_bytes = 1050673152
attention = "gqa"
qk_head_dim = 128
v_head_dim = 128
max_context = 131072
"""


@dataclass
class World:
    client: TestClient
    engine: Engine
    token: str


@pytest.fixture
def world(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[World]:
    reset_limits()
    llama_16 = LLAMA.read_text().replace('slug = "llama31-8b-rtx4090-sglang"', 'slug = "llama-16"')
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        publish(conn, llama_16 + LLAMA_FACTS.format(layers=16), owner="tester")
        token = create_token(conn, create_user(conn, "alice"), "cli")
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, engine, token)


def _upload(w: World, slug: str, decode: float, gpus: dict[str, Any] | None, **fp: Any) -> Any:
    with w.engine.connect() as conn:
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == slug)
            .order_by(REVISIONS.c.number.desc())
        ).first()  # type: ignore[misc]
    files = made_up_report(toml, sha, decode_tok_s=decode, gpus=gpus, contexts=(2048,), ttft_ms=100.0)
    if fp:  # the fingerprint as lair.report.fingerprint records it on a real rig, in both files
        doc = json.loads(files["results.json"])
        doc["fingerprint"] |= fp
        files["results.json"] = json.dumps(doc).encode()
        files["fingerprint.json"] = json.dumps(doc["fingerprint"]).encode()
    headers = {"authorization": f"Bearer {w.token}", "content-type": "application/gzip"}
    return w.client.post("/api/v1/reports", content=tgz(files), headers=headers)


def test_the_fit_widget_prefers_the_recipes_own_facts(world: World) -> None:
    fit = {"gpu": "rtx-4090", "gpus": 1}
    table = world.client.get(f"/api/v1/recipes/{LLAMA_SLUG}/fit", params=fit).json()
    own = world.client.get("/api/v1/recipes/llama-16/fit", params=fit).json()
    # KV bytes per token = layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes
    assert table["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    assert own["kv_bytes_per_token"] == 16 * 8 * 128 * 2 * 2
    page = lxml.html.fromstring(world.client.get("/recipes/llama-16").text)
    (facts,) = page.xpath("//p[@class='model-facts']")
    assert facts.get("data-origin") == "recipe" and "16 layers" in facts.text_content()
    assert "its author's word" in facts.text_content()
    (known,) = lxml.html.fromstring(world.client.get(f"/recipes/{LLAMA_SLUG}").text).xpath(
        "//p[@class='model-facts']"
    )
    assert known.get("data-origin") == "registry" and "32 layers" in known.text_content()


def test_a_report_is_checked_against_the_registrys_table_never_the_recipes_facts(world: World) -> None:
    # seed 003 carries meta.model_facts but the registry's table has no config for its model
    r = _upload(world, "dsv41-flash-exl3-2x", 20.0, H100)
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "reported-by-report"
    assert row["note"].startswith("model facts unknown") and "never used to verify" in row["note"]
    # llama-16's own facts claim 16 layers; the table's 32-layer Llama is what the row is held to:
    # 150 tok/s on one H100 is under its ceiling (3350 GB/s over the bf16 weights and 2K of KV)
    r = _upload(world, "llama-16", 150.0, H100)
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "verified"
    weights = 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096)
    ceiling = 3350e9 / (weights + 2048 * 32 * 8 * 128 * 2 * 2)
    assert row["roofline"]["decode_roofline_tok_s"] == pytest.approx(ceiling, rel=0.02)


@pytest.mark.parametrize(
    ("line", "value", "message"),
    [
        ("n_layers", "100000", "must be <= 1024, got 100000"),
        ("active_params", "9030261248", "active_params is above total_params"),
        ("weight_bytes", "1", "bits per weight"),
        ("n_kv_heads", "64", "n_kv_heads is above n_heads"),
    ],
)
def test_absurd_facts_are_refused_with_a_located_error(
    world: World, line: str, value: str, message: str
) -> None:
    text = LLAMA.read_text() + re.sub(
        rf"(?m)^{line} = .*$", f"{line} = {value}", LLAMA_FACTS.format(layers=32)
    )
    want = text.splitlines().index(f"{line} = {value}") + 1
    result = check_text(text, "recipe.toml", "toml")
    (issue,) = result.errors
    assert message in issue.message and issue.path.startswith("meta.model_facts")
    if line == "n_layers":  # a field's own bound is located at its line; a cross-field check at the table
        assert (issue.path, issue.line) == ("meta.model_facts.n_layers", want)
    h = {"authorization": f"Bearer {world.token}"}
    r = world.client.post("/api/v1/recipes", json={"toml": text}, headers=h)
    assert r.status_code == 422 and message in r.text and "meta.model_facts" in r.text


def test_seed_003_page_derives_flags_command_and_hardware(world: World) -> None:
    raw = tomllib.loads(SEED_003.read_text())
    page = lxml.html.fromstring(world.client.get("/recipes/dsv41-flash-exl3-2x").text)
    flags = [
        li.text_content().split(" (entrypoint)")[0]
        for li in page.xpath("//ul[contains(@class, 'derived-flags')]/li")
    ]
    assert flags == [
        "--config /opt/ds41-serving/conservative.yaml",
        "--worker-cls combined_worker.CombinedWorker",
        "--disable-custom-all-reduce",
        "--served-model-name deepseek-v41-flash-exl3",
        "--enable-auto-tool-choice",
        "--tool-call-parser deepseek_v41",
        "--reasoning-parser deepseek_v41",
    ]  # the entrypoint's three, then the 7 args as 4 flags with their values
    (command,) = page.xpath("//code[@id='derived-command']")
    lines = [ln.rstrip(" \\").strip() for ln in command.text_content().splitlines()]
    assert lines[0] == "docker run --rm"
    wanted = [
        "--shm-size=2g", "--device=/dev/dri/card0", "--memory=9g", "--cpus=6",
        "-v /mnt/nas/ai/huggingface/hub:/hub:ro", "-v /home/kilork/exl3-cache:/cache",
        "-e NCCL_PROTO='^LL128'", "--entrypoint=/opt/ds41-venv/bin/python", raw["docker_image"],
        "/opt/ds41-serving/serve.py serve /model", "--served-model-name deepseek-v41-flash-exl3",
    ]  # fmt: skip
    for want in wanted:
        assert want in lines, want
    assert sum(ln.startswith("-e ") for ln in lines) == len(raw["env"])
    (hw,) = page.xpath("//ul[@class='derived-hardware']/li[1]")
    assert " ".join(hw.text_content().split()) == (
        "2 nodes x 1 GPU (2 GPUs: TP2) (derived from the launch fields: no meta.hardware)"
    )
    listing = lxml.html.fromstring(world.client.get("/recipes").text)
    (card,) = listing.xpath("//li[@data-slug='dsv41-flash-exl3-2x']//p[@class='summary']")
    assert card.text_content() == "vllm · coolbho3k/DeepSeek-V4.1-Flash-EXL3-3bpw · 2 nodes x 1 GPU (TP2)"


def test_a_report_page_has_its_rows_and_the_rigs_summary(world: World) -> None:
    rig = {
        "engine": {"name": "sglang", "version": "0.5.3"},
        "image": {"name": "lmsysorg/sglang:v0.5.3-cu129", "id": "sha256:aa", "digests": [DIGEST]},
        "os": "Ubuntu 24.04.1 LTS", "kernel": "6.8.0-45-generic", "lair_version": "0.9.0",
    }  # fmt: skip
    gpus = H100 | {"driver": "580.65.06", "cuda": "13.0"}
    r = _upload(world, LLAMA_SLUG, 120.0, gpus, **rig)
    assert r.status_code == 201, r.text
    rid, (stored,) = r.json()["id"], r.json()["rows"]
    page = lxml.html.fromstring(world.client.get(f"/reports/{rid}").text)
    (tr,) = page.xpath("//table[contains(@class, 'report-rows')]/tbody/tr")
    cells = [" ".join(td.text_content().split()) for td in tr.xpath("td")]
    assert cells[:2] == ["2,048", "1"] and cells[6].startswith("verified")
    per_stream, ttft = stored["decode_tok_s_per_stream"], stored["ttft_ms"]
    assert abs(per_stream - 120.0) < 1 and abs(ttft - 100.0) < 1  # the made-up timings' own figures
    assert cells[4] == f"{per_stream:,.1f} tok/s" and cells[5] == f"{ttft:,.1f} ms"
    summary = dict(
        zip(page.xpath("//dl[@id='rig']/dt/text()"), page.xpath("//dl[@id='rig']/dd/text()"), strict=True)
    )
    assert summary["GPUs"] == "1x NVIDIA H100 80GB HBM3"
    assert (summary["driver"], summary["CUDA"], summary["engine"]) == ("580.65.06", "13.0", "sglang 0.5.3")
    assert summary["image"] == "lmsysorg/sglang:v0.5.3-cu129"
    assert summary["image digest"] == DIGEST
    assert summary["CPU"] == "AMD EPYC, 16 logical CPUs, x86_64"  # made_up_report's rig
    assert summary["RAM"] == "128.0 GiB" and summary["OS"] == "Ubuntu 24.04.1 LTS · 6.8.0-45-generic"
    files = page.xpath("//ul[@class='files']/li/a/@href")
    assert f"/reports/{rid}/files/requests.jsonl" in files and f"/reports/{rid}/files/results.json" in files
    assert world.client.get(files[0]).status_code == 200
