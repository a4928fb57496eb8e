"""The recipe page's speed charts, drawn by :mod:`lair.report.charts` (the run report's module).

Two charts share the context axis: decode tok/s (per stream at concurrency 1, all streams together
above, as the rows carry it) and prefill tok/s. One colour per concurrency; the author's reported
rows dashed, rows verified (or replicated) by the registry solid; the roofline ceiling the rows are
rated against dotted, where the model's facts and the GPUs are known. Retracted rows are left out.
"""

from __future__ import annotations

import hashlib
import html
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from statistics import median
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.report.charts import Chart, Series, Tier, render
from lair.report.charts import context_label as fmt_context
from lair.vocabulary import REPORTED, TIERS, VERIFIED

__all__ = ["PENDING_CLASS", "chart_key", "chart_store", "load_chart", "speed_chart", "store_svgs"]

PENDING_CLASS = "chart-pending"
"""The class of what a page shows where a chart is still being drawn (:mod:`.drawer`)."""


@dataclass
class _Store:
    conn: Connection
    defer: bool
    pending: list[Chart]


_STORE: ContextVar[_Store | None] = ContextVar("chart_store", default=None)


@contextmanager
def chart_store(conn: Connection, *, defer: bool = False) -> Iterator[list[Chart]]:
    """Charts drawn inside the block are kept in (and read back from) the ``chart_svgs`` table over
    ``conn``: a write that re-renders a page whose rows did not change (a vote) draws nothing, in
    any process. A chart is a pure function of what it shows, keyed by the sha256 of that.

    With ``defer`` a chart not in the table yet is not drawn: the page gets a placeholder (a
    ``PENDING_CLASS`` paragraph) and the chart goes into the list yielded, for the drawer to draw
    after the write and render the page again (:mod:`.drawer`)."""
    store = _Store(conn, defer, [])
    token = _STORE.set(store)
    try:
        yield store.pending
    finally:
        _STORE.reset(token)


def chart_key(chart: Chart) -> str:
    return hashlib.sha256(repr(chart).encode()).hexdigest()


_FIND = sa.text("SELECT svg FROM chart_svgs WHERE key = :k")
_KEEP = sa.text("INSERT INTO chart_svgs (key, svg) VALUES (:k, :s) ON CONFLICT (key) DO NOTHING")


def store_svgs(conn: Connection, svgs: dict[str, str]) -> None:
    """Keep drawn charts by their :func:`chart_key` (one drawn twice at once is kept once)."""
    for key, svg in svgs.items():
        conn.execute(_KEEP, {"k": key, "s": svg})


def _pending(chart: Chart, key: str) -> str:
    return (
        f'<p class="{PENDING_CLASS}" data-chart="{key[:16]}">{html.escape(chart.title)}: the chart of'
        " these rows is being drawn; reload the page in a moment.</p>"
    )


def _draw(chart: Chart) -> str:
    store = _STORE.get()
    if store is None or not any(s.points for s in chart.series):
        return render(chart)
    key = chart_key(chart)
    found = store.conn.execute(_FIND, {"k": key}).scalar()
    if found is not None:
        return str(found)
    if store.defer:
        store.pending.append(chart)
        return _pending(chart, key)
    svg = render(chart)
    store_svgs(store.conn, {key: svg})
    return svg


_Points = dict[tuple[int | None, Tier], dict[int, list[float]]]


def _tier(row: dict[str, Any]) -> Tier:
    """The line style: dashed for the author's numbers, solid for any row from a run report."""
    return "reported" if (row.get("tier") or row["provenance"]) == REPORTED else "verified"


def _series(points: _Points) -> list[Series]:
    """One series per (concurrency, tier); several rows at one context drawn at their median."""
    return [
        Series(conc, [(float(ctx), median(vs)) for ctx, vs in sorted(by_ctx.items())], tier=tier)
        for (conc, tier), by_ctx in sorted(points.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1]))
    ]


def _rigs(rows: list[dict[str, Any]]) -> str:
    """The GPUs most rows are rated on (the roofline drawn is theirs); "" when none is rated."""
    found = Counter(r["rating"]["gpus"] for r in rows if (r.get("rating") or {}).get("gpus"))
    return min(found.items(), key=lambda kv: (-kv[1], kv[0]))[0] if found else ""


def _chart(rows: list[dict[str, Any]], key: str, ceiling: str, per_conc: bool) -> list[Series]:
    gpus = _rigs(rows)
    measured: _Points = defaultdict(lambda: defaultdict(list))
    roof: _Points = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get(key) is None:
            continue
        conc = r.get("concurrency") or 1
        measured[(conc, _tier(r))][r["context"]].append(float(r[key]))
        rating = r.get("rating") or {}
        if gpus and rating.get("gpus") == gpus and rating.get(ceiling) is not None:
            roof[(conc if per_conc else None, "roofline")][r["context"]].append(float(rating[ceiling]))
    return _series(measured) + _series(roof)


def speed_chart(rows: list[dict[str, Any]]) -> str:
    """The SVGs, or "" when no live row has a speed. ``rows`` may carry their roofline ``rating``
    (:func:`lair.registry.service.fitting.rated_rows`)."""
    live = [r for r in rows if not r.get("retracted")]
    gpus = _rigs(live)
    label = f"roofline, {gpus}" if gpus else "roofline"
    decode = _chart(live, "decode_tok_s", "decode_roofline_tok_s", per_conc=True)
    prefill = _chart(live, "prefill_tok_s", "prefill_roofline_tok_s", per_conc=False)
    solid = solid_label(live)
    return _draw(Chart("decode by context", "decode, all streams", "tok/s", decode, label, solid)) + _draw(
        Chart("prefill by context", "prefill", "tok/s", prefill, label, solid)
    )


def load_chart(contexts: list[dict[str, Any]], label: str = "verified (solid)") -> str:
    """One run's throughput against latency: a line per context through its rate cells (output
    tok/s of all streams on x, TTFT p99 on y), the knee where latency turns up; "" without cells."""
    series = []
    for i, g in enumerate(contexts):
        pts = [
            (float(c["output_tok_s"]), float(c["ttft_ms"]["p99"]))
            for c in g["cells"]
            if c.get("output_tok_s") is not None and c.get("ttft_ms")
        ]
        if pts:  # a context with only a warm cell has no rate to draw
            series.append(Series(i + 1, pts, tier="verified", label=f"ctx {fmt_context(g['context'])}"))
    if not series:
        return ""
    chart = Chart("latency by throughput", "TTFT p99", "ms", series, solid_label=label,
                  x_title="output tok/s, all streams")  # fmt: skip
    return _draw(chart)


def solid_label(rows: list[dict[str, Any]]) -> str:
    """The solid style's legend entry: the tiers of the rows from run reports, weakest first
    (``reported-by-report (solid)``, ``verified, replicated (solid)``)."""
    found = {str(r.get("tier") or r["provenance"]) for r in rows}
    names = [t for t in TIERS if t in found and t != REPORTED] or [VERIFIED]
    return f"{', '.join(names)} (solid)"
