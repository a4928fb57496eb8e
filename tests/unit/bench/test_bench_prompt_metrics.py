"""Prompt building and sizing; Prometheus parsing and per-cell engine metrics."""

from __future__ import annotations

import asyncio

import pytest

from lair.bench.metrics import cell_engine_metrics, parse_prometheus
from lair.bench.prompt import PromptSizer, needle_prompt, prompt_text

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
    during = [{**before, "vllm:kv_cache_usage_perc": 0.75}]
    em = cell_engine_metrics(before, after, during)
    assert em["prefix_cache_hits_delta"] == 0.0
    assert em["kv_cache_usage_max"] == 0.75
    assert em["spec_decode_acceptance"] == pytest.approx(0.8)
    assert em["counters_delta"] == {
        "vllm:spec_decode_num_accepted_tokens_total": 80,
        "vllm:spec_decode_num_draft_tokens_total": 100,
    }


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
