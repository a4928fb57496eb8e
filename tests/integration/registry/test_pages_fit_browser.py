"""The pages fit their screen: headless Chromium at 1280 and 390 px on a real ``lair serve`` seeded with
the bundled examples, each given a made-up report on an H100 (rows with a row id, a ``lair reproduce``
command and a certificate; verified where the registry knows the model, reported-by-report where it
does not). Measured in the page, not by eye:

- the document and the main column never scroll sideways (``scrollWidth == clientWidth``), and every
  element wider than the main column sits in a box of its own that scrolls (``overflow-x: auto``)
  and can be reached with the keyboard (``tabindex``);
- at 1280 px the speed tables fit without scrolling (the Tier column is never cut);
- every opened certificate is a row as wide as its table, and stays on screen where the table
  scrolls (390 px);
- every legend ``<text>`` of every chart lies inside its SVG's viewBox (its getBBox() mapped through
  its transform into the SVG's user space);
- the empty matrix and cost pages say what would fill them and how; the derived command keeps its
  last argument and its notes on lines of their own.

The recipe page of every example, and the report, matrix, cost and fit pages of one with a verified
row (tiny-cpu) and of one without (dsv41-flash-exl3-2x). Screenshots go to the test's folder and the
artifacts (``LAIR_TEST_ARTIFACTS``)."""

from __future__ import annotations

import json
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.facets import slugify
from lair.registry.service.publish import RECIPES, REVISIONS
from lair.testing.forged_reports import made_up_report
from lair.testing.registry import charts_drawn, tgz

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*/recipe.toml"))
WIDTHS = (1280, 390)
VERIFIED, UNCHECKED = "tiny-cpu", "dsv41-flash-exl3-2x"  # a model the registry knows; one it does not
H100 = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]}

# sideways overflow of the document and the main column; what pokes out of the main column outside
# a scroll box; the scroll boxes that scroll; legend texts outside their viewBox; certificate rows
MEASURE = """() => {
  const main = document.querySelector("main"), doc = document.documentElement;
  const mainRight = main.getBoundingClientRect().right;
  const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
    + (typeof e.className === "string" && e.className ? "." + e.className : "");
  const scrollBox = e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const inScrollBox = e => {
    for (let p = e.parentElement; p && p !== main; p = p.parentElement) if (scrollBox(p)) return true;
    return false;
  };
  const all = [...main.querySelectorAll("*")];
  const poking = all.filter(e => e.getBoundingClientRect().right > mainRight + 0.5 && !inScrollBox(e))
    .map(name);
  const scrolling = all.filter(e => scrollBox(e) && e.scrollWidth > e.clientWidth).map(e => ({
    box: name(e), over: e.scrollWidth - e.clientWidth, tabindex: e.getAttribute("tabindex"),
    speed: !!e.querySelector("table.speed")}));
  const legends = [...document.querySelectorAll("svg.chart")].flatMap(svg => {
    const vb = svg.viewBox.baseVal, inv = svg.getScreenCTM().inverse();
    return [...svg.querySelectorAll("text[data-part=legend]")].map(t => {
      const b = t.getBBox(), m = inv.multiply(t.getScreenCTM());
      const [p, q] = [[b.x, b.y], [b.x + b.width, b.y + b.height]]
        .map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
      return {chart: svg.getAttribute("aria-label"), text: t.textContent, left: p.x - vb.x, top: p.y - vb.y,
              right: vb.x + vb.width - q.x, bottom: vb.y + vb.height - q.y};
    });
  });
  const certificates = [...document.querySelectorAll("details.certificate[open]")].map(d => {
    const td = d.closest("td"), table = d.closest("table"), wrap = d.closest(".table-scroll");
    const [c, t, w, s] = [td, table, wrap, d].map(e => e.getBoundingClientRect());
    return {row: d.dataset.row, colspan: td.colSpan, columns: table.tHead.rows[0].cells.length,
            cellLeft: c.left - t.left, cellRight: t.right - c.right,
            shownRight: w.right - s.right, shownLeft: s.left - w.left};
  });
  return {doc: doc.scrollWidth - doc.clientWidth, main: main.scrollWidth - main.clientWidth,
          poking, scrolling, legends, certificates};
}"""


def _slug(example: Path) -> str:
    meta = tomllib.loads(example.read_text()).get("meta", {})
    return str(meta.get("slug") or slugify(meta.get("title") or example.parent.name))


