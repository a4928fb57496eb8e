"""The engine's Prometheus ``/metrics``: parse, snapshot, and what changed during a cell.

One table per engine (:data:`ENGINE_METRICS`) names the exact metrics lair reads; no fragment
matching, so that vLLM's ``external_prefix_cache_hits_total``, ``prompt_tokens_cached_total`` and
``prompt_tokens_cached_by_source_total`` (other views of the same hits) are never added in, nor
SGLang's ``encoder_cache_hit_tokens_total`` or its other ``*token_usage`` gauges:

- vLLM 0.32: hits ``vllm:prefix_cache_hits_total``, queries ``vllm:prefix_cache_queries_total``,
  KV use ``vllm:kv_cache_usage_perc``, spec decode ``vllm:spec_decode_num_accepted_tokens_total`` /
  ``vllm:spec_decode_num_draft_tokens_total``;
- SGLang 0.5.23: hits ``sglang:cached_tokens_total``, queries ``sglang:prompt_tokens_total``, KV use
  ``sglang:token_usage``, spec decode ``sglang:spec_accept_rate`` (a gauge);
- llama.cpp: no hit counter; queries ``llamacpp:prompt_tokens_total``, KV use
  ``llamacpp:kv_cache_usage_ratio``;
- lair's calibrated test server: ``calibrated:prefix_cache_hits_total`` / ``..._queries_total``,
  ``calibrated:kv_cache_usage_perc``.

The table of a snapshot is the one whose prefix its metrics carry. Counters are summed over label
sets (SGLang's ``cache_source`` device/host/storage are parts of one total); gauges are read as the
highest label set (one value per engine, TP or DP rank). A hits delta of ``None`` means the server
has no hit counter: together with responses without ``cached_tokens`` the cold cache is not proven.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lair.bench.client import Endpoint, http_request
from lair.errors import BenchError

__all__ = [
    "ENGINE_METRICS",
    "EngineMetrics",
    "MetricsWatch",
    "cell_engine_metrics",
    "metrics_table",
    "parse_prometheus",
    "sample_delays",
    "scrape",
]

MAX = "@max"
"""Key suffix of a metric's highest label set (gauges); the bare name holds the sum."""


@dataclass(frozen=True)
class EngineMetrics:
    """The exact metric names of one engine's ``/metrics``."""

    engine: str
    prefix: str
    hits: str | None
    queries: str | None
    kv_usage: str | None
    spec_accepted: str | None = None
    spec_draft: str | None = None
    spec_rate: str | None = None


ENGINE_METRICS = (
    EngineMetrics(
        "vllm",
        "vllm:",
        hits="vllm:prefix_cache_hits_total",
        queries="vllm:prefix_cache_queries_total",
        kv_usage="vllm:kv_cache_usage_perc",
        spec_accepted="vllm:spec_decode_num_accepted_tokens_total",
        spec_draft="vllm:spec_decode_num_draft_tokens_total",
    ),
    EngineMetrics(
        "sglang",
        "sglang:",
        hits="sglang:cached_tokens_total",
        queries="sglang:prompt_tokens_total",
        kv_usage="sglang:token_usage",
        spec_rate="sglang:spec_accept_rate",
    ),
    EngineMetrics(
        "llamacpp",
        "llamacpp:",
        hits=None,
        queries="llamacpp:prompt_tokens_total",
        kv_usage="llamacpp:kv_cache_usage_ratio",
    ),
    EngineMetrics(
        "calibrated",
        "calibrated:",
        hits="calibrated:prefix_cache_hits_total",
        queries="calibrated:prefix_cache_queries_total",
        kv_usage="calibrated:kv_cache_usage_perc",
    ),
)


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over label sets, and ``name@max`` -> the highest label set;
    histogram buckets are dropped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rsplit("}", 1)[-1]
        else:
            name, _, rest = line.partition(" ")
        name = name.strip()
        if name.endswith("_bucket"):
            continue
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        out[name] = out.get(name, 0.0) + value
        out[name + MAX] = max(out.get(name + MAX, value), value)
    return out


def metrics_table(snap: dict[str, float]) -> EngineMetrics | None:
    """The table of the engine whose metrics ``snap`` holds, None for an unknown server."""
    return next((t for t in ENGINE_METRICS if any(k.startswith(t.prefix) for k in snap)), None)


async def scrape(ep: Endpoint, api_key: str | None = None) -> dict[str, float] | None:
    """One snapshot of ``/metrics``; None when the server has none."""
    try:
        status, body = await http_request(ep, "GET", "/metrics", api_key=api_key, timeout_s=10)
    except BenchError:
        return None
    return parse_prometheus(body.decode("utf-8", "replace")) if status == 200 else None


def _delta(before: dict[str, float], after: dict[str, float], name: str | None) -> float | None:
    if name is None or name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def _gauge(snap: dict[str, float], name: str | None) -> float | None:
    return snap.get(name + MAX) if name else None


def cell_engine_metrics(
    before: dict[str, float], after: dict[str, float], samples: list[dict[str, float]]
) -> dict[str, Any]:
    """What the engine says about one cell: prefix-cache hits, KV use, spec-decode acceptance."""
    t = metrics_table(after)
    changed = {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total")}
    out: dict[str, Any] = {
        "metrics_engine": t.engine if t else None,
        "prefix_cache_hits_delta": None,
        "prefix_cache_queries_delta": None,
        "kv_cache_usage_max": None,
        "spec_decode_acceptance": None,
        "counters_delta": {k: v for k, v in changed.items() if v},
    }
    if t is None:
        return out
    kv = [v for s in [*samples, after] if (v := _gauge(s, t.kv_usage)) is not None]
    acc, draft = _delta(before, after, t.spec_accepted), _delta(before, after, t.spec_draft)
    out["prefix_cache_hits_delta"] = _delta(before, after, t.hits)
    out["prefix_cache_queries_delta"] = _delta(before, after, t.queries)
    out["kv_cache_usage_max"] = max(kv) if kv else None
    out["spec_decode_acceptance"] = acc / draft if acc is not None and draft else _gauge(after, t.spec_rate)
    return out


FIRST_SAMPLE_S = 0.05
"""When the first ``/metrics`` sample of a cell is taken; each later pause doubles, up to the
watch's interval, so a cell of a tenth of a second gets samples while its requests run."""


def sample_delays(interval_s: float) -> Iterator[float]:
    """Pauses before each sample: 0.05, 0.1, 0.2 ... s, then ``interval_s`` on and on."""
    delay = min(FIRST_SAMPLE_S, interval_s)
    while True:
        yield delay
        delay = min(delay * 2, interval_s)


@dataclass
class MetricsWatch:
    """Scrapes ``/metrics`` while a cell runs, often at first (:func:`sample_delays`).

    Stopping sets an event rather than cancelling the task: a cancel that lands while a scrape's
    ``wait_for`` is completing is swallowed (Python 3.11), and the loop then scraped on forever while
    :meth:`stop` waited for it."""

    ep: Endpoint
    api_key: str | None
    interval_s: float = 1.0
    samples: list[dict[str, float]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _loop(self) -> None:
        for delay in sample_delays(self.interval_s):
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
                return
            except TimeoutError:
                pass
            snap = await scrape(self.ep, self.api_key)
            if self._stop.is_set():
                return
            if snap is not None:
                self.samples.append(snap)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> list[dict[str, float]]:
        """Ends the watch (a scrape in flight finishes first, within its own timeout)."""
        self._stop.set()
        if self._task is not None:
            await self._task
        return self.samples
