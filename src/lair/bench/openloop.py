"""Open-loop load: rate cells whose requests are sent on a schedule (:mod:`lair.bench.arrivals`)
whatever the server's state, and the saturation sweep that steps the rate up until throughput stops
growing, the SLO breaks, the server over-saturates or the sweep's time or request budget runs out.

Each cell's prompts are built and its schedule drawn before anything is timed; then one thread sends
every request at its time on a connection opened just before (:func:`lair.bench.rawstream.pump_scheduled`)
and reads every stream as the closed-loop cells do. A cell's figures come from its per-request rows
(:mod:`lair.bench.load`), the rows ``requests.jsonl`` keeps.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lair.bench import definitions as d
from lair.bench.arrivals import schedule
from lair.bench.certificate import output_certificate
from lair.bench.client import Endpoint, parse_stream
from lair.bench.load import load_figures, sweep_summary
from lair.bench.rawstream import Sent, pump_scheduled, resolve
from lair.bench.results import BenchOptions
from lair.bench.row_times import ms_after, tokens_rounded
from lair.bench.slo import SloTerm, parse_slo
from lair.errors import BenchError

__all__ = ["LoadPlan", "load_rows", "load_text", "run_load"]

_SWEEP_FACTOR = 2.0
"""Each sweep step offers this many times the previous step's rate."""
_FD_SPARE = 64


@dataclass
class LoadPlan:
    """What the load cells need from the bench session: where, how to build ``n`` request payloads of
    a context, the options and where progress goes."""

    ep: Endpoint
    payloads: Callable[[int, int], Awaitable[list[bytes]]]
    opts: BenchOptions
    say: Callable[[str], None]


def _max_open(want: int) -> int:
    """Raise the soft descriptor limit towards the hard one; at most ``want`` open requests, fewer
    when the limit says so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, want + _FD_SPARE)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(1, min(want, soft - _FD_SPARE))


def _timing(rec: Sent) -> d.RequestTiming:
    if rec.stream is None:
        return d.RequestTiming(send_t=rec.scheduled_t, done_t=rec.scheduled_t, error=rec.error or "not sent")
    st = rec.stream
    r = parse_stream(st.send_t, st.arrival_times(), st.reads)
    if rec.late:
        r.error = r.error or "timed out"
    return r


def load_rows(
    ctx: int, rate: float, step: int, sent: list[Sent], timings: list[d.RequestTiming], opts: BenchOptions
) -> list[dict[str, Any]]:
    """Per-request rows of one rate cell: ms after the cell's first scheduled send (``scheduled_ms``,
    ``send_ms``) or after the request's own send (``ttft_ms``, ``chunk_ms``, ``done_ms``), the send
    error and the requests in flight at the send, and the validity gate's verdict."""
    t0 = sent[0].scheduled_t if sent else 0.0
    problems = d.answer_problems(timings, opts.decode_tokens, opts.force_output)
    rows = []
    for i, (rec, r) in enumerate(zip(sent, timings, strict=True)):
        ttft = d.ttft_s(r)
        was_sent = rec.stream is not None
        rows.append(
            {
                "load": "rate",
                "rate": rate,
                "step": step,
                "context": ctx,
                "index": i,
                "scheduled_ms": round((rec.scheduled_t - t0) * 1000, 3),
                "send_ms": round((r.send_t - t0) * 1000, 3) if was_sent else None,
                "send_error_ms": round((r.send_t - rec.scheduled_t) * 1000, 4) if was_sent else None,
                "in_flight": rec.in_flight,
                "ttft_ms": round(ttft * 1000, 3) if ttft is not None else None,
                "done_ms": round((r.done_t - r.send_t) * 1000, 3) if was_sent else None,
                "decode_tok_s": d.per_stream_decode_tok_s(r),
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
                "cached_tokens": r.cached_tokens,
                "status": r.status,
                "error": r.error,
                "chunk_ms": ms_after(r.send_t, r.content_times),
                "chunk_tokens": tokens_rounded(r),
                "output_check": problems[i] or "",
            }
        )
    return rows


