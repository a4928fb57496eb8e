"""The chart module's SVG, parsed as XML: a log2 context axis labelled in binary units, styles per tier,
labels escaped, safe to inline under a strict CSP (no style, script or external reference), small,
deterministic, and ids that never clash between two charts of a page."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from lair.report.charts import Chart, Series, context_label, context_ticks, render

SVG = "{http://www.w3.org/2000/svg}"
CONTEXTS = [1024 << i for i in range(8)]  # 1K .. 128K


def _speeds(conc: int, scale: float) -> list[tuple[float, float]]:
    return [(float(c), scale * conc * 200 / (1 + i / 4)) for i, c in enumerate(CONTEXTS)]


def _chart(label: str = "", roofline: str = "roofline, 1x NVIDIA GeForce RTX 4090") -> Chart:
    series = [
        Series(conc, _speeds(conc, scale), tier=tier, label=label if conc == 1 else "")
        for conc in (1, 4)
        for tier, scale in (("verified", 1.0), ("reported", 1.1), ("roofline", 2.5))
    ]
    return Chart("decode by context", "decode", "tok/s", series, roofline_label=roofline)


def _texts(svg: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("data-part") == cls]


def _dash(group: ET.Element) -> list[float] | None:
    """The stroke-dasharray of the series' line (None: solid)."""
    (path, *_) = [p for p in group.iter(f"{SVG}path") if p.get("fill") == "none"]
    value = path.get("stroke-dasharray")
    return [float(x) for x in value.split(",")] if value else None


def test_context_ticks_are_powers_of_two_labelled_in_binary_units() -> None:
    assert context_ticks(1024, 131072) == ([1 << p for p in range(10, 18)], [])
    assert [context_label(x) for x in context_ticks(1024, 131072)[0]] == [
        "1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K",
    ]  # fmt: skip
    # 512 .. 2M is 13 powers: every other one labelled (7 labels), the rest left as bare ticks
    labelled, bare = context_ticks(512, 2 << 20)
    assert [context_label(x) for x in labelled] == ["512", "2K", "8K", "32K", "128K", "512K", "2M"]
    assert [context_label(x) for x in bare] == ["1K", "4K", "16K", "64K", "256K", "1M"]
    assert context_ticks(2051, 40960) == ([2048, 4096, 8192, 16384, 32768, 65536], [])
    assert context_label(40960) == "40K" and context_label(1000) == "1,000"


def test_axes_start_at_zero_with_units_and_the_context_labels() -> None:
    svg = ET.fromstring(render(_chart()))
    assert _texts(svg, "ytick")[0] == "0" and len(_texts(svg, "ytick")) >= 3
    # the highest point is the 4-stream ceiling at 1K: 2.5 * 4 * 200 = 2,000 -> ticks to 2k
    assert _texts(svg, "ytick")[-1] == "2k"
    assert _texts(svg, "ylabel") == ["decode (tok/s)"]
    assert _texts(svg, "xlabel") == ["context (tokens, log scale)"]
    assert _texts(svg, "xtick") == ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K"]
    assert _texts(svg, "title") == ["decode by context"]


def test_one_series_per_concurrency_and_tier_styled_apart() -> None:
    svg = ET.fromstring(render(_chart()))
    groups = [g for g in svg.iter(f"{SVG}g") if g.get("data-part") == "series"]
    keys = [(g.get("data-concurrency"), g.get("data-tier")) for g in groups]
    assert sorted(keys) == sorted((str(c), t) for c in (1, 4) for t in ("verified", "reported", "roofline"))
    colours = {g.get("data-concurrency"): set() for g in groups}
    for g in groups:
        colours[g.get("data-concurrency")].add(next(p.get("stroke") for p in g.iter(f"{SVG}path")))
    assert all(len(c) == 1 for c in colours.values()) and colours["1"] != colours["4"]  # a colour each
    for g in groups:
        dash = _dash(g)
        if g.get("data-tier") == "verified":
            assert dash is None  # solid
        elif g.get("data-tier") == "reported":
            assert dash is not None and dash[0] > dash[1]  # dashed: long dashes
        else:
            assert dash is not None and dash[0] < dash[1]  # dotted: dots shorter than the gaps
    legend = _texts(svg, "legend")
    assert legend[:2] == ["1 stream", "4 streams"]
    assert "verified (solid)" in legend and "reported (dashed)" in legend
    assert " ".join(legend[4:]) == "roofline, 1x NVIDIA GeForce RTX 4090 (dotted)"


def test_a_chart_without_a_roofline_has_no_roofline_line_or_legend() -> None:
    chart = _chart()
    bare = Chart(chart.title, chart.quantity, chart.unit, [s for s in chart.series if s.tier != "roofline"])
    svg = ET.fromstring(render(bare))
    assert "roofline" not in {g.get("data-tier") for g in svg.iter(f"{SVG}g")}
    assert not any("roofline" in t for t in _texts(svg, "legend"))
    assert render(Chart("empty", "decode", "tok/s", [Series(1, [])])) == ""


