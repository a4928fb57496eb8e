"""The engine's Prometheus ``/metrics``: parse, snapshot, and what changed during a cell.

Names differ per engine (``vllm:``, ``sglang:``, ``llamacpp:``...); lair recognises them by what
they mean, matching on name fragments:

- prefix-cache hits: a counter whose name holds ``prefix_cache_hits``, ``cache_hit_tokens`` or
  ``prompt_tokens_cached`` (llama.cpp);
- prefix-cache queries: ``prefix_cache_queries``;
- KV-cache use (gauge, highest value seen during the cell): ``kv_cache_usage``, ``gpu_cache_usage``,
  ``token_usage``;
- speculative decoding: ``spec_decode_num_accepted_tokens`` / ``spec_decode_num_draft_tokens``
  (acceptance = accepted delta / draft delta), or an engine's own ``spec_accept`` gauge.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from lair.bench.client import Endpoint, http_request
from lair.errors import BenchError

__all__ = ["MetricsWatch", "cell_engine_metrics", "parse_prometheus", "scrape"]

_HITS = ("prefix_cache_hits", "cache_hit_tokens", "prompt_tokens_cached")
_QUERIES = ("prefix_cache_queries",)
_KV = ("kv_cache_usage", "gpu_cache_usage", "token_usage")
_SPEC_ACC, _SPEC_DRAFT, _SPEC_GAUGE = (
    "spec_decode_num_accepted_tokens",
    "spec_decode_num_draft_tokens",
    "spec_accept",
)


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value, summed over label sets; histogram buckets are dropped."""
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
    return out


async def scrape(ep: Endpoint, api_key: str | None = None) -> dict[str, float] | None:
    """One snapshot of ``/metrics``; None when the server has none."""
    try:
        status, body = await http_request(ep, "GET", "/metrics", api_key=api_key, timeout_s=10)
    except BenchError:
        return None
    return parse_prometheus(body.decode("utf-8", "replace")) if status == 200 else None


def _sum(snap: dict[str, float], frags: tuple[str, ...]) -> float | None:
    vals = [v for k, v in snap.items() if any(f in k for f in frags) and not k.endswith(("_created", "_sum"))]
    return sum(vals) if vals else None


def _delta(before: dict[str, float], after: dict[str, float], frags: tuple[str, ...]) -> float | None:
    a, b = _sum(after, frags), _sum(before, frags)
    return None if a is None or b is None else a - b


def cell_engine_metrics(
    before: dict[str, float], after: dict[str, float], samples: list[dict[str, float]]
) -> dict[str, Any]:
    """What the engine says about one cell: prefix-cache hits, KV use, spec-decode acceptance."""
    kv = [v for s in [*samples, after] if (v := _sum(s, _KV)) is not None]
    acc, draft = _delta(before, after, (_SPEC_ACC,)), _delta(before, after, (_SPEC_DRAFT,))
    acceptance = acc / draft if acc is not None and draft else _sum(after, (_SPEC_GAUGE,))
    changed = {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total")}
    return {
        "prefix_cache_hits_delta": _delta(before, after, _HITS),
        "prefix_cache_queries_delta": _delta(before, after, _QUERIES),
        "kv_cache_usage_max": max(kv) if kv else None,
        "spec_decode_acceptance": acceptance,
        "counters_delta": {k: v for k, v in changed.items() if v},
    }


@dataclass
class MetricsWatch:
    """Scrapes ``/metrics`` every ``interval_s`` while a cell runs."""

    ep: Endpoint
    api_key: str | None
    interval_s: float = 1.0
    samples: list[dict[str, float]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            snap = await scrape(self.ep, self.api_key)
            if snap is not None:
                self.samples.append(snap)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> list[dict[str, float]]:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        return self.samples
