"""Speed charts as inline SVG, drawn by matplotlib's SVG backend: the run report's charts and the
registry's recipe page both go through :func:`render`.

    svg = render(Chart("decode by context", "decode", "tok/s", (
        Series(1, ((1024, 160.0), (8192, 140.0)), tier="verified"),
        Series(1, ((1024, 150.0), (8192, 120.0)), tier="reported"),
        Series(1, ((1024, 400.0), (8192, 380.0)), tier="roofline"),
    ), roofline_label="roofline, 1x RTX 4090"))

A chart is a metric against context on a log2 axis labelled 1K, 2K, ... 128K (every other power
when they would crowd), a y axis from zero with round ticks and the unit in its title, one colour
per concurrency, and a line style per tier: solid for measured and verified rows, dashed for rows
as reported by the author, dotted for the roofline ceiling; the legend names each colour and style.
A single context is drawn as bars (a line through one point says nothing).

The SVG is made to be inlined in a page with a strict Content-Security-Policy: matplotlib's
``style`` attributes become presentation attributes, its ``<style>``, metadata, comments and
DOCTYPE are dropped, element ids are namespaced per chart, and only drawing elements are kept.
Text stays ``<text>`` (``svg.fonttype`` none), escaped by the XML serializer, with math parsing
off so a ``$`` in a label is a dollar sign. The output is deterministic (fixed hash salt, no
dates), so cached pages do not churn. matplotlib is imported only when a chart is drawn.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Chart", "Series", "context_label", "context_ticks", "nice_ticks", "render", "value_label"]

Tier = Literal["measured", "verified", "reported", "roofline"]

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
ROOFLINE_GREY = "#4b5563"
_FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
_WIDTH_IN, _HEIGHT_IN = 5.2, 3.1  # 374 x 223 pt (viewBox units); the page's CSS scales it to fit
_TICK_PT, _LEGEND_PT = 11, 10  # shown at 0.9x on a 390 px phone, 1.3x in a 500 px desktop column
_LEGEND_ROW_IN = 0.23
_DASHES = {"measured": "-", "verified": "-", "reported": (0, (5, 3)), "roofline": (0, (1, 2))}
_STYLE_NAMES = {"verified": "verified (solid)", "reported": "reported (dashed)"}


@dataclass(frozen=True)
class Series:
    """One line: a metric at each context of one concurrency and tier (``concurrency`` None: a line
    shared by every concurrency, drawn in grey, e.g. a prefill ceiling)."""

    concurrency: int | None
    points: Sequence[tuple[float, float]]
    tier: Tier = "measured"
    label: str = ""  # the legend's name for this colour; default "N stream(s)"


@dataclass(frozen=True)
class Chart:
    title: str
    quantity: str  # the y axis title before the unit: "decode speed"
    unit: str  # "tok/s", "ms"
    series: Sequence[Series] = field(default_factory=tuple)
    roofline_label: str = "roofline"
    solid_label: str = "verified (solid)"
    """The legend's name of the solid style (``verified`` series): the tiers of the rows drawn so,
    in lair.vocabulary's words (a chart of reported-by-report rows never says "verified")."""
    x_title: str = ""
    """A linear x axis with this title (a throughput-vs-latency chart: x output tok/s, one colour per
    context, ``Series.label`` naming it); "" for the context axis."""


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 x 10^k) up to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def value_label(v: float) -> str:
    """A y tick or bar value: 0, 2.5, 150, 1.5k, 12k, 3M."""
    if v >= 1_000_000:
        return f"{v / 1e6:,.1f}M".replace(".0M", "M")
    if v >= 10_000:
        return f"{v / 1000:,.0f}k"
    if v >= 1000:
        return f"{v / 1000:,.1f}k".replace(".0k", "k")
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:,.1f}"


