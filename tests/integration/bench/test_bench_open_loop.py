"""``lair bench --rate`` and ``--sweep`` end to end against the calibrated server: the cells sent on
the seeded schedule (each row's scheduled time equals the schedule drawn here by hand from the same
seed), every answer read and checked, the report's ``load.jsonl`` rows giving back each cell's
figures, and a sweep that stops where its request budget says, with users at a speed counted by
Little's law from the rows by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lair.bench.arrivals import schedule
from lair.bench.load import load_figures
from lair.cli import main
from lair.testing.calibrated_server import running_server

pytestmark = pytest.mark.integration

SERVER = ("--ttft-ms", "20", "--token-ms", "4")


def _bench(capsys: pytest.CaptureFixture[str], url: str, out: Path, *args: str) -> dict[str, Any]:
    argv = ["bench", url, "--contexts", "64", "--decode-tokens", "8", "--out", str(out), "--json", *args]
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "load.jsonl").read_text().splitlines()]


def test_rate_cells_follow_the_seeded_schedule_and_the_rows_give_back_the_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "report"
    with running_server(*SERVER) as url:
        doc = _bench(capsys, url, out, "--rate", "20,40", "--rate-requests", "24", "--seed", "11")
    load = doc["load"]
    assert doc["cells"] == [] and load["sweeps"] == []
    assert [c["offered_rate"] for c in load["cells"]] == [20.0, 40.0]
    rows = _rows(out)
    for step, (cell, rate) in enumerate(zip(load["cells"], (20.0, 40.0), strict=True)):
        assert (cell["requests"], cell["completed"], cell["flags"], cell["failures"]) == (24, 24, [], {})
        mine = [r for r in rows if r["step"] == step]
        want = schedule(rate, 24, "poisson", 1.0, 11 + step)
        assert [r["scheduled_ms"] for r in mine] == [round(t * 1000, 3) for t in want]
        assert all(r["send_error_ms"] >= 0 and r["completion_tokens"] == 8 for r in mine)
        again = load_figures(mine, rate)
        assert {k: again[k] for k in ("achieved_rate", "ttft_ms", "tpot_ms", "e2e_ms", "output_tok_s")} == {
            k: cell[k] for k in ("achieved_rate", "ttft_ms", "tpot_ms", "e2e_ms", "output_tok_s")
        }
    results = json.loads((out / "results.json").read_text())
    assert results["bench"]["load"] == load


def test_a_sweep_stops_at_its_request_budget_and_counts_users_by_littles_law(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    args = ("--sweep", "--rate", "10", "--arrival", "constant")
    args += ("--rate-requests", "16", "--max-requests", "48")
    with running_server(*SERVER) as url:
        doc = _bench(capsys, url, out, *args, "--slo", "ttft_p99<=2s", "--user-speed", "10")
    (sweep,) = doc["load"]["sweeps"]
    assert [c["offered_rate"] for c in doc["load"]["cells"]] == [10.0, 20.0, 40.0]
    assert sweep["stopped"] == "the request budget (--max-requests 48) is spent"
    rows = _rows(out)
    for step, rate in enumerate((10.0, 20.0, 40.0)):  # constant arrivals: exactly 1/rate apart
        mine = [r for r in rows if r["step"] == step]
        assert [r["scheduled_ms"] for r in mine] == [round(i * 1000 / rate, 3) for i in range(16)]

    def users(step: int) -> float:  # Little's law by hand: time in the system over the cell's span
        mine = [r for r in rows if r["step"] == step]
        end = max(r["send_ms"] + r["done_ms"] for r in mine)
        return sum(r["done_ms"] for r in mine) / (end - min(r["send_ms"] for r in mine))

    best = max(range(3), key=users)  # every cell decodes far above 10 tok/s a user and meets the SLO
    assert sweep["users"]["rate"] == (10.0, 20.0, 40.0)[best]
    assert sweep["users"]["users"] == pytest.approx(users(best), abs=1e-3)
    assert sweep["slo"] == ["ttft_p99<=2000ms"] and sweep["max_goodput"]["goodput_rps"] > 0
