"""Leave-one-out check of ``lair fit --predict``: how often the band covers a measured row it never saw.

For every measured row (the bundled table, built from the GPU runs in benchmarks/results, plus the
verified rows of a registry database with ``--db``), the row is held out and its band computed from the
other rows exactly as a prediction does (:func:`lair.fit.predict.matching` and
:func:`~lair.fit.predict.band`: same engine, model class and weight format; the default band under
``MIN_ROWS`` matches). The row is covered when its efficiency lies in [low, high]; its error is
|expected - measured| / measured (the roofline is the same on both sides, so the error in tok/s equals
the error in efficiency).

    .venv/bin/python benchmarks/predict_loo.py                      # bundled rows
    .venv/bin/python benchmarks/predict_loo.py --db sqlite:///registry.db
    .venv/bin/python benchmarks/predict_loo.py --json benchmarks/results/predict_loo.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from lair.fit.predict import DEFAULT_DECODE, DEFAULT_PREFILL, EfficiencyRow, MatchKey, band, matching

DEFAULTS = {"decode": DEFAULT_DECODE, "prefill": DEFAULT_PREFILL}


def held_out(rows: Sequence[EfficiencyRow], figure: str) -> list[dict[str, Any]]:
    """One entry per row with ``figure``: its band from the other rows, covered or not, its error."""
    out = []
    for i, row in enumerate(rows):
        measured = getattr(row, figure)
        if measured is None:
            continue
        others = [r for j, r in enumerate(rows) if j != i]
        key = MatchKey(row.engine, row.model_class, row.weight_format)
        b = band(matching(others, key, figure), figure, DEFAULTS[figure])
        out.append({
            "id": row.id, "engine": row.engine, "measured": measured,
            "low": b.low, "expected": b.expected, "high": b.high, "basis": b.basis, "rows": b.rows,
            "covered": b.low <= measured <= b.high,
            "error": abs(b.expected - measured) / measured if measured else None,
        })  # fmt: skip
    return out


def summary(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Coverage (covered / rows) and the median and p90 error of held-out entries."""
    errors = sorted(e["error"] for e in entries if e["error"] is not None)
    covered = sum(1 for e in entries if e["covered"])
    n = len(entries)
    return {
        "rows": n,
        "covered": covered,
        "coverage": round(covered / n, 4) if n else None,
        "median_error": round(statistics.median(errors), 4) if errors else None,
        "p90_error": round(statistics.quantiles(errors, n=10, method="inclusive")[-1], 4)
        if len(errors) >= 2
        else None,
    }


def default_only(entries: Sequence[dict[str, Any]], figure: str) -> dict[str, Any]:
    """The baseline: the default band alone, for every held-out row (what learning from rows adds)."""
    low, mid, high = DEFAULTS[figure]
    m = [e["measured"] for e in entries]
    return summary([
        {"covered": low <= x <= high, "error": abs(mid - x) / x if x else None} for x in m
    ])  # fmt: skip


def report(rows: Sequence[EfficiencyRow]) -> dict[str, Any]:
    """Per figure: the summary over every held-out row, per basis (rows / default) and per engine,
    and the default band alone on the same rows."""
    out: dict[str, Any] = {"rows": len(rows), "sources": sorted({r.source for r in rows})}
    for figure in ("decode", "prefill"):
        entries = held_out(rows, figure)
        groups = {f"basis={b}": summary([e for e in entries if e["basis"] == b]) for b in ("rows", "default")}
        groups |= {
            f"engine={g}": summary([e for e in entries if e["engine"] == g]) for g in _engines(entries)
        }
        groups["default_band_only"] = default_only(entries, figure)
        out[figure] = {"all": summary(entries), **groups, "held_out": entries}
    return out


def _engines(entries: Sequence[dict[str, Any]]) -> list[str]:
    return sorted({e["engine"] for e in entries})


def registry_rows(db: str) -> list[EfficiencyRow]:
    from lair.registry.db.engine import connect_url, make_engine
    from lair.registry.service.efficiencies import efficiency_rows

    engine = make_engine(connect_url(db))
    try:
        with engine.connect() as conn:
            return efficiency_rows(conn)
    finally:
        engine.dispose()


def main() -> int:
    from lair.fit.efficiencies import bundled_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="also the verified rows of this registry database (SQLAlchemy URL or path)")
    ap.add_argument("--no-bundled", action="store_true", help="leave the bundled table out")
    ap.add_argument("--json", help="write the report here")
    a = ap.parse_args()
    rows = ([] if a.no_bundled else list(bundled_rows())) + (registry_rows(a.db) if a.db else [])
    out = report(rows)
    for figure in ("decode", "prefill"):
        s = out[figure]["all"]
        print(
            f"{figure}: {s['covered']}/{s['rows']} covered, median error {s['median_error']}", file=sys.stderr
        )
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
