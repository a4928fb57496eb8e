"""Human renderings of a run report: a text/Markdown table and a self-contained HTML page with an
inline SVG plot of tok/s against context. Everything renders from the ``results.json`` document."""

from __future__ import annotations

import html
import math
from typing import Any

__all__ = ["COLUMNS", "html_page", "markdown", "svg_plot", "table_rows"]

COLUMNS = (
    ("context", "context"),
    ("concurrency", "conc"),
    ("prompt_tokens", "prompt tok"),
    ("ttft_ms_p50", "TTFT p50 ms"),
    ("ttft_ms_p90", "TTFT p90 ms"),
    ("prefill_tok_s", "prefill tok/s"),
    ("decode_tok_s_per_stream", "decode tok/s/stream"),
    ("decode_tok_s_aggregate", "decode tok/s total"),
    ("cached_tokens", "cached tok"),
    ("flags", "flags"),
)
"""(cell key, column title) of the speed table, in order."""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "ok"
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The speed table as text cells, one row per (context, concurrency)."""
    return [[_fmt(cell.get(key)) for key, _ in COLUMNS] for cell in doc["bench"]["cells"]]


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _needle_line(doc: dict[str, Any]) -> str:
    n = doc["bench"].get("needle")
    if not n:
        return ""
    state = "found" if n["found"] else "NOT found"
    return f"Needle at {n['context']:,} context, depth {n['depth']:.0%}: {state} in {n['time_s']:.1f} s.\n"


def _fingerprint_lines(fp: dict[str, Any]) -> list[str]:
    gpus = fp.get("gpus") or {}
    gpu = f"{gpus.get('count')} x {', '.join(gpus.get('models') or [])}" if gpus else "none found"
    ram = fp.get("ram_bytes")
    image = fp.get("image") or {}
    return [
        f"- GPU: {gpu}" + (f" (driver {gpus.get('driver')}, CUDA {gpus.get('cuda')})" if gpus else ""),
        f"- CPU: {(fp.get('cpu') or {}).get('model')} x {(fp.get('cpu') or {}).get('count')}",
        f"- RAM: {ram / 2**30:.1f} GiB" if ram else "- RAM: unknown",
        f"- OS: {fp.get('os')}, kernel {fp.get('kernel')}",
        f"- image: {image.get('name')} {image.get('id') or ''}".rstrip() if image else "- image: none",
        f"- engine: {fp.get('engine_version') or 'unknown'}; lair {fp.get('lair_version')}",
        f"- recipe sha256: {fp.get('recipe_sha256') or '-'}",
    ]


def _meta_line(doc: dict[str, Any]) -> str:
    b = doc["bench"]
    return f"{b['url']} · {b['started_at']} → {b['finished_at']} · lair {doc.get('lair_version')}"


def markdown(doc: dict[str, Any]) -> str:
    """The report as Markdown (also what ``lair report show`` prints)."""
    b = doc["bench"]
    head = [
        f"# {doc.get('run_name') or 'bench'}: {b['model']}",
        "",
        _meta_line(doc),
        "",
        _md_table([t for _, t in COLUMNS], table_rows(doc)),
        "",
        _needle_line(doc),
        "Definitions: TTFT to the first content token; decode per stream excludes the first chunk; "
        "total decode = all streams' decode tokens over first to last content chunk; "
        "headline = p50 over repeats.",
        "",
        "## Machine",
        *_fingerprint_lines(doc.get("fingerprint") or {}),
    ]
    return "\n".join(head).rstrip() + "\n"


_W, _H, _PAD = 640, 300, 48
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _series(doc: dict[str, Any], key: str) -> dict[int, list[tuple[float, float]]]:
    out: dict[int, list[tuple[float, float]]] = {}
    for c in doc["bench"]["cells"]:
        if c.get(key) is not None:
            out.setdefault(c["concurrency"], []).append((float(c["context"]), float(c[key])))
    return {k: sorted(v) for k, v in sorted(out.items())}


def _text(x: float, y: float, s: str, anchor: str = "middle", fill: str = "#222") -> str:
    attrs = f'x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="11" fill="{fill}"'
    return f"<text {attrs}>{html.escape(s)}</text>"


def svg_plot(doc: dict[str, Any], key: str, title: str) -> str:
    """An inline SVG line plot of ``key`` against context (log x when contexts span > 8x)."""
    series = _series(doc, key)
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f"<p>{html.escape(title)}: no data</p>"
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    logx = max(xs) / max(min(xs), 1) > 8

    def fx(x: float) -> float:
        lo, hi = (math.log(min(xs)), math.log(max(xs))) if logx else (min(xs), max(xs))
        v = math.log(x) if logx else x
        return _PAD + (v - lo) / ((hi - lo) or 1) * (_W - 2 * _PAD)

    def fy(y: float) -> float:
        return _H - _PAD - y / (max(ys) or 1) * (_H - 2 * _PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img">']
    parts.append(f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>')
    parts.append(f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#888"/>')
    parts.append(f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>')
    parts.append(f'<text x="{_PAD - 4}" y="{_PAD}" text-anchor="end" font-size="10">{max(ys):,.0f}</text>')
    for x in sorted(set(xs)):
        parts.append(
            f'<text x="{fx(x):.1f}" y="{_H - _PAD + 14}" text-anchor="middle" font-size="10">{x:,.0f}</text>'
        )
    for i, (conc, s) in enumerate(series.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        line = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in s)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>')
        parts += [f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}"/>' for x, y in s]
        parts.append(
            f'<text x="{_W - _PAD + 4}" y="{_PAD + 14 * i}" font-size="11" fill="{colour}">x{conc}</text>'
        )
    parts.append(
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">context (tokens)</text>'
    )
    return "".join(parts) + "</svg>"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}"
    "td:last-child{text-align:left}.muted{color:#666}"
)


def html_page(doc: dict[str, Any]) -> str:
    """A self-contained HTML page: table, plots, needle, machine. No external resources."""
    b = doc["bench"]
    title = html.escape(f"{doc.get('run_name') or 'bench'}: {b['model']}")
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in table_rows(doc)
    )
    fp = "".join(f"<li>{html.escape(x[2:])}</li>" for x in _fingerprint_lines(doc.get("fingerprint") or {}))
    plots = "".join(
        svg_plot(doc, k, t)
        for k, t in (
            ("decode_tok_s_per_stream", "decode tok/s per stream"),
            ("decode_tok_s_aggregate", "decode tok/s, all streams"),
            ("prefill_tok_s", "prefill tok/s"),
        )
    )
    meta = html.escape(
        f"{b['url']} · {b['started_at']} → {b['finished_at']} · lair {doc.get('lair_version')}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_CSS}</style>"
        f"</head><body><h1>{title}</h1><p class='muted'>{meta}</p><table><tr>{head}</tr>{body}</table>"
        f"<p>{html.escape(_needle_line(doc))}</p><div>{plots}</div><h2>Machine</h2><ul>{fp}</ul>"
        "</body></html>\n"
    )
