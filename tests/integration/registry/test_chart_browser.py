"""Every speed chart in headless Chromium at 1280 and 390 px: a recipe page with reported and verified
rows at two concurrencies from 1K to 128K context (and their roofline), every bundled example's page,
and a run report's HTML page (written by the real report writer, rated on a declared RTX 4090). In
the page, no two text boxes of a chart overlap (each ``<text>``'s getBBox() mapped through its screen
matrix), and each chart fits the viewport. Screenshots go to the test's folder and the artifacts."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lair.bench import BenchResult, CellResult
from lair.registry.db.engine import make_engine
from lair.registry.db.tables import MEASUREMENTS
from lair.registry.service.facets import slugify
from lair.registry.service.publish import publish
from lair.report import write_run_report
from lair.testing.registry import add_verified_row, rendered
from lair.testing.tiny_model import make_tiny_model

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SLUG = "chart-llama-8b-4090"
CONTEXTS = [1024 << i for i in range(8)]  # 1K .. 128K
WIDTHS = (1280, 390)

# the screen box of every <text> of every chart, and each chart's box; the page's own getBBox()
BOXES = """() => [...document.querySelectorAll("svg.chart")].map(svg => {
  const box = el => {
    const b = el.getBBox(), m = el.getScreenCTM();
    const pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
      .map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
    const xs = pts.map(p => p.x), ys = pts.map(p => p.y);
    return {text: el.textContent, left: Math.min(...xs), right: Math.max(...xs),
            top: Math.min(...ys), bottom: Math.max(...ys)};
  };
  const r = svg.getBoundingClientRect();
  return {texts: [...svg.querySelectorAll("text")].map(box), left: r.left, right: r.right,
          viewport: window.innerWidth, title: svg.getAttribute("aria-label")};
})"""


def _recipe() -> str:
    rows = "".join(
        f"[[meta.performance]]\ncontext = {c}\nconcurrency = {n}\ndecode_tok_s = {d:.1f}\n"
        f"prefill_tok_s = {p:.1f}\n\n"
        for c, n, d, p in _speeds(1.1)
    )
    return f"""engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "meta-llama/Llama-3.1-8B-Instruct"
