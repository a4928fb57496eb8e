"""Human renderings of a run report: a text/Markdown table and a self-contained HTML page with an
inline SVG plot of tok/s against context. Everything renders from the ``results.json`` document; the
tables come from :mod:`lair.table`, the page from the Jinja2 template ``templates/report.html``
(autoescaped: run names, models and fingerprints are the uploader's text)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from lair.report.quality import QUALITY_COLUMNS, quality_markdown, quality_rows, quality_source
from lair.table import markdown_table

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = [
    "CERTIFICATE_COLUMNS",
    "COLUMNS",
    "ENERGY_COLUMNS",
    "cell_rows",
    "certificate_lines",
    "certificate_rows",
    "certificate_text",
    "charts",
    "energy_rows",
    "energy_text",
    "html_page",
    "machine_text",
    "markdown",
    "speed_text",
    "table_rows",
]

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


ENERGY_COLUMNS = (
    "context",
    "conc",
    "avg W",
    "peak W",
    "J/output tok",
    "J/prompt tok",
    "output tok/kWh",
    "$/Mtok energy",
    "$/Mtok hardware",
    "$/Mtok total",
    "energy from",
)
"""Columns of the energy table (cells with an energy figure)."""
CERTIFICATE_COLUMNS = ("context", "conc", "ran", "idle gap s", "cache", "client", "GPU", "machine")
"""Columns of the per-cell certificate table."""


def _num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    x = float(v)
    if x and abs(x) < 10 ** (-digits):
        return f"{x:.3g}"
    return f"{x:,.{digits}f}"


def energy_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    """The energy table's rows: one per cell whose certificate holds an energy figure."""
    rows = []
    for c in cells:
        e = (c.get("certificate") or {}).get("energy")
        if not e:
            continue
        usd = e.get("usd_per_mtok") or {}
        rows.append(
            [
                _fmt(c["context"]),
                _fmt(c["concurrency"]),
                _num(e.get("avg_w")),
                _num(e.get("peak_w")),
                _num(e.get("j_per_output_token"), 3),
                _num(e.get("j_per_prompt_token"), 4),
                _num(e.get("output_tokens_per_kwh"), 0),
                _num(usd.get("energy"), 4),
                _num(usd.get("hardware"), 4),
                _num(usd.get("total"), 4),
                str(e.get("energy_source") or "-"),
            ]
        )
    return rows


def _cache_text(cache: dict[str, Any]) -> str:
    hits = [
        x for x in (cache.get("counter_hit_tokens"), cache.get("response_cached_tokens")) if x is not None
    ]
    by = "+".join(cache.get("proven_by") or []) or "nothing to see a hit"
    if not cache.get("proven_by"):
        return "cold not proven (no hit counter, no cached_tokens)"
    state = "cold" if cache.get("cold") else "HIT"
    return f"{state}: {max(hits, default=0):g} hit tok ({by})"


def _client_text(cl: dict[str, Any]) -> str:
    verdict = "CLIENT-BOUND" if cl.get("bound") else "ok"
    return (
        f"{verdict}: cpu {100 * float(cl.get('cpu_fraction_max', 0)):.0f}%, "
        f"lag p99 {float(cl.get('loop_lag_p99_ms_max', 0)):.1f} ms"
    )


def _gpu_text(g: dict[str, Any] | None) -> str:
    if not g:
        return "no GPU telemetry"
    sm, parts = g.get("sm_clock_mhz") or {}, [f"{g.get('samples', 0)} samples"]
    if sm:
        parts.append(f"SM {sm['min']:.0f}-{sm['max']:.0f} MHz")
    if g.get("temp_c_max") is not None:
        parts.append(f"max {g['temp_c_max']:.0f} C")
    reasons = g.get("throttle_reasons") or []
    parts.append("THROTTLED: " + ", ".join(reasons) if reasons else "no throttling")
    return ", ".join(parts)


