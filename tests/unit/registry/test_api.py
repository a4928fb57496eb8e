"""The site and API in process (Starlette's TestClient over the real app) on SQLite and PostgreSQL:
JSON twins, exports, the error envelope on every route, ETag/Last-Modified 304s, cache invalidation."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from registry_paths import LLAMA, SEED_000, SEED_003
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.cli import main
from lair.registry.service.publish import add_revision, publish, seed_examples
from lair.registry.web.app import create_app

SLUG_000 = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
LLAMA_SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield c


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().out


def test_recipe_json_is_the_export_plus_registry_fields(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _cli(capsys, "export", str(SEED_000), "--format", "json")
    assert rc == 0
    doc = client.get(f"/api/v1/recipes/{SLUG_000}.json").json()
    assert doc["recipe"] == json.loads(out)
    assert doc["slug"] == SLUG_000 and doc["revision"] == 1 and re.fullmatch("[0-9a-f]{64}", doc["sha256"])
    assert doc["votes"] == 0
    perf = tomllib.loads(SEED_000.read_text())["meta"]["performance"]
    assert [(m["context"], m["decode_tok_s"], m["prefill_tok_s"]) for m in doc["measurements"]] == [
        (p["context"], p.get("decode_tok_s"), p.get("prefill_tok_s")) for p in perf
    ]
    assert all(m["provenance"] == "reported" for m in doc["measurements"])
    assert client.get(f"/recipes/{SLUG_000}.json").json() == doc  # the page's twin


def test_driver_floor_of_seed_003_is_unknown_with_the_reason(client: TestClient) -> None:
    image = tomllib.loads(SEED_003.read_text())["docker_image"]
    floor = client.get("/api/v1/recipes/dsv41-flash-exl3-2x.json").json()["driver_floor"]
    assert floor["text"] == "unknown - check the image tag" and floor["driver"] is None
    assert image in floor["reason"] and "names no CUDA version" in floor["reason"]
    assert floor["source_url"].startswith("https://docs.nvidia.com/") and floor["source_date"]
    page = client.get("/recipes/dsv41-flash-exl3-2x").text
    assert "unknown - check the image tag" in page and "names no CUDA version" in page


def test_driver_floor_from_an_image_tag(client: TestClient) -> None:
    floor = client.get(f"/api/v1/recipes/{LLAMA_SLUG}.json").json()["driver_floor"]
    # lmsysorg/sglang:...-cu129 -> CUDA 12.9; NVIDIA's table: CUDA 12.9 GA needs >= 575.51.03 on Linux
    assert (floor["cuda"], floor["driver"], floor["basis"]) == ("12.9", "575.51.03", "image tag")


def test_exports_load_back_to_the_same_model(
    client: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = client.get(f"/api/v1/recipes/{SLUG_000}.json").json()
    for ext in ("toml", "yaml"):
        r = client.get(f"/api/v1/recipes/{SLUG_000}.{ext}")
        assert r.status_code == 200 and ext in r.headers["content-type"]
        path = tmp_path / f"recipe.{ext}"
        path.write_bytes(r.content)
        rc, _ = _cli(capsys, "check", str(path))
        assert rc == 0, capsys.readouterr().err
        rc, out = _cli(capsys, "export", str(path), "--format", "json")
        assert json.loads(out) == doc["recipe"]
    assert yaml.safe_load(client.get(f"/api/v1/recipes/{SLUG_000}.yaml").text)["meta"]["slug"] == SLUG_000


def test_revisions_have_their_own_immutable_urls(client: TestClient, engine: Engine) -> None:
    text = LLAMA.read_text().replace("max_context = 32768", "max_context = 16384")
    with engine.begin() as conn:
        add_revision(conn, LLAMA_SLUG, text, author="tester", notes="halve the context")
    latest = client.get(f"/api/v1/recipes/{LLAMA_SLUG}.json").json()
    one = client.get(f"/api/v1/recipes/{LLAMA_SLUG}/revisions/1.json").json()
    two = client.get(f"/api/v1/recipes/{LLAMA_SLUG}/revisions/2.json").json()
    assert latest["revision"] == 2 and latest["sha256"] == two["sha256"] != one["sha256"]
    assert one["recipe"]["meta"]["max_context"] == 32768 and two["recipe"]["meta"]["max_context"] == 16384
    assert two["revision_notes"] == "halve the context"
    assert [r["number"] for r in latest["revisions"]] == [2, 1]
    toml1 = client.get(f"/api/v1/recipes/{LLAMA_SLUG}/revisions/1.toml").text
    assert tomllib.loads(toml1)["meta"]["max_context"] == 32768
    assert "halve the context" in client.get(f"/recipes/{LLAMA_SLUG}").text


def test_cached_responses_follow_every_write(client: TestClient, engine: Engine) -> None:
    url = f"/api/v1/recipes/{LLAMA_SLUG}.json"
    first = client.get(url)
    assert client.get(url).headers["etag"] == first.headers["etag"]
    with engine.begin() as conn:
        add_revision(conn, LLAMA_SLUG, LLAMA.read_text().replace("bf16", "bf16-x"), author="t", notes="n")
    after = client.get(url)
    assert after.json()["revision"] == 2 and after.headers["etag"] != first.headers["etag"]
    assert client.get("/api/v1/recipes?tag=bf16-x").json()["count"] == 1


def test_etag_and_last_modified_give_304(client: TestClient) -> None:
    for url in (f"/api/v1/recipes/{SLUG_000}.json", f"/recipes/{SLUG_000}", f"/recipes/{SLUG_000}.json"):
        r = client.get(url)
        etag, modified = r.headers["etag"], r.headers["last-modified"]
        again = client.get(url, headers={"if-none-match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        assert client.get(url, headers={"if-none-match": '"other"'}).status_code == 200
        assert client.get(url, headers={"if-modified-since": modified}).status_code == 304
        assert (
            client.get(url, headers={"if-modified-since": "Mon, 01 Jan 2001 00:00:00 GMT"}).status_code == 200
        )


ERROR_URLS = [
    ("/api/v1/recipes/nope.json", 404),
    ("/api/v1/recipes/nope.toml", 404),
    (f"/api/v1/recipes/{SLUG_000}.exe", 404),
    (f"/api/v1/recipes/{SLUG_000}", 404),
    (f"/api/v1/recipes/{SLUG_000}/revisions/9.json", 404),
    (f"/api/v1/recipes/{SLUG_000}/revisions/x.json", 404),
    ("/api/v1/recipes?limit=1000", 422),
    ("/api/v1/recipes?gpus=zero", 422),
    ("/api/v1/recipes?sort=price", 422),
    ("/api/v1/recipes?cursor=abc", 422),
    (f"/api/v1/recipes/{SLUG_000}/fit", 422),
    (f"/api/v1/recipes/{SLUG_000}/fit?gpu=abacus", 422),
    (f"/api/v1/recipes/{LLAMA_SLUG}/placeholders?PORT=eighty", 422),
    (f"/api/v1/recipes/{SLUG_000}/cost?price_kwh=-1", 422),
    ("/recipes/nope/cost.json", 404),
    ("/api/v1/nothing-here", 404),
    ("/recipes.json?limit=-3", 422),
    ("/recipes/nope.json", 404),
    (f"/recipes/{SLUG_000}/revisions/7.json", 404),
    ("/static/nope.css", 404),
]


@pytest.mark.parametrize(("url", "status"), ERROR_URLS)
def test_json_routes_answer_errors_in_the_envelope(client: TestClient, url: str, status: int) -> None:
    r = client.get(url)
    assert r.status_code == status
    if url.startswith("/static/"):
        return
    body = r.json()
    assert body["ok"] is False and set(body["error"]) >= {"code", "message", "status"}
    assert body["error"]["status"] == status and body["error"]["message"]


HTML_ERRORS = [
    ("/recipes/nope", 404),
    (f"/recipes/{SLUG_000}/revisions/9", 404),
    ("/recipes?limit=0", 422),
    ("/nothing/here", 404),
    ("/recipes/nope/fit", 404),
    ("/recipes/nope/placeholders", 404),
    ("/recipes/nope/cost", 404),
]


@pytest.mark.parametrize(("url", "status"), HTML_ERRORS)
def test_pages_answer_errors_as_pages(client: TestClient, url: str, status: int) -> None:
    r = client.get(url)
    assert r.status_code == status and r.headers["content-type"].startswith("text/html")
    assert f"<h1>{status}: " in r.text


def test_writes_are_not_allowed_on_read_routes(client: TestClient) -> None:
    r = client.post(f"/api/v1/recipes/{SLUG_000}.json", content=b"{}")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_placeholders_render_values_and_never_echo_secrets(client: TestClient) -> None:
    url = f"/api/v1/recipes/{LLAMA_SLUG}/placeholders"
    out = client.get(
        url, params={"MODEL_DIR": "/data/llama", "PORT": "31000", "HF_TOKEN": "hf_leak123"}
    ).json()
    rendered = tomllib.loads(out["toml"])
    assert rendered["model"] == "/data/llama" and rendered["args"][1] == "31000"
    assert rendered["env"]["HF_TOKEN"] == "${HF_TOKEN}" and "-v /data/llama:/model:ro" in out["command"]
    assert "hf_leak123" not in json.dumps(out)
    page = client.get(f"/recipes/{LLAMA_SLUG}/placeholders", params={"HF_TOKEN": "hf_leak123", "PORT": "1"})
    assert "hf_leak123" not in page.text and "${HF_TOKEN}" in page.text


def test_fit_widget_gives_verdict_kv_pool_and_max_context(client: TestClient) -> None:
    out = client.get(f"/api/v1/recipes/{LLAMA_SLUG}/fit", params={"gpu": "rtx-4090", "gpus": 1}).json()
    assert out["known"] and out["verdict"] == "fits" and out["kv_pool_tokens"] > 0
    # hand check: Llama 3.1 8B KV = 32 layers x 8 heads x 128 x 2 (K,V) x 2 bytes = 131072 B/token
    assert out["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    assert out["max_context"] == min(out["kv_pool_tokens"], 131072)  # the model's own limit caps it
    # the seed's facts come from its meta.model_facts; `lair fit` of the example folder on the same
    # GPUs prints FITS-WITH-OFFLOAD and a 519.2 tok/s decode ceiling at 1,048,576 tokens
    seed = client.get(f"/api/v1/recipes/{SLUG_000}/fit", params={"gpu": "rtx-pro-6000", "gpus": 2}).json()
    assert seed["known"] and seed["verdict"] == "fits-with-offload"
    assert (seed["context"], seed["decode_roofline_tok_s"]) == (1048576, 519.2)
    # the page says which prompt its prefill ceiling is for (the fitted context), as the JSON does
    page = client.get(f"/recipes/{SLUG_000}/fit", params={"gpu": "rtx-pro-6000", "gpus": 2}).text
    assert seed["prefill"]["prompt_tokens"] == 1048576
    assert f"prefill ceiling {seed['prefill_roofline_tok_s']:,.1f} tok/s for a 1M-token prompt" in page
    # the DGX Spark publishes dense FP4 only, the model computes in bf16: the ceiling is said to be
    # unknown, not left out
    spark = client.get(f"/api/v1/recipes/{SLUG_000}/fit", params={"gpu": "dgx-spark", "gpus": 1}).json()
    assert (
        spark["known"]
        and spark["prefill_roofline_tok_s"] is None
        and spark["prefill"]["compute_format"] == "bf16"
    )
    page = client.get(f"/recipes/{SLUG_000}/fit", params={"gpu": "dgx-spark", "gpus": 1}).text
    assert "prefill ceiling: unknown (NVIDIA DGX Spark (GB10) has no published tensor throughput" in page


def test_the_fit_widget_preselects_no_gpu_the_recipe_does_not_name(client: TestClient) -> None:
    """The tiny CPU recipe names no GPU: the form asks for one instead of defaulting to the list's first."""
    page = client.get("/recipes/tiny-cpu").text
    select = re.search(r'<select name="gpu" required>(.*?)</select>', page, re.S)
    assert select, "no GPU list"
    first = re.search(r"<option[^>]*>[^<]*</option>", select.group(1))
    assert first and first.group(0) == '<option value="" selected disabled>choose a GPU</option>'
    assert '<p class="note cpu-only">A CPU-only recipe: the fit sizes GPUs' in page
    assert select.group(1).count("selected") == 1