def context_label(n: float) -> str:
    """A context in binary units: 512, 1K, 128K, 1M (a non-power keeps its digits: 40,960)."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{int(n) // size}{unit}"
    return f"{n:,.0f}"


def context_ticks(lo: float, hi: float, most: int = 8) -> tuple[list[int], list[int]]:
    """(labelled, unlabelled) powers of two spanning ``lo``..``hi``: at most ``most`` labels, every
    k-th power labelled when more would crowd, the rest left as unlabelled ticks."""
    first, last = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 1)))
    last = max(last, first + 1)
    powers = list(range(first, last + 1))
    step = math.ceil(len(powers) / most)
    labelled = [1 << p for p in powers if (p - first) % step == 0]
    return labelled, [1 << p for p in powers if (p - first) % step]


def _streams(c: int | None) -> str:
    return "all streams" if c is None else f"{c} stream" + ("" if c == 1 else "s")


def _colours(chart: Chart) -> dict[int | None, str]:
    concs = sorted({s.concurrency for s in chart.series if s.concurrency is not None})
    return {c: COLOURS[i % len(COLOURS)] for i, c in enumerate(concs)} | {None: ROOFLINE_GREY}


def _gid(kind: str, **data: object) -> str:
    return "lair-" + kind + "".join(f"--{k}={v}" for k, v in data.items())


_ROOF_SPAN = 3.0  # a ceiling above 3x the fastest measurement runs off the axis, so the data stays readable


def _top(chart: Chart) -> tuple[float, bool]:
    """The highest value the y axis must show, and whether a roofline runs above it."""
    measured = [y for s in chart.series if s.tier != "roofline" for _, y in s.points]
    highest = max(y for s in chart.series for _, y in s.points)
    if measured and highest > _ROOF_SPAN * max(measured):
        return _ROOF_SPAN * max(measured), True
    return highest, False


def _legend_entries(chart: Chart, colours: dict[int | None, str]) -> list[tuple[str, dict[str, Any]]]:
    """(label, Line2D keyword arguments) of each legend entry: colours first, then styles."""
    out: list[tuple[str, dict[str, Any]]] = []
    for conc in [c for c in colours if c is not None]:
        label = next((s.label for s in chart.series if s.concurrency == conc and s.label), _streams(conc))
        out.append((label, {"color": colours[conc], "linewidth": 3}))
    tiers = {s.tier for s in chart.series}
    for tier in [t for t in ("verified", "reported") if t in tiers]:
        name = chart.solid_label if tier == "verified" else _STYLE_NAMES[tier]
        out.append((name, {"color": "#374151", "linestyle": _DASHES[tier]}))
    if "roofline" in tiers:
        above = ", partly above the axis" if _top(chart)[1] else ""
        label = "\n".join(textwrap.wrap(f"{chart.roofline_label} (dotted{above})", 30))
        out.append((label, {"color": "#374151", "linestyle": _DASHES["roofline"]}))
    return out


def _legend_columns(labels: list[str]) -> int:
    """The most legend columns whose entries fit across the figure: matplotlib fills a legend column
    by column, each as wide as its widest entry (DejaVu Sans averages 0.6 em a character; the handle
    and gaps take about 4 em). An estimate: :func:`_figure` measures the legend drawn and gives it
    fewer columns while it is still too wide."""
    widths = [_LEGEND_PT * (4 + 0.6 * max(len(line) for line in s.split("\n"))) for s in labels]
    for ncols in range(len(labels), 0, -1):
        rows = math.ceil(len(labels) / ncols)
        spans = range(0, len(labels), rows)
        if ncols == 1 or sum(max(widths[i : i + rows]) for i in spans) <= _WIDTH_IN * 72 - 16:
            return ncols
    raise AssertionError("unreachable: one column always fits")


def _legend_lines(labels: list[str], ncols: int) -> int:
    """Lines of text in the legend's tallest column when its entries fill ``ncols`` columns."""
    rows = math.ceil(len(labels) / ncols)
    lines = [s.count("\n") + 1 for s in labels]
    return max(sum(lines[i : i + rows]) for i in range(0, len(labels), rows))


def _line(ax: Axes, s: Series, colour: str) -> None:
    pts = sorted(s.points)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    gid = _gid("series", concurrency=s.concurrency if s.concurrency is not None else "all", tier=s.tier)
    if s.tier == "roofline":
        ax.plot(xs, ys, color=colour, linestyle=_DASHES["roofline"], linewidth=1.6, gid=gid)
        return
    hollow = s.tier == "reported"
    ax.plot(
        xs, ys, color=colour, linestyle=_DASHES[s.tier], linewidth=1.8, marker="o", markersize=5,
        markerfacecolor="white" if hollow else colour, markeredgecolor=colour, gid=gid,
    )  # fmt: skip