[meta]
title = "Chart check: Llama 3.1 8B on one RTX 4090"
slug = "{SLUG}"
summary = "reported and verified rows at two concurrencies, 1K to 128K"
upstream_weights = "meta-llama/Llama-3.1-8B-Instruct"
[meta.hardware]
gpu_model = "RTX 4090"
gpu_count = 1
{rows}"""


def _speeds(scale: float) -> list[tuple[int, int, float, float]]:
    """(context, concurrency, decode, prefill) falling with context, more in total at 4 streams."""
    return [
        (c, n, scale * (60 if n == 1 else 180) / (1 + i / 5), scale * 6000 / (1 + i / 3) / (1 + n / 8))
        for i, c in enumerate(CONTEXTS)
        for n in (1, 4)
    ]


@pytest.fixture(scope="module")
def recipe_url(served: Any) -> str:
    engine = make_engine(served.db)
    with engine.begin() as conn:
        publish(conn, _recipe(), owner="author")
        for c, n, decode, prefill in _speeds(1.0):
            mid = add_verified_row(conn, SLUG, context=c, decode_tok_s=decode)
            conn.execute(
                sa.update(MEASUREMENTS)
                .where(MEASUREMENTS.c.id == mid)
                .values(concurrency=n, prefill_tok_s=prefill)
            )
        rendered(conn, SLUG)  # the rows changed behind the service layer: render as its writes do
    engine.dispose()
    return f"{served.base}/recipes/{SLUG}"


def _cell(ctx: int, conc: int) -> CellResult:
    i = CONTEXTS.index(ctx)
    decode, ttft = (40.0 if conc == 1 else 25.0) / (1 + i / 6), ctx / 20 * (1 + conc / 4)
    return CellResult(
        context=ctx, concurrency=conc, repeats=1, prompt_tokens=ctx + 3, ttft_ms_p50=ttft,
        ttft_ms_p90=ttft * 1.1, prefill_tok_s=20_000.0 / (1 + i / 4) / (1 + conc / 8),
        decode_tok_s_per_stream=decode, decode_tok_s_aggregate=decode * conc * 0.9, completion_tokens=64,
        cached_tokens=0, cache_hit=False, client_bound=False, output_length_ok=True, errors=0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def report_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("report")
    gguf = make_tiny_model(tmp / "model")
    recipe = tmp / "tiny.toml"
    recipe.write_text(
        f'engine = "xllamacpp"\nruntime = "native"\nmodel = "{gguf}"\nentrypoint = ["python3"]\n'
        '[meta.hardware]\ngpu_model = "RTX 4090"\ngpu_count = 1\n'
    )
    cells = [_cell(c, n) for c in CONTEXTS for n in (1, 4)]
    res = BenchResult("http://h:1", "tiny", "a", "b", {}, cells, server={"engine": "llama.cpp"})
    out = write_run_report(recipe, "charts", res, out_dir=tmp / "rep")
    return (out / "report.html").as_uri()


def _overlaps(texts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    boxes = [t for t in texts if t["right"] - t["left"] > 0 and t["text"].strip()]
    eps = 0.5  # px: boxes that merely touch
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["left"] < b["right"] - eps
        and b["left"] < a["right"] - eps
        and a["top"] < b["bottom"] - eps
        and b["top"] < a["bottom"] - eps
    ]


def _check(browser: Any, url: str, name: str, tmp_path: Path, artifacts: Path, charts: int) -> None:
    for width in WIDTHS:
        ctx = browser.new_context(viewport={"width": width, "height": 900})
        page = ctx.new_page()
        resp = page.goto(url)
        page_ok = resp is None or resp.ok  # None: a file:// page
        found = page.evaluate(BOXES)
        for where in (tmp_path, artifacts):
            page.screenshot(path=str(where / f"charts-{name}-{width}.png"), full_page=True)
        charts_shown = page.locator("svg.chart")
        if charts_shown.count():
            charts_shown.first.scroll_into_view_if_needed()
            for where in (tmp_path, artifacts):
                page.screenshot(path=str(where / f"charts-{name}-{width}-first.png"))
        ctx.close()
        assert page_ok, (name, width)
        assert len(found) == charts, (name, width, [c["title"] for c in found])
        for chart in found:
            assert len(chart["texts"]) >= 8, chart["title"]  # ticks, axis titles, title, legend
            assert not _overlaps(chart["texts"]), (name, width, chart["title"], _overlaps(chart["texts"]))
            assert chart["left"] >= 0 and chart["right"] <= chart["viewport"], (name, width, chart)


def test_recipe_page_charts_are_readable_at_both_widths(
    browser: Any, recipe_url: str, tmp_path: Path, artifacts: Path
) -> None:
    _check(browser, recipe_url, "recipe", tmp_path, artifacts, charts=2)  # decode, prefill


def _expected_charts(example: Path) -> int:
    """A decode chart when some row has a decode speed, a prefill chart when some row has a prefill speed."""
    rows = tomllib.loads(example.read_text()).get("meta", {}).get("performance", [])
    return sum(any(r.get(k) for r in rows) for k in ("decode_tok_s", "prefill_tok_s"))


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*/recipe.toml")), ids=lambda p: p.parent.name)
def test_every_bundled_example_page_has_readable_charts(
    browser: Any, served: Any, example: Path, tmp_path: Path, artifacts: Path
) -> None:
    meta = tomllib.loads(example.read_text()).get("meta", {})
    slug = meta.get("slug") or slugify(meta.get("title") or example.parent.name)
    url = f"{served.base}/recipes/{slug}"
    _check(browser, url, example.parent.name, tmp_path, artifacts, charts=_expected_charts(example))


def test_run_report_charts_are_readable_at_both_widths(
    browser: Any, report_url: str, tmp_path: Path, artifacts: Path
) -> None:
    _check(browser, report_url, "report", tmp_path, artifacts, charts=4)  # decode, all streams, prefill, TTFT
