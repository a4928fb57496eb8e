"""The recipe page's speed charts, drawn by :mod:`lair.report.charts` (the run report's module).

Two charts share the context axis: decode tok/s (per stream at concurrency 1, all streams together
above, as the rows carry it) and prefill tok/s. One colour per concurrency; the author's reported
rows dashed, rows verified (or replicated) by the registry solid; the roofline ceiling the rows are
rated against dotted, where the model's facts and the GPUs are known. Retracted rows are left out.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from statistics import median
from typing import Any

from sqlalchemy import Connection

from lair.report.charts import Chart, Series, Tier, render

__all__ = ["chart_store", "speed_chart"]

_STORE: ContextVar[Connection | None] = ContextVar("chart_store", default=None)


@contextmanager
def chart_store(conn: Connection) -> Iterator[None]:
    """Charts drawn inside the block are kept in (and read back from) the ``chart_svgs`` table over
    ``conn``: a write that re-renders a page whose rows did not change (a vote) draws nothing, in
    any process. A chart is a pure function of what it shows, keyed by the sha256 of that."""
    token = _STORE.set(conn)
    try:
        yield
    finally:
        _STORE.reset(token)


def _draw(chart: Chart) -> str:
    conn = _STORE.get()
    if conn is None:
        return render(chart)
    import sqlalchemy as sa

    key = hashlib.sha256(repr(chart).encode()).hexdigest()
    found = conn.execute(sa.text("SELECT svg FROM chart_svgs WHERE key = :k"), {"k": key}).scalar()
    if found is not None:
        return str(found)
    svg = render(chart)
    insert = "INSERT INTO chart_svgs (key, svg) VALUES (:k, :s) ON CONFLICT (key) DO NOTHING"
    conn.execute(sa.text(insert), {"k": key, "s": svg})
    return svg


_Points = dict[tuple[int | None, Tier], dict[int, list[float]]]


def _tier(row: dict[str, Any]) -> Tier:
    return "reported" if (row.get("tier") or row["provenance"]) == "reported" else "verified"


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
    return _draw(Chart("decode by context", "decode, all streams", "tok/s", decode, label)) + _draw(
        Chart("prefill by context", "prefill", "tok/s", prefill, label)
    )
