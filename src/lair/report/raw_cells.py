"""One cell of a run report recomputed from its raw per-request timings (``requests.jsonl``) by the
bench's own aggregation, never from the report's summary: what ``lair reproduce`` holds its run to
and the registry holds a replication attempt to.

It lives here, not in the registry, so that a base install (no ``registry`` extra) can reproduce a
row: it needs only the bench and the standard library.

    timing_of(row) -> RequestTiming            one raw request row back as the bench's timing
    cell_stats(results, requests, ctx, conc)   p50/p90/min/max/n of the cell's figures, or None
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import accumulate
from typing import Any

from lair.bench import definitions as d
from lair.bench.aggregate import aggregate_cell

__all__ = ["cell_stats", "timing_of"]


def timing_of(row: dict[str, Any]) -> d.RequestTiming:
    """One raw request row back as the bench's :class:`RequestTiming` (seconds from the repeat's start)."""
    send_ms = float(row["send_ms"])
    times = [(send_ms + float(c)) / 1000 for c in row.get("chunk_ms") or []]
    tokens = [float(t) for t in row.get("chunk_tokens") or []]
    cum = list(accumulate(tokens)) if len(tokens) == len(times) else []
    return d.RequestTiming(
        send_t=send_ms / 1000,
        content_times=times,
        content_cum_tokens=cum,  # type: ignore[arg-type]  # shares keep their fractions
        prompt_tokens=row.get("prompt_tokens"),
        completion_tokens=row.get("completion_tokens"),
        cached_tokens=row.get("cached_tokens"),
        status=int(row.get("status") or 0),
        error=str(row.get("error") or ""),
    )


def cell_stats(results: bytes, requests: bytes, context: int, concurrency: int) -> dict[str, Any] | None:
    """The summaries (``p50``, ``p90``, ``min``, ``max``, ``n``) of one cell of a report, recomputed
    from its raw timings by the bench's aggregation (None: the report lacks the cell)."""
    opts = (json.loads(results).get("bench") or {}).get("options") or {}
    reps: dict[int, list[Any]] = defaultdict(list)
    for line in requests.splitlines():
        if line.strip():
            row = json.loads(line)
            if int(row["context"]) == context and int(row["concurrency"]) == concurrency:
                reps[int(row["repeat"])].append(timing_of(row))
    if not reps:
        return None
    fig = aggregate_cell(
        [reps[i] for i in sorted(reps)],
        [],
        want_tokens=int(opts.get("decode_tokens", 0)),
        force_output=bool(opts.get("force_output", True)),
    )
    return fig.stats()
