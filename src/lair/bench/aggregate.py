"""One cell's figures from its requests' timings: the single computation the bench runs on what it
measured and the registry runs again on the raw timings a report uploads (``requests.jsonl``), so a
verified number is recomputed by the same code that produced it.

Headline numbers are p50s over the cell's samples (:mod:`lair.bench.definitions` says what each
sample is); the summaries keep p90, min, max and n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lair.bench import definitions as d

__all__ = ["CellFigures", "aggregate_cell"]


def _median_int(values: Sequence[int | None]) -> int | None:
    xs = [v for v in values if v is not None]
    return round(d.percentile(xs, 50)) if xs else None


def _p(sm: d.Summary | None, key: str = "p50") -> float | None:
    return getattr(sm, key) if sm else None


@dataclass(frozen=True)
class CellFigures:
    """What a cell's timings say, before any judgement of the run (client load, flags)."""

    repeats: int
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_ms: d.Summary | None
    prefill_tok_s: d.Summary | None
    decode_tok_s_per_stream: d.Summary | None
    decode_tok_s_aggregate: d.Summary | None
    cached_tokens: int | None
    """Sum of the responses' ``cached_tokens``; None when no response reported it (not "0 cached")."""
    cache_hit: bool
    cold_proven: bool
    """An engine hit counter or a response's ``cached_tokens`` was there to see a cache hit."""
    output_length_ok: bool
    errors: int
    usage_missing: bool
    """Some successful response carried no ``completion_tokens``."""

    def headline(self) -> dict[str, Any]:
        """The cell's headline numbers, keyed as in ``results.json``."""
        return {
            "repeats": self.repeats,
            "prompt_tokens": self.prompt_tokens,
            "ttft_ms_p50": _p(self.ttft_ms),
            "ttft_ms_p90": _p(self.ttft_ms, "p90"),
            "prefill_tok_s": _p(self.prefill_tok_s),
            "decode_tok_s_per_stream": _p(self.decode_tok_s_per_stream),
            "decode_tok_s_aggregate": _p(self.decode_tok_s_aggregate),
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_hit": self.cache_hit,
            "output_length_ok": self.output_length_ok,
            "errors": self.errors,
        }

    def stats(self) -> dict[str, dict[str, float] | None]:
        """The summaries as ``results.json`` keeps them under ``stats``."""
        pairs = (
            ("ttft_ms", self.ttft_ms),
            ("prefill_tok_s", self.prefill_tok_s),
            ("decode_tok_s_per_stream", self.decode_tok_s_per_stream),
            ("decode_tok_s_aggregate", self.decode_tok_s_aggregate),
        )
        return {k: sm.as_dict() if sm else None for k, sm in pairs}


def aggregate_cell(
    reps: Sequence[Sequence[d.RequestTiming]],
    hit_deltas: Sequence[float | None],
    *,
    want_tokens: int,
    force_output: bool,
) -> CellFigures:
    """The figures of one cell: ``reps`` its repeats' request timings, ``hit_deltas`` each repeat's
    prefix-cache hit counter delta (None: the engine has no counter), ``want_tokens`` the output
    length asked for (checked when ``force_output``)."""
    rs = [r for rep in reps for r in rep]
    ok = [r for r in rs if r.ok]
    counted = [h for h in hit_deltas if h is not None]
    reported = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    return CellFigures(
        repeats=len(reps),
        prompt_tokens=_median_int([r.prompt_tokens for r in ok]),
        completion_tokens=_median_int([r.completion_tokens for r in ok]),
        ttft_ms=d.summarize([t * 1000 if (t := d.ttft_s(r)) is not None else None for r in ok]),
        prefill_tok_s=d.summarize([d.prefill_tok_s([r for r in rep if r.ok]) for rep in reps]),
        decode_tok_s_per_stream=d.summarize([d.per_stream_decode_tok_s(r) for r in ok]),
        decode_tok_s_aggregate=d.summarize(
            [d.aggregate_decode_tok_s([r for r in rep if r.ok]) for rep in reps]
        ),
        cached_tokens=sum(reported) if reported else None,
        cache_hit=d.is_cache_hit([r.cached_tokens for r in ok], sum(counted)),
        cold_proven=bool(counted) or bool(reported),
        output_length_ok=not force_output or all(r.completion_tokens == want_tokens for r in ok),
        errors=len(rs) - len(ok),
        usage_missing=any(r.completion_tokens is None for r in ok),
    )
