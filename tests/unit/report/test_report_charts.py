"""Report charts and HTML, read back as a browser would get them: the SVG parsed as XML (axis ticks
from 0, units, legend, one series per concurrency, bars for a single row, no empty frames, the
roofline ceiling where rated), the roofline % in the page, the real engine name and version, and
report folders of the bundled examples ignored by git."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path
from typing import Any

from lair.bench import BenchResult, CellResult
from lair.report import write_run_report
from lair.report.charts import nice_ticks
from lair.report.render import html_page
from lair.testing.tiny_model import make_tiny_model

SVG = "{http://www.w3.org/2000/svg}"
REPO = Path(__file__).resolve().parents[3]


def _cell(ctx: int, conc: int, decode: float, prefill: float | None = 20_000.0) -> CellResult:
    return CellResult(
        context=ctx, concurrency=conc, repeats=1, prompt_tokens=ctx + 3, ttft_ms_p50=100.0, ttft_ms_p90=110.0,
        prefill_tok_s=prefill, decode_tok_s_per_stream=decode, decode_tok_s_aggregate=decode * conc * 0.9,
        completion_tokens=64, cached_tokens=0, cache_hit=False, client_bound=False, output_length_ok=True,
        errors=0,
    )  # fmt: skip


def _doc(cells: list[CellResult], server: dict[str, Any] | None = None) -> dict[str, Any]:
    res = BenchResult("http://h:1", "m", "a", "b", {}, cells, server=server or {})
    return {"run_name": "r", "bench": res.as_dict(), "fingerprint": {}, "lair_version": "0"}


def _svgs(page: str) -> list[ET.Element]:
    out, pos = [], 0
    while (start := page.find("<svg", pos)) >= 0:
        end = page.index("</svg>", start) + len("</svg>")
        out.append(ET.fromstring(page[start:end]))
        pos = end
    return out


def _texts(svg: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("data-part") == cls]


def test_nice_ticks_start_at_zero_and_cover_the_top() -> None:
    assert nice_ticks(3695) == [0, 1000, 2000, 3000, 4000]
    assert nice_ticks(163) == [0, 50, 100, 150, 200]
    assert nice_ticks(0.8) == [0, 0.2, 0.4, 0.6, 0.8]


def _series(svg: ET.Element) -> list[dict[str, str]]:
    return [dict(g.attrib) for g in svg.iter(f"{SVG}g") if g.get("data-part") == "series"]


def test_charts_have_zero_ticks_units_and_a_legend() -> None:
    cells = [_cell(2048, 1, 160.0), _cell(40960, 1, 80.0), _cell(2048, 4, 120.0), _cell(40960, 4, 60.0)]
    charts = _svgs(html_page(_doc(cells)))
    assert len(charts) == 4  # per stream, all streams, prefill, TTFT
    for svg, unit in zip(charts, ["tok/s", "tok/s", "tok/s", "ms"], strict=True):
        (ylabel,) = _texts(svg, "ylabel")
        assert ylabel.endswith(f"({unit})")
        yticks = _texts(svg, "ytick")
        assert yticks[0] == "0" and len(yticks) >= 3
        # 2,048 and 40,960 tokens on a log2 axis: the powers of two around them, 2K to 64K
        assert _texts(svg, "xtick") == ["2K", "4K", "8K", "16K", "32K", "64K"]
        assert _texts(svg, "legend") == ["1 stream", "4 streams"]
        assert _texts(svg, "xlabel") == ["context (tokens, log scale)"]
        assert [(s["data-concurrency"], s["data-tier"]) for s in _series(svg)] == [
            ("1", "measured"),
            ("4", "measured"),
        ]
    assert _texts(charts[0], "title") == ["decode per stream"]
    assert _texts(charts[0], "ytick") == ["0", "50", "100", "150", "200"]  # nice_ticks(160)


def test_a_single_row_is_bars_with_values_and_no_empty_frames() -> None:
    page = html_page(_doc([_cell(2048, 1, 163.0, prefill=None)]))
    charts = _svgs(page)
    assert len(charts) == 2 and "no data" not in page  # decode per stream, TTFT; no aggregate, no prefill
    decode = charts[0]
    assert [s["data-tier"] for s in _series(decode)] == ["measured"] and _texts(decode, "value") == ["163"]
    assert _texts(decode, "ytick")[0] == "0" and _texts(decode, "xtick") == ["1 stream"]
    assert _texts(decode, "xlabel") == ["context 2K tokens"]


def test_the_roofline_is_drawn_where_the_report_is_rated() -> None:
    from lair.report.roofline_rows import RooflineRows

    cells = [_cell(2048, 1, 160.0), _cell(40960, 1, 80.0), _cell(2048, 4, 120.0), _cell(40960, 4, 60.0)]
    ceilings = {(2048, 1): 300.0, (40960, 1): 250.0, (2048, 4): 200.0, (40960, 4): 150.0}
    rows = [
        {"context": c, "concurrency": n, "decode_roofline_tok_s": v, "prefill_roofline_tok_s": 90_000.0,
         "decode_tok_s": None, "decode_pct": None, "prefill_tok_s": None, "prefill_pct": None,
         "implausible": False, "why": ""}
        for (c, n), v in ceilings.items()
    ]  # fmt: skip
    rr = RooflineRows(rows=rows, hardware="1x NVIDIA GeForce RTX 4090", model="m")
    decode, aggregate, prefill, ttft = _svgs(html_page(_doc(cells), rr))
    tiers = [(s["data-concurrency"], s["data-tier"]) for s in _series(decode)]
    assert tiers == [("1", "measured"), ("4", "measured"), ("1", "roofline"), ("4", "roofline")]
    assert " ".join(_texts(decode, "legend")).endswith("roofline, 1x NVIDIA GeForce RTX 4090 (dotted)")
    assert _texts(decode, "ytick")[-1] == "300"  # the axis reaches the ceiling: nice_ticks(300)
    assert any(s["data-tier"] == "roofline" for s in _series(prefill))
    for svg in (aggregate, ttft):  # no ceiling rated for these
        assert all(s["data-tier"] == "measured" for s in _series(svg))
        assert not any("roofline" in t for t in _texts(svg, "legend"))


def test_report_html_has_the_roofline_and_the_real_engine(tmp_path: Path) -> None:
    gguf = make_tiny_model(tmp_path / "model")
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(
        f'engine = "xllamacpp"\nruntime = "native"\nmodel = "{gguf}"\nentrypoint = ["python3"]\n'
        '[meta.hardware]\ngpu_model = "RTX 4090"\ngpu_count = 1\n'
    )
    res = BenchResult(
        "http://h:1", "tiny", "a", "b", {}, [_cell(512, 1, 4000.0), _cell(512, 2, 3000.0)],
        server={"engine": "llama.cpp", "version": None, "max_context": 1024}, server_version="llama.cpp",
    )  # fmt: skip
    out = write_run_report(recipe, "t", res, out_dir=tmp_path / "rep")
    page = (out / "report.html").read_text()
    assert "% of roofline" in page and "Roofline (1x NVIDIA GeForce RTX 4090" in page
    from lair.report import load_report
    from lair.report.roofline_rows import rate_report

    rr = rate_report(out, load_report(out))
    assert all(f"{r['decode_pct']:.1f}%" in page for r in rr.rows)
    assert "| 512 | 1 |" in (out / "report.md").read_text()  # one context label: 512, not 515
    engine = load_report(out)["fingerprint"]["engine"]
    assert engine == {
        "name": "llama.cpp (xllamacpp)",
        "version": metadata.version("xllamacpp"),
        "source": "its package installed here",
    }
    assert "b0-unknown" not in page and f"llama.cpp (xllamacpp) {metadata.version('xllamacpp')}" in page


def test_report_folders_of_the_bundled_examples_are_git_ignored() -> None:
    for example in sorted((REPO / "examples").glob("*/recipe.toml")):
        path = example.parent / "reports" / "2026-12-01_101500_demo" / "results.json"
        proc = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=REPO, check=False)
        assert proc.returncode == 0, path
