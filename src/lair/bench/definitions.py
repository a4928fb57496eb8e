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
noisy
    A cell is noisy when something besides the engine and the bench used the machine while it ran,
    or its own repeats disagree: other processes' CPU above ``OTHER_CPU_NOISY_FRACTION`` of the
    machine's cores (system busy minus the engine's own minus the client's own, from ``/proc/stat``:
    :mod:`lair.bench.machine`), CPU steal above ``STEAL_NOISY_FRACTION``, another process on a GPU
    using more than ``GPU_OTHER_SM_NOISY_PCT`` of its SMs, or a repeat spread (max / min of the
    per-repeat prefill and aggregate decode) above ``REPEAT_SPREAD_NOISY_RATIO``. A noisy number is
    kept and shown, but never becomes a replication attempt or a verified row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CACHE_PREFIX_ALLOWANCE_TOKENS",
    "CLIENT_CPU_BOUND_FRACTION",
    "GPU_OTHER_SM_NOISY_PCT",
    "LOOP_LAG_BOUND_MS",
    "NOISE_LIMITS",
    "OTHER_CPU_NOISY_FRACTION",
    "REPEAT_SPREAD_NOISY_RATIO",
    "STEAL_NOISY_FRACTION",
    "RequestTiming",
    "Summary",
    "aggregate_decode_tok_s",
    "chunk_tokens",
    "decode_span",
    "decode_tokens",
    "is_cache_hit",
    "is_client_bound",
    "noise_reasons",
    "per_stream_decode_tok_s",
    "percentile",
    "prefill_tok_s",
    "repeat_spread",
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

OTHER_CPU_NOISY_FRACTION = 0.25
"""Other processes' CPU (cores busy minus the engine's and the bench's own), as a fraction of the
machine's cores, above which a cell is noisy. A quarter of the machine: on 2 cores one busy neighbour
at half a core is caught, while a quiet machine's daemons, shells and editors stay under 0.05; on a
large GPU host it is many cores of someone else's work, enough to delay the engine's scheduler
thread. Applied only when the engine's own CPU is known (else the engine's CPU is in "other")."""

STEAL_NOISY_FRACTION = 0.05
"""CPU steal (time the hypervisor gave this virtual machine's CPUs to another guest) as a fraction of
all CPU time, above which a cell is noisy: a cloud VM on a busy host loses 5% and more, a dedicated
or idle host loses under 1%."""

REPEAT_SPREAD_NOISY_RATIO = 2.0
"""max / min of a cell's per-repeat prefill or aggregate decode above which it is noisy: the same
cell measured twice at half and at all of its speed is no measurement of the engine. On a quiet
2-core machine, the tiny llama.cpp engine's repeats of cells lasting 15 ms spread up to 1.43x
(measured, 2026-12-07: timer ticks and scheduling jitter weigh heavily in so short a window); the
same cells beside two busy-loop processes spread 3.4x. Cells of seconds spread a few percent."""

GPU_OTHER_SM_NOISY_PCT = 5.0
"""SM use (%) of a process other than the engine on a GPU (NVML's per-process samples) above which
a cell is noisy: a second engine or a training job sharing the GPU. An idle process holding memory
(a notebook, a monitoring agent) stays at 0%. Where the engine's processes are unknown, two or more
processes above it on one GPU are noisy."""

NOISE_LIMITS = {
    "other_cpu_fraction": OTHER_CPU_NOISY_FRACTION,
    "steal_fraction": STEAL_NOISY_FRACTION,
    "repeat_spread_ratio": REPEAT_SPREAD_NOISY_RATIO,
    "gpu_other_sm_pct": GPU_OTHER_SM_NOISY_PCT,
}
"""The limits each cell's machine certificate records beside its figures."""


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


SPREAD_METRICS = ("prefill_tok_s", "decode_tok_s_aggregate")
"""The figures whose samples are repeats (one value per repeat): their spread is the cell's."""


def repeat_spread(stats: dict[str, dict[str, float] | None]) -> dict[str, float]:
    """max / min of each per-repeat figure with two or more repeats and a positive minimum."""
    out = {}
    for key in SPREAD_METRICS:
        s = stats.get(key)
        if s and s.get("n", 0) >= 2 and s["min"] > 0:
            out[key] = s["max"] / s["min"]
    return out


def _gpu_reasons(gpu: dict[str, Any], engine_pids: set[int] | None) -> list[str]:
    """Other processes above ``GPU_OTHER_SM_NOISY_PCT`` on a GPU (with the engine's pids unknown:
    a second one above it on the same GPU)."""
    busy = [p for p in gpu.get("processes") or [] if (p.get("sm_pct") or 0.0) > GPU_OTHER_SM_NOISY_PCT]
    if engine_pids is not None:
        others = [p for p in busy if p["pid"] not in engine_pids]
    else:
        per_gpu: dict[int, list[dict[str, Any]]] = {}
        for p in busy:
            per_gpu.setdefault(p["gpu"], []).append(p)
        others = [p for ps in per_gpu.values() if len(ps) > 1 for p in ps]
    return [
        f"process {p['pid']} used {p['sm_pct']:.0f}% of GPU {p['gpu']}'s SMs "
        f"(limit {GPU_OTHER_SM_NOISY_PCT:g}%)"
        for p in others
    ]


def noise_reasons(
    cpu: dict[str, Any],
    spread: dict[str, float],
    gpu: dict[str, Any] | None = None,
    engine_pids: set[int] | None = None,
) -> list[str]:
    """Why a cell is noisy (empty: it is not), each reason with its figure and its limit: ``cpu`` is
    :func:`lair.bench.machine.cpu_window`'s figures, ``spread`` :func:`repeat_spread`'s, ``gpu``
    :func:`lair.bench.machine.gpu_processes`' answer."""
    out = []
    other = cpu.get("other_cpu_fraction")
    if other is not None and other > OTHER_CPU_NOISY_FRACTION:
        out.append(
            f"other processes used {cpu['other_cpu_cores']:.2f} of {cpu['cpus']} cores "
            f"({other:.0%}, limit {OTHER_CPU_NOISY_FRACTION:.0%})"
        )
    steal = cpu.get("steal_fraction") or 0.0
    if steal > STEAL_NOISY_FRACTION:
        out.append(f"CPU steal {steal:.1%} (limit {STEAL_NOISY_FRACTION:.0%})")
    for key, ratio in spread.items():
        if ratio > REPEAT_SPREAD_NOISY_RATIO:
            out.append(f"{key} repeats spread {ratio:.2f}x max/min (limit {REPEAT_SPREAD_NOISY_RATIO:g}x)")
    return out + (_gpu_reasons(gpu, engine_pids) if gpu and gpu.get("checked") else [])