async def _rate_cell(
    plan: LoadPlan, ctx: int, rate: float, step: int, n: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    o = plan.opts
    payloads = await plan.payloads(ctx, n)
    offsets = schedule(rate, n, o.arrival, o.burstiness, (o.seed or 0) + step)
    info = await resolve(plan.ep)
    loop = asyncio.get_running_loop()
    gc.disable()  # no collector pauses while sends are timed
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        sent = await loop.run_in_executor(
            None,
            pump_scheduled,
            info,
            payloads,
            offsets,
            o.request_timeout_s,
            o.read_interval_ms / 1000,
            _max_open(o.max_open),
        )
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        gc.enable()
    timings = [_timing(rec) for rec in sent]
    rows = load_rows(ctx, rate, step, sent, timings, o)
    cell = _cell(ctx, rate, step, rows, timings, o, cpu / wall if wall > 0 else 0.0)
    return cell, rows


def _cell(
    ctx: int,
    rate: float,
    step: int,
    rows: list[dict[str, Any]],
    timings: list[d.RequestTiming],
    o: BenchOptions,
    cpu_fraction: float,
) -> dict[str, Any]:
    slo = parse_slo(o.slo) if o.slo else []
    figs = load_figures(rows, rate, slo)
    output = output_certificate([timings], o.decode_tokens, o.force_output)
    flags = [
        name
        for cond, name in (
            (not output.valid, "invalid-output"),
            (bool(figs["failures"]), "errors"),
            (figs["oversaturated"] is True, "oversaturated"),
            (cpu_fraction > d.CLIENT_CPU_BOUND_FRACTION, "client-bound"),
        )
        if cond
    ]
    return {
        "context": ctx,
        "step": step,
        "arrival": o.arrival,
        "burstiness": o.burstiness,
        "cache": "cold",
        **figs,
        "client_cpu_fraction": round(cpu_fraction, 4),
        "flags": flags,
        "output": output.__dict__,
    }


def _line(c: dict[str, Any]) -> str:
    def p(key: str, q: str = "p99") -> str:
        v = c.get(key)
        return "-" if not v else f"{v[q]:,.1f}"

    rate = c["achieved_rate"]
    flags = f"  [{', '.join(c['flags'])}]" if c["flags"] else ""
    return (
        f"ctx {c['context']} @ {c['offered_rate']:g}/s: sent {rate or 0:,.2f}/s, "
        f"{c['completed']}/{c['requests']} done, {c['output_tok_s'] or 0:,.1f} tok/s, "
        f"ttft p99 {p('ttft_ms')} ms, "
        f"tpot p99 {p('tpot_ms')} ms, send error p99 {p('send_error_ms')} ms{flags}"
    )


def _stop(c: dict[str, Any], prev: dict[str, Any] | None, slo: list[SloTerm]) -> str | None:
    """Why the sweep stops after cell ``c`` (None: it goes on)."""
    if c["oversaturated"] is True:
        return f"over-saturated at {c['offered_rate']:g}/s: requests in flight kept growing"
    if slo and c["slo_met"] is False:
        return f"the SLO broke at {c['offered_rate']:g}/s"
    if prev is not None and prev["output_tok_s"] and c["output_tok_s"] is not None:
        gain = c["output_tok_s"] / prev["output_tok_s"] - 1
        added = c["offered_rate"] / prev["offered_rate"] - 1
        if gain < d.KNEE_EFFICIENCY * added:
            return (
                f"throughput stopped growing at {c['offered_rate']:g}/s ({gain:+.0%} for {added:+.0%} load)"
            )
    return None


async def _sweep(plan: LoadPlan, ctx: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    o = plan.opts
    slo = parse_slo(o.slo) if o.slo else []
    rate = (o.rates or [1.0])[0]
    cells: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    began, used = time.perf_counter(), 0
    for step in range(64):
        n = min(o.rate_requests, o.max_requests - used)
        if n < d.OVERSATURATION_MIN_SENDS:
            return cells, rows, f"the request budget (--max-requests {o.max_requests}) is spent"
        if n / rate > o.max_duration_s - (time.perf_counter() - began):
            return (
                cells,
                rows,
                f"the next step would pass the time budget (--max-duration {o.max_duration_s:g} s)",
            )
        cell, cell_rows = await _rate_cell(plan, ctx, rate, step, n)
        used += n
        cells.append(cell)
        rows += cell_rows
        plan.say("  " + _line(cell))
        why = _stop(cell, cells[-2] if len(cells) > 1 else None, slo)
        if why:
            return cells, rows, why
        rate *= _SWEEP_FACTOR
    return cells, rows, "64 steps"


async def run_load(plan: LoadPlan) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The load section of the results (cells, and with ``sweep`` the stop reason and the summary
    per context) and its per-request rows."""
    o = plan.opts
    if plan.ep.scheme != "http":
        raise BenchError(
            "open-loop rates are measured over plain HTTP only", hint="bench the server's http:// URL"
        )
    slo = parse_slo(o.slo) if o.slo else []
    cells: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    sweeps = []
    for ctx in o.contexts:
        if o.sweep:
            plan.say(f"sweep at ctx {ctx} from {(o.rates or [1.0])[0]:g}/s")
            got, got_rows, why = await _sweep(plan, ctx)
            plan.say(f"  sweep stopped: {why}")
            pairs = [(c["offered_rate"], [r for r in got_rows if r["step"] == c["step"]]) for c in got]
            sweeps.append({"context": ctx, "stopped": why, **sweep_summary(pairs, slo, o.user_speed)})
        else:
            got, got_rows = [], []
            for step, rate in enumerate(o.rates or []):
                cell, cell_rows = await _rate_cell(plan, ctx, rate, step, o.rate_requests)
                plan.say("  " + _line(cell))
                got.append(cell)
                got_rows += cell_rows
        cells += got
        rows += got_rows
    section = {
        "arrival": o.arrival,
        "burstiness": o.burstiness,
        "seed": o.seed or 0,
        "requests_per_rate": o.rate_requests,
        "slo": [t.text() for t in slo],
        "user_speed": o.user_speed,
        "cells": cells,
        "sweeps": sweeps,
    }
    return section, rows


def load_text(section: dict[str, Any]) -> str:
    """The load section as ``lair bench`` prints it: a line per rate cell, then each sweep's
    headline (why it stopped, the knee, the max goodput under the SLO, users at the speed)."""
    lines = [_line(c) for c in section["cells"]]
    for sw in section["sweeps"]:
        lines.append(f"sweep at ctx {sw['context']}: stopped: {sw['stopped']}")
        k = sw["knee"]
        lines.append(
            f"  knee: {k['rate']:g}/s, {k['output_tok_s'] or 0:,.1f} tok/s"
            if k
            else "  knee: none (throughput kept growing)"
        )
        g = sw["max_goodput"]
        if sw["slo"]:
            slo = ",".join(sw["slo"])
            lines.append(
                f"  max goodput ({slo}): {g['goodput_rps']:,.2f} req/s at {g['rate']:g}/s"
                if g
                else f"  max goodput ({slo}): none"
            )
        if section.get("user_speed"):
            u = sw["users"]
            lines.append(
                f"  users at {section['user_speed']:g} tok/s each: {u['users']:,.1f} (at {u['rate']:g}/s)"
                if u
                else f"  users at {section['user_speed']:g} tok/s each: none"
            )
    return "\n".join(lines)