def _y_axis(ax: Axes, chart: Chart, top: float) -> None:
    ticks = nice_ticks(top)
    ax.set_ylim(0, ticks[-1])
    ax.set_yticks(ticks, [value_label(t) for t in ticks])
    ax.set_ylabel(f"{chart.quantity} ({chart.unit})", gid=_gid("ylabel"))
    for t in ax.get_yticklabels():
        t.set_gid(_gid("ytick"))
    for value, tick in zip(ticks, ax.yaxis.get_major_ticks(), strict=True):
        tick.tick1line.set_gid(_gid("ytick-mark", value=f"{value:g}"))  # where a value sits
    ax.grid(axis="y", color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)


def _draw_lines(ax: Axes, chart: Chart, colours: dict[int | None, str]) -> None:
    xs = [x for s in chart.series for x, _ in s.points]
    labelled, minor = context_ticks(min(xs), max(xs))
    for s in chart.series:
        _line(ax, s, colours[s.concurrency])
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(labelled + minor) / 2**0.25, max(labelled + minor) * 2**0.25)
    ax.set_xticks(labelled, [context_label(x) for x in labelled])
    ax.set_xticks(minor, [""] * len(minor), minor=True)
    ax.set_xlabel("context (tokens, log scale)", gid=_gid("xlabel"))
    for t in ax.get_xticklabels():
        t.set_gid(_gid("xtick"))


def _draw_linear(ax: Axes, chart: Chart, colours: dict[int | None, str]) -> None:
    """A linear x axis from zero with round ticks, titled ``chart.x_title``."""
    for s in chart.series:
        _line(ax, s, colours[s.concurrency])
    ticks = nice_ticks(max(x for s in chart.series for x, _ in s.points))
    ax.set_xlim(0, ticks[-1])
    ax.set_xticks(ticks, [value_label(t) for t in ticks])
    ax.set_xlabel(chart.x_title, gid=_gid("xlabel"))
    for t in ax.get_xticklabels():
        t.set_gid(_gid("xtick"))


def _draw_bars(ax: Axes, chart: Chart, colours: dict[int | None, str]) -> None:
    """One context: a group per concurrency, a bar per tier with its value, the ceiling dotted above."""
    (ctx,) = {x for s in chart.series for x, _ in s.points}
    measured = [s for s in chart.series if s.tier != "roofline"]
    concs = sorted({s.concurrency for s in measured}, key=lambda c: (c is None, c or 0))
    lift = _top(chart)[0] * 0.02
    for g, conc in enumerate(concs):
        bars = [s for s in measured if s.concurrency == conc]
        width = 0.7 / len(bars)
        for i, s in enumerate(bars):
            x, v = g - 0.35 + width * (i + 0.5), s.points[0][1]
            gid = _gid("series", concurrency=conc if conc is not None else "all", tier=s.tier)
            hollow = s.tier == "reported"
            ax.bar(
                x, v, width * 0.9, color="white" if hollow else colours[conc], edgecolor=colours[conc],
                linestyle="--" if hollow else "-", linewidth=1.5, gid=gid,
            )  # fmt: skip
            ax.text(
                x,
                v + lift,
                f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:,.1f}",
                ha="center",
                va="bottom",
                fontsize=_LEGEND_PT,
                gid=_gid("value"),
            )
        for s in [s for s in chart.series if s.tier == "roofline" and s.concurrency in (conc, None)]:
            gid = _gid("series", concurrency=s.concurrency or "all", tier="roofline")
            y, colour = s.points[0][1], colours[s.concurrency]
            ax.plot([g - 0.4, g + 0.4], [y, y], color=colour, linestyle=_DASHES["roofline"], gid=gid)
    ax.set_xlim(-0.6, len(concs) - 0.4)
    ax.set_xticks(range(len(concs)), [_streams(c) for c in concs])
    ax.set_xlabel(f"context {context_label(ctx)} tokens", gid=_gid("xlabel"))
    for t in ax.get_xticklabels():
        t.set_gid(_gid("xtick"))


