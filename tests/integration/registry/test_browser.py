"""The site in headless Chromium: search, filter, open a recipe, every seed section in order with its
numbers, exports that ``lair check`` accepts, the placeholder form, the fit widget. Screenshots of the
main pages go to the run's artifacts folder."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SEED_000 = ROOT / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"
SLUG_000 = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
LLAMA_SLUG = "llama31-8b-rtx4090-sglang"

# the sections of the published seed page, in its order (../seeds/000): title; votes; badge; credits;
# version line; tags; summary; launch command; env; flags; notes; agent; engine; model; hardware;
# context; KV pool; performance; install requirements; placeholders; downloads; revision notes;
# revision history; fork; export
SEED_ORDER = [
    "title",
    "votes",
    "badge",
    "credits",
    "version",
    "tags",
    "summary",
    "launch-command",
    "env",
    "flags",
    "notes",
    "agent",
    "engine",
    "model",
    "hardware",
    "context",
    "kv-pool",
    "performance",
    "requirements",
    "placeholders",
    "downloads",
    "revision-notes",
    "revision-history",
    "fork",
    "export",
]


def _slugs(page: Any) -> list[str]:
    return [str(s) for s in page.locator("li.result").evaluate_all("els => els.map(e => e.dataset.slug)")]


def test_search_filter_and_open_a_recipe(page: Any, site: str, artifacts: Path) -> None:
    page.goto(site + "/")
    assert len(_slugs(page)) >= 4
    page.screenshot(path=str(artifacts / "list.png"), full_page=True)
    page.fill("#search input[name=q]", "engram")
    page.click("#search button[type=submit]")
    page.wait_for_url("**/recipes?*q=engram*")
    assert _slugs(page) == [SLUG_000]
    page.fill("#search input[name=q]", "")
    page.fill("#search input[name=gpu]", "RTX 4090")
    page.click("#search button[type=submit]")
    page.wait_for_url("**gpu=RTX+4090**")
    assert _slugs(page) == [LLAMA_SLUG]
    page.fill("#search input[name=gpu]", "")
    page.fill("#search input[name=min_context]", "1000000")
    page.click("#search button[type=submit]")
    page.wait_for_url("**min_context=1000000**")
    assert SLUG_000 in _slugs(page) and LLAMA_SLUG not in _slugs(page)
    page.click(f"li.result[data-slug='{SLUG_000}'] a.title")
    page.wait_for_url(f"**/recipes/{SLUG_000}")
    assert page.locator("h1").first.inner_text() == tomllib.loads(SEED_000.read_text())["meta"]["title"]


def test_seed_page_has_every_section_in_order_with_its_numbers(page: Any, site: str, artifacts: Path) -> None:
    page.goto(f"{site}/recipes/{SLUG_000}")
    found = page.locator("[data-section]").evaluate_all("els => els.map(e => e.dataset.section)")
    assert [s for s in found if s in SEED_ORDER] == SEED_ORDER
    page.screenshot(path=str(artifacts / "recipe-seed-000.png"), full_page=True)
    raw = tomllib.loads(SEED_000.read_text())
    text = page.locator("article.recipe").inner_text()
    perf = page.locator("[data-section=performance] table.speed tbody tr[data-provenance]")
    assert perf.count() == len(raw["meta"]["performance"])
    cells = [perf.nth(i).inner_text() for i in range(perf.count())]
    assert "163 tok/s" in cells[0] and "7,360 tok/s" in cells[1] and "167.3 tok/s" in cells[2]
    assert "307.3 tok/s" in cells[3] and all("reported" in c for c in cells)
    assert "1,071,558 tokens across concurrent requests" in text and "max context: 1M tokens" in text
    for knob in raw["meta"]["env_knobs"]:
        assert f"{knob['name']}={knob['value']}" in text
    assert raw["meta"]["launch_command"] in text and "sign in to vote" in text
    assert "Community submission — verify on your own hardware." in text
    api = f"{site}/api/v1/recipes/{SLUG_000}.json"
    assert page.locator("#curl").inner_text() == f"curl -fsSL {api}"
    prompt = page.locator("#agent-prompt").inner_text()
    assert api in prompt and "diff" in prompt and "hooks" in prompt and "secrets" in prompt
    assert (
        page.locator("[data-section=performance] svg.chart").count() == 2
    )  # decode; prefill (one context: bars)
    assert (
        page.locator("svg.chart [data-part=series][data-tier=reported] use").count() == 3
    )  # a marker per decode row
    floor = page.locator(".driver-floor").inner_text()
    assert (
        "580.65.06" in floor and "CUDA 13" in floor
    )  # the recipe states CUDA >= 13; NVIDIA: 13.0 -> 580.65.06


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_export_downloads_pass_lair_check(page: Any, site: str, tmp_path: Path, fmt: str) -> None:
    page.goto(f"{site}/recipes/{SLUG_000}")
    with page.expect_download() as info:
        page.click(f"[data-section=export] a:has-text('recipe.{fmt}')")
    path = tmp_path / f"recipe.{fmt}"
    info.value.save_as(str(path))
    check = subprocess.run([sys.executable, "-m", "lair", "check", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    exported = subprocess.run(
        [sys.executable, "-m", "lair", "export", str(path), "--format", "json"],
        capture_output=True,
        text=True,
    )
    with urllib.request.urlopen(f"{site}/api/v1/recipes/{SLUG_000}.json") as r:
        assert json.loads(exported.stdout) == json.loads(r.read())["recipe"]


def test_placeholder_form_renders_the_recipe(page: Any, site: str, artifacts: Path) -> None:
    page.goto(f"{site}/recipes/{LLAMA_SLUG}")
    form = page.locator("form#placeholders")
    assert form.locator("input[name=HF_TOKEN]").is_disabled()
    form.locator("input[name=MODEL_DIR]").fill("/srv/models/llama")
    form.locator("input[name=PORT]").fill("31337")
    form.locator("button[type=submit]").click()
    page.wait_for_url("**/placeholders?**")
    command = page.locator("#rendered-command").inner_text()
    rendered = tomllib.loads(page.locator("#rendered-toml").inner_text())
    assert "-v /srv/models/llama:/model:ro" in command and "--port 31337" in command
    assert 'HF_TOKEN="${HF_TOKEN}"' in command and rendered["env"]["HF_TOKEN"] == "${HF_TOKEN}"
    assert rendered["model"] == "/srv/models/llama"
    page.screenshot(path=str(artifacts / "placeholders.png"), full_page=True)
    page.locator("form#placeholders input[name=PORT]").fill("eighty")
    page.locator("form#placeholders button[type=submit]").click()
    page.wait_for_url("**PORT=eighty**")
    assert "expected an integer" in page.locator(".field-error[data-field=PORT]").inner_text()
    assert page.locator("#rendered-command").count() == 0


def test_fit_widget(page: Any, site: str, artifacts: Path) -> None:
    page.goto(f"{site}/recipes/{LLAMA_SLUG}")
    page.select_option("form#fit select[name=gpu]", "rtx-4090")
    page.fill("form#fit input[name=gpus]", "1")
    page.click("form#fit button[type=submit]")
    page.wait_for_url("**/fit?**")
    with urllib.request.urlopen(f"{site}/api/v1/recipes/{LLAMA_SLUG}/fit?gpu=rtx-4090&gpus=1") as r:
        api = json.loads(r.read())
    assert page.locator("#fit-result").get_attribute("data-verdict") == api["verdict"] == "fits"
    assert page.locator("#kv-pool").inner_text() == f"{api['kv_pool_tokens']:,}"
    assert page.locator("#max-context").inner_text() == f"{api['max_context']:,}"
    page.screenshot(path=str(artifacts / "fit.png"), full_page=True)
    # the fit page's form keeps the GPU and count just checked (from its query string)
    assert page.locator("form#fit select[name=gpu]").input_value() == "rtx-4090"
    assert page.locator("form#fit input[name=gpus]").input_value() == "1"
    page.goto(f"{site}/recipes/{SLUG_000}")
    facts = page.locator("[data-section=fit] p.model-facts").inner_text()
    assert "61 layers" in facts and "from the recipe's meta.model_facts" in facts


def test_a_rows_certificate_opens_and_its_reproduce_command_selects_in_one_click(
    page: Any, served: Any, artifacts: Path
) -> None:
    """A verified row (a made-up report on an H100 uploaded through the API): its certificate opens on
    a click and shows the seed, the GPU samples and the energy; one click on its ``lair reproduce``
    command selects all of it (no script: CSS user-select); the price form renders $/Mtok at the
    price typed, J/output token x 10^6 / 3.6x10^6 x price."""
    import sqlalchemy as sa

    from lair.registry.db.engine import make_engine
    from lair.registry.db.tables import RECIPES, REVISIONS
    from lair.registry.service.accounts import create_token, create_user
    from lair.testing.forged_reports import made_up_report
    from lair.testing.registry import tgz

    engine = make_engine(served.db)
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "cert-uploader"), "cli")
        toml, sha = conn.execute(
            sa.select(REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
            .where(RECIPES.c.slug == LLAMA_SLUG)
        ).one()
    engine.dispose()
    h100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}
    files = made_up_report(toml, sha, decode_tok_s=100.0, gpus=h100, contexts=(2048,), ttft_ms=100.0)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/gzip"}
    req = urllib.request.Request(f"{served.base}/api/v1/reports", tgz(files), headers, method="POST")
    with urllib.request.urlopen(req) as r:
        report_id = json.loads(r.read())["id"]
    with urllib.request.urlopen(f"{served.base}/api/v1/recipes/{LLAMA_SLUG}.json") as r:
        (row,) = [m for m in json.loads(r.read())["measurements"] if m["report_id"] == report_id]
    assert row["tier"] == "verified"
    j = row["energy"]["j_per_output_token"]

    page.goto(f"{served.base}/recipes/{LLAMA_SLUG}")
    details = page.locator(f'details.certificate[data-row="{row["id"]}"]')
    assert details.evaluate("d => d.open") is False
    details.locator("summary").click()
    assert details.evaluate("d => d.open") is True
    text = details.inner_text()
    for shown in ("seed 7", "20 samples of 1 GPU", f"{j:.3g} J/output token", "driver 580.159.04",
                  "not client-bound", "cold"):  # fmt: skip
        assert shown in text, shown
    page.screenshot(path=str(artifacts / "recipe-certificate.png"), full_page=True)
    page.locator(f"#row-{row['id']} code.reproduce").click()
    assert page.evaluate("() => window.getSelection().toString()") == f"lair reproduce {row['row_id']}"

    page.fill("form#price input[name=price_kwh]", "0.31")
    page.click("form#price button[type=submit]")
    page.wait_for_url(f"**/recipes/{LLAMA_SLUG}/cost?price_kwh=0.31")
    detail = page.locator("tr.row-detail", has=page.locator(f"#row-{row['id']}"))  # under its row
    cost = detail.locator("xpath=preceding-sibling::tr[1]").locator("td.cost").inner_text()
    assert float(cost.lstrip("$")) == pytest.approx(j * 1e6 / 3.6e6 * 0.31, rel=5e-3)
