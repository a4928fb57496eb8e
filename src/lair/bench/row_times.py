"""How a per-request row writes its times and tokens, shared by the closed-loop rows
(:func:`lair.bench.runner.request_rows`) and the open-loop ones (:func:`lair.bench.openloop.load_rows`)."""

from __future__ import annotations

from lair.bench import definitions as d

__all__ = ["ms_after", "tokens_rounded"]


def ms_after(t0: float, times: list[float]) -> list[float]:
    """Times as ms after ``t0``, to the microsecond."""
    ms0 = t0 * 1000
    return [round(t * 1000 - ms0, 3) for t in times]


def tokens_rounded(r: d.RequestTiming) -> list[float]:
    """Tokens per chunk (whole numbers as they are, shares to 3 decimals)."""
    tokens = d.chunk_tokens(r)
    if len(r.content_cum_tokens) == len(tokens):
        return tokens  # from continuous usage: whole numbers already
    return [round(x, 3) for x in tokens]