def test_roofline_percent_per_row_and_implausible_rows(client: TestClient) -> None:
    page = client.get(f"/recipes/{LLAMA_SLUG}").text
    rows = re.findall(r"<tr class=\"[^\"]*\" data-provenance=\"reported\">(.*?)</tr>", page, re.S)
    assert len(rows) == 2
    # hand roofline at 2K: RTX 4090 1008 GB/s over the bytes read per token: the bf16 weights less the
    # input embedding (a lookup reads one row) plus the 2,048 tokens of KV
    params = 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) + 128256 * 4096
    ceiling = 1008e9 / (params * 2 + 2048 * 131072)
    pct = float(re.search(r"decode ([0-9.]+)%", rows[0]).group(1))  # type: ignore[union-attr]
    assert abs(pct - 100 * 30 / ceiling) < 1.0
    assert "implausible" not in rows[0] and "implausible: above the roofline" in rows[1]


def test_list_search_and_twins(client: TestClient) -> None:
    api = client.get("/api/v1/recipes", params={"q": "engram"}).json()
    assert [i["slug"] for i in api["items"]] == [SLUG_000]
    assert client.get("/recipes.json", params={"q": "engram"}).json() == api
    page = client.get("/", params={"q": "engram"}).text
    assert f'data-slug="{SLUG_000}"' in page and 'data-slug="tiny-cpu"' not in page
    assert client.get("/api/v1/recipes", params={"gpu": "RTX 4090"}).json()["items"][0]["slug"] == LLAMA_SLUG


