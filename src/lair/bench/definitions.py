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
valid output
    Every successful answer (HTTP 200, no error event) must look like an answer: it carries
    content; with forced output its completion-token count lies within
    ``OUTPUT_TOKENS_LOW_RATIO``..``OUTPUT_TOKENS_HIGH_RATIO`` of the tokens asked (MLPerf TEST06's
    0.9-1.1x); its text is not blank, is not one short unit (a token, a character) repeated for the
    whole answer, and decodes as text (at most ``NOT_TEXT_FRACTION`` of its characters are U+FFFD
    replacements or control characters); and where the prompts of one repeat differ, no two answers of
    ``DISTINCT_MIN_TOKENS`` tokens or more are the same text. A cell with any failing answer is flagged
    ``invalid-output`` and never verified.
over-saturated (open loop)
    An open-loop cell is over-saturated when the requests in flight, as the client counts them at
    each send, keep growing through the second half of the cell's sends: the least-squares slope of
    in-flight against send time there exceeds ``OVERSATURATION_GROWTH_FRACTION`` of the offered rate
    (the server completes less than 80% of what arrives, so its queue grows without bound) and that
    slope over the second half's span adds at least ``OVERSATURATION_MIN_GROWTH`` requests and at
    least the first half's mean in flight (a wobble of one or two requests at a high rate is
    sampling noise, not a queue). Below ``OVERSATURATION_MIN_SENDS`` sends it is not decided.
knee (saturation sweep)
    Over cells of rising offered rate, the knee is the last cell before the first step whose
    throughput (output tokens per second) grew by less than ``KNEE_EFFICIENCY`` of the load added
    (rate ratio - 1): past it, more load mostly queues.
