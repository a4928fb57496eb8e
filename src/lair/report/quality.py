"""The quality table of a run report (``results.json``'s ``eval`` section, written by ``lair eval``
or ``lair launch --bench --eval``) and the quality deltas of ``lair report compare``.

Per suite: score ± stderr, the 95% interval, n, repeats with their spread (min-max and how many
samples flipped verdict between repeats) and wall time. Per-sample records are in
``eval_samples.jsonl`` beside ``results.json``.
"""

from __future__ import annotations

from typing import Any

from lair.table import markdown_table

__all__ = [
    "QUALITY_COLUMNS",
    "quality_compare",
    "quality_compare_lines",
    "quality_markdown",
    "quality_rows",
    "quality_source",
]

QUALITY_COLUMNS = (
    "suite",
    "metric",
    "score",
    "± stderr",
    "95% CI",
    "n",
    "repeats",
    "spread",
    "flips",
    "wall s",
)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _row(s: dict[str, Any]) -> list[str]:
    sp = s.get("spread") or {}
    ci = s.get("ci95")
    spread = f"{_pct(sp.get('min'))}-{_pct(sp.get('max'))}" if s.get("repeats", 1) > 1 else "-"
    return [
        str(s["suite"]),
        str(s["metric"]),
        _pct(s["score"]),
        _pct(s.get("stderr")),
        f"{_pct(ci[0])}-{_pct(ci[1])}" if ci else "-",
        f"{s['n']:,}",
        str(s.get("repeats", 1)),
        spread,
        str(sp.get("flips", 0)),
        f"{s.get('wall_s', 0.0):,.1f}",
    ]


def quality_rows(doc: dict[str, Any]) -> list[list[str]]:
    ev = doc.get("eval") or {}
    return [_row(s) for s in ev.get("suites", [])]


def quality_source(doc: dict[str, Any]) -> str:
    ev = doc["eval"]
    h = ev.get("harness") or {}
    return f"lm-eval {h.get('lm_eval', '?')} over the {h.get('api', 'completions')} API of {ev['model']}"


def quality_markdown(doc: dict[str, Any]) -> list[str]:
    """The quality section as Markdown lines (none when the report has no evaluation)."""
    rows = quality_rows(doc)
    if not rows:
        return []
    lines = ["## Quality", "", quality_source(doc), "", markdown_table(QUALITY_COLUMNS, rows)]
    lines += ["", "Per-sample records (prompt hash, output, verdict): eval_samples.jsonl.", ""]
    return lines


def quality_compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per suite in either report: score of A and B and the delta in percentage points (B - A)."""
    sa = {s["suite"]: s for s in (a.get("eval") or {}).get("suites", [])}
    sb = {s["suite"]: s for s in (b.get("eval") or {}).get("suites", [])}
    rows = []
    for name in sorted(sa.keys() | sb.keys()):
        x, y = sa.get(name, {}), sb.get(name, {})
        score_a, score_b = x.get("score"), y.get("score")
        delta = None if score_a is None or score_b is None else 100 * (score_b - score_a)
        rows.append(
            {
                "suite": name,
                "metric": x.get("metric") or y.get("metric"),
                "a": score_a,
                "b": score_b,
                "delta_pp": delta,
                "n": {"a": x.get("n"), "b": y.get("n")},
                "stderr": {"a": x.get("stderr"), "b": y.get("stderr")},
            }
        )
    return rows


def quality_compare_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    head = ("suite", "metric", "A", "B", "Δ (points)", "n A", "n B")
    cells = []
    for r in rows:
        d = "-" if r["delta_pp"] is None else f"{r['delta_pp']:+.1f}"
        n = r["n"]
        cells.append([r["suite"], str(r["metric"]), _pct(r["a"]), _pct(r["b"]), d, str(n["a"] or "-"),
                      str(n["b"] or "-")])  # fmt: skip
    return ["", markdown_table(head, cells)]