def machine_text(m: dict[str, Any] | None) -> str:
    """``NOISY: reason; reason`` or ``quiet: other 0.01 of 2 cores, steal 0%``; ``-`` before it existed."""
    if not m:
        return "-"
    if m.get("noisy"):
        return "NOISY: " + "; ".join(m.get("reasons") or [])
    cpu = m.get("cpu") or {}
    if cpu.get("other_cpu_cores") is not None:
        parts = [f"other {cpu['other_cpu_cores']:.2f} of {cpu.get('cpus')} cores"]
    else:
        parts = [str(m.get("engine_cpu") or "engine CPU unknown")]
    if cpu:
        parts.append(f"steal {float(cpu.get('steal_fraction') or 0):.0%}")
    spread = m.get("repeat_spread") or {}
    if spread:
        parts.append(f"repeats within {max(spread.values()):.2f}x")
    return "quiet: " + ", ".join(parts)


def certificate_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    """One row per cell with a certificate: when it ran, the cache, the client, the GPU."""
    rows = []
    for c in cells:
        cert = c.get("certificate")
        if not cert:
            continue
        rows.append(
            [
                _fmt(c["context"]),
                _fmt(c["concurrency"]),
                f"#{int(cert.get('position', 0)) + 1}",
                f"{float(cert.get('idle_gap_s') or 0.0):.3f}",
                _cache_text(cert.get("cache") or {}),
                _client_text(cert.get("client") or {}),
                _gpu_text(cert.get("gpu")),
                machine_text(cert.get("machine")),
            ]
        )
    return rows


def certificate_lines(bench: dict[str, Any]) -> list[str]:
    """The run's certificate in a few lines ("no certificate" for a report written before them)."""
    rc = bench.get("certificate")
    if not rc:
        return ["No certificate (a report from before lair recorded one)."]
    order = "fixed order" if rc.get("order") == "fixed" else f"shuffled order (seed {rc.get('seed')})"
    ran = " -> ".join(f"{a}x{b}" for a, b in rc.get("cells_in_order") or [])
    sw = rc.get("software") or {}
    tele = rc.get("telemetry")
    tele_text = (
        f"GPU telemetry: {tele}" if tele != "none" else (rc.get("telemetry_note") or "no GPU telemetry")
    )
    engine = " ".join(str(x) for x in (sw.get("engine"), sw.get("engine_version")) if x) or "unknown"
    return [
        f"- {order}: {ran}; {rc.get('warmup_requests', 0)} warm-up request(s); "
        f"idle gap {float(rc.get('idle_gap_s') or 0):g} s before each cell",
        f"- {tele_text}",
        f"- engine {engine}"
        + (f" (commit {sw['engine_commit']})" if sw.get("engine_commit") else "")
        + (f"; driver {sw['driver']}" if sw.get("driver") else "")
        + (f", CUDA {sw['cuda']}" if sw.get("cuda") else "")
        + (f"; image {sw['image_digest']}" if sw.get("image_digest") else ""),
    ]


def energy_text(doc: dict[str, Any]) -> str:
    """The energy table as the CLI prints it ("" when no cell has an energy figure)."""
    rows = energy_rows(doc["cells"])
    return "\n".join(" | ".join(r) for r in [list(ENERGY_COLUMNS), *rows]) if rows else ""


def certificate_text(doc: dict[str, Any]) -> str:
    """The certificate as the CLI prints it: the run's lines, then one line per cell."""
    rows = certificate_rows(doc["cells"])
    lines = ["certificate:", *certificate_lines(doc)]
    return "\n".join(lines + [" | ".join(r) for r in [list(CERTIFICATE_COLUMNS), *rows]] if rows else lines)


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


def cell_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    """The speed table as text cells, one row per (context, concurrency)."""
    return [[_fmt(cell.get(key)) for key, _ in COLUMNS] for cell in cells]


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The report's speed table as text cells."""
    return cell_rows(doc["bench"]["cells"])


