"""A measured speed as a percentage of its ceiling, with an ``implausible`` flag above 100%.

The percentage compares with the usual ceiling (uniform expert routing, see roofline.py); the flag
uses the strict one (the fewest expert bytes any routing could read), so a real result is never flagged
for routing luck. A decode figure at concurrency > 1 is read as the aggregate over the streams (how
recipe pages and lair's bench print it); pass ``decode_is_aggregate=False`` for a per-stream figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lair.fit.fit import Hardware, Layout
from lair.fit.model_facts import ModelFacts
from lair.fit.roofline import decode_bound, prefill_bound

__all__ = ["Measured", "RowRating", "rate_row"]


@dataclass(frozen=True)
class Measured:
    """One measured row: context (prompt tokens), concurrency, and the speeds seen (tok/s)."""

    context: int
    concurrency: int = 1
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None


@dataclass(frozen=True)
class RowRating:
    """A measured row next to its ceilings."""

    context: int
    concurrency: int
    decode_tok_s: float | None
    decode_roofline_tok_s: float | None
    decode_pct: float | None
    prefill_tok_s: float | None
    prefill_roofline_tok_s: float | None
    prefill_pct: float | None
    implausible: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(measured: float | None, ceiling: float | None) -> float | None:
    if measured is None or not ceiling:
        return None
    return round(100.0 * measured / ceiling, 1)


def rate_row(
    facts: ModelFacts,
    hw: Hardware,
    layout: Layout | None,
    row: Measured,
    *,
    decode_is_aggregate: bool = True,
) -> RowRating:
    """``row`` as % of its roofline; ``implausible`` when a speed exceeds the strict ceiling."""
    lay = layout or Layout()
    ctx, conc = max(row.context, 1), max(row.concurrency, 1)
    usual = decode_bound(facts, hw, lay, context=ctx, concurrency=conc)
    strict = decode_bound(facts, hw, lay, context=ctx, concurrency=conc, routing="min")
    pick = "aggregate_tok_s" if decode_is_aggregate and conc > 1 else "per_stream_tok_s"
    ceiling, hard = getattr(usual, pick), getattr(strict, pick)
    pre = prefill_bound(facts, hw, lay, prompt_tokens=ctx).tok_s
    why = []
    if row.decode_tok_s is not None and row.decode_tok_s > hard:
        why.append(f"decode {row.decode_tok_s:,.1f} tok/s > ceiling {hard:,.1f}")
    if row.prefill_tok_s is not None and pre and row.prefill_tok_s > pre:
        why.append(f"prefill {row.prefill_tok_s:,.1f} tok/s > ceiling {pre:,.1f}")
    return RowRating(
        context=ctx,
        concurrency=conc,
        decode_tok_s=row.decode_tok_s,
        decode_roofline_tok_s=round(ceiling, 1),
        decode_pct=_pct(row.decode_tok_s, ceiling),
        prefill_tok_s=row.prefill_tok_s,
        prefill_roofline_tok_s=round(pre, 1) if pre else None,
        prefill_pct=_pct(row.prefill_tok_s, pre),
        implausible=bool(why),
        why="; ".join(why),
    )
