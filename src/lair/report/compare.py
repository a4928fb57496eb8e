"""Two run reports side by side: the cells they share, with deltas in percent (B against A)."""

from __future__ import annotations

from typing import Any

from lair.report.quality import quality_compare, quality_compare_lines
from lair.table import markdown_table

__all__ = ["COMPARED", "compare", "compare_text"]

COMPARED = ("ttft_ms_p50", "prefill_tok_s", "decode_tok_s_per_stream", "decode_tok_s_aggregate")
"""Cell metrics a comparison shows (lower TTFT is better; higher tok/s is better)."""


def _pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a * 100.0


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows for every (context, concurrency) in either report; metrics of A, B and delta %."""
    cells_a = {(c["context"], c["concurrency"]): c for c in a["bench"]["cells"]}
    cells_b = {(c["context"], c["concurrency"]): c for c in b["bench"]["cells"]}
    rows = []
    for key in sorted(cells_a.keys() | cells_b.keys()):
        ca, cb = cells_a.get(key, {}), cells_b.get(key, {})
        row: dict[str, Any] = {"context": key[0], "concurrency": key[1]}
        for m in COMPARED:
            row[m] = {"a": ca.get(m), "b": cb.get(m), "delta_pct": _pct(ca.get(m), cb.get(m))}
        row["flags"] = {"a": ca.get("flags"), "b": cb.get("flags")}
        rows.append(row)
    return {
        "a": {"run_name": a.get("run_name"), "model": a["bench"]["model"], "created_at": a.get("created_at")},
        "b": {"run_name": b.get("run_name"), "model": b["bench"]["model"], "created_at": b.get("created_at")},
        "rows": rows,
        "quality": quality_compare(a, b),
    }


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}"


def _delta(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def compare_text(cmp: dict[str, Any]) -> str:
    """The comparison as a Markdown table."""
    head = ["context", "conc"]
    for m in COMPARED:
        head += [f"{m} A", "B", "Δ"]
    lines = [
        f"A: {cmp['a']['run_name']} ({cmp['a']['model']}, {cmp['a']['created_at']})",
        f"B: {cmp['b']['run_name']} ({cmp['b']['model']}, {cmp['b']['created_at']})",
        "",
    ]
    rows = []
    for r in cmp["rows"]:
        cells = [f"{r['context']:,}", str(r["concurrency"])]
        for m in COMPARED:
            cells += [_cell(r[m]["a"]), _cell(r[m]["b"]), _delta(r[m]["delta_pct"])]
        rows.append(cells)
    lines.append(markdown_table(head, rows))
    lines += quality_compare_lines(cmp.get("quality") or [])
    return "\n".join(lines) + "\n"