def speed_text(cells: list[dict[str, Any]]) -> str:
    """The speed table as the CLI prints it: one line per cell, `` | `` between columns."""
    return "\n".join(" | ".join(r) for r in [[t for _, t in COLUMNS], *cell_rows(cells)])


def _needle_line(doc: dict[str, Any]) -> str:
    n = doc["bench"].get("needle")
    if not n:
        return ""
    state = "found" if n["found"] else "NOT found"
    return f"Needle at {n['context']:,} context, depth {n['depth']:.0%}: {state} in {n['time_s']:.1f} s.\n"


def _fingerprint_lines(fp: dict[str, Any]) -> list[str]:
    gpus = fp.get("gpus") or {}
    gpu = f"{gpus.get('count')} x {', '.join(gpus.get('models') or [])}" if gpus else "none found"
    kit = f"ROCm {gpus.get('rocm')}" if gpus.get("vendor") == "amd" else f"CUDA {gpus.get('cuda')}"
    ram = fp.get("ram_bytes")
    image = fp.get("image") or {}
    return [
        f"- GPU: {gpu}" + (f" (driver {gpus.get('driver')}, {kit})" if gpus else ""),
        f"- CPU: {(fp.get('cpu') or {}).get('model')} x {(fp.get('cpu') or {}).get('count')}",
        f"- RAM: {ram / 2**30:.1f} GiB" if ram else "- RAM: unknown",
        f"- OS: {fp.get('os')}, kernel {fp.get('kernel')}",
        f"- image: {image.get('name')} {image.get('id') or ''}".rstrip() if image else "- image: none",
        f"- engine: {engine_label(fp)}; lair {fp.get('lair_version')}",
        f"- recipe sha256: {fp.get('recipe_sha256') or '-'}",
    ]


def engine_label(fp: dict[str, Any]) -> str:
    """``llama.cpp (xllamacpp 0.2.1, installed package)``, ``vllm 0.11.0 (server /version)``."""
    eng = fp.get("engine") or {}
    name, version, source = eng.get("name"), eng.get("version"), eng.get("source")
    if not name and not version:
        return str(fp.get("engine_version") or "unknown")
    text = " ".join(str(x) for x in (name, version) if x)
    return text + (f" ({source})" if source else "")


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
        markdown_table([t for _, t in COLUMNS], table_rows(doc)),
        "",
        _needle_line(doc),
        *_energy_markdown(b),
        *_certificate_markdown(b),
        *quality_markdown(doc),
        "Definitions: TTFT to the first content token; decode per stream excludes the first chunk; "
        "total decode = all streams' decode tokens over first to last content chunk; "
        "headline = p50 over repeats.",
        "",
        "## Machine",
        *_fingerprint_lines(doc.get("fingerprint") or {}),
    ]
    return "\n".join(head).rstrip() + "\n"


def _energy_markdown(bench: dict[str, Any]) -> list[str]:
    rows = energy_rows(bench["cells"])
    if not rows:
        return []
    return ["## Energy", "", markdown_table(ENERGY_COLUMNS, rows), ""]


def _certificate_markdown(bench: dict[str, Any]) -> list[str]:
    rows = certificate_rows(bench["cells"])
    table = [markdown_table(CERTIFICATE_COLUMNS, rows), ""] if rows else []
    return ["## Certificate", "", *certificate_lines(bench), "", *table]


_ChartSpec = tuple[str, str, str, str, str | None]
_CHARTS: tuple[_ChartSpec, ...] = (
    ("decode_tok_s_per_stream", "decode per stream", "decode speed", "tok/s", "decode_roofline_tok_s"),
    ("decode_tok_s_aggregate", "decode, all streams together", "decode speed", "tok/s", None),
    ("prefill_tok_s", "prefill", "prefill speed", "tok/s", "prefill_roofline_tok_s"),
    ("ttft_ms_p50", "time to first token, p50", "TTFT", "ms", None),
)
"""(cell key, chart title, y axis quantity, unit, the roofline row's ceiling key or None)."""


