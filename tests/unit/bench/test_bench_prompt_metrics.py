"""Prompt building and sizing; Prometheus parsing and per-cell engine metrics."""

from __future__ import annotations

import asyncio

import pytest

from lair.bench.metrics import cell_engine_metrics, parse_prometheus
from lair.bench.prompt import FILLER_WORDS, PromptSizer, needle_prompt, prompt_text

PROM = """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 120.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 30.0
vllm:prefix_cache_queries_total{engine="0"} 1000
vllm:kv_cache_usage_perc{engine="0"} 0.25
vllm:spec_decode_num_accepted_tokens_total 80
vllm:spec_decode_num_draft_tokens_total 100
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3
llamacpp:prompt_tokens_total 4096
"""


def test_prometheus_sums_label_sets_and_drops_buckets() -> None:
    m = parse_prometheus(PROM)
    assert m["vllm:prefix_cache_hits_total"] == 150.0
    assert m["llamacpp:prompt_tokens_total"] == 4096
    assert not any(k.endswith("_bucket") for k in m)


def test_cell_engine_metrics_deltas_and_peaks() -> None:
    before = parse_prometheus(PROM)
    after = dict(before)
    after.update({"vllm:prefix_cache_hits_total": 150.0, "vllm:spec_decode_num_accepted_tokens_total": 160})
    after["vllm:spec_decode_num_draft_tokens_total"] = 200
    during = [
        parse_prometheus(PROM.replace('kv_cache_usage_perc{engine="0"} 0.25', "kv_cache_usage_perc 0.75"))
    ]
    em = cell_engine_metrics(before, after, during)
    assert em["metrics_engine"] == "vllm" and em["prefix_cache_hits_delta"] == 0.0
    assert em["kv_cache_usage_max"] == 0.75
    assert em["spec_decode_acceptance"] == pytest.approx(0.8)
    assert em["counters_delta"] == {
        "vllm:spec_decode_num_accepted_tokens_total": 80,
        "vllm:spec_decode_num_draft_tokens_total": 100,
    }


# vLLM 0.32 after one request that hit 128 cached tokens: four counters say so, one is the hit count.
VLLM_HITS = """\
vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {q}
vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {h}
vllm:external_prefix_cache_hits_total{{engine="0",model_name="tiny"}} {h}
vllm:prompt_tokens_cached_total{{engine="0",model_name="tiny"}} {h}
vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="tiny",source="local_compute"}} {h}
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} 0.01
"""


def test_vllm_hits_are_counted_once() -> None:
    before = parse_prometheus(VLLM_HITS.format(q=0, h=0))
    after = parse_prometheus(VLLM_HITS.format(q=256, h=128))
    em = cell_engine_metrics(before, after, [])
    assert (em["prefix_cache_hits_delta"], em["prefix_cache_queries_delta"]) == (128, 256)


SGLANG = """\
sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {d}
sglang:cached_tokens_total{{model_name="m",cache_source="host"}} {h}
sglang:encoder_cache_hit_tokens_total{{model_name="m"}} 999
sglang:prompt_tokens_total{{model_name="m"}} 300
sglang:token_usage{{model_name="m",tp_rank="0"}} 0.2
sglang:token_usage{{model_name="m",tp_rank="1"}} 0.3
sglang:swa_token_usage{{model_name="m"}} 0.9
sglang:full_token_usage{{model_name="m"}} 0.9
sglang:spec_accept_rate{{model_name="m"}} 0.6
"""


def test_sglang_exact_names() -> None:
    before = parse_prometheus(SGLANG.format(d=0, h=0))
    em = cell_engine_metrics(before, parse_prometheus(SGLANG.format(d=100, h=28)), [])
    assert em["metrics_engine"] == "sglang" and em["prefix_cache_hits_delta"] == 128
    assert em["kv_cache_usage_max"] == 0.3 and em["spec_decode_acceptance"] == 0.6


def test_llamacpp_has_no_hit_counter() -> None:
    snap = parse_prometheus("llamacpp:prompt_tokens_total 10\nllamacpp:tokens_predicted_total 5\n")
    em = cell_engine_metrics(snap, snap, [])
    assert em["metrics_engine"] == "llamacpp" and em["prefix_cache_hits_delta"] is None
    assert cell_engine_metrics({}, {"other_total": 1.0}, [])["metrics_engine"] is None


def test_every_prompt_starts_with_a_fresh_nonce() -> None:
    a, b = prompt_text(50), prompt_text(50)
    assert a.split()[0] != b.split()[0] and a[:16] != b[:16]
    assert len(a.split()) == 51


