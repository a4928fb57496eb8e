"""The metric definitions on hand-built timings whose right answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lair.bench import definitions as d

DATA = Path(__file__).parents[2] / "data" / "bench"


def _stream(send: float, first: float, delay: float, chunks: int, first_tokens: int = 1) -> d.RequestTiming:
    times = [first + i * delay for i in range(chunks)]
    chars = [4 * first_tokens] + [4] * (chunks - 1)
    return d.RequestTiming(
        send_t=send,
        content_times=times,
        content_chars=chars,
        prompt_tokens=1000,
        completion_tokens=first_tokens + chunks - 1,
    )


def test_ttft_is_send_to_first_content_chunk() -> None:
    r = _stream(send=10.0, first=10.25, delay=0.01, chunks=5)
    assert d.ttft_s(r) == pytest.approx(0.25)
    assert d.ttft_s(d.RequestTiming(send_t=1.0)) is None


def test_bundled_first_chunk_is_left_out_of_per_stream_decode() -> None:
    # 3 tokens in the first chunk, then 1 token every 10 ms: true decode 100 tok/s
    r = _stream(send=0.0, first=0.2, delay=0.01, chunks=98, first_tokens=3)
    assert d.chunk_tokens(r)[0] == pytest.approx(3.0)
    assert d.per_stream_decode_tok_s(r) == pytest.approx(100.0)


def test_continuous_usage_gives_exact_chunk_tokens() -> None:
    r = _stream(send=0.0, first=0.2, delay=0.02, chunks=4)
    r.content_chars = [1, 50, 1, 1]  # text length is ignored when usage is continuous
    r.content_cum_tokens = [2, 4, 6, 8]
    r.completion_tokens = 8
    assert d.chunk_tokens(r) == [2.0, 2.0, 2.0, 2.0]
    assert d.per_stream_decode_tok_s(r) == pytest.approx(6 / 0.06)


def test_prefill_at_concurrency_spans_first_send_to_last_first_token() -> None:
    rs = [_stream(0.0, 0.5, 0.01, 3), _stream(0.001, 1.0, 0.01, 3)]
    assert d.prefill_tok_s(rs) == pytest.approx(2000 / 1.0)
    assert d.prefill_tok_s(rs[:1]) == pytest.approx(1000 / 0.5)


@given(phases=st.lists(st.floats(0.0, 0.0099), min_size=2, max_size=16))
def test_aggregate_spans_first_to_last_decoding_chunk(phases: list[float]) -> None:
    # every stream: 100 tok/s, offset by its phase; one late starter decodes for a shorter time
    rs = [_stream(0.0, 0.2 + p, 0.01, 100) for p in phases]
    rs.append(_stream(0.0, 0.5, 0.01, 40))
    tokens = 99 * len(phases) + 39
    span = max(0.2 + p + 0.99 for p in phases) - (0.2 + min(phases))
    assert d.aggregate_decode_tok_s(rs) == pytest.approx(tokens / span, rel=1e-9)
    assert d.aggregate_decode_tok_s(rs) <= len(rs) * max(d.per_stream_decode_tok_s(r) or 0 for r in rs)


def _recorded(name: str) -> list[d.RequestTiming]:
    doc = json.loads((DATA / name).read_text())
    out = []
    for row in doc["requests"]:
        times = [t / 1000 for t in row["chunk_ms"]]
        chars = [round(1000 * x) for x in row["chunk_tokens"]]  # the shares, as text lengths
        out.append(
            d.RequestTiming(
                send_t=row["send_ms"] / 1000,
                content_times=times,
                content_chars=chars,
                prompt_tokens=row["prompt_tokens"],
                completion_tokens=row["completion_tokens"],
            )
        )
    return out


def test_a_stream_stalled_by_the_other_prefill_cannot_lift_the_aggregate() -> None:
    """Recorded on llama.cpp at 2 streams: stream 0 gets its first token, then waits ~50 ms while
    stream 1's 2,048-token prompt is prefilled; both then decode together. Per stream: 1,249 and
    2,444 tok/s. An "all streams decoding" window counted only the fast part (4,500 tok/s, above
    2 x 1,249 + 2,444 = 3,693). The aggregate is 2 x 127.3 decode tokens over 55.970 -> 158.284 ms."""
    rs = _recorded("llamacpp_2streams_prefill_stall.json")
    per_stream = [d.per_stream_decode_tok_s(r) or 0.0 for r in rs]
    assert per_stream == pytest.approx([1249.16, 2444.35], rel=1e-4)
    agg = d.aggregate_decode_tok_s(rs)
    assert agg is not None and agg <= sum(per_stream) <= 2 * max(per_stream)
    assert agg == pytest.approx((128 - 0.677 + 128 - 0.607) / (0.158284 - 0.055970), rel=1e-4)


def test_aggregate_needs_decoding_streams() -> None:
    one_chunk = d.RequestTiming(send_t=0.0, content_times=[0.1], content_chars=[4], completion_tokens=1)
    assert d.aggregate_decode_tok_s([one_chunk, one_chunk]) is None
    assert d.aggregate_decode_tok_s([_stream(0, 0.1, 0.01, 5), _stream(0, 5.0, 0.01, 5)]) is not None


def test_summary_headline_is_the_median() -> None:
    sm = d.summarize([3.0, None, 1.0, 2.0, 10.0])
    assert sm is not None and (sm.p50, sm.min, sm.max, sm.n) == (2.5, 1.0, 10.0, 4)
    assert sm.p90 == pytest.approx(7.9)
    assert d.summarize([None]) is None


def test_client_bound_by_cpu_or_loop_lag() -> None:
    assert not d.is_client_bound(cpu_s=0.2, wall_s=1.0, loop_lag_p99_ms=1.0)
    assert d.is_client_bound(cpu_s=0.9, wall_s=1.0, loop_lag_p99_ms=1.0)
    assert d.is_client_bound(cpu_s=0.1, wall_s=1.0, loop_lag_p99_ms=d.LOOP_LAG_BOUND_MS + 1)
    # 1% CPU and a 0.2 ms lag: not client-bound, however many chunks share one read (0.0 ms gaps)
    assert not d.is_client_bound(cpu_s=0.01, wall_s=1.0, loop_lag_p99_ms=0.2)
    # reads batched on a 10 ms tick are late only once they fall a whole tick behind it
    batched = {"cpu_s": 0.1, "wall_s": 1.0, "loop_lag_p99_ms": 1.0, "interval_ms": 10.0}
    assert not d.is_client_bound(**batched, batched_lag_p99_ms=8.0)
    assert d.is_client_bound(**batched, batched_lag_p99_ms=11.0)


def test_chunks_read_together_count_at_their_common_arrival() -> None:
    """Two streams at 100 tok/s whose chunks after the first are read in batches of 5, each batch
    stamped with the arrival of its last chunk: the aggregate is what reading every chunk apart gives
    (200 decode tokens over 0.2 -> 1.203 s)."""

    def batched(first: float) -> d.RequestTiming:
        r = _stream(0.0, first, 0.01, 101)
        last_of_batch = [0] + [((i - 1) // 5) * 5 + 5 for i in range(1, 101)]
        r.content_times = [r.content_times[j] for j in last_of_batch]
        return r

    rs = [batched(0.2), batched(0.203)]
    assert d.aggregate_decode_tok_s(rs) == pytest.approx(200 / 1.003, rel=1e-9)
    assert d.per_stream_decode_tok_s(rs[0]) == pytest.approx(100.0)


def test_cache_hit_allows_the_template_prefix() -> None:
    assert not d.is_cache_hit([4, 4, 0], counter_hits=12)
    assert d.is_cache_hit([0, 900], counter_hits=0)
    assert d.is_cache_hit([None, None], counter_hits=5000)
