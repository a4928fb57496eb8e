"""Every cell of a run report recomputed from its raw per-request timings (``requests.jsonl``).

The definitions are lair's own (:mod:`lair.bench.definitions`), applied exactly as the bench applies
them; the results' cells must agree with the recomputation within rounding (``REL_TOL``: the raw
file keeps times to the microsecond and token shares to three decimals). Besides agreement, a cell
must be a clean measurement to be verified: full output lengths, a cold cache that was proven cold
(an engine counter or ``cached_tokens`` in the responses), a client that was not the bottleneck, and
no failed requests.

The raw timings must also be physically possible (:func:`plausibility`, each refusal located by its
line of ``requests.jsonl``): clocks that run forward (sends at or after the repeat's first send, which
is at 0; every chunk after its request's send, in order; the first chunk strictly after the send), no
negative token counts, the server's own usage counts present, no more content chunks than completion
tokens, prompts the size of their cell's context (``PROMPT_TOLERANCE``), and no stream faster than
``MAX_STREAM_TOK_S``. A gap of 0 between two chunks is no refusal: chunks read together share their
arrival time (llama.cpp flushes a burst of tokens at once; see :mod:`lair.bench.definitions`). The
floor on a stream's gaps is its mean gap: above one token a microsecond here, and at most 100% of the
roofline of its GPUs in :mod:`.verify`.

Each cell's certificate (:func:`check_certificate`, written by :mod:`lair.bench.certificate`) must
show a cold prefix cache (no hit tokens beyond the template's allowance, by the engine's counter or the
responses) that agrees with the cell, a client that was not the bottleneck by its own numbers and by
its verdict, and, on a rig whose fingerprint names GPUs the bench samples (NVIDIA's), GPU samples
during the cell with an energy figure and the driver and CUDA versions: otherwise the report is
refused. An AMD rig's GPUs (read from amd-smi) have no telemetry in lair's bench: its cells are held
to their roofline but, with no energy figure, never verified. Thermal or power
throttling seen during a cell is no refusal: the row carries a note saying so. A report with no
certificate at all (written before lair recorded one) is kept as it was checked before, at most
``reported-by-report``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from lair.bench import definitions as d
from lair.bench.aggregate import aggregate_cell
from lair.fit.catalog import is_amd_smi_name
from lair.report.raw_cells import timing_of  # one reading of a raw row, the client's and the registry's

__all__ = [
    "ABS_TOL",
    "MAX_REPEAT_SPREAD",
    "MAX_STREAM_TOK_S",
    "NO_CERTIFICATE",
    "PROMPT_SLACK_TOKENS",
    "PROMPT_TOLERANCE",
    "REL_TOL",
    "Certified",
    "by_cell",
    "check_cells",
    "check_certificate",
    "plausibility",
    "timing_of",
]

REL_TOL = 2e-3
"""Relative disagreement allowed between a reported number and its recomputation (rounding)."""
ABS_TOL = 1e-2

MAX_STREAM_TOK_S = 1e6
"""Fastest decode one stream may show over its span (one token a microsecond). No engine on any
hardware steps that fast: a decode step is at least a few GPU kernels of microseconds each, and
speculative decoding accepts a handful of tokens a step. The real ceiling is the roofline."""
PROMPT_TOLERANCE = 0.10
"""How far a request's prompt tokens (the server's count) may be from its cell's context: the bench
sizes prompts to the context within 1% with a token counter, and by a two-probe fit without one."""
PROMPT_SLACK_TOKENS = 32
"""...and at least this many tokens either way (a chat template's opening tokens, small contexts)."""
MAX_REPEAT_SPREAD = 0.25
"""Largest spread of a verified cell's per-repeat decode speeds, (max - min) / median (25%). The repeats
of a cell run back to back against one server, so they differ by the noise of one rig (a few percent
on a GPU); rigs that replicate a row must agree within 10% (:data:`~.tiers.MAX_SPREAD`). A
replication's band is the repeats' range widened by 5% each way (:mod:`lair.replication`): at 25% the
band of a verified row reaches at most about 29% below and 30% above it, where repeats at 5, 200 and
20,000 tok/s made a band that took any attempt. A cell over it is not verified (:mod:`.bounds`)."""

_NUMBERS = (
    "ttft_ms_p50",
    "ttft_ms_p90",
    "prefill_tok_s",
    "decode_tok_s_per_stream",
    "decode_tok_s_aggregate",
)

_CLIENT_KEYS = ("cpu_fraction_max", "loop_lag_p99_ms_max", "batched_lag_p99_ms_max")
_EXACT = ("repeats", "prompt_tokens", "completion_tokens", "cached_tokens", "errors", "output_length_ok")


def _recompute(
    reps: list[list[d.RequestTiming]], cell: dict[str, Any], want: int, force: bool
) -> dict[str, Any]:
    """The cell again, by the bench's own aggregation (:func:`lair.bench.aggregate.aggregate_cell`)."""
    hits = [m.get("prefix_cache_hits_delta") for m in cell.get("engine_metrics") or []]
    fig = aggregate_cell(reps, hits, want_tokens=want, force_output=force)
    return fig.headline() | {"cold_proven": fig.cold_proven}


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _client_bound(cell: dict[str, Any], interval_ms: float) -> bool:
    """What the cell's recorded client load says (any repeat over a bound makes the cell bound)."""
    c = cell.get("client") or {}
    return d.is_client_bound(
        float(c.get("cpu_fraction_max", 0.0)),
        1.0,
        float(c.get("loop_lag_p99_ms_max", 0.0)),
        float(c.get("batched_lag_p99_ms_max", 0.0)),
        interval_ms,
    )


def _disagreements(where: str, cell: dict[str, Any], again: dict[str, Any]) -> list[str]:
    out = []
    for key in _NUMBERS:
        if not _close(cell.get(key), again[key]):
            out.append(
                f"{where}: {key} is {cell.get(key)} in results.json; the raw timings give {again[key]}"
            )
    for key in (*_EXACT, "cache_hit"):
        if cell.get(key) != again[key]:
            out.append(
                f"{where}: {key} is {cell.get(key)!r} in results.json; the raw timings give {again[key]!r}"
            )
    return out


def _cleanliness(where: str, cell: dict[str, Any], again: dict[str, Any], bound: bool) -> list[str]:
    out = []
    if not again["output_length_ok"]:
        out.append(f"{where}: output lengths short of the {cell.get('_want')} tokens asked for")
    if again["cache_hit"]:
        out.append(f"{where}: prompts hit the prefix cache (a warm-cache number)")
    if not again["cold_proven"]:
        out.append(f"{where}: cold cache not proven (no engine hit counter, no cached_tokens in responses)")
    if bound or cell.get("client_bound"):
        c = cell.get("client") or {}
        load = ", ".join(f"{k} {c[k]:.3g}" for k in _CLIENT_KEYS if isinstance(c.get(k), int | float))
        out.append(f"{where}: client-bound (the bench, not the server, limited the numbers: {load})")
    if again["errors"]:
        out.append(f"{where}: {again['errors']} failed requests")
    return out


def _row_reasons(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, row in enumerate(rows):
        chunks = row.get("chunk_ms") or []
        if chunks and not _close(row.get("ttft_ms"), chunks[0]):
            out.append(
                f"requests.jsonl line {i + 1}: ttft_ms {row.get('ttft_ms')} "
                f"is not its first chunk {chunks[0]}"
            )
        if any(b < a for a, b in pairwise(chunks)):
            out.append(f"requests.jsonl line {i + 1}: chunk times go backwards")
        tokens = row.get("chunk_tokens") or []
        if len(tokens) != len(chunks):
            out.append(
                f"requests.jsonl line {i + 1}: {len(tokens)} chunk token counts for {len(chunks)} chunks"
            )
        elif row.get("completion_tokens") is not None and not _close(sum(tokens), row["completion_tokens"]):
            out.append(
                f"requests.jsonl line {i + 1}: chunk tokens add up to {sum(tokens):.3f}, "
                "not completion_tokens"
            )
    return out


def _number(x: Any) -> float | None:
    """``x`` as a finite float, or None (not a number, a bool, NaN or infinite)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _clocks(where: str, row: dict[str, Any]) -> list[str]:
    send, chunks = _number(row.get("send_ms")), row.get("chunk_ms") or []
    out = []
    if send is None or send < 0:
        out.append(
            f"{where}: send_ms {row.get('send_ms')!r} is before the repeat's first send "
            "(send times count from it: >= 0 ms)"
        )
    times = [_number(c) for c in chunks]
    bad = next((i for i, t in enumerate(times) if t is None or t < 0), None)
    if bad is not None:
        out.append(
            f"{where}: chunk_ms[{bad}] {chunks[bad]!r} is before the request was sent "
            "(chunk times count from its send: >= 0 ms)"
        )
    elif times and times[0] == 0:
        out.append(f"{where}: the first chunk arrives 0 ms after the send (a response takes time to arrive)")
    return out


def _tokens(where: str, row: dict[str, Any], ok: bool) -> list[str]:
    tokens, chunks = row.get("chunk_tokens") or [], row.get("chunk_ms") or []
    out = []
    bad = next((i for i, t in enumerate(tokens) if (v := _number(t)) is None or v < 0), None)
    if bad is not None:
        out.append(f"{where}: chunk_tokens[{bad}] {tokens[bad]!r} is not a token count (>= 0)")
    missing = [k for k in ("prompt_tokens", "completion_tokens") if _number(row.get(k)) is None]
    if ok and missing:
        out.append(
            f"{where}: no {' or '.join(missing)}: the server's own usage counts are needed "
            "(stream_options.include_usage)"
        )
    completion = _number(row.get("completion_tokens"))
    if ok and completion is not None and len(chunks) > completion:
        out.append(
            f"{where}: {len(chunks)} content chunks for {completion:g} completion tokens "
            "(every content chunk carries at least one token's text)"
        )
    return out


def _speed(where: str, row: dict[str, Any]) -> list[str]:
    """A stream no faster than one token a microsecond over its span (first to last chunk)."""
    chunks, tokens = row.get("chunk_ms") or [], [_number(t) for t in row.get("chunk_tokens") or []]
    if len(chunks) < 2 or not tokens or None in tokens:
        return []
    start, end, total = _number(chunks[0]), _number(chunks[-1]), _number(row.get("completion_tokens"))
    total = sum(t or 0.0 for t in tokens) if total is None else total
    if start is None or end is None or end <= start:
        return []
    span_s, decode = (end - start) / 1000, total - (tokens[0] or 0.0)
    if decode / span_s <= MAX_STREAM_TOK_S:
        return []
    return [
        f"{where}: {decode:g} tokens in {span_s * 1e6:.3f} us after the first chunk is "
        f"{decode / span_s:,.0f} tok/s, past one token a microsecond"
    ]


def _prompt(where: str, row: dict[str, Any], ok: bool) -> list[str]:
    got, ctx = _number(row.get("prompt_tokens")), _number(row.get("context"))
    if not ok or got is None or ctx is None:
        return []
    allowed = max(PROMPT_SLACK_TOKENS, PROMPT_TOLERANCE * ctx)
    if abs(got - ctx) <= allowed:
        return []
    return [
        f"{where}: prompt_tokens {got:g} is not the cell's context {ctx:g} "
        f"(within {PROMPT_TOLERANCE:.0%}, at least {PROMPT_SLACK_TOKENS} tokens)"
    ]


def plausibility(rows: list[dict[str, Any]]) -> list[str]:
    """Every reason the raw rows are not physically possible (see the module doc), located by line."""
    out = []
    for i, row in enumerate(rows):
        where = f"requests.jsonl line {i + 1}"
        ok = not row.get("error") and bool(row.get("chunk_ms"))
        out += _clocks(where, row) + _tokens(where, row, ok) + _speed(where, row) + _prompt(where, row, ok)
    return out


def _first_sends(key: tuple[int, int], reps: dict[int, list[dict[str, Any]]]) -> list[str]:
    out = []
    for rep, rows in sorted(reps.items()):
        sends = [v for r in rows if (v := _number(r.get("send_ms"))) is not None]
        if sends and not _close(min(sends), 0.0):
            out.append(
                f"cell ctx {key[0]} x{key[1]} repeat {rep}: its first send is at {min(sends):g} ms, not 0 "
                "(send times count from the repeat's first send)"
            )
    return out


def by_cell(rows: list[dict[str, Any]]) -> dict[tuple[int, int], dict[int, list[dict[str, Any]]]]:
    """The raw request rows by cell (context, concurrency), then by repeat index."""
    groups: dict[tuple[int, int], dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[(int(row["context"]), int(row["concurrency"]))][int(row["repeat"])].append(row)
    return groups


def check_cells(bench: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the recomputed cells, every reason the report cannot be verified); no reasons: all clean."""
    opts = bench.get("options") or {}
    want, force = int(opts.get("decode_tokens", 0)), bool(opts.get("force_output", True))
    interval = float(opts.get("read_interval_ms", 0.0))
    groups, reasons, out = by_cell(rows), _row_reasons(rows) + plausibility(rows), []
    cells = bench.get("cells") or []
    if not cells:
        reasons.append("results.json holds no cells")
    for cell in cells:
        key = (int(cell["context"]), int(cell["concurrency"]))
        where = f"cell ctx {key[0]} x{key[1]}"
        reps = groups.pop(key, {})
        if not reps or any(len(v) != key[1] for v in reps.values()):
            reasons.append(f"{where}: requests.jsonl lacks its requests ({key[1]} per repeat)")
            continue
        reasons += _first_sends(key, reps)
        again = _recompute([[timing_of(r) for r in reps[i]] for i in sorted(reps)], cell, want, force)
        bound = _client_bound(cell, interval)
        reasons += _disagreements(where, cell, again)
        reasons += _cleanliness(where, cell | {"_want": want}, again, bound)
        out.append(again | {"context": key[0], "concurrency": key[1]})
    reasons += [f"requests.jsonl has requests of ctx {c} x{n} that no cell reports" for c, n in groups]
    return out, reasons


NO_CERTIFICATE = (
    "no certificate: the report records no cache counters, client load or GPU telemetry per cell "
    "(written before lair recorded them)"
)
"""The note of every row of a report without a certificate (such rows are at most reported-by-report)."""


@dataclass
class Certified:
    """What the certificates say: reasons to refuse the report, notes per cell, and whether the
    report has a certificate at all."""

    reasons: list[str] = field(default_factory=list)
    notes: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    present: bool = True


def _amd(gpus: dict[str, Any]) -> bool:
    """An AMD rig: ``vendor`` "amd" and every GPU named as amd-smi names a catalog card (a fingerprint
    that says "amd" beside NVIDIA names is held to NVIDIA's telemetry, never let off it)."""
    models = gpus.get("models")
    if gpus.get("vendor") != "amd" or not isinstance(models, list) or not models:
        return False
    return all(isinstance(m, str) and is_amd_smi_name(m) for m in models)


def _gpu_count(fp: dict[str, Any] | None) -> int:
    """The GPUs of the fingerprint that lair's bench samples (NVIDIA's, through NVML or nvidia-smi):
    0 on an AMD rig (``vendor`` "amd", read from amd-smi), whose cells then carry no energy figure
    and are never verified (:func:`.bounds.power_reasons`), but are not refused for it."""
    gpus = (fp or {}).get("gpus") or {}
    n = gpus.get("count") if isinstance(gpus, dict) and not _amd(gpus) else None
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else 0


def _cache_reasons(where: str, cell: dict[str, Any], cache: dict[str, Any]) -> list[str]:
    out = []
    counted = cache.get("counter_hit_tokens")
    hits = [m.get("prefix_cache_hits_delta") for m in cell.get("engine_metrics") or []]
    hits = [h for h in hits if h is not None]
    if counted is not None and not _close(counted, sum(hits)):
        out.append(
            f"{where}: certificate counts {counted:g} hit tokens; "
            f"the engine metrics' deltas add to {sum(hits):g}"
        )
    if cache.get("response_cached_tokens") != cell.get("cached_tokens"):
        out.append(
            f"{where}: certificate has {cache.get('response_cached_tokens')!r} cached tokens in the "
            f"responses; the cell has {cell.get('cached_tokens')!r}"
        )
    if not cache.get("cold"):
        seen = max([x for x in (counted, cache.get("response_cached_tokens")) if x is not None], default=0)
        why = "prefix-cache hits" if cache.get("proven_by") else "a cold cache not proven"
        out.append(f"{where}: certificate shows {why} ({seen:g} hit tokens): a warm-cache number")
    return out


def _client_reasons(where: str, client: dict[str, Any]) -> list[str]:
    bound = d.is_client_bound(
        float(client.get("cpu_fraction_max", 0.0)),
        1.0,
        float(client.get("loop_lag_p99_ms_max", 0.0)),
        float(client.get("batched_lag_p99_ms_max", 0.0)),
        float(client.get("read_interval_ms", 0.0)),
    )
    if not (bound or client.get("bound")):
        return []
    load = ", ".join(f"{k} {client[k]:.3g}" for k in _CLIENT_KEYS if isinstance(client.get(k), int | float))
    return [f"{where}: certificate shows a client-bound run (the bench limited the numbers: {load})"]


def _gpu_reasons(where: str, cert: dict[str, Any], gpus: int) -> list[str]:
    g = cert.get("gpu") or {}
    if not gpus:
        return []
    if not g.get("samples"):
        return [f"{where}: the fingerprint names {gpus} GPU(s) but the certificate holds no GPU samples"]
    if not cert.get("energy"):
        return [f"{where}: the fingerprint names {gpus} GPU(s) but the certificate has no energy figure"]
    return []


def _throttle_note(cert: dict[str, Any]) -> list[str]:
    g = cert.get("gpu") or {}
    kinds = [k for k in ("thermal", "power") if g.get(f"{k}_throttled")]
    if not kinds:
        return []
    reasons = ", ".join(str(r) for r in g.get("throttle_reasons") or [])
    return [f"GPU {' and '.join(kinds)} throttling during the cell ({reasons})"]


def _run_reasons(run: dict[str, Any], cells: list[dict[str, Any]], gpus: int) -> list[str]:
    out = []
    if gpus and run.get("telemetry") == "none":
        out.append(
            f"certificate: the fingerprint names {gpus} GPU(s) but the run had no GPU telemetry "
            f"({run.get('telemetry_note') or 'no reason given'})"
        )
    sw = run.get("software") or {}
    missing = [k for k in ("driver", "cuda") if gpus and not sw.get(k)]
    if missing:
        out.append(f"certificate: software.{' and software.'.join(missing)} missing on a rig with GPUs")
    ran = sorted(tuple(p) for p in run.get("cells_in_order") or [])
    if ran != sorted((int(c["context"]), int(c["concurrency"])) for c in cells):
        out.append("certificate: cells_in_order does not list the report's cells")
    return out


def check_certificate(bench: dict[str, Any], fingerprint: dict[str, Any] | None) -> Certified:
    """Every reason the cells' certificates refuse the report, and the notes they put on its rows
    (see the module doc); ``present`` False for a report without any certificate."""
    cells, run = bench.get("cells") or [], bench.get("certificate")
    if not run and not any(c.get("certificate") for c in cells):
        return Certified(present=False)
    out, gpus = Certified(), _gpu_count(fingerprint)
    out.reasons += (
        _run_reasons(run or {}, cells, gpus) if run else ["certificate: the run's certificate is missing"]
    )
    for cell in cells:
        key = (int(cell["context"]), int(cell["concurrency"]))
        where, cert = f"cell ctx {key[0]} x{key[1]}", cell.get("certificate")
        if not cert:
            out.reasons.append(f"{where}: no certificate")
            continue
        out.reasons += _cache_reasons(where, cell, cert.get("cache") or {})
        out.reasons += _client_reasons(where, cert.get("client") or {})
        out.reasons += _gpu_reasons(where, cert, gpus)
        out.notes[key] = _throttle_note(cert)
    return out