@pytest.fixture(scope="module")
def reports(served: Any) -> dict[str, str]:
    return upload_reports(served)


def upload_reports(served: Any) -> dict[str, str]:
    """Each example's slug -> the id of its made-up report (uploaded through the API, as ``lair submit``)."""
    engine = make_engine(served.db)
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "fit-uploader"), "cli")
        recipes = conn.execute(
            sa.select(RECIPES.c.slug, REVISIONS.c.toml, REVISIONS.c.sha256)
            .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
            .where(RECIPES.c.slug.in_([_slug(e) for e in EXAMPLES]))
        ).all()
    engine.dispose()
    out = {}
    headers = {"authorization": f"Bearer {token}", "content-type": "application/gzip"}
    for slug, toml, sha in recipes:
        files = made_up_report(toml, sha, decode_tok_s=30.0, gpus=H100, contexts=(2048,), run_name=slug)
        req = urllib.request.Request(f"{served.base}/api/v1/reports", tgz(files), headers, method="POST")
        with urllib.request.urlopen(req) as r:
            out[slug] = json.loads(r.read())["id"]
    charts_drawn(served.db)  # the pages hold their charts, not the placeholder a write leaves for a while
    return out


def _pages(reports: dict[str, str]) -> list[tuple[str, str]]:
    pages = [(f"recipe-{_slug(e)}", f"/recipes/{_slug(e)}") for e in EXAMPLES]
    for slug in (VERIFIED, UNCHECKED):
        pages += [
            (f"report-{slug}", f"/reports/{reports[slug]}"),
            (f"matrix-{slug}", f"/recipes/{slug}/matrix"),
            (f"cost-{slug}", f"/recipes/{slug}/cost"),
            (f"fit-{slug}", f"/recipes/{slug}/fit?gpu=rtx-4090&gpus=1"),
        ]
    return pages


def _measure(page: Any, url: str, shot: list[Path]) -> dict[str, Any]:
    resp = page.goto(url)
    assert resp is not None and resp.ok, url
    page.locator("details.certificate").evaluate_all("ds => ds.forEach(d => { d.open = true; })")
    got: dict[str, Any] = page.evaluate(MEASURE)
    for path in shot:
        page.screenshot(path=str(path), full_page=True)
    return got


def test_every_page_fits_1280_and_390_px_with_legends_inside_and_certificates_full_width(
    browser: Any, served: Any, reports: dict[str, str], tmp_path: Path, artifacts: Path
) -> None:
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for width in WIDTHS:
        ctx = browser.new_context(viewport={"width": width, "height": 900})
        page = ctx.new_page()
        try:
            for name, path in _pages(reports):
                shots = [where / f"fit-{name}-{width}.png" for where in (tmp_path, artifacts)]
                found[(name, width)] = _measure(page, served.base + path, shots)
        finally:
            ctx.close()
    for (name, width), got in found.items():
        where = (name, width)
        assert (got["doc"], got["main"]) == (0, 0), (where, got)
        assert got["poking"] == [], (where, got["poking"])
        for box in got["scrolling"]:
            assert box["tabindex"] == "0", (where, box)  # a box that scrolls is reachable by keyboard
            assert not (width == 1280 and box["speed"]), (where, box)  # the Tier column is never cut
        assert [t for t in got["legends"] if min(t["left"], t["top"], t["right"], t["bottom"]) < 0] == [], (
            where
        )
        for cert in got["certificates"]:
            assert cert["colspan"] == cert["columns"], (where, cert)  # a row of its own under its row
            assert abs(cert["cellLeft"]) < 0.5 and abs(cert["cellRight"]) < 0.5, (
                where,
                cert,
            )  # the table's width
            assert cert["shownLeft"] >= 0 and cert["shownRight"] >= 0, (where, cert)  # on screen
    recipe_pages = [got for (name, _), got in found.items() if name.startswith("recipe-")]
    without = [where for where, got in found.items() if where[0].startswith("recipe-") and not got["legends"]]
    assert without == []  # every example's page has a chart with a legend
    assert sum(len(got["certificates"]) for got in recipe_pages) >= 2 * len(EXAMPLES)  # one report each


