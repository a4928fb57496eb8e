"""``lair fit --predict`` and ``lair fit --rank`` through the real CLI entry, on model folders and catalog
GPUs, against speeds worked out by hand from the bundled rows (src/lair/fit/efficiencies.toml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fit_configs import LLAMA_3_1_8B, LLAMA_3_1_70B, QWEN2_5_7B_AWQ

from lair.cli import main

# Llama 3.1 8B: 15,009,849,344 weight bytes read per step (no input embedding), 131,072 KV bytes a token
WEIGHTS = 15_009_849_344
KV_4X8K = 4 * 131_072 * 8192
# The 9 torch-loop-sdpa rows, sorted: 0.0732 0.0743 0.1274 0.1293 0.2357 0.2378 0.3619 0.4125 0.5722;
# p10 at position 0.8 = 0.0732 + 0.8 x 0.0011, p50 = 0.2357, p90 at 7.2 = 0.4125 + 0.2 x 0.1597
SDPA = (0.0741, 0.2357, 0.4444)
# All 18 bundled rows: the 9th and 10th of them sorted are 0.2999 and 0.3353
ALL_MEDIAN = (0.2999 + 0.3353) / 2


def _folder(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    rc = main(["fit", *argv])
    out = capsys.readouterr().out
    return rc, json.loads(out) if "--json" in argv else out


def test_predict_on_the_rows_of_the_named_engine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    llama = _folder(tmp_path, "llama-3.1-8b", LLAMA_3_1_8B)
    argv = ["--model", llama, "--gpu", "H200", "--context", "8192", "--concurrency", "4", "--predict"]
    rc, out = _run(capsys, *argv, "--engine", "torch-loop-sdpa", "--json")
    assert rc == 0
    p = out["prediction"]
    assert p["key"] == {"engine": "torch-loop-sdpa", "model_class": "dense", "weight_format": "bf16"}
    eff = p["decode_efficiency"]
    assert (eff["low"], eff["expected"], eff["high"]) == SDPA
    assert eff["basis"] == "rows" and eff["rows"] == 9 and "h200-sdpa-llama-8b-1024" in eff["row_ids"]
    assert eff["links"][0] == "benchmarks/results/gpu_fit_validate_h200.json#rows/0"
    per_stream = 4.8e12 / (WEIGHTS + KV_4X8K)  # H200: 4.8 TB/s; 248.6 tok/s per stream
    assert p["decode_per_stream_tok_s"] == {
        "expected": round(SDPA[1] * per_stream, 1), "low": round(SDPA[0] * per_stream, 1),
        "high": round(SDPA[2] * per_stream, 1),
    }  # fmt: skip
    assert p["decode_total_tok_s"]["expected"] == round(SDPA[1] * 4 * per_stream, 1)  # 234.4
    pre = p["prefill_efficiency"]  # no bundled row measured prefill: the stated default band
    assert pre["basis"] == "default" and pre["rows"] == 0 and (pre["low"], pre["high"]) == (0.15, 0.65)
    assert p["prefill_total_tok_s"]["expected"] == round(0.40 * out["prefill"]["tok_s"], 1)
    assert p["prefill_per_stream_tok_s"]["expected"] == round(0.40 * out["prefill"]["tok_s"] / 4, 1)
    rc, text = _run(capsys, *argv, "--engine", "vllm")
    assert rc == 0
    assert "  predicted at 8,192 tokens x 4 (vllm, dense, bf16):" in text
    assert "efficiency 10-85% of the roofline, expected 50%, the default band (no matching row" in text


def test_no_predict_no_prediction(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    llama = _folder(tmp_path, "llama-3.1-8b", LLAMA_3_1_8B)
    rc, out = _run(capsys, "--model", llama, "--gpu", "H200", "--context", "8192", "--json")
    assert rc == 0 and "prediction" not in out


def test_rank_orders_what_fits_by_predicted_decode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    small = _folder(tmp_path, "qwen-7b-awq", QWEN2_5_7B_AWQ)
    mid = _folder(tmp_path, "llama-8b", LLAMA_3_1_8B)
    big = _folder(tmp_path, "llama-70b", LLAMA_3_1_70B)
    gone = str(tmp_path / "nothing-here")
    rig = ["--gpu", "RTX 4090", "--gpus", "1", "--concurrency", "4", "--host-ram-gb", "32"]
    rc, out = _run(capsys, *rig, "--rank", big, mid, gone, small, "--json")
    assert rc == 0
    assert (out["gpu"], out["gpus"]) == ("NVIDIA GeForce RTX 4090", 1)
    assert (out["context"], out["concurrency"]) == (8192, 4)
    got = [(Path(c["name"]).name, c["verdict"], c["rank"]) for c in out["candidates"]]
    assert got == [
        ("qwen-7b-awq", "fits", 1), ("llama-8b", "fits", 2), ("llama-70b", "does-not-fit", None),
        ("nothing-here", "unknown", None),
    ]  # fmt: skip
    awq, llama, no, unknown = out["candidates"]
    # the 8B: no engine named, so all 18 bundled rows (dense, bf16); RTX 4090: 1,008 GB/s
    assert llama["efficiency"]["rows"] == 18 and llama["efficiency"]["expected"] == round(ALL_MEDIAN, 4)
    assert llama["decode_total_tok_s"]["expected"] == round(ALL_MEDIAN * 4 * 1008e9 / (WEIGHTS + KV_4X8K), 1)
    assert llama["why"] == "4 x 8,192 tokens fit the KV budget (asked 4)"
    # the AWQ model: no awq row, the default band (expected 50% of its ceiling)
    assert awq["efficiency"]["basis"] == "default" and awq["weight_format"] == "awq-4bit"
    assert awq["decode_total_tok_s"]["expected"] == round(0.5 * awq["decode_roofline_total_tok_s"], 1)
    assert "host RAM 32.00 GiB" in no["why"]
    assert "does not exist" in unknown["why"] and unknown["prediction"] is None
    rc, text = _run(capsys, *rig, "--rank", mid, big)
    assert rc == 0
    lines = text.splitlines()
    assert lines[0] == "2 candidates on 1 x NVIDIA GeForce RTX 4090 at 8,192 tokens x 4 (any engine):"
    head = "rank model verdict decode total tok/s (band) per stream efficiency why"
    assert lines[1].split() == head.split()
    assert lines[2].split()[:3] == ["1", mid, "fits"] and lines[3].split()[:3] == ["-", big, "does-not-fit"]


def test_rank_with_nothing_that_fits_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big = _folder(tmp_path, "llama-70b", LLAMA_3_1_70B)
    rc, out = _run(capsys, "--gpu", "RTX 4090", "--host-ram-gb", "32", "--rank", big, "--json")
    assert rc == 1 and out["candidates"][0]["verdict"] == "does-not-fit"


def test_predict_learns_from_a_registrys_rows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def efficiencies(client: Any) -> dict[str, Any]:
        asked.append(client.creds.url)
        rows = [
            {"id": f"x@1#{i}", "engine": "vllm", "model_class": "dense", "weight_format": "bf16", "decode": d,
             "link": f"/recipes/x#row-{i}", "source": "registry"}
            for i, d in enumerate((0.5, 0.7, 0.6), start=1)
        ]  # fmt: skip
        return {"ok": True, "count": 3, "rows": rows}

    monkeypatch.setattr("lair.client.api.Client.efficiencies", efficiencies)
    llama = _folder(tmp_path, "llama-3.1-8b", LLAMA_3_1_8B)
    argv = ["--model", llama, "--gpu", "H200", "--context", "8192", "--predict", "--engine", "vllm"]
    rc, out = _run(capsys, *argv, "--registry", "http://registry.example/", "--json")
    assert rc == 0 and asked == ["http://registry.example"]
    eff = out["prediction"]["decode_efficiency"]
    # 0.5 0.6 0.7: p10 at position 0.2 = 0.5 + 0.2 x 0.1, p90 at 1.8 = 0.6 + 0.8 x 0.1
    assert (eff["low"], eff["expected"], eff["high"], eff["rows"]) == (0.52, 0.6, 0.68, 3)
    assert eff["row_ids"] == ["x@1#1", "x@1#2", "x@1#3"]
    assert eff["links"][0] == "http://registry.example/recipes/x#row-1"
