"""``lair import-results``: each sample file's cells, field by field from the file's own numbers
(per-request files recomputed by hand with lair's definitions), the provenance, the fields not
carried, and the budgets as located errors."""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from lair.cli import main
from lair.errors import InteropError
from lair.interop import peer_results
from lair.interop.peer_results import read_results

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "tests" / "data" / "interop" / "results"
TINY = ROOT / "examples" / "tiny-cpu"


def test_a_detailed_vllm_run_is_recomputed_with_lairs_definitions() -> None:
    run = read_results("vllm-bench", RESULTS / "vllm-bench-detailed.json", "0.32.0")
    (cell,) = run.cells
    assert run.recomputed and (run.tool, run.version) == ("vllm-bench", "0.32.0")
    assert (cell["context"], cell["concurrency"], cell["prompt_tokens"], cell["errors"]) == (100, 1, 100, 0)
    # request 1: sent at 10.0, chunks at 10.05, .06, .07, .09; request 2: sent at 10.5, chunks at
    # 10.54, .55, .56, .57; 4 tokens each, one per chunk
    assert cell["ttft_ms_p50"] == pytest.approx(45.0)  # TTFTs 50 and 40 ms
    assert cell["ttft_ms_p90"] == pytest.approx(49.0)  # 40 + 0.9 x 10
    assert cell["prefill_tok_s"] == pytest.approx(2250.0)  # p50 of 100/0.05 and 100/0.04
    assert cell["decode_tok_s_per_stream"] == pytest.approx(87.5)  # p50 of 3/0.04 and 3/0.03
    assert cell["decode_tok_s_aggregate"] == pytest.approx(6 / 0.52)  # 3 + 3 tokens over 10.05 .. 10.57
    assert any("max_concurrency" in d for d in run.differs)


def test_a_summary_vllm_run_keeps_the_peers_figures_and_says_which_definitions_differ() -> None:
    path = RESULTS / "vllm-bench-summary.json"
    run = read_results("vllm-bench", path)
    (cell,) = run.cells
    assert not run.recomputed and run.version.startswith("unknown")
    assert run.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert cell["ttft_ms_p50"] == 45.0 and cell["ttft_ms_p90"] is None  # the file has p99 only
    assert cell["decode_tok_s_per_stream"] == pytest.approx(1000 / 11.6667)
    assert cell["decode_tok_s_aggregate"] == 12.9032 and cell["completion_tokens"] == 4
    assert [d.split(":")[0] for d in run.differs] == [
        "decode_tok_s_per_stream",
        "decode_tok_s_aggregate",
        "ttft_ms_p50",
    ]
    lost = {u.path for u in run.unmapped}
    assert {"date", "backend", "request_throughput", "p99_ttft_ms", "mean_e2el_ms"} <= lost
    assert not lost & {"completed", "median_ttft_ms", "median_tpot_ms", "output_throughput"}


def test_llama_bench_tests_become_prefill_and_decode_cells() -> None:
    run = read_results("llama-bench", RESULTS / "llama-bench.json")
    assert run.version == "b7012 (6c7b0d1)" and run.model == "models/qwen3-8b-q4_k_m.gguf"
    assert run.cells == [
        {"context": 512, "concurrency": 1, "repeats": 1, "prompt_tokens": 512, "prefill_tok_s": 1520.5},
        {"context": 1, "concurrency": 1, "repeats": 1, "decode_tok_s_per_stream": 45.25,
         "decode_tok_s_aggregate": 45.25, "completion_tokens": 128},
        {"context": 4096, "concurrency": 1, "repeats": 1, "decode_tok_s_per_stream": 41.0,
         "decode_tok_s_aggregate": 41.0, "completion_tokens": 128},
    ]  # fmt: skip
    mixed, aside = run.unmapped
    assert (mixed.path, mixed.value) == ("[3]", "pp512+tg128")
    assert "gpu_info" in aside.value and "samples_ts" in aside.value


