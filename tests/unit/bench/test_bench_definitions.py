"""The metric definitions on hand-built timings whose right answers are known."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lair.bench import definitions as d


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
def test_aggregate_counts_only_while_all_streams_decode(phases: list[float]) -> None:
    # every stream: 100 tok/s, offset by its phase; one late starter decodes for a shorter time
    rs = [_stream(0.0, 0.2 + p, 0.01, 100) for p in phases]
    rs.append(_stream(0.0, 0.5, 0.01, 40))
    assert d.aggregate_decode_tok_s(rs) == pytest.approx(100.0 * len(rs), rel=1e-6)


def test_aggregate_needs_overlapping_streams() -> None:
    assert d.aggregate_decode_tok_s([_stream(0, 0.1, 0.01, 5), _stream(0, 5.0, 0.01, 5)]) is None


def test_summary_headline_is_the_median() -> None:
    sm = d.summarize([3.0, None, 1.0, 2.0, 10.0])
    assert sm is not None and (sm.p50, sm.min, sm.max, sm.n) == (2.5, 1.0, 10.0, 4)
    assert sm.p90 == pytest.approx(7.9)
    assert d.summarize([None]) is None


def test_client_bound_by_cpu_or_loop_lag() -> None:
    assert not d.is_client_bound(cpu_s=0.2, wall_s=1.0, loop_lag_p99_ms=1.0)
    assert d.is_client_bound(cpu_s=0.9, wall_s=1.0, loop_lag_p99_ms=1.0)
    assert d.is_client_bound(cpu_s=0.1, wall_s=1.0, loop_lag_p99_ms=d.LOOP_LAG_BOUND_MS + 1)
    # a lag shorter than the gap between chunks still reads each chunk on its own
    assert not d.is_client_bound(cpu_s=0.1, wall_s=1.0, loop_lag_p99_ms=8.0, gap_ms=10.0)
    assert d.is_client_bound(cpu_s=0.1, wall_s=1.0, loop_lag_p99_ms=12.0, gap_ms=10.0)
    # reads batched on a 10 ms tick are late only once they fall a whole tick behind it
    batched = {"cpu_s": 0.1, "wall_s": 1.0, "loop_lag_p99_ms": 1.0, "interval_ms": 10.0}
    assert not d.is_client_bound(**batched, batched_lag_p99_ms=8.0)
    assert d.is_client_bound(**batched, batched_lag_p99_ms=11.0)


def test_chunks_read_together_count_at_their_common_arrival() -> None:
    """Two streams at 100 tok/s whose chunks after the first are read in batches of 5, each batch
    stamped with the arrival of its last chunk: the aggregate is still exactly 200 tok/s."""

    def batched(first: float) -> d.RequestTiming:
        r = _stream(0.0, first, 0.01, 101)
        last_of_batch = [0] + [((i - 1) // 5) * 5 + 5 for i in range(1, 101)]
        r.content_times = [r.content_times[j] for j in last_of_batch]
        return r

    rs = [batched(0.2), batched(0.203)]
    assert d.aggregate_decode_tok_s(rs) == pytest.approx(200.0, rel=1e-9)
    assert d.per_stream_decode_tok_s(rs[0]) == pytest.approx(100.0)


def test_cache_hit_allows_the_template_prefix() -> None:
    assert not d.is_cache_hit([4, 4, 0], counter_hits=12)
    assert d.is_cache_hit([0, 900], counter_hits=0)
    assert d.is_cache_hit([None, None], counter_hits=5000)