_RC: dict[Any, Any] = {  # Any keys: matplotlib types them as a Literal of every rc name
    "svg.fonttype": "none",  # text stays <text>: selectable, searchable, escaped by the serializer
    "svg.hashsalt": "lair-chart",  # ids from a fixed salt: the same chart, the same bytes
    "text.parse_math": False,  # a "$" in a label is a dollar sign, not TeX
    "font.family": "DejaVu Sans",  # matplotlib's bundled font: the layout's metrics match the browser's
    "font.size": _TICK_PT,
    "axes.titlesize": 12,
    "axes.labelsize": _TICK_PT,
    "legend.fontsize": _LEGEND_PT,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}


def _figure(chart: Chart) -> bytes:
    """The chart's SVG document, its legend inside the figure: drawn, the legend's width measured
    (matplotlib's own text metrics, those of the DejaVu Sans the browser is asked for), and drawn
    again with one column fewer, or at last a wider figure, while it runs past either side."""
    from matplotlib import rc_context

    colours = _colours(chart)
    entries = _legend_entries(chart, colours)
    labels = [label for label, _ in entries]
    ncols = _legend_columns(labels)
    width = _WIDTH_IN
    with rc_context(_RC):
        while True:
            fig, legend = _draw(chart, colours, entries, ncols, width)
            fig.draw_without_rendering()
            box, dpi = legend.get_window_extent(), fig.dpi
            needed = (box.width + 2 * _LEGEND_MARGIN_PT * dpi / 72) / dpi  # inches
            if box.x0 >= _LEGEND_MARGIN_PT * dpi / 72 and needed <= width:
                break
            if ncols > 1:
                ncols -= 1
            else:
                width = math.ceil(needed * 20) / 20  # a twentieth of an inch: few distinct sizes
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return buf.getvalue()


_LEGEND_MARGIN_PT = 4  # each side of the legend: the browser's glyphs may run a little wider


