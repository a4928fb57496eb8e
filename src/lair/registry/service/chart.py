"""A server-rendered SVG chart of decode and prefill speed against context (log scale), no script.

Two panels share the context axis: decode tok/s (one line per concurrency) and prefill tok/s.
Every label is escaped; the SVG is inlined in the page.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

__all__ = ["speed_chart"]

W, H, PAD_L, PAD_R, PAD_T, PANEL_H, GAP = 640, 300, 64, 16, 24, 100, 40
COLORS = ("#2563eb", "#16a34a", "#db2777", "#ea580c", "#7c3aed")


def _fmt(v: float) -> str:
    """Context ticks in binary units as recipe pages write them (2048 -> 2K, 1048576 -> 1M)."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if v >= size:
            return f"{v / size:.3g}{unit}"
    return f"{v:g}"


def _x(ctx: float, lo: float, hi: float) -> float:
    span = math.log2(hi) - math.log2(lo) or 1.0
    return PAD_L + (math.log2(ctx) - math.log2(lo)) / span * (W - PAD_L - PAD_R)


def _panel(
    series: dict[str, list[tuple[int, float]]], top: float, lo: float, hi: float, label: str
) -> list[str]:
    ymax = max((v for pts in series.values() for _, v in pts), default=1.0) * 1.1 or 1.0
    out = [f'<text x="4" y="{top + 12}" class="axis">{escape(label)}</text>']
    out.append(
        f'<line x1="{PAD_L}" y1="{top + PANEL_H}" x2="{W - PAD_R}" y2="{top + PANEL_H}" class="grid"/>'
    )
    for frac in (0.5, 1.0):
        y = top + PANEL_H - frac * PANEL_H / 1.1
        tick = _fmt(round(ymax / 1.1 * frac, 1))
        out.append(f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">{tick}</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        coords = [(_x(c, lo, hi), top + PANEL_H - v / ymax * PANEL_H) for c, v in sorted(pts)]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (x, y), (c, v) in zip(coords, sorted(pts), strict=True):
            tip = escape(f"{name}: {v:g} tok/s at {c:,} tokens")
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{tip}</title></circle>'
            )
        attrs = f'x="{W - PAD_R}" y="{top + 12 + 14 * i}" text-anchor="end" fill="{color}" class="axis"'
        out.append(f"<text {attrs}>{escape(name)}</text>")
    return out


def speed_chart(rows: list[dict[str, Any]]) -> str:
    """The SVG, or "" when no row has a speed."""
    live = [r for r in rows if not r.get("retracted")]
    decode: dict[str, list[tuple[int, float]]] = {}
    prefill: dict[str, list[tuple[int, float]]] = {"prefill": []}
    for r in live:
        if r.get("decode_tok_s"):
            decode.setdefault(f"decode x{r.get('concurrency') or 1}", []).append(
                (r["context"], r["decode_tok_s"])
            )
        if r.get("prefill_tok_s"):
            prefill["prefill"].append((r["context"], r["prefill_tok_s"]))
    contexts = [r["context"] for r in live if r.get("decode_tok_s") or r.get("prefill_tok_s")]
    if not contexts:
        return ""
    lo, hi = min(contexts) / 1.5, max(contexts) * 1.5
    label = "decode and prefill speed against context"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" class="chart" '
        f'aria-label="{label}">'
    ]
    parts += _panel(decode, PAD_T, lo, hi, "decode tok/s")
    parts += _panel({k: v for k, v in prefill.items() if v}, PAD_T + PANEL_H + GAP, lo, hi, "prefill tok/s")
    for c in sorted(set(contexts)):
        parts.append(
            f'<text x="{_x(c, lo, hi):.1f}" y="{H - 6}" text-anchor="middle" class="axis">{_fmt(c)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
