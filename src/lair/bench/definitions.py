"""Every number lair's bench reports, defined in one place.

All times are seconds on the monotonic clock (``time.perf_counter``), taken when the bytes arrive,
before any parsing. A *content chunk* is a streamed chunk whose delta carries non-empty ``content``
or reasoning text (``reasoning_content`` / ``reasoning``); role-only and empty chunks never count.

TTFT
    From the moment the request is written to the socket to the arrival of the first content chunk.
prefill tok/s
    At concurrency 1: server-reported prompt tokens / TTFT. At concurrency c (all requests sent
    together): sum of prompt tokens / (last first-token time - first send time).
per-stream decode tok/s
    (completion tokens - tokens in the first content chunk) / (last content chunk - first content
    chunk). Token counts come from the server's usage; the tokens of each chunk come from continuous
    usage where the server offers it, else the completion tokens are shared out in proportion to
    each chunk's text length.
aggregate decode tok/s
    Decode tokens of all c streams (each stream's tokens after its first content chunk, as in the
    per-stream figure) / the decode span of the cell, from the earliest first content chunk of any
    stream to the latest last content chunk of any stream. Every stream's own span lies inside that
    span, so the aggregate can never exceed the sum of the per-stream figures, i.e. concurrency x
    the fastest stream. (A window of "all streams decoding" could: a stream that waits while a later
    one prefills is slow over its own span but fast inside that window.) At concurrency 1 it equals
    the per-stream figure.
summary
    Every metric is reported as p50, p90, min and max over its samples (requests or repeats); the
    headline is the midpoint of the samples, i.e. the p50 (median).
cache hit
    A cell hit the prefix cache when any request reports more than ``CACHE_PREFIX_ALLOWANCE_TOKENS``
    cached prompt tokens, or the engine's prefix-cache hit counter grew by more than that per request.
client-bound
    A run is client-bound when the bench's own CPU time (every thread of the process) exceeds
    ``CLIENT_CPU_BOUND_FRACTION`` of the wall time, or its p99 reading lag exceeds
    ``LOOP_LAG_BOUND_MS``, or, for reads batched on a tick (plain HTTP, after a stream's first
    content chunk), their p99 lag behind their tick exceeds the tick interval (the reader no longer
    keeps its schedule): then the client, not the server, limited the numbers, and they are flagged
    instead of trusted. Reading lag is the time from the kernel's receive timestamp of a read (for a
    batched read, the later of that and its tick) to the bench reading it (plain HTTP), or the event
    loop's wake-up lateness (TLS streams: no kernel timestamp there). Gaps between chunks say nothing
    about the client (chunks read together share one arrival time) and are not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CACHE_PREFIX_ALLOWANCE_TOKENS",
    "CLIENT_CPU_BOUND_FRACTION",
    "LOOP_LAG_BOUND_MS",
    "RequestTiming",
    "Summary",
    "aggregate_decode_tok_s",
    "chunk_tokens",
    "decode_span",
    "decode_tokens",
    "is_cache_hit",
    "is_client_bound",
    "per_stream_decode_tok_s",
    "percentile",
    "prefill_tok_s",
    "summarize",
    "ttft_s",
]

CLIENT_CPU_BOUND_FRACTION = 0.8
"""Own CPU seconds per wall second above which the bench cannot keep up (one Python thread)."""

CACHE_PREFIX_ALLOWANCE_TOKENS = 32
"""Cached prompt tokens per request that do not count as a cache hit: the chat template's opening
tokens come before the nonce, are the same in every prompt, and engines that cache by token (llama.cpp)
report them."""

LOOP_LAG_BOUND_MS = 5.0
"""p99 reading lag (ms) above which the bench is not keeping up with the streams."""


@dataclass(slots=True)
class RequestTiming:
    """What one streamed request measured, in monotonic seconds.

    ``content_times[i]`` is the arrival time of content chunk *i*, ``content_chars[i]`` its text
    length and ``content_cum_tokens[i]`` the server's cumulative completion-token count at that chunk
    when it streams continuous usage (else empty).
    """

    send_t: float
    content_times: list[float] = field(default_factory=list)
    content_chars: list[int] = field(default_factory=list)
    content_cum_tokens: list[int] = field(default_factory=list)
    done_t: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    status: int = 0
    error: str = ""
    text: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.content_times)


def ttft_s(r: RequestTiming) -> float | None:
    """Send to first content chunk; None when no content arrived."""
    return r.content_times[0] - r.send_t if r.content_times else None


def chunk_tokens(r: RequestTiming) -> list[float]:
    """Tokens carried by each content chunk (see the module docstring for the sources)."""
    n = len(r.content_times)
    if len(r.content_cum_tokens) == n and n:
        prev = 0
        out: list[float] = []
        for cum in r.content_cum_tokens:
            out.append(float(cum - prev))
            prev = cum
        if r.completion_tokens is not None and r.completion_tokens > prev:
            # tokens whose text came after the last content chunk, or never (a detokenizer holding back
            # an incomplete UTF-8 sequence): counted with the last chunk, as decode_tokens counts them
            out[-1] += r.completion_tokens - prev
        return out
    total_chars = sum(r.content_chars)
    tokens = r.completion_tokens if r.completion_tokens is not None else n
    if total_chars <= 0:
        return [tokens / n] * n if n else []
    return [tokens * c / total_chars for c in r.content_chars]


def per_stream_decode_tok_s(r: RequestTiming) -> float | None:
    """(completion tokens - first chunk's tokens) / (last chunk - first chunk)."""
    if len(r.content_times) < 2:
        return None
    span = r.content_times[-1] - r.content_times[0]
    if span <= 0:
        return None
    return decode_tokens(r) / span


def prefill_tok_s(rs: Sequence[RequestTiming]) -> float | None:
    """Sum of prompt tokens / (last first-token time - first send time), over requests sent together."""
    done = [r for r in rs if r.content_times]
    if not done or any(r.prompt_tokens is None for r in done):
        return None
    span = max(r.content_times[0] for r in done) - min(r.send_t for r in rs)
    return sum(r.prompt_tokens or 0 for r in done) / span if span > 0 else None


def decode_span(rs: Sequence[RequestTiming]) -> tuple[float, float] | None:
    """(earliest first content chunk, latest last content chunk) over streams with 2+ chunks."""
    decoding = [r for r in rs if len(r.content_times) >= 2]
    if not decoding:
        return None
    start = min(r.content_times[0] for r in decoding)
    end = max(r.content_times[-1] for r in decoding)
    return (start, end) if end > start else None


def decode_tokens(r: RequestTiming) -> float:
    """Tokens after the first content chunk (what the per-stream figure counts)."""
    if len(r.content_times) < 2:
        return 0.0
    per_chunk = chunk_tokens(r)
    total = r.completion_tokens if r.completion_tokens is not None else sum(per_chunk)
    return total - per_chunk[0]


def aggregate_decode_tok_s(rs: Sequence[RequestTiming]) -> float | None:
    """Decode tokens of every stream / the cell's decode span (see the module docstring)."""
    if len(rs) == 1:
        return per_stream_decode_tok_s(rs[0])
    span = decode_span(rs)
    if span is None:
        return None
    return sum(decode_tokens(r) for r in rs) / (span[1] - span[0])


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Summary:
    """p50 (the headline), p90, min, max and sample count of one metric."""

    p50: float
    p90: float
    min: float
    max: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {"p50": self.p50, "p90": self.p90, "min": self.min, "max": self.max, "n": self.n}


def summarize(values: Sequence[float | None]) -> Summary | None:
    """Summary of the samples that exist; None when there are none."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return Summary(percentile(xs, 50), percentile(xs, 90), min(xs), max(xs), len(xs))


def is_cache_hit(cached_tokens: Sequence[int | None], counter_hits: float) -> bool:
    """True when prompts were (partly) served from the prefix cache beyond the template allowance."""
    over = any((c or 0) > CACHE_PREFIX_ALLOWANCE_TOKENS for c in cached_tokens)
    return over or counter_hits > CACHE_PREFIX_ALLOWANCE_TOKENS * max(1, len(cached_tokens))


def is_client_bound(
    cpu_s: float,
    wall_s: float,
    loop_lag_p99_ms: float,
    batched_lag_p99_ms: float = 0.0,
    interval_ms: float = 0.0,
) -> bool:
    """True when the bench's own CPU use or reading lag says it limited the measurement.

    Reads batched on a tick of ``interval_ms`` are late when their p99 lag behind the tick exceeds
    the interval.
    """
    busy = wall_s > 0 and cpu_s / wall_s > CLIENT_CPU_BOUND_FRACTION
    behind = interval_ms > 0 and batched_lag_p99_ms > interval_ms
    return busy or behind or loop_lag_p99_ms > LOOP_LAG_BOUND_MS
