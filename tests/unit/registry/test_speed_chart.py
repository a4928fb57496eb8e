"""The recipe page's speed charts, on SQLite and PostgreSQL: drawn by the run report's chart module, one
series per concurrency and tier (reported dashed, verified solid), retracted rows left out, and the
roofline the rows are rated on drawn dotted at the ceiling computed by hand from Llama 3.1 8B's bytes
per token and the RTX 4090's datasheet bandwidth."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.tables import MEASUREMENTS
from lair.registry.db.version import now
from lair.registry.service.chart import speed_chart
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.testing.registry import add_verified_row, rendered

SVG = "{http://www.w3.org/2000/svg}"
SLUG = "llama31-8b-rtx4090-sglang"  # meta.hardware: 1x RTX 4090; model facts known to the registry

# Llama 3.1 8B in bf16: per layer q and o 4096x4096, k and v 4096x1024, the MLP 3x 4096x14336; the lm
# head 128256x4096; 2 bytes a weight. KV: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes a token.
WEIGHT_BYTES = 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096)
KV_PER_TOKEN = 32 * 8 * 128 * 2 * 2
RTX_4090 = 1008e9  # bytes/s, NVIDIA RTX 4090 specifications


def _svgs(html: str) -> list[ET.Element]:
    out, pos = [], 0
    while (start := html.find("<svg", pos)) >= 0:
        end = html.index("</svg>", start) + len("</svg>")
        out.append(ET.fromstring(html[start:end]))
        pos = end
    return out


def _series(svg: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {
        (g.get("data-concurrency", ""), g.get("data-tier", "")): g
        for g in svg.iter(f"{SVG}g")
        if g.get("data-part") == "series"
    }


def _texts(svg: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("data-part") == cls]


def _values(svg: ET.Element, group: ET.Element) -> list[float]:
    """The y values of a series' line, read back through the y axis' tick marks."""
    marks = {
        float(g.get("data-value", "")): float(next(g.iter(f"{SVG}use")).get("y", ""))
        for g in svg.iter(f"{SVG}g")
        if g.get("data-part") == "ytick-mark"
    }
    (v0, y0), (v1, y1) = min(marks.items()), max(marks.items())
    path = next(p for p in group.iter(f"{SVG}path") if p.get("fill") == "none")
    ys = [float(n) for n in path.get("d", "").replace("M", "").replace("L", "").split()[1::2]]
    return [v0 + (y - y0) / (y1 - y0) * (v1 - v0) for y in ys]


ROWS = [(c, n, 150.0 / n**0.5 / (1 + i / 8), "reported") for i, c in enumerate((2048, 8192)) for n in (1, 4)]


@pytest.fixture
def page(engine: Engine, db_url: str) -> str:
    text = LLAMA.read_text().split("[[meta.performance]]")[0]  # the recipe without its rows
    for c, n, decode, _ in ROWS:
        text += f"[[meta.performance]]\ncontext = {c}\nconcurrency = {n}\ndecode_tok_s = {decode:.1f}\n\n"
    with engine.begin() as conn:
        publish(conn, text, owner="author")
        for c in (2048, 8192):
            add_verified_row(conn, SLUG, context=c, decode_tok_s=100.0 if c == 2048 else 90.0)
        gone = add_verified_row(conn, SLUG, context=4096, decode_tok_s=999.0)
        conn.execute(sa.update(MEASUREMENTS).where(MEASUREMENTS.c.id == gone).values(retracted_at=now()))
        rendered(conn, SLUG)  # as a retraction's write renders the recipe's documents
    with TestClient(create_app(db_url)) as client:
        resp = client.get(f"/recipes/{SLUG}")
        assert resp.status_code == 200
        return resp.text


def test_the_recipe_page_charts_tiers_concurrencies_and_the_roofline(page: str) -> None:
    charts = [s for s in _svgs(page) if s.get("class") == "chart"]
    decode = next(s for s in charts if _texts(s, "title") == ["decode by context"])
    series = _series(decode)
    assert set(series) == {
        ("1", "reported"),
        ("4", "reported"),
        ("1", "verified"),
        ("1", "roofline"),
        ("4", "roofline"),
    }
    assert series[("1", "verified")].find(f".//{SVG}path[@fill='none']").get("stroke-dasharray") is None  # type: ignore[union-attr]
    assert series[("1", "reported")].find(f".//{SVG}path[@fill='none']").get("stroke-dasharray")  # type: ignore[union-attr]
    assert _values(decode, series[("1", "verified")]) == pytest.approx(
        [100.0, 90.0], abs=0.2
    )  # not 999: retracted
    assert _texts(decode, "ytick")[0] == "0" and _texts(decode, "ylabel") == ["decode, all streams (tok/s)"]
    assert _texts(decode, "xtick") == ["2K", "4K", "8K"]
    legend = " ".join(_texts(decode, "legend"))
    assert legend.startswith("1 stream 4 streams verified (solid) reported (dashed)")
    assert legend.endswith("roofline, 1x NVIDIA GeForce RTX 4090 (dotted)")
    # the reported rows are rated on the recipe's RTX 4090 (the verified ones name no GPU): at one
    # stream the ceiling is the bandwidth over the bytes a token reads, weights plus the context's KV
    ceilings = [RTX_4090 / (WEIGHT_BYTES + c * KV_PER_TOKEN) for c in (2048, 8192)]
    assert _values(decode, series[("1", "roofline")]) == pytest.approx(ceilings, rel=0.01)
    assert all(
        r < s
        for r, s in zip(
            _values(decode, series[("1", "roofline")]),
            _values(decode, series[("4", "roofline")]),
            strict=True,
        )
    )


def test_speed_chart_is_empty_without_speeds_and_leaves_retracted_rows_out() -> None:
    assert speed_chart([]) == ""
    row: dict[str, Any] = {"context": 2048, "concurrency": 1, "decode_tok_s": 50.0, "prefill_tok_s": None}
    assert speed_chart([row | {"provenance": "reported", "retracted": True}]) == ""
    (svg,) = _svgs(speed_chart([row | {"provenance": "verified", "tier": "replicated"}]))
    assert set(_series(svg)) == {("1", "verified")}  # replicated rows are drawn as verified
    assert _texts(svg, "value") == ["50"] and _texts(svg, "xtick") == ["1 stream"]