def test_needle_sits_at_its_depth() -> None:
    text = needle_prompt(1000, 0.25, "cobalt-1234")
    words = text.split()
    at = words.index("passphrase")
    assert 200 < at < 300 and "cobalt-1234." in words
    assert text.endswith("Answer with the passphrase only.")


def test_sizer_fits_the_servers_counts() -> None:
    async def probe(text: str) -> int:  # a server counting 1.5 tokens per word + 20 template tokens
        return round(1.5 * len(text.split()) + 20)

    sizer = PromptSizer()
    asyncio.run(sizer.calibrate(probe))
    assert sizer.calibrated
    words = sizer.words_for(4096)
    assert abs(1.5 * (words + 1) + 20 - 4096) <= 2


def test_exact_counter_trims_every_prompt_to_the_target() -> None:
    """With an exact counter the filler grows or shrinks until the server count is within 1% (or half
    of the longest filler word, 5 tokens here)."""
    import random

    costs = {w: random.Random(w).choice([1, 2, 3, 5]) for w in FILLER_WORDS}  # uneven tokens per word

    def tokens(text: str) -> int:
        return sum(costs.get(w, 4) for w in text.split())

    async def counter(text: str) -> int:
        return tokens(text)

    async def probe(text: str) -> int:  # the server adds 23 template tokens around the content
        return tokens(text) + 23

    sizer = PromptSizer(counter=counter)
    asyncio.run(sizer.calibrate(probe))
    assert sizer.calibrated and sizer.overhead == 23
    for target in (64, 700, 5000):
        sizes = [tokens(asyncio.run(sizer.fit(target))) + 23 for _ in range(20)]
        assert all(abs(n - target) <= max(2.5, 0.01 * target) for n in sizes), (target, sizes)


def test_a_counter_that_cannot_count_is_dropped() -> None:
    async def counter(text: str) -> int:
        return 0

    async def probe(text: str) -> int:
        return round(1.5 * len(text.split()) + 20)

    sizer = PromptSizer(counter=counter)
    asyncio.run(sizer.calibrate(probe))
    assert sizer.counter is None and sizer.calibrated and abs(sizer.tokens_per_word - 1.5) < 0.01


def _cell_of(cached: int | None, hits_delta: float | None) -> list[str]:
    """The flags of a one-request cell whose response said ``cached`` and whose /metrics said
    ``hits_delta`` (None: no such source)."""
    from types import SimpleNamespace

    from lair.bench.definitions import RequestTiming
    from lair.bench.runner import _cell, _Client, _Repeat

    r = RequestTiming(send_t=0.0, content_times=[0.1, 0.2], content_chars=[1, 1], done_t=0.2)
    r.prompt_tokens, r.completion_tokens, r.cached_tokens = 128, 2, cached
    engine = {} if hits_delta is None else {"prefix_cache_hits_delta": hits_delta}
    rep = _Repeat([r], _Client(cpu_s=0.01, wall_s=1.0, loop_lag_p99_ms=0.1), engine)
    s = SimpleNamespace(opts=SimpleNamespace(decode_tokens=2, force_output=True))
    cell = _cell(s, 128, 1, [rep])  # type: ignore[arg-type]
    return [*cell.flags, f"cached={cell.cached_tokens}"]


def test_cold_cache_not_proven_only_without_both_sources() -> None:
    assert _cell_of(None, None) == ["cold-cache-not-proven", "cached=None"]  # "-", never "0"
    assert _cell_of(0, None) == ["cached=0"]
    assert _cell_of(None, 0.0) == ["cached=None"]
    assert _cell_of(None, 500.0) == ["cache-hit", "cached=None"]


def test_words_too_long_for_the_target_are_topped_up_with_one_letter_words() -> None:
    """Every filler word costs 5 tokens, a one-letter word 1: whole words land up to 2.5 tokens off a
    64-token target; topped up, every prompt is within 1 token of it."""

    def tokens(text: str) -> int:
        return sum(1 if len(w) == 1 else 5 for w in text.split())

    async def counter(text: str) -> int:
        return tokens(text)

    async def probe(text: str) -> int:
        return tokens(text) + 7

    sizer = PromptSizer(counter=counter)
    asyncio.run(sizer.calibrate(probe))
    sizes = [tokens(asyncio.run(sizer.fit(64))) + 7 for _ in range(30)]
    assert all(abs(n - 64) <= 1 for n in sizes), sizes
