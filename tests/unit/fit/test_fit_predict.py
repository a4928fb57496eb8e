"""The predicted speed (lair.fit.predict), the ranking order (lair.fit.ranking), the bundled efficiency
table and the leave-one-out check (benchmarks/predict_loo.py), each against values worked out by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lair.fit import DecodeBound, PrefillBound
from lair.fit.efficiencies import TABLE, bundled_rows
from lair.fit.predict import DEFAULT_DECODE, EfficiencyRow, MatchKey, band, predict
from lair.fit.ranking import rank

REPO = Path(__file__).resolve().parents[3]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _row(i: int, decode: float | None, prefill: float | None = None, **kw: str) -> EfficiencyRow:
    key = {"engine": "vllm", "model_class": "dense", "weight_format": "bf16"} | kw
    return EfficiencyRow(id=f"r{i}", decode=decode, prefill=prefill, link=f"/recipes/x#row-{i}", **key)


# 100 tok/s per stream, 200 in total at 2 streams; prefill 10,000 tok/s over the replica.
DECODE = DecodeBound(4096, 2, 2, 1e9, 1e8, 0.01, 0.001, 0.0, 0.01, 100.0, 200.0, "memory")
PREFILL = PrefillBound(4096, 1e10, "bf16", 1e14, 10_000.0)
KEY = MatchKey("vllm", "dense", "bf16")
ROWS = [
    _row(1, 0.2, prefill=0.3),
    _row(2, 0.8),
    _row(3, 0.5, prefill=0.5),
    _row(4, 0.6),
    _row(5, 0.4),
    _row(6, 0.99, engine="sglang"),  # each of these differs from KEY in one field: never counted
    _row(7, 0.01, weight_format="fp8"),
    _row(8, 0.99, model_class="moe"),
    _row(9, None, prefill=0.9),  # no decode figure: counts for prefill only
]


def test_the_band_is_p10_p50_p90_of_the_matching_rows() -> None:
    p = predict(DECODE, PREFILL, ROWS, KEY)
    b = p.decode_efficiency
    # sorted 0.2 0.4 0.5 0.6 0.8: p10 at position 0.4 = 0.2 + 0.4 x 0.2; p90 at 3.6 = 0.6 + 0.6 x 0.2
    assert (b.low, b.expected, b.high) == (0.28, 0.5, 0.72)
    assert b.basis == "rows" and b.rows == 5
    assert b.row_ids == ["r1", "r2", "r3", "r4", "r5"]
    assert b.links == [f"/recipes/x#row-{i}" for i in range(1, 6)]
    assert p.decode_per_stream_tok_s.__dict__ == {"expected": 50.0, "low": 28.0, "high": 72.0}
    assert p.decode_total_tok_s.__dict__ == {"expected": 100.0, "low": 56.0, "high": 144.0}


def test_the_prefill_band_counts_the_rows_that_measured_prefill() -> None:
    p = predict(DECODE, PREFILL, ROWS, KEY)
    b = p.prefill_efficiency
    # r1, r3 and r9 (no decode figure, a prefill one): 0.3 0.5 0.9; p10 at 0.2 = 0.3 + 0.2 x 0.2,
    # p90 at 1.8 = 0.5 + 0.8 x 0.4
    assert (b.low, b.expected, b.high, b.rows, b.row_ids) == (0.34, 0.5, 0.82, 3, ["r1", "r3", "r9"])
    assert p.prefill_total_tok_s is not None and p.prefill_per_stream_tok_s is not None
    assert p.prefill_total_tok_s.__dict__ == {"expected": 5000.0, "low": 3400.0, "high": 8200.0}
    assert p.prefill_per_stream_tok_s.__dict__ == {"expected": 2500.0, "low": 1700.0, "high": 4100.0}


def test_default_band_counts_the_rows_it_did_not_use() -> None:
    two = [_row(1, 0.3, prefill=0.3), _row(2, 0.5, prefill=0.5)]
    p = predict(DECODE, PREFILL, two, KEY)
    assert p.decode_efficiency.basis == "default" and p.decode_efficiency.rows == 2
    assert p.decode_efficiency.row_ids == ["r1", "r2"]
    assert p.decode_efficiency.why == "2 matching rows; a band needs 3"
    b = p.decode_efficiency
    assert (b.low, b.expected, b.high) == (0.1, 0.5, 0.85)
    assert p.decode_per_stream_tok_s.__dict__ == {"expected": 50.0, "low": 10.0, "high": 85.0}
    # prefill: 0.15 / 0.40 / 0.65 x 10,000 in total, shared by the 2 streams
    assert p.prefill_total_tok_s is not None and p.prefill_per_stream_tok_s is not None
    assert p.prefill_total_tok_s.__dict__ == {"expected": 4000.0, "low": 1500.0, "high": 6500.0}
    assert p.prefill_per_stream_tok_s.__dict__ == {"expected": 2000.0, "low": 750.0, "high": 3250.0}
    none = predict(DECODE, PREFILL, [], KEY).decode_efficiency
    assert none.rows == 0 and none.why == "no matching row; a band needs 3"
    assert (none.low, none.expected, none.high) == DEFAULT_DECODE


def test_no_engine_named_matches_every_engine() -> None:
    b = predict(DECODE, PREFILL, ROWS, MatchKey(None, "dense", "bf16")).decode_efficiency
    # r1-r5 and r6 (sglang): 0.2 0.4 0.5 0.6 0.8 0.99; p10 at 0.5 = 0.3; p50 = 0.55; p90 at 4.5 = 0.895
    assert (b.low, b.expected, b.high, b.rows) == (0.3, 0.55, 0.895, 6)


def test_no_prefill_ceiling_gives_no_prefill_speed() -> None:
    p = predict(DECODE, PrefillBound(4096, 1e10, "bf16", None, None), ROWS, KEY)
    assert p.prefill_total_tok_s is None and p.prefill_per_stream_tok_s is None


def test_band_of_three_rows() -> None:
    b = band([_row(1, 0.1), _row(2, 0.2), _row(3, 0.9)], "decode", DEFAULT_DECODE)
    # p10 at position 0.2 = 0.1 + 0.2 x 0.1; p90 at 1.8 = 0.2 + 0.8 x 0.7
    assert (b.low, b.expected, b.high) == (0.12, 0.2, 0.76)


def test_ranking_puts_what_fits_first_fastest_first() -> None:
    def c(name: str, verdict: str, speed: float) -> dict[str, object]:
        return {"name": name, "verdict": verdict, "prediction": {}, "decode_total_tok_s": {"expected": speed}}

    got = rank([
        c("slow", "fits", 10.0), c("none", "does-not-fit", 99.0), c("off", "fits-with-offload", 50.0),
        c("fast", "fits", 20.0), {"name": "?", "verdict": "unknown", "prediction": None},
    ])  # fmt: skip
    assert [(x["name"], x["rank"]) for x in got] == [
        ("fast", 1), ("slow", 2), ("off", 3), ("none", None), ("?", None),
    ]  # fmt: skip


def test_the_bundled_table_is_what_its_script_writes_from_the_results() -> None:
    assert TABLE.read_text(encoding="utf-8") == _script("efficiency_table").build()
    rows = bundled_rows()
    assert len(rows) == 18  # gpu_fit_validate_h200.json: 2 shapes x 2 kernels x (4 contexts + the KV pool)
    first = next(r for r in rows if r.id == "h200-sdpa-llama-8b-1024")
    assert first.decode == round(181.4 / 317.0, 4) and first.engine == "torch-loop-sdpa"


def test_leave_one_out_coverage_and_error() -> None:
    loo = _script("predict_loo")
    rows = [_row(1, 0.1), _row(2, 0.2), _row(3, 0.3), _row(4, 0.9), _row(5, 0.5, engine="sglang")]
    held = {e["id"]: e for e in loo.held_out(rows, "decode")}
    # r1 out: 0.2 0.3 0.9 -> p10 0.22, p50 0.3, p90 0.78: 0.1 is below; error |0.3 - 0.1| / 0.1 = 2
    assert (held["r1"]["low"], held["r1"]["high"], held["r1"]["covered"]) == (0.22, 0.78, False)
    assert held["r1"]["error"] == pytest.approx(2.0)
    # r2 out: 0.1 0.3 0.9 -> 0.14 .. 0.78, covered; error 0.1 / 0.2
    assert (held["r2"]["low"], held["r2"]["covered"], held["r2"]["error"]) == (0.14, True, pytest.approx(0.5))
    # r3 out: 0.1 0.2 0.9 -> 0.12 .. 0.76, p50 0.2: covered, error 0.1 / 0.3
    assert held["r3"]["covered"] and held["r3"]["error"] == pytest.approx(1 / 3)
    # r4 out: 0.1 0.2 0.3 -> 0.12 .. 0.28: 0.9 is above; error 0.7 / 0.9
    assert not held["r4"]["covered"] and held["r4"]["error"] == pytest.approx(7 / 9)
    # r5 (the only sglang row): the default band 0.10 .. 0.85 around 0.50: covered, error 0
    assert held["r5"]["basis"] == "default" and held["r5"]["covered"] and held["r5"]["error"] == 0
    got = loo.report(rows)["decode"]
    assert got["all"]["rows"] == 5 and got["all"]["covered"] == 3 and got["all"]["coverage"] == 0.6
    assert got["all"]["median_error"] == 0.5  # errors 0, 1/3, 0.5, 7/9, 2
    assert (got["basis=rows"]["covered"], got["basis=rows"]["rows"]) == (2, 4)
    assert (got["basis=default"]["covered"], got["basis=default"]["rows"]) == (1, 1)
    # the baseline, the default band 0.10 .. 0.85 around 0.50 for every row: 0.9 alone is outside;
    # errors 0.4/0.1, 0.3/0.2, 0.2/0.3, 0.4/0.9, 0: median 0.2/0.3
    base = got["default_band_only"]
    assert (base["covered"], base["rows"], base["median_error"]) == (4, 5, round(2 / 3, 4))