def _draw(
    chart: Chart,
    colours: dict[int | None, str],
    entries: list[tuple[str, dict[str, Any]]],
    ncols: int,
    width: float,
) -> tuple[Any, Any]:
    """The figure (``width`` inches across) and its legend of ``ncols`` columns, not yet saved."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = _legend_lines([label for label, _ in entries], ncols)
    fig = Figure(figsize=(width, _HEIGHT_IN + _LEGEND_ROW_IN * rows), layout="constrained")
    FigureCanvasSVG(fig)  # layout measured and drawn by the SVG renderer, no raster canvas
    ax = fig.add_subplot()
    top = _top(chart)[0]
    single = not chart.x_title and len({x for s in chart.series for x, _ in s.points}) == 1
    (_draw_linear if chart.x_title else _draw_bars if single else _draw_lines)(ax, chart, colours)
    _y_axis(ax, chart, top * (1.12 if single else 1.0))
    ax.set_title(chart.title, gid=_gid("title"))
    handles = [Line2D([], [], label=label, **kw) for label, kw in entries]
    legend = fig.legend(handles=handles, loc="outside lower center", ncols=ncols, frameon=False)
    for t in legend.get_texts():
        t.set_gid(_gid("legend"))
    return fig, legend


def render(chart: Chart) -> str:
    """The chart as an inline ``<svg class="chart">`` ("" when no series has a point). The same
    chart is drawn once (about 0.1 s) and then served from a small cache: the output is a pure
    function of the chart."""
    series = tuple(
        Series(s.concurrency, tuple((float(x), float(y)) for x, y in s.points), s.tier, s.label)
        for s in chart.series
        if s.points
    )
    if not series:
        return ""
    return _render(
        Chart(
            chart.title,
            chart.quantity,
            chart.unit,
            series,
            chart.roofline_label,
            chart.solid_label,
            chart.x_title,
        )
    )


@lru_cache(maxsize=256)  # a chart is 5-20 KB: at most a few MB
def _render(chart: Chart) -> str:
    return clean_svg(_figure(chart), chart.title)


# --- the SVG made safe and small to inline -------------------------------------------------------

_SVG, _XLINK = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"
ET.register_namespace("", _SVG)
_KEEP = {"svg", "g", "defs", "clipPath", "path", "use", "rect", "text", "tspan", "circle", "line", "polyline"}
_PRESENTATION = {
    "fill", "fill-opacity", "stroke", "stroke-width", "stroke-dasharray", "stroke-dashoffset",
    "stroke-opacity", "stroke-linejoin", "stroke-linecap", "stroke-miterlimit", "opacity", "font-size",
    "font-weight", "font-style", "text-anchor", "clip-path", "dominant-baseline",
}  # fmt: skip
_HREF = f"{{{_XLINK}}}href"
_REF = re.compile(r"url\(#([^)]+)\)")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _presentation(el: ET.Element) -> None:
    """``style="fill: #fff; font-size: 10px"`` -> ``fill="#fff" font-size="10px"`` (CSP-proof)."""
    style = el.attrib.pop("style", "")
    for decl in style.split(";"):
        name, _, value = decl.partition(":")
        name, value = name.strip(), value.strip()
        if name in _PRESENTATION:
            el.set(name, value)


def _classify(el: ET.Element) -> None:
    """A ``lair-KIND--k=v`` id (matplotlib writes an artist's gid as the id) -> ``data-part="KIND"`` and
    ``data-k="v"`` on its text (or itself); not a class, which the page's own CSS could style."""
    kind, *pairs = el.attrib.pop("id")[len("lair-") :].split("--")
    texts = list(el.iter(f"{{{_SVG}}}text"))
    for target in texts or [el]:
        target.set("data-part", kind)
        for pair in pairs:
            k, _, v = pair.partition("=")
            target.set(f"data-{k}", v)


def _prune(parent: ET.Element) -> None:
    for child in list(parent):
        if _local(child.tag) not in _KEEP:
            parent.remove(child)
            continue
        for name in [a for a in child.attrib if _local(a).startswith("on")]:
            del child.attrib[name]  # never emitted by matplotlib; dropped all the same
        href = child.get(_HREF)
        if href is not None and not href.startswith("#"):
            del child.attrib[_HREF]
        _prune(child)


def _ids(root: ET.Element, prefix: str) -> None:
    """Keep only ids something refers to, prefixed per chart so two charts on a page never clash."""
    used = {v[1:] for el in root.iter() if (v := el.get(_HREF, "")).startswith("#")}
    used |= {m for el in root.iter() for v in el.attrib.values() for m in _REF.findall(v)}
    for el in root.iter():
        ident = el.get("id")
        if ident is not None and ident.startswith("lair-"):
            _classify(el)
        elif ident is not None and ident in used:
            el.set("id", prefix + ident)
        elif ident is not None:
            del el.attrib["id"]
        if (href := el.attrib.pop(_HREF, "")).startswith("#"):
            el.set("href", "#" + prefix + href[1:])  # SVG 2's href: no xlink namespace to declare
        for name, value in el.attrib.items():
            if "url(#" in value:
                el.set(name, _REF.sub(lambda m: f"url(#{prefix}{m.group(1)})", value))


_FLOAT = re.compile(r"(-?\d+\.\d\d)\d+")
_NO_ROTATION = re.compile(r"^rotate\(-?0 [^)]*\)$")


def _compact(el: ET.Element) -> None:
    """Two decimals (a hundredth of a point), no indentation, no zero rotations, one font on the root."""
    for name, value in el.attrib.items():
        el.set(name, _FLOAT.sub(r"\1", " ".join(value.split())))
    if _NO_ROTATION.match(el.get("transform", "")):
        del el.attrib["transform"]
    el.attrib.pop("font-family", None)
    if _local(el.tag) not in {"text", "tspan"}:
        el.text = None
    el.tail = None


def clean_svg(raw: bytes, title: str) -> str:
    """matplotlib's SVG document -> one ``<svg>`` element safe and small to inline in HTML."""
    root = ET.fromstring(raw)  # drops comments, the XML declaration and the DOCTYPE
    _prune(root)
    for el in root.iter():
        _presentation(el)
        _compact(el)
    _ids(root, "c" + hashlib.sha256(raw).hexdigest()[:8] + "-")
    for name in ("width", "height", "version"):
        root.attrib.pop(name, None)
    root.attrib.update({"class": "chart", "role": "img", "aria-label": title, "font-family": _FONT})
    root.attrib.update({"stroke-linejoin": "round", "stroke-linecap": "butt"})  # matplotlib's <style>
    for el in list(root.iter()):
        for child in [c for c in el if _local(c.tag) in {"defs", "g"} and not len(c) and not c.attrib]:
            el.remove(child)
    return ET.tostring(root, encoding="unicode", short_empty_elements=True)