def test_openapi_and_llms_txt(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.1") and "/api/v1/recipes/{slug}.json" in doc["paths"]
    assert "Recipe" in doc["components"]["schemas"]
    text = client.get("/llms.txt").text
    assert SLUG_000 in text and "Show the diff before overwriting" in text


def test_seed_000_quality_figures_are_reported_rows(client: TestClient) -> None:
    """The example's ``[[meta.quality]]`` figures (GSM8K-200 thinking off 98.5%, HumanEval pass@1 97.0%,
    96.3-97.6 over runs) are reported rows in the database, on the page and in its JSON twin."""
    page = client.get(f"/recipes/{SLUG_000}").text
    table = re.search(r'<table class="quality">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(
        r'<tr [^>]*data-provenance="reported"[^>]*>\s*<td class="suite">(.*?)</td>\s*'
        r'<td class="score">(.*?)</td>'
        r'.*?<td class="tier" data-tier="(.*?)">.*?<td class="note">(.*?)</td>',
        table[1],
        re.S,
    )
    assert rows == [
        ("GSM8K-200 (thinking off)", "98.5%", "reported", ""),
        ("HumanEval pass@1", "97.0%", "reported", "96.3-97.6 over runs"),
    ]
    doc = client.get(f"/recipes/{SLUG_000}.json").json()
    got = [(q["suite"], q["score"], q["unit"], q["tier"], q["note"], q["links"]) for q in doc["quality"]]
    assert got == [
        ("GSM8K-200 (thinking off)", 98.5, "%", "reported", "", {}),
        ("HumanEval pass@1", 97.0, "%", "reported", "96.3-97.6 over runs", {}),
    ]