def test_empty_matrix_and_cost_pages_say_what_fills_them_and_the_derived_command_keeps_its_lines(
    browser: Any, served: Any, reports: dict[str, str]
) -> None:
    page = browser.new_page()
    try:
        page.goto(f"{served.base}/recipes/{UNCHECKED}/matrix")
        empty = " ".join(page.locator("#matrix-empty").inner_text().split())
        assert empty.startswith("No verified or replicated rows yet (1 reported-by-report).")
        assert f"lair pull {UNCHECKED} -o recipe.toml && lair launch recipe.toml --bench --submit" in empty
        assert page.locator("#history-empty").count() == 1 and "—" not in page.inner_text("article")
        page.goto(f"{served.base}/recipes/{UNCHECKED}/cost")
        empty = " ".join(page.locator("#cost-empty").inner_text().split())
        assert empty.startswith("No row of this recipe has a $/Mtok yet: 1 row, none of them verified")
        assert "lair launch recipe.toml --bench --submit" in empty and "lair[gpu]" in empty
        page.goto(f"{served.base}/recipes/{VERIFIED}/cost")
        assert page.locator("#cost-empty").count() == 0  # its verified row has a price
        page.goto(f"{served.base}/recipes/{UNCHECKED}")
        lines = page.locator("#derived-command").text_content().splitlines()
        notes = [i for i, ln in enumerate(lines) if ln.startswith("#")]
        assert notes and lines[notes[0] - 1].strip() == "--reasoning-parser deepseek_v41", lines[-3:]
        assert lines[notes[0]] == "# + a read-only bind mount per line of /tmp/sm121-exl3-mounts.txt"
    finally:
        page.close()


CONTEXTS = [1024 << i for i in range(8)]  # 1K .. 128K
ROOFS = ("roofline, 2x NVIDIA RTX PRO 6000 Blackwell", "roofline, 8x NVIDIA H100 80GB HBM3", "")
# (concurrencies, solid label, roofline label, a reported series too, one context): legends that ran
# past both sides of the viewBox (by 10 to 85 pt) when their columns were only estimated
HARD_LEGENDS = [
    ((1,), "verified (solid)", ROOFS[0], True, True),
    ((1, 4), "reported-by-report (solid)", ROOFS[1], False, False),
    ((1, 4), "reported-by-report (solid)", "", True, False),
    ((1, 4, 16, 64), "verified (solid)", "", True, False),
    ((1, 4), "verified, replicated (solid)", ROOFS[0], True, True),
    ((1,), "reported-by-report, verified, replicated (solid)", ROOFS[1], True, False),
]


def _hard_chart(i: int, concs: tuple[int, ...], solid: str, roof: str, reported: bool, single: bool) -> Any:
    from lair.report.charts import Chart, Series

    xs = CONTEXTS[:1] if single else CONTEXTS
    line = [Series(c, [(x, c * 10.0 / (1 + i)) for i, x in enumerate(xs)], "verified") for c in concs]
    if reported:
        line.append(Series(concs[0], [(x, 11.0 / (1 + i)) for i, x in enumerate(xs)], "reported"))
    if roof:
        line += [Series(c, [(x, c * 40.0 / (1 + i)) for i, x in enumerate(xs)], "roofline") for c in concs]
    return Chart(f"decode {i}", "decode, all streams", "tok/s", line, roof or "roofline", solid)


def test_crowded_legends_stay_inside_the_chart(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    """Legends of many entries, long tier words and wrapped roofline names, as drawn for the pages,
    and one entry too long for the figure (the figure widens): every legend text inside the viewBox."""
    from lair.report.charts import Chart, Series, render

    charts = [_hard_chart(i, *hard) for i, hard in enumerate(HARD_LEGENDS)]
    long = "1 stream on the recipe's own rig, as its author named the concurrency in the recipe"
    charts.append(Chart("decode long", "decode", "tok/s", [Series(1, [(1024.0, 5.0)], label=long)]))
    doc = tmp_path / "charts.html"
    doc.write_text("<!doctype html><body><main>" + "".join(render(c) for c in charts) + "</main></body>")
    for width in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": 900})
        try:
            page.goto(doc.as_uri())
            got = page.evaluate(MEASURE)
            for where in (tmp_path, artifacts):
                page.screenshot(path=str(where / f"fit-legends-{width}.png"), full_page=True)
        finally:
            page.close()
        assert {t["chart"] for t in got["legends"]} == {c.title for c in charts}  # each has its legend
        clipped = [t for t in got["legends"] if min(t["left"], t["top"], t["right"], t["bottom"]) < 0]
        assert clipped == [], (width, clipped)