users at S tok/s
    A cell holds its mean concurrency (Little's law: the requests' summed time in the system over the
    cell's span) as users at S tok/s each when the ``USER_SPEED_PERCENTILE``-th percentile of its TPOT
    is at most 1/S (nine in ten requests decode at S or faster) and, with an SLO, the SLO holds.
"""

from __future__ import annotations

import math
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CACHE_PREFIX_ALLOWANCE_TOKENS",
    "CLIENT_CPU_BOUND_FRACTION",
    "DISTINCT_MIN_TOKENS",
    "GPU_OTHER_SM_NOISY_PCT",
    "KNEE_EFFICIENCY",
    "LOOP_LAG_BOUND_MS",
    "NOISE_LIMITS",
    "NOT_TEXT_FRACTION",
    "OTHER_CPU_NOISY_FRACTION",
    "OUTPUT_TOKENS_HIGH_RATIO",
    "OUTPUT_TOKENS_LOW_RATIO",
    "OVERSATURATION_GROWTH_FRACTION",
    "OVERSATURATION_MIN_GROWTH",
    "OVERSATURATION_MIN_SENDS",
    "REPEAT_SPREAD_NOISY_RATIO",
    "STEAL_NOISY_FRACTION",
    "USER_SPEED_PERCENTILE",
    "RequestTiming",
    "Summary",
    "aggregate_decode_tok_s",
    "answer_problems",
    "chunk_tokens",
    "decode_span",
    "decode_tokens",
    "duplicate_answers",
    "is_cache_hit",
    "is_client_bound",
    "is_oversaturated",
    "noise_reasons",
    "output_problem",
    "output_token_bounds",
    "per_stream_decode_tok_s",
    "percentile",
    "prefill_tok_s",
    "repeat_spread",
    "repeated_unit",
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


OUTPUT_TOKENS_LOW_RATIO = 0.9
OUTPUT_TOKENS_HIGH_RATIO = 1.1
"""Forced output must come back with 0.9x to 1.1x the tokens asked (MLPerf TEST06's bounds): a
server that stops at EOS despite ``ignore_eos``, or pads, is not measured at the length asked."""

NOT_TEXT_FRACTION = 0.1
"""Above this fraction of U+FFFD replacements (bytes that are not UTF-8) and control characters
(other than tab and newlines), an answer does not decode as text. A detokenizer that splits a
multi-byte character across chunks leaves a few, never a tenth."""

DISTINCT_MIN_TOKENS = 16
"""Answers of this many tokens or more to different prompts must differ; shorter ones may agree by
chance (a one-token answer to two prompts)."""

_UNIT_MAX_CHARS = 16
"""The longest unit whose repetition over a whole answer counts as "one token repeated"."""


def output_token_bounds(want: int) -> tuple[int, int]:
    """The (least, most) completion tokens a forced answer of ``want`` tokens may carry."""
    return math.ceil(want * OUTPUT_TOKENS_LOW_RATIO - 1e-9), math.floor(
        want * OUTPUT_TOKENS_HIGH_RATIO + 1e-9
    )


def repeated_unit(text: str) -> str | None:
    """The unit (at most ``_UNIT_MAX_CHARS`` characters, surrounding blanks ignored) that the whole
    text repeats at least twice, or None: ``" tok tok tok"`` -> ``"tok"``, ``"abab"`` -> ``"ab"``."""
    t = text.strip()
    if len(t) < 2:
        return None
    words = t.split()
    if len(words) >= 2 and len(set(words)) == 1 and len(words[0]) <= _UNIT_MAX_CHARS:
        return words[0]
    period = (t + t).find(t, 1)  # the smallest period of t (len(t) when it has none)
    return t[:period] if period <= _UNIT_MAX_CHARS and len(t) >= 2 * period and len(t) % period == 0 else None


def _not_text_chars(text: str) -> int:
    return sum(
        1 for ch in text if ch == "\ufffd" or (unicodedata.category(ch) == "Cc" and ch not in "\t\n\r")
    )


def output_problem(r: RequestTiming, want: int, force: bool) -> str | None:
    """Why a successful answer (HTTP 200, no error) is not a valid one, or None (see the module
    docstring, *valid output*). Answers that failed are counted as errors, not judged here."""
    if r.status != 200 or r.error:
        return None
    if not r.content_times or r.completion_tokens == 0:
        return f"no content (completion_tokens {r.completion_tokens})"
    if force and r.completion_tokens is not None:
        lo, hi = output_token_bounds(want)
        if not lo <= r.completion_tokens <= hi:
            return f"{r.completion_tokens} completion tokens, {want} asked (allowed {lo}-{hi})"
    if not r.text.strip():
        n = len(r.content_times)
        return f"blank text in {n} content chunk{'s' if n != 1 else ''}"
    bad = _not_text_chars(r.text)
    if bad > NOT_TEXT_FRACTION * len(r.text):
        return f"not text: {bad} of {len(r.text)} characters are replacements or control characters"
    unit = repeated_unit(r.text)
    if unit is not None and (r.completion_tokens is None or r.completion_tokens >= 2):
        return f"one unit repeated for the whole answer: {unit!r}"
    return None


def duplicate_answers(rs: Sequence[RequestTiming]) -> list[int]:
    """Indexes of the answers (of one repeat, to different prompts) that repeat an earlier answer's
    text, among those of ``DISTINCT_MIN_TOKENS`` tokens or more."""
    seen: set[str] = set()
    out = []
    for i, r in enumerate(rs):
        if r.status != 200 or r.error or (r.completion_tokens or len(r.content_times)) < DISTINCT_MIN_TOKENS:
            continue
        if r.text in seen:
            out.append(i)
        seen.add(r.text)
    return out


def answer_problems(rs: Sequence[RequestTiming], want: int, force: bool) -> list[str | None]:
    """Per answer of one repeat (to different prompts): :func:`output_problem`, else a duplicate's
    reason (:func:`duplicate_answers`), else None."""
    out = [output_problem(r, want, force) for r in rs]
    for i in duplicate_answers(rs):
        if out[i] is None:
            first = next(j for j in range(i) if rs[j].text == rs[i].text)
            out[i] = f"the same text as answer {first} of this repeat, to a different prompt"
    return out


OVERSATURATION_GROWTH_FRACTION = 0.2
"""In-flight growth (requests per second, over the second half of an open-loop cell's sends) above
this fraction of the offered rate: the queue grows without bound."""

OVERSATURATION_MIN_GROWTH = 4.0
"""The trend must add at least this many requests in flight over the second half: measured on the
calibrated server (no capacity limit, ~50 ms a request), 16 Poisson sends at 40/s gave a slope of
in-flight above 0.2 x the rate from a wobble of 2-3 requests."""

OVERSATURATION_MIN_SENDS = 16
"""Fewer sends than this say nothing about a trend."""

KNEE_EFFICIENCY = 0.25
"""A rate step whose throughput grew by less than this fraction of the load it added is past the knee."""

USER_SPEED_PERCENTILE = 90.0
"""The TPOT percentile that must meet 1 / (tokens per second per user)."""


def is_oversaturated(send_s: Sequence[float], in_flight: Sequence[int], rate: float) -> bool | None:
    """Whether the in-flight count grows without bound over the second half of the sends (None:
    too few sends to say)."""
    if len(send_s) < OVERSATURATION_MIN_SENDS:
        return None
    half = len(send_s) // 2
    xs, ys = list(send_s[half:]), [float(v) for v in in_flight[half:]]
    if max(xs) <= min(xs):
        return None
    slope = statistics.linear_regression(xs, ys).slope
    growth = slope * (max(xs) - min(xs))
    first_mean = statistics.fmean(in_flight[:half])
    return slope > OVERSATURATION_GROWTH_FRACTION * rate and growth >= max(
        OVERSATURATION_MIN_GROWTH, first_mean
    )