def test_labels_are_escaped_and_a_dollar_is_not_math() -> None:
    out = render(_chart(label="<script>alert(1)</script> $x^2$ & co"))
    assert "<script" not in out and "&lt;script&gt;alert(1)&lt;/script&gt; $x^2$ &amp; co" in out
    svg = ET.fromstring(out)
    assert _texts(svg, "legend")[0] == "<script>alert(1)</script> $x^2$ & co"
    roof = ET.fromstring(render(_chart(roofline='roofline" onload="alert(1)')))
    assert not [a for el in roof.iter() for a in el.attrib if a.startswith("on")]


def test_safe_to_inline_under_a_strict_csp() -> None:
    out = render(_chart())
    svg = ET.fromstring(out)
    tags = {el.tag.removeprefix(SVG) for el in svg.iter()}
    assert tags <= {"svg", "g", "defs", "clipPath", "path", "use", "rect", "text", "tspan"}
    assert not [el for el in svg.iter() if "style" in el.attrib]  # style-src 'self' blocks style=""
    assert "<!--" not in out and "<?xml" not in out and "DOCTYPE" not in out and "metadata" not in out
    assert "http://" not in out.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert svg.get("class") == "chart" and svg.get("role") == "img" and svg.get("aria-label")
    assert [el for el in svg.iter() if el.get("class")] == [
        svg
    ]  # the page's CSS (.legend...) can't restyle a part
    assert "width" not in svg.attrib and svg.get("viewBox")  # the page's CSS sizes it


def test_small_and_deterministic_with_ids_unique_per_chart() -> None:
    first, again = render(_chart()), render(_chart())
    assert first == again and len(first.encode()) < 40_000
    other = render(_chart(roofline="roofline, 2x NVIDIA RTX PRO 6000"))
    for out in (first, other):
        svg = ET.fromstring(out)
        ids = {el.get("id") for el in svg.iter() if el.get("id")}
        refs = {el.get("href", "")[1:] for el in svg.iter() if el.get("href")}
        refs |= {
            m for el in svg.iter() for v in el.attrib.values() for m in re.findall(r"url\(#([^)]+)\)", v)
        }
        assert refs and refs <= ids  # every reference resolves inside its own chart
    ids_of = [set(re.findall(r' id="([^"]+)"', out)) for out in (first, other)]
    assert not ids_of[0] & ids_of[1]  # two charts on one page never share an id


def test_the_same_chart_in_a_fresh_process_is_the_same_bytes() -> None:
    here = str(Path(__file__).parent)
    code = f"import sys; sys.path[:0] = [{here!r}]; from test_chart_svg import _chart, render; "
    code += "print(render(_chart()))"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert fresh == render(_chart()) + "\n"


def test_matplotlib_is_imported_only_when_a_chart_is_drawn() -> None:
    code = "import sys, lair.report.charts, lair.report.render; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_far_ceiling_runs_off_the_axis_and_the_legend_says_so() -> None:
    # a tiny model on a big GPU: the ceiling is 1,000x the measurement; the axis stops at 3x the fastest
    measured = [(float(c), 40.0 - i) for i, c in enumerate(CONTEXTS)]
    ceiling = [(float(c), 400_000.0 / (i + 1)) for i, c in enumerate(CONTEXTS)]
    chart = Chart("decode", "decode", "tok/s", [Series(1, measured), Series(1, ceiling, tier="roofline")])
    svg = ET.fromstring(render(chart))
    assert _texts(svg, "ytick") == ["0", "25", "50", "75", "100", "125"]  # 3 x 40 = 120 in steps of 2.5 x 10
    assert " ".join(_texts(svg, "legend")) == "1 stream roofline (dotted, partly above the axis)"
    near = Chart("decode", "decode", "tok/s", [Series(1, measured), Series(1, measured[:1], tier="roofline")])
    assert "above the axis" not in render(near)


def test_value_labels_shorten_thousands_and_millions() -> None:
    from lair.report.charts import value_label

    assert [value_label(v) for v in (0, 2.5, 150, 1500, 2000, 12_000, 150_000, 2_500_000, 3e6)] == [
        "0", "2.5", "150", "1.5k", "2k", "12k", "150k", "2.5M", "3M",
    ]  # fmt: skip


def test_one_context_is_bars_and_a_shared_ceiling_spans_every_group() -> None:
    series = [
        Series(1, [(40960.0, 7000.0)], tier="reported"),
        Series(4, [(40960.0, 9000.0)], tier="verified"),
        Series(None, [(40960.0, 12000.0)], tier="roofline"),
    ]
    svg = ET.fromstring(render(Chart("prefill", "prefill", "tok/s", series)))
    assert _texts(svg, "xtick") == ["1 stream", "4 streams"]  # no empty group for the shared ceiling
    assert _texts(svg, "xlabel") == ["context 40K tokens"] and _texts(svg, "value") == ["7,000", "9,000"]
    parts = [
        (g.get("data-concurrency"), g.get("data-tier")) for g in svg.iter(f"{SVG}g") if g.get("data-part")
    ]
    assert parts.count(("all", "roofline")) == 2  # the ceiling drawn over both groups