def test_the_report_folder_and_its_provenance(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    peer = RESULTS / "llama-bench.json"
    rc = main(
        [
            "import-results",
            "llama-bench",
            str(peer),
            "--recipe",
            str(TINY),
            "-o",
            str(tmp_path / "r"),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["report"] == str(tmp_path / "r")
    files = sorted(
        p.relative_to(tmp_path / "r").as_posix() for p in (tmp_path / "r").rglob("*") if p.is_file()
    )
    assert files == [
        "fingerprint.json", "peer/llama-bench.json", "recipe.recipe.toml", "report.md", "requests.jsonl",
        "results.json",
    ]  # fmt: skip
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["kind"] == "lair.run_report" and doc["bench"]["cells"] == out["cells"]
    imported = doc["imported"]
    assert (imported["tool"], imported["version"]) == ("llama-bench", "b7012 (6c7b0d1)")
    assert imported["sha256"] == hashlib.sha256(peer.read_bytes()).hexdigest()
    assert (tmp_path / "r" / "peer" / "llama-bench.json").read_bytes() == peer.read_bytes()
    assert json.loads((tmp_path / "r" / "fingerprint.json").read_text()) == doc["fingerprint"]
    assert (tmp_path / "r" / "requests.jsonl").read_text() == ""


def test_budgets_and_bad_values_are_located(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    detailed = json.loads((RESULTS / "vllm-bench-detailed.json").read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(detailed | {"itls": [[0.01, -1], [0.01]]}))
    with pytest.raises(InteropError, match="a gap is -1") as e:
        read_results("vllm-bench", bad)
    assert (e.value.file, e.value.path) == (str(bad), "itls[0]")
    bad.write_text(json.dumps(detailed | {"ttfts": [0.05]}))
    with pytest.raises(InteropError, match="differ in length"):
        read_results("vllm-bench", bad)
    monkeypatch.setattr(peer_results, "MAX_REQUESTS", 1)
    with pytest.raises(InteropError, match="2 requests is over the budget of 1"):
        read_results("vllm-bench", RESULTS / "vllm-bench-detailed.json")
    monkeypatch.setattr(peer_results, "MAX_ENTRIES", 3)
    with pytest.raises(InteropError, match="4 tests is over the budget of 3"):
        read_results("llama-bench", RESULTS / "llama-bench.json")
    monkeypatch.setattr(peer_results, "MAX_RESULT_BYTES", 100)
    with pytest.raises(InteropError, match="over the 100-byte budget"):
        read_results("llama-bench", RESULTS / "llama-bench.json")
    bad.write_text('{"completed": "two"}')
    with pytest.raises(InteropError) as e:
        read_results("vllm-bench", bad)
    assert e.value.path == "completed"


def test_aiperf_records_are_recomputed_with_lairs_definitions() -> None:
    run = read_results("aiperf", RESULTS / "aiperf-profile_export.jsonl", "0.13.0")
    (cell,) = run.cells
    assert run.recomputed and (run.tool, run.version) == ("aiperf", "0.13.0")
    # request 1: sent at 1000.0 s, first token +100 ms, ends 1000.5, 64 -> 21 tokens; request 2: sent
    # at 1000.6, first token +50 ms, ends 1000.9, 64 -> 11 tokens: never both in flight
    assert (cell["context"], cell["concurrency"], cell["completion_tokens"]) == (64, 1, 16)
    assert cell["ttft_ms_p50"] == pytest.approx(75.0) and cell["ttft_ms_p90"] == pytest.approx(95.0)
    assert cell["prefill_tok_s"] == pytest.approx(960.0)  # p50 of 64/0.1 and 64/0.05
    assert cell["decode_tok_s_per_stream"] == pytest.approx(45.0)  # p50 of 20/0.4 and 10/0.25
    assert cell["decode_tok_s_aggregate"] == pytest.approx(37.5)  # 30 tokens over 1000.1 .. 1000.9


def test_aiperf_summary_keeps_its_figures_and_version() -> None:
    run = read_results("aiperf", RESULTS / "aiperf-profile_export_aiperf.json")
    (cell,) = run.cells
    assert not run.recomputed and run.version == "0.13.0"
    assert (cell["context"], cell["concurrency"], cell["ttft_ms_p50"], cell["ttft_ms_p90"]) == (
        64,
        1,
        75.0,
        95.0,
    )
    assert (cell["decode_tok_s_per_stream"], cell["decode_tok_s_aggregate"]) == (45.0, 35.5556)
    assert {"request_latency", "inter_token_latency", "benchmark_duration"} <= {u.path for u in run.unmapped}
    assert [d.split(":")[0] for d in run.differs] == [
        "decode_tok_s_per_stream",
        "decode_tok_s_aggregate",
        "ttft_ms_p50",
    ]


def test_a_bad_aiperf_record_is_located(tmp_path: Path) -> None:
    lines = (RESULTS / "aiperf-profile_export.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["metrics"]["output_sequence_length"]["value"] = "many"
    bad = tmp_path / "profile_export.jsonl"
    bad.write_text(lines[0] + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(InteropError) as e:
        read_results("aiperf", bad)
    assert e.value.path == "line 2: metrics.output_sequence_length.value"


def test_guidellm_benchmarks_are_recomputed_from_their_requests() -> None:
    run = read_results("guidellm", RESULTS / "guidellm-benchmarks.json")
    (cell,) = run.cells
    assert run.recomputed and (run.tool, run.version) == ("guidellm", "0.8.1")
    # two streams sent at 100.0: first tokens at 100.2 / 100.3, last at 101.2 / 100.8, 51 / 21 tokens;
    # a third request errored
    assert (cell["context"], cell["concurrency"], cell["completion_tokens"], cell["errors"]) == (
        128,
        2,
        36,
        1,
    )
    assert cell["ttft_ms_p50"] == pytest.approx(250.0) and cell["ttft_ms_p90"] == pytest.approx(290.0)
    assert cell["decode_tok_s_per_stream"] == pytest.approx(45.0)  # p50 of 50/1.0 and 20/0.5
    assert cell["decode_tok_s_aggregate"] == pytest.approx(70.0)  # 50 + 20 tokens over 100.2 .. 101.2
    assert cell["prefill_tok_s"] is None  # a burst of 2 is not measured from a sustained run


def test_a_file_vllm_itself_wrote_imports_and_recomputes() -> None:
    path = RESULTS / "vllm-bench-generated.json"
    raw = json.loads(path.read_text())  # the file's own numbers, recomputed here by hand
    run = read_results("vllm-bench", path, "0.32.0")
    (cell,) = run.cells
    assert run.recomputed and (cell["concurrency"], cell["errors"]) == (2, 0)
    assert cell["context"] == round(raw["total_input_tokens"] / raw["completed"])
    assert cell["ttft_ms_p50"] == pytest.approx(statistics.median(raw["ttfts"]) * 1000)

    def decode(i: int) -> float:  # tokens shared evenly over the chunks: all but the first chunk's
        chunks = len(raw["itls"][i]) + 1
        return raw["output_lens"][i] * (1 - 1 / chunks) / sum(raw["itls"][i])

    assert cell["decode_tok_s_per_stream"] == pytest.approx(statistics.median(decode(i) for i in range(4)))
    firsts = [s + t for s, t in zip(raw["start_times"], raw["ttfts"], strict=True)]
    lasts = [f + sum(g) for f, g in zip(firsts, raw["itls"], strict=True)]
    tokens = sum(n * (1 - 1 / (len(g) + 1)) for n, g in zip(raw["output_lens"], raw["itls"], strict=True))
    assert cell["decode_tok_s_aggregate"] == pytest.approx(tokens / (max(lasts) - min(firsts)))


def test_a_file_guidellm_itself_wrote_imports_and_recomputes() -> None:
    """guidellm 0.8.1 writes a request's iteration times only under ``info.timings`` (the hand-written
    sample also had them at the top level): read there, every figure is recomputed by hand here."""
    path = RESULTS / "guidellm-generated.json"
    (bench,) = json.loads(path.read_text())["benchmarks"]
    done = bench["requests"]["successful"]
    run = read_results("guidellm", path)
    (cell,) = run.cells
    assert run.recomputed and (run.tool, run.version) == ("guidellm", "0.8.1")
    assert (cell["concurrency"], cell["errors"]) == (bench["config"]["strategy"]["streams"], 0)
    assert cell["context"] == round(statistics.mean(r["prompt_tokens"] for r in done))
    t = [r["info"]["timings"] for r in done]
    ttfts = [
        (x["first_token_iteration"] - r["request_start_time"]) * 1000 for x, r in zip(t, done, strict=True)
    ]
    assert cell["ttft_ms_p50"] == pytest.approx(statistics.median(ttfts))
    per = [
        (r["output_tokens"] - 1) / (x["last_token_iteration"] - x["first_token_iteration"])
        for x, r in zip(t, done, strict=True)
    ]
    assert cell["decode_tok_s_per_stream"] == pytest.approx(statistics.median(per))
    span = max(x["last_token_iteration"] for x in t) - min(x["first_token_iteration"] for x in t)
    assert cell["decode_tok_s_aggregate"] == pytest.approx(sum(r["output_tokens"] - 1 for r in done) / span)


def test_files_aiperf_itself_wrote_import_with_its_concurrency() -> None:
    """AIPerf 0.13.0's own exports of one run: the summary keeps AIPerf's figures and finds the
    concurrency in ``input_config.phases`` (a list); the per-request records are recomputed by hand."""
    summary = json.loads((RESULTS / "aiperf-generated_aiperf.json").read_text())
    run = read_results("aiperf", RESULTS / "aiperf-generated_aiperf.json")
    (cell,) = run.cells
    assert not run.recomputed and run.version == summary["aiperf_version"] == "0.13.0"
    assert cell["concurrency"] == summary["input_config"]["phases"][0]["concurrency"] == 2
    assert cell["ttft_ms_p50"] == summary["time_to_first_token"]["p50"]
    assert cell["decode_tok_s_per_stream"] == summary["output_token_throughput_per_user"]["p50"]
    path = RESULTS / "aiperf-generated.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    (mine,) = read_results("aiperf", path, "0.13.0").cells
    ttfts = [r["metrics"]["time_to_first_token"]["value"] for r in recs]
    assert mine["ttft_ms_p50"] == pytest.approx(statistics.median(ttfts))
    assert mine["ttft_ms_p50"] == pytest.approx(
        summary["time_to_first_token"]["p50"], rel=1e-6
    )  # AIPerf's own
    assert mine["concurrency"] == 2 and mine["errors"] == 0 and len(recs) == summary["request_count"]["avg"]

    def decode(r: dict[str, Any]) -> float:  # (tokens - 1) over first token to the end
        m, meta = r["metrics"], r["metadata"]
        first = meta["request_start_ns"] / 1e9 + m["time_to_first_token"]["value"] / 1000
        return (m["output_sequence_length"]["value"] - 1) / (meta["request_end_ns"] / 1e9 - first)

    assert mine["decode_tok_s_per_stream"] == pytest.approx(statistics.median(decode(r) for r in recs))
