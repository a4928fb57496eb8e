"""The figures of a warm (agentic) cell from its per-request rows (``sessions.jsonl``): the one
computation the bench runs and a registry runs again on an uploaded report.

A warm cell is N multi-turn sessions side by side (:mod:`lair.bench.sessions`): turn 1 is the shared
system prompt and fresh user text, each later turn appends the previous answer and new user text, so
every prompt but the first of a session starts with the whole previous prompt. What the cell
*declares* reusable is that: per request, the previous turn's prompt tokens (0 for a first turn).
What was *measured* reused comes from two independent places: the ``cached_tokens`` the responses
report, and the engine's own prefix-cache hit counter over the cell (vLLM's
``prefix_cache_hits_total``, SGLang's ``cached_tokens_total``; llama.cpp has none). Hit rates are
over the cell's prompt tokens. The two measurements agree when they differ by at most
``HIT_RATE_AGREEMENT`` of the prompt tokens; a cell whose responses and counter disagree, or that has
neither, is flagged ``cache-unconfirmed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lair.bench.definitions import percentile
from lair.bench.load import PERCENTILES, failure_kind, request_metrics

__all__ = ["HIT_RATE_AGREEMENT", "warm_figures"]

HIT_RATE_AGREEMENT = 0.05
"""Largest gap between the responses' and the counter's hit rates (a share of the prompt tokens)
that still counts as the same measurement: engines count hits in whole KV blocks (vLLM: 16 tokens)
while a response may report the exact prefix, a few tokens per request apart."""


def _pcts(values: Sequence[float]) -> dict[str, float] | None:
    return {f"p{q:g}": round(percentile(values, q), 4) for q in PERCENTILES} if values else None


def _rate(part: float | None, whole: int) -> float | None:
    return None if part is None or whole <= 0 else round(part / whole, 6)


def warm_figures(rows: Sequence[dict[str, Any]], counter_hits: float | None) -> dict[str, Any]:
    """One warm cell's figures from its rows (any order) and the engine counter's hit tokens over the
    cell (None: the engine has no counter)."""
    done = [r for r in rows if not failure_kind(r)]
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in rows)
    declared = sum(int(r.get("declared_reuse_tokens") or 0) for r in rows)
    cached = [r.get("cached_tokens") for r in rows]
    responses = None if any(c is None for c in cached) or not rows else sum(int(c or 0) for c in cached)
    by_turn: dict[str, Any] = {}
    for turn in sorted({int(r["turn"]) for r in done}):
        ttft = [m for r in done if int(r["turn"]) == turn and (m := request_metrics(r)["ttft"]) is not None]
        by_turn[str(turn)] = _pcts(ttft)
    kinds: dict[str, int] = {}
    for r in rows:
        if k := failure_kind(r):
            kinds[k] = kinds.get(k, 0) + 1
    hit_responses, hit_counter = _rate(responses, prompt), _rate(counter_hits, prompt)
    agree = (
        None
        if hit_responses is None or hit_counter is None
        else abs(hit_responses - hit_counter) <= HIT_RATE_AGREEMENT
    )
    return {
        "requests": len(rows),
        "completed": len(done),
        "prompt_tokens": prompt,
        "declared_reuse_tokens": declared,
        "response_cached_tokens": responses,
        "counter_hit_tokens": counter_hits,
        "declared_hit_rate": _rate(declared, prompt),
        "response_hit_rate": hit_responses,
        "counter_hit_rate": hit_counter,
        "hit_rates_agree": agree,
        "ttft_ms": _pcts([m for r in done if (m := request_metrics(r)["ttft"]) is not None]),
        "ttft_ms_by_turn": by_turn,
        "tpot_ms": _pcts([m for r in done if (m := request_metrics(r)["tpot"]) is not None]),
        "failures": kinds,
    }
