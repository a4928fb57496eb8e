"""Report folder, renderings and comparison from a hand-built bench result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lair.bench import BenchResult, CellResult
from lair.errors import BenchError
from lair.report import REPORT_FILES, compare, compare_text, load_report, markdown, write_run_report


def _cell(ctx: int, conc: int, decode: float) -> CellResult:
    return CellResult(
        context=ctx,
        concurrency=conc,
        repeats=1,
        prompt_tokens=ctx,
        ttft_ms_p50=100.0,
        ttft_ms_p90=110.0,
        prefill_tok_s=ctx / 0.1,
        decode_tok_s_per_stream=decode,
        decode_tok_s_aggregate=decode * conc,
        completion_tokens=64,
        cached_tokens=0,
        cache_hit=False,
        client_bound=False,
        output_length_ok=True,
        errors=0,
    )


def _result(decode: float) -> BenchResult:
    cells = [_cell(2048, 1, decode), _cell(40960, 1, decode / 2), _cell(40960, 4, decode / 3)]
    return BenchResult(
        url="http://h:8000",
        model="m",
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:01:00+00:00",
        options={},
        cells=cells,
        requests=[{"index": 0, "ttft_ms": 100.0}],
    )


def test_report_folder_without_recipe(tmp_path: Path) -> None:
    out = write_run_report(None, "r1", _result(160.0), {"engine": "key=sk-abcdef"}, out_dir=tmp_path / "r1",
                           api_key="sk-abcdef")  # fmt: skip
    for name in REPORT_FILES:
        assert (out / name).is_file()
    assert (out / "logs" / "engine.log").read_text() == "key=***"
    doc = load_report(out)
    assert doc["schema_version"] == 1 and doc["bench"]["cells"][0]["decode_tok_s_per_stream"] == 160.0
    md = markdown(doc)
    assert "| 2,048 | 1 | 2,048 | 100.0 | 110.0 | 20,480.0 | 160.0 | 160.0 | 0 | ok |" in md
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 4 and "http://" not in page.replace("http://h:8000", "").replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


def test_report_needs_a_place(tmp_path: Path) -> None:
    with pytest.raises(BenchError):
        write_run_report(None, "x", _result(1.0))
    (tmp_path / "results.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(BenchError):
        load_report(tmp_path)


def test_compare_gives_percent_deltas(tmp_path: Path) -> None:
    a = load_report(write_run_report(None, "a", _result(100.0), out_dir=tmp_path / "a"))
    b = load_report(write_run_report(None, "b", _result(150.0), out_dir=tmp_path / "b"))
    cmp = compare(a, b)
    row = cmp["rows"][0]
    assert (row["context"], row["concurrency"]) == (2048, 1)
    assert row["decode_tok_s_per_stream"]["delta_pct"] == pytest.approx(50.0)
    assert row["ttft_ms_p50"]["delta_pct"] == 0.0
    assert "+50.0%" in compare_text(cmp)


def test_bench_command_module_imports_nothing_heavy() -> None:
    code = "import sys, lair.cli.bench_cmds; print(sorted(m for m in sys.modules if m.startswith('lair.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "lair.bench" not in out and "lair.report" not in out
    assert (
        "pydantic"
        not in subprocess.run(
            [sys.executable, "-c", "import sys, lair.cli.bench_cmds; print(list(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
