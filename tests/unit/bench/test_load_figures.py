"""Open-loop figures, the knee, goodput and users at a speed on hand-built rows whose answers are
computed by hand here; the SLO grammar and its located errors."""

from __future__ import annotations

from typing import Any

import pytest

from lair.bench import definitions as d
from lair.bench.load import cell_meets, failure_kind, goodput, knee, load_figures, sweep_summary, users_at
from lair.bench.slo import SloTerm, parse_slo
from lair.errors import ConfigError


def _row(send: float, ttft: float, done: float, decode: float = 50.0, **kw: Any) -> dict[str, Any]:
    row = {
        "send_ms": send, "ttft_ms": ttft, "done_ms": done, "decode_tok_s": decode, "status": 200,
        "error": "", "output_check": "", "completion_tokens": 10, "in_flight": 0, "send_error_ms": 0.1,
        "chunk_ms": [ttft, ttft + 20.0, ttft + 60.0], "chunk_tokens": [1.0, 1.0, 2.0],
    }  # fmt: skip
    return row | kw


ROWS = [
    _row(0.0, 100.0, 1250.0),
    _row(250.0, 200.0, 1250.0),
    _row(500.0, 3000.0, 3500.0),
    _row(750.0, 150.0, 1250.0),
]
"""Span: first send 0 to the last end max(1250, 1500, 4000, 2000) = 4000 ms."""


def test_slo_terms_and_located_errors() -> None:
    assert parse_slo("ttft_p99<=2s,tpot<=50ms") == [
        SloTerm("ttft", 99.0, 2000.0),
        SloTerm("tpot", 100.0, 50.0),
    ]
    assert parse_slo("e2e_p99.9 < 3000") == [SloTerm("e2e", 99.9, 3000.0, strict=True)]
    with pytest.raises(ConfigError, match=r"column 14: unknown metric 'tpt' \(did you mean tpot\?\)"):
        parse_slo("ttft_p99<=2s,tpt<=50ms")
    with pytest.raises(ConfigError, match="column 1: 'ttft>=2s' is not"):
        parse_slo("ttft>=2s")
    with pytest.raises(ConfigError, match="percentile p0 is not"):
        parse_slo("ttft_p0<=2s")


def test_goodput_counts_requests_meeting_every_bound_over_the_span() -> None:
    # ttft <= 2 s: three of four requests, over 4.0 s
    assert goodput(ROWS, parse_slo("ttft<=2s")) == pytest.approx(3 / 4.0)
    # tpot = 1000 / 50 tok/s = 20 ms for all; itl: gaps 20/1 and 40/2 = 20 ms
    assert goodput(ROWS, parse_slo("tpot<=20ms,itl<=20")) == pytest.approx(4 / 4.0)
    assert goodput(ROWS, parse_slo("itl<20")) == 0.0


def test_cell_meets_at_the_percentile() -> None:
    # ttft sorted 100, 150, 200, 3000: p50 = 175, p99 = 200 + 2800 x 0.97 = 2916
    assert cell_meets(ROWS, parse_slo("ttft_p50<=175ms"))
    assert not cell_meets(ROWS, parse_slo("ttft_p99<=2900ms"))
    assert cell_meets(ROWS, parse_slo("ttft_p99<=2917ms"))
    failed = [*ROWS, _row(900.0, 0.0, 10.0, status=500, error="HTTP 500: boom", ttft_ms=None)]
    assert not cell_meets(failed, parse_slo("ttft_p50<=175ms"))


def test_failure_kinds() -> None:
    kinds = [
        failure_kind(r)
        for r in (
            _row(0, 1, 2),
            _row(0, 1, 2, error="timed out after 9 s"),
            _row(0, 1, 2, status=503, error="HTTP 503: busy"),
            _row(0, 1, 2, status=0, error="client limit: 4 requests already open"),
            _row(0, 1, 2, status=0, error="no response"),
            _row(0, 1, 2, ttft_ms=None),
            _row(0, 1, 2, output_check="blank text in 1 content chunk"),
        )
    ]
    assert kinds == ["", "timeout", "http-5xx", "client-limit", "no-response", "no-content", "invalid-output"]


