"""Warm (agentic) cells: ``lair bench --sessions N --turns T --turn-tokens U``.

Per context C, N sessions share one system prompt of C tokens. Turn 1 of each session sends the
system prompt and U tokens of fresh user text; turn k sends the whole conversation so far (the
previous answers as the server returned them) and U new tokens. The N sessions move in lockstep: turn
k of every session is sent together, as a closed-loop cell of N streams, and the next turn starts
when all have answered (the agent's tool call between turns takes no time here). Prefix hits are the
point of such a cell, not a fault: it is labelled ``cache: warm``, its reuse is declared per request
and measured by the responses and by the engine's counter (:mod:`lair.bench.warm`), and it is kept
apart from the cold cells (``results.json`` ``bench.sessions``, rows in ``sessions.jsonl``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lair.bench import definitions as d
from lair.bench.certificate import output_certificate
from lair.bench.results import BenchOptions
from lair.bench.row_times import ms_after, tokens_rounded
from lair.bench.warm import warm_figures

__all__ = ["SessionPlan", "run_sessions", "sessions_text"]


@dataclass
class SessionPlan:
    """What the warm cells need from the bench session: fresh texts of a size, how to send bodies
    together (timings, client CPU fraction), a chat body of messages, the engine's hit counter (None:
    it has none) and where progress goes."""

    texts: Callable[[int, int], Awaitable[list[str]]]
    send: Callable[[list[dict[str, Any]]], Awaitable[tuple[list[d.RequestTiming], float]]]
    body: Callable[[list[dict[str, str]]], dict[str, Any]]
    counter: Callable[[], Awaitable[tuple[str | None, float | None]]]
    opts: BenchOptions
    say: Callable[[str], None]


def _row(
    ctx: int, session: int, turn: int, r: d.RequestTiming, t0: float, declared: int, check: str
) -> dict[str, Any]:
    ttft = d.ttft_s(r)
    return {
        "load": "session",
        "context": ctx,
        "session": session,
        "turn": turn,
        "send_ms": round((r.send_t - t0) * 1000, 3),
        "ttft_ms": round(ttft * 1000, 3) if ttft is not None else None,
        "done_ms": round((r.done_t - r.send_t) * 1000, 3),
        "decode_tok_s": d.per_stream_decode_tok_s(r),
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
        "declared_reuse_tokens": declared,
        "status": r.status,
        "error": r.error,
        "chunk_ms": ms_after(r.send_t, r.content_times),
        "chunk_tokens": tokens_rounded(r),
        "output_check": check,
    }


async def _cell(plan: SessionPlan, ctx: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    o = plan.opts
    n, turns = int(o.sessions or 1), o.turns
    (system,) = await plan.texts(ctx, 1)
    users = await plan.texts(o.turn_tokens, n * turns)
    talks: list[list[dict[str, str]]] = [[{"role": "system", "content": system}] for _ in range(n)]
    last_prompt = [0] * n
    rows: list[dict[str, Any]] = []
    every: list[d.RequestTiming] = []
    cpu: list[float] = []
    metric, before = await plan.counter()
    t0: float | None = None
    for turn in range(turns):
        for i in range(n):
            talks[i].append({"role": "user", "content": users[i * turns + turn]})
        timings, fraction = await plan.send([plan.body(t) for t in talks])
        cpu.append(fraction)
        t0 = min(r.send_t for r in timings) if t0 is None else t0
        problems = d.answer_problems(timings, o.decode_tokens, o.force_output)
        for i, r in enumerate(timings):
            rows.append(_row(ctx, i, turn, r, t0, last_prompt[i] if turn else 0, problems[i] or ""))
            last_prompt[i] = int(r.prompt_tokens or 0)
            talks[i].append({"role": "assistant", "content": r.text})
        every += timings
    _, after = await plan.counter()
    hits = None if before is None or after is None else after - before
    figs = warm_figures(rows, hits)
    output = output_certificate([every], o.decode_tokens, o.force_output)
    flags = [
        name
        for cond, name in (
            (not output.valid, "invalid-output"),
            (bool(figs["failures"]), "errors"),
            (figs["hit_rates_agree"] is not True, "cache-unconfirmed"),
            (_reused_little(figs), "little-reuse"),
            (max(cpu, default=0.0) > d.CLIENT_CPU_BOUND_FRACTION, "client-bound"),
        )
        if cond
    ]
    cell = {"context": ctx, "sessions": n, "turns": turns, "turn_tokens": o.turn_tokens, "cache": "warm"}
    cell |= figs | {"counter_metric": metric, "client_cpu_fraction": round(max(cpu, default=0.0), 4)}
    return cell | {"flags": flags, "output": output.__dict__}, rows


async def run_sessions(plan: SessionPlan) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The sessions section of the results (one warm cell per context) and its per-request rows."""
    o = plan.opts
    cells, rows = [], []
    for ctx in o.contexts:
        plan.say(f"warm cell: ctx {ctx}, {o.sessions} sessions x {o.turns} turns of {o.turn_tokens} tokens")
        cell, got = await _cell(plan, ctx)
        plan.say("  " + _line(cell))
        cells.append(cell)
        rows += got
    section = {"sessions": o.sessions, "turns": o.turns, "turn_tokens": o.turn_tokens, "cells": cells}
    return section, rows


def _reused_little(figs: dict[str, Any]) -> bool:
    """The engine reused under half of what the cell declared (no prefix cache, or one too small)."""
    measured = figs["counter_hit_rate"] if figs["counter_hit_rate"] is not None else figs["response_hit_rate"]
    return measured is not None and measured < 0.5 * (figs["declared_hit_rate"] or 0.0)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _line(c: dict[str, Any]) -> str:
    ttft = c["ttft_ms"]
    flags = f"  [{', '.join(c['flags'])}]" if c["flags"] else ""
    return (
        f"ctx {c['context']} warm: {c['completed']}/{c['requests']} done, hit rate declared "
        f"{_pct(c['declared_hit_rate'])}, responses {_pct(c['response_hit_rate'])}, engine counter "
        f"{_pct(c['counter_hit_rate'])}, ttft p50 {ttft['p50'] if ttft else '-'} ms{flags}"
    )


def sessions_text(section: dict[str, Any]) -> str:
    """The sessions section as ``lair bench`` prints it: a line per warm cell."""
    return "\n".join(_line(c) for c in section["cells"])
