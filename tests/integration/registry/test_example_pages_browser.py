"""Every bundled example's page in headless Chromium, at 1280 and 390 px, on a real ``lair serve``:

- the fit widget has the model's facts, and a fit check gives a verdict (the example's own GPUs, or
  the first catalog GPU when the recipe names none);
- every reported row shows its % of roofline (rated on the recipe's GPUs with its own facts);
- the flags section lists flags (the recipe's ``meta.flags`` or those of ``entrypoint``/``args``) and
  the hardware section says what the recipe runs on (``meta.hardware`` or derived from its nodes and
  parallel sizes, marked "derived");
- the speed table is readable at 390 px: it is not clipped by the page; what does not fit scrolls
  inside its own container (the container fits the viewport, its scroll width covers the table).

Screenshots go to the test's folder and the artifacts (``LAIR_TEST_ARTIFACTS``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from lair.registry.service.facets import slugify

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*/recipe.toml"))
WIDTHS = (1280, 390)

TABLE_BOX = """() => {
  const t = document.querySelector("[data-section=performance] table.speed");
  if (!t) return null;
  const box = el => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right}; };
  const wrap = t.closest(".table-scroll");
  const cells = [...t.querySelectorAll("th, td")].map(box);
  return {table: box(t), wrap: wrap ? box(wrap) : null, scrollWidth: wrap ? wrap.scrollWidth : 0,
          clientWidth: wrap ? wrap.clientWidth : 0, overflow: wrap ? getComputedStyle(wrap).overflowX : "",
          viewport: window.innerWidth, docWidth: document.documentElement.scrollWidth,
          cellRight: Math.max(...cells.map(c => c.right)), tableWidth: t.scrollWidth};
}"""


def _slug(example: Path) -> str:
    meta = tomllib.loads(example.read_text()).get("meta", {})
    return str(meta.get("slug") or slugify(meta.get("title") or example.parent.name))


def _shot(page: Any, name: str, tmp_path: Path, artifacts: Path) -> None:
    for where in (tmp_path, artifacts):
        page.screenshot(path=str(where / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_example_page_has_fit_roofline_flags_hardware_and_a_readable_table(
    browser: Any, site: str, example: Path, width: int, tmp_path: Path, artifacts: Path
) -> None:
    raw = tomllib.loads(example.read_text())
    meta = raw.get("meta", {})
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    page = ctx.new_page()
    try:
        resp = page.goto(f"{site}/recipes/{_slug(example)}")
        assert resp is not None and resp.ok
        name = f"example-{example.parent.name}-{width}"
        _shot(page, name, tmp_path, artifacts)
        # the fit widget knows the model and gives a verdict on the recipe's GPUs
        facts = page.locator("[data-section=fit] p.model-facts")
        assert facts.count() == 1 and "params" in facts.inner_text()
        assert facts.get_attribute("data-origin") == "recipe"  # every example carries its facts
        if not (meta.get("hardware") or {}).get("gpu_model"):  # no GPU named: the form asks for one
            assert page.locator("form#fit select[name=gpu]").input_value() == ""
            page.select_option("form#fit select[name=gpu]", "rtx-4090")
        page.locator("form#fit button[type=submit]").click()
        page.wait_for_url("**/fit?**")
        verdict = page.locator("#fit-result").get_attribute("data-verdict")
        assert verdict in ("fits", "fits-with-offload", "does-not-fit"), verdict
        _shot(page, name + "-fit", tmp_path, artifacts)
        page.go_back()
        # every reported row shows its % of roofline
        rows = page.locator("[data-section=performance] table.speed tbody tr[data-provenance=reported]")
        assert rows.count() == len(meta.get("performance", []))
        for i in range(rows.count()):
            cell = rows.nth(i).locator("td.roofline").inner_text()
            assert "%" in cell and "on " in cell, (example.parent.name, i, cell)
        # flags and hardware are there (given or derived from the launch fields)
        flags = page.locator("[data-section=flags]")
        assert flags.locator(".none").count() == 0 and flags.inner_text().count("-") >= 1
        hardware = page.locator("[data-section=hardware]")
        assert hardware.locator(".none").count() == 0
        if meta.get("hardware"):
            assert meta["hardware"]["gpu_model"] in hardware.inner_text()
        else:
            assert "derived" in hardware.inner_text()
        # the speed table is never clipped: it fits, or it scrolls inside its own container
        box = page.evaluate(TABLE_BOX)
        if meta.get("performance"):
            assert box is not None and box["wrap"] is not None, box
            assert box["docWidth"] <= box["viewport"] + 1, box  # the page itself never scrolls sideways
            assert box["wrap"]["right"] <= box["viewport"] + 1, box
            fits = box["tableWidth"] <= box["clientWidth"] + 1
            assert fits or (
                box["overflow"] in ("auto", "scroll") and box["scrollWidth"] >= box["tableWidth"]
            ), box
            header = page.locator("[data-section=performance] table.speed th", has_text="% of roofline")
            header.scroll_into_view_if_needed()
            assert header.is_visible()
            _shot(page, name + "-table", tmp_path, artifacts)
    finally:
        ctx.close()