def _by_concurrency(rows: list[dict[str, Any]], key: str) -> dict[int, list[tuple[float, float]]]:
    out: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get(key) is not None:
            out.setdefault(int(r["concurrency"]), []).append((float(r["context"]), float(r[key])))
    return dict(sorted(out.items()))


def metric_chart(cells: list[dict[str, Any]], spec: _ChartSpec, roofline: Any = None) -> str:
    """The SVG chart of one metric, with the roofline ceiling where rated ("" when no cell has it)."""
    from lair.report.charts import Chart, Series, render

    key, title, quantity, unit, ceiling = spec
    series = [Series(c, pts) for c, pts in _by_concurrency(cells, key).items()]
    if series and ceiling and roofline is not None and roofline.rows:
        measured = {s.concurrency for s in series}
        lines = _by_concurrency(roofline.rows, ceiling)
        series += [Series(c, pts, tier="roofline") for c, pts in lines.items() if c in measured]
    label = f"roofline, {roofline.hardware}" if roofline is not None and roofline.hardware else "roofline"
    return render(Chart(title, quantity, unit, series, roofline_label=label))


def charts(doc: dict[str, Any], roofline: Any = None) -> str:
    """The report's SVG charts; the all-streams chart only when some cell ran several streams.
    ``roofline`` (:class:`lair.report.roofline_rows.RooflineRows`) adds the ceilings it rated."""
    cells = doc["bench"]["cells"]
    several = any(int(c["concurrency"]) > 1 for c in cells)
    specs = [k for k in _CHARTS if several or k[0] != "decode_tok_s_aggregate"]
    return "".join(metric_chart(cells, spec, roofline) for spec in specs)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}"
    "td:last-child{text-align:left}.muted{color:#666}"
    "svg.chart{display:block;margin:1em 0;width:100%;max-width:500px;height:auto}"
)


@cache
def _template() -> Template:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("lair.report", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,  # a missing variable is an error, not an empty cell
    )
    return env.get_template("report.html")


def _roofline_section(roofline: Any) -> dict[str, Any] | None:
    from lair.report.roofline_rows import ROOFLINE_HEAD, roofline_table

    if roofline is None:
        return None
    title, rows = roofline_table(roofline)
    return {"title": title, "head": ROOFLINE_HEAD, "rows": rows, "missing": roofline.missing}


def html_page(doc: dict[str, Any], roofline: Any = None) -> str:
    """A self-contained HTML page: table, charts, roofline, needle, machine. No external resources.
    ``roofline`` is a :class:`lair.report.roofline_rows.RooflineRows` (None: no section)."""
    from markupsafe import Markup

    b = doc["bench"]
    quality = quality_rows(doc)
    return (
        _template().render(
            title=f"{doc.get('run_name') or 'bench'}: {b['model']}",
            meta=_meta_line(doc),
            css=Markup(_CSS),  # a constant of this module
            speed={"head": [t for _, t in COLUMNS], "rows": table_rows(doc)},
            needle=_needle_line(doc).strip(),
            energy={"head": ENERGY_COLUMNS, "rows": energy_rows(b["cells"])},
            certificate={
                "lines": [x[2:] if x.startswith("- ") else x for x in certificate_lines(b)],
                "head": CERTIFICATE_COLUMNS,
                "rows": certificate_rows(b["cells"]),
            },
            quality={"source": quality_source(doc), "head": QUALITY_COLUMNS, "rows": quality}
            if quality
            else None,
            charts=Markup(charts(doc, roofline)),  # SVG built by lair.report.charts, its text escaped there
            roofline=_roofline_section(roofline),
            machine=[x[2:] for x in _fingerprint_lines(doc.get("fingerprint") or {})],
        )
        + "\n"
    )
