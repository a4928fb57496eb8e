"""Inline SVG charts of a run report: a metric against context, one series per concurrency.

Every chart has a y axis from zero with round ticks and the unit in its title, an x axis with a tick
at each measured context, and a legend naming each series ("1 stream", "4 streams"). A run with a
single context is drawn as bars with their values written on them (a line through one point says
nothing). A metric no cell has is not drawn at all.
"""

from __future__ import annotations

import html
import math
from typing import Any

__all__ = ["bar_chart", "line_chart", "metric_chart", "nice_ticks"]

_W, _H = 640, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 72, 120, 36, 52
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")

Series = dict[int, list[tuple[float, float]]]


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 x 10^k) up to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _label(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:,.0f}k"
    if v >= 1000:
        return f"{v / 1000:,.1f}k".replace(".0k", "k")
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:,.1f}"


def _text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11, **attrs: str) -> str:
    extra = "".join(f' {k.rstrip("_").replace("_", "-")}="{v}"' for k, v in attrs.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{extra}>'
        f"{html.escape(s)}</text>"
    )


def _streams(c: int) -> str:
    return f"{c} stream" + ("" if c == 1 else "s")


def _frame(title: str, unit: str, ticks: list[float]) -> list[str]:
    """The SVG head, title, y axis (ticks from 0, grid lines, unit) and the x axis line."""
    plot_h = _H - _TOP - _BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" '
        f'aria-label="{html.escape(title)}" font-family="sans-serif">',
        _text(_W / 2, 20, f"{title} ({unit})", size=14, class_="title"),
    ]
    for t in ticks:
        y = _TOP + plot_h - t / ticks[-1] * plot_h
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(_text(_LEFT - 6, y + 4, _label(t), "end", 10, class_="ytick"))
    parts.append(
        _text(16, _TOP + plot_h / 2, unit, size=11, transform=f"rotate(-90 16 {_TOP + plot_h / 2:.1f})")
    )
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" stroke="#555"/>')
    parts.append(
        f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" y2="{_H - _BOTTOM}" stroke="#555"/>'
    )
    return parts


def _legend(series: Series) -> list[str]:
    parts = []
    for i, conc in enumerate(series):
        colour, y = _COLOURS[i % len(_COLOURS)], _TOP + 8 + 18 * i
        parts.append(f'<rect x="{_W - _RIGHT + 12}" y="{y - 8}" width="12" height="12" fill="{colour}"/>')
        parts.append(_text(_W - _RIGHT + 30, y + 2, _streams(conc), "start", class_="legend"))
    return parts


def _fy(v: float, top: float) -> float:
    plot_h = _H - _TOP - _BOTTOM
    return _TOP + plot_h - v / top * plot_h


def line_chart(series: Series, title: str, unit: str) -> str:
    """Lines over contexts (log x when they span more than 8x), a labelled tick at each context."""
    xs = sorted({x for pts in series.values() for x, _ in pts})
    ticks = nice_ticks(max(y for pts in series.values() for _, y in pts))
    logx = xs[-1] / max(xs[0], 1) > 8

    def fx(x: float) -> float:
        lo, hi = (math.log(xs[0]), math.log(xs[-1])) if logx else (xs[0], xs[-1])
        v = math.log(x) if logx else x
        return _LEFT + 16 + (v - lo) / ((hi - lo) or 1) * (_W - _LEFT - _RIGHT - 32)

    parts = _frame(title, unit, ticks)
    for x in xs:
        parts.append(_text(fx(x), _H - _BOTTOM + 16, f"{x:,.0f}", size=10, class_="xtick"))
    parts.append(_text((_LEFT + _W - _RIGHT) / 2, _H - 12, "context (tokens)"))
    for i, pts in enumerate(series.values()):
        colour = _COLOURS[i % len(_COLOURS)]
        line = " ".join(f"{fx(x):.1f},{_fy(y, ticks[-1]):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>')
        for x, y in pts:
            cy = _fy(y, ticks[-1])
            parts.append(f'<circle cx="{fx(x):.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}"/>')
            parts.append(_text(fx(x), cy - 7, _label(y), size=9, class_="value", fill=colour))
    return "".join(parts + _legend(series)) + "</svg>"


def bar_chart(series: Series, title: str, unit: str) -> str:
    """One context: a bar per concurrency with its value written on it."""
    (ctx,) = {x for pts in series.values() for x, _ in pts}
    values = [(conc, pts[0][1]) for conc, pts in series.items()]
    ticks = nice_ticks(max(v for _, v in values))
    parts = _frame(title, unit, ticks)
    slot = (_W - _LEFT - _RIGHT) / len(values)
    for i, (conc, v) in enumerate(values):
        colour, x, y = _COLOURS[i % len(_COLOURS)], _LEFT + slot * i + slot * 0.25, _fy(v, ticks[-1])
        height = _H - _BOTTOM - y
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.5:.1f}" height="{height:.1f}" fill="{colour}"/>'
        )
        parts.append(_text(x + slot * 0.25, y - 5, _label(v), size=10, class_="value"))
        parts.append(_text(x + slot * 0.25, _H - _BOTTOM + 16, _streams(conc), size=10, class_="xtick"))
    parts.append(_text((_LEFT + _W - _RIGHT) / 2, _H - 12, f"context {ctx:,.0f} tokens"))
    return "".join(parts + _legend(series)) + "</svg>"


def _series(cells: list[dict[str, Any]], key: str) -> Series:
    out: Series = {}
    for c in cells:
        if c.get(key) is not None:
            out.setdefault(int(c["concurrency"]), []).append((float(c["context"]), float(c[key])))
    return {k: sorted(v) for k, v in sorted(out.items())}


def metric_chart(cells: list[dict[str, Any]], key: str, title: str, unit: str) -> str:
    """The chart of one metric ("" when no cell has it)."""
    series = _series(cells, key)
    if not series:
        return ""
    contexts = {x for pts in series.values() for x, _ in pts}
    return bar_chart(series, title, unit) if len(contexts) == 1 else line_chart(series, title, unit)