def test_load_figures_of_a_cell() -> None:
    f = load_figures(ROWS, rate=4.0, slo=parse_slo("ttft<=2s"))
    assert f["achieved_rate"] == pytest.approx(3 / 0.75)  # 3 gaps over 750 ms
    assert f["completed_rate"] == pytest.approx(4 / 4.0)
    assert f["output_tok_s"] == pytest.approx(40 / 4.0)
    assert f["ttft_ms"]["p50"] == pytest.approx(175.0)
    assert f["e2e_ms"]["p90"] == pytest.approx(1250.0 + (3500.0 - 1250.0) * 0.7)  # pos 2.7
    assert f["oversaturated"] is None  # 4 sends: too few to say
    assert f["failures"] == {} and f["goodput_rps"] == pytest.approx(0.75) and f["slo_met"] is False


def test_oversaturation_is_in_flight_growing_through_the_second_half() -> None:
    sends = [0.1 * i for i in range(20)]
    # one more in flight per send at 10/s: slope 10/s, above 0.2 x 10
    assert d.is_oversaturated(sends, list(range(20)), rate=10.0) is True
    assert d.is_oversaturated(sends, [3] * 20, rate=10.0) is False
    # ramp to 4 in the first half, then steady
    assert d.is_oversaturated(sends, [min(i, 4) for i in range(20)], rate=10.0) is False
    assert d.is_oversaturated(sends[:10], list(range(10)), rate=10.0) is None
    # 40/s, a wobble from 1 to 4 over the second half's 0.225 s: slope ~14/s is above 0.2 x 40, but
    # it adds ~3 requests, fewer than OVERSATURATION_MIN_GROWTH (4): sampling noise, not a queue
    fast = [0.025 * i for i in range(20)]
    wobble = [2, 1, 2, 3, 2, 1, 2, 2, 1, 2, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4]
    assert d.is_oversaturated(fast, wobble, rate=40.0) is False
    assert d.is_oversaturated(fast, [*wobble[:10], *range(1, 21, 2)], rate=40.0) is True  # +18 in 0.225 s


def test_knee_is_the_last_point_before_throughput_stalls() -> None:
    # 1->2: +95% for +100% load; 2->4: +94.9%; 4->8: +10.5% < 25% of +100%: knee at rate 4
    assert knee([(1, 100.0), (2, 195.0), (4, 380.0), (8, 420.0), (16, 430.0)]) == 2
    assert knee([(1, 100.0), (2, 200.0)]) is None
    # a small step: 10 -> 11 (+10% load) needs +2.5% throughput; +3% keeps growing
    assert knee([(10, 100.0), (11, 103.0), (12, 103.5)]) == 1


def test_users_at_a_speed_and_the_sweep_summary() -> None:
    slow = [_row(0.0, 100.0, 1000.0, decode=10.0), _row(500.0, 100.0, 2000.0, decode=10.0)]
    # fast: tpot 20 ms <= 1000 / 20 tok/s; Little: (1250 + 1250 + 3500 + 1250) ms / 4000 ms = 1.8125
    # slow: tpot 100 ms > 50 ms
    cells = [(4.0, ROWS), (8.0, slow)]
    assert users_at(cells, speed=20.0) == {"users": 1.812, "rate": 4.0, "speed_tok_s": 20.0}
    assert users_at(cells, speed=60.0) is None  # 1000 / 60 = 16.7 ms < 20 ms
    assert users_at(cells, speed=20.0, slo=parse_slo("ttft_p99<=2s")) is None  # ROWS' p99 is 2916 ms
    s = sweep_summary(cells, parse_slo("ttft<=2s"), speed=20.0)
    # goodput: ROWS 3 / 4.0 s = 0.75; slow: 2 / 2.5 s = 0.8 (span 0 to 500 + 2000 ms)
    assert s["max_goodput"] == {"goodput_rps": 0.8, "rate": 8.0}
    # throughput 40 / 4.0 = 10 tok/s, then 20 / 2.5 = 8 (less for twice the load: the knee is rate 4)
    assert s["knee"]["rate"] == 4.0 and s["users"] is None and s["slo"] == ["ttft<=2000ms"]


def test_a_sweep_whose_steps_are_too_small_to_judge_is_refused_before_it_runs() -> None:
    from lair.bench import BenchOptions

    with pytest.raises(ConfigError, match="rate_requests = 12: a sweep's step needs at least 16"):
        BenchOptions(contexts=[64], sweep=True, rate_requests=12)
    assert BenchOptions(contexts=[64], rates=[4.0], rate_requests=12).rate_requests == 12  # rates alone: fine
    assert BenchOptions(contexts=[64], sweep=True, rate_requests=d.OVERSATURATION_MIN_SENDS).sweep
