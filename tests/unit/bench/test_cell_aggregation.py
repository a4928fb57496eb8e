"""The bench and the registry aggregate a cell with one function: the bench's cell (from its own
timings, in monotonic seconds) and the registry's recomputation (from the ``requests.jsonl`` rows
the bench wrote, rounded to the microsecond) agree on recorded timings, and both agree with a hand
computation of the headline numbers."""

from __future__ import annotations

from typing import Any

import pytest

from lair.bench import definitions as d
from lair.bench.runner import _cell, _Client, _Repeat, request_rows
from lair.registry.service.recompute import check_cells

T0 = 81_234.567_891_3  # a monotonic clock far from zero: the rows' rounding is exercised


def _timing(send: float, chunks: list[float], prompt: int = 256) -> d.RequestTiming:
    n = len(chunks)
    return d.RequestTiming(
        send_t=T0 + send,
        content_times=[T0 + c for c in chunks],
        content_chars=[4] * n,
        content_cum_tokens=list(range(1, n + 1)),
        done_t=T0 + chunks[-1] + 0.001,
        prompt_tokens=prompt,
        completion_tokens=n,
        cached_tokens=0,
        status=200,
    )


# two repeats of two streams, 5 tokens each (one token a chunk); times in seconds after the repeat's start
REPEATS = [
    [_timing(0.0, [0.100, 0.150, 0.200, 0.250, 0.300]), _timing(0.001, [0.120, 0.180, 0.240, 0.300, 0.360])],
    [
        _timing(10.0, [10.090, 10.130, 10.170, 10.210, 10.250]),
        _timing(10.0, [10.110, 10.160, 10.210, 10.260, 10.310]),
    ],
]


class _Opts:
    decode_tokens = 5
    force_output = True


class _S:
    opts = _Opts()


def _bench_cell() -> dict[str, Any]:
    reps = [_Repeat(ts, _Client(cpu_s=0.01, wall_s=1.0, loop_lag_p99_ms=0.1)) for ts in REPEATS]
    return _cell(_S(), 256, 2, reps).as_dict()  # type: ignore[arg-type]  # only .opts is read


def test_the_bench_cell_matches_a_hand_computation() -> None:
    cell = _bench_cell()
    # TTFT samples 100, 119, 90, 110 ms (the second stream of repeat 0 was sent 1 ms late): p50 = 105
    assert cell["ttft_ms_p50"] == pytest.approx(105.0)
    # per stream: 4 tokens over 0.2, 0.24, 0.16, 0.2 s = 20, 16.67, 25, 20 tok/s: p50 = 20
    assert cell["decode_tok_s_per_stream"] == pytest.approx(20.0)
    # prefill: 512 prompt tokens over (last first token - first send) = 0.120 s and 0.110 s
    assert cell["prefill_tok_s"] == pytest.approx((512 / 0.120 + 512 / 0.110) / 2)
    # all streams: 8 decode tokens over first first-chunk to last chunk: 0.26 s and 0.22 s
    assert cell["decode_tok_s_aggregate"] == pytest.approx((8 / 0.26 + 8 / 0.22) / 2)
    assert (cell["prompt_tokens"], cell["completion_tokens"], cell["cached_tokens"]) == (256, 5, 0)
    assert cell["flags"] == [] and cell["errors"] == 0


def test_the_registry_recomputes_the_bench_cell_from_its_rows() -> None:
    cell = _bench_cell()
    reps = [_Repeat(ts, _Client(cpu_s=0.01, wall_s=1.0, loop_lag_p99_ms=0.1)) for ts in REPEATS]
    rows = [row for i, rep in enumerate(reps) for row in request_rows(256, 2, i, rep)]
    bench = {"options": {"decode_tokens": 5, "force_output": True}, "cells": [cell]}
    (again,), reasons = check_cells(bench, rows)
    assert reasons == []
    for key in (
        "ttft_ms_p50",
        "ttft_ms_p90",
        "prefill_tok_s",
        "decode_tok_s_per_stream",
        "decode_tok_s_aggregate",
    ):
        assert again[key] == pytest.approx(cell[key], rel=1e-6), key
    for key in ("repeats", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_hit", "errors"):
        assert again[key] == cell[key], key


def test_tokens_whose_text_never_came_are_counted_with_the_last_chunk() -> None:
    """vLLM with continuous usage: 16 completion tokens, the last one's text held back by the
    detokenizer (no content chunk carries it). The chunks' tokens still add up to the server's count,
    so the registry's check that binds chunk timings to usage accepts the row."""
    r = _timing(0.0, [0.100, 0.150, 0.200, 0.250, 0.300])
    r.completion_tokens = 6  # content_cum_tokens say 1..5
    assert d.chunk_tokens(r) == [1.0, 1.0, 1.0, 1.0, 2.0]
    assert d.decode_tokens(r) == 5.0  # as before: completion tokens after the first chunk
    rep = _Repeat([r], _Client(cpu_s=0.01, wall_s=1.0, loop_lag_p99_ms=0.1))
    (row,) = request_rows(256, 1, 0, rep)
    assert sum(row["chunk_tokens"]) == row["completion_tokens"] == 6
    cell = _cell(_S(), 256, 1, [rep]).as_dict()  # type: ignore[arg-type]  # only .opts is read
    bench = {"options": {"decode_tokens": 6, "force_output": True}, "cells": [cell]}
    _, reasons = check_cells(bench, [row])
    assert not [x for x in reasons if "chunk tokens add up" in x], reasons
