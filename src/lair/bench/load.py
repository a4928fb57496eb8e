"""Open-loop load: each rate cell's figures, the saturation knee, goodput under an SLO and users at a
speed, all computed from the per-request rows of ``requests.jsonl`` (:func:`load_rows` writes them):
the one computation the report runs and the registry can run again on an uploaded report.

Per request (ms): TTFT (send to the first content chunk), TPOT (first to last content chunk over the
tokens after the first chunk: 1000 / the per-stream decode rate), ITL (each gap between content
chunks over the tokens of the later chunk; with ``read_interval_ms`` > 0 the chunks of one tick
share a time, so ITL is exact only with ``--read-interval-ms 0``), E2E (send to the end of the
response) and the send error (actual send minus scheduled send, monotonic clock). The rest of the
definitions are in :mod:`lair.bench.definitions` (over-saturation, knee, users).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lair.bench import definitions as d
from lair.bench.slo import SloTerm

__all__ = [
    "PERCENTILES",
    "cell_meets",
    "failure_kind",
    "goodput",
    "knee",
    "load_figures",
    "request_metrics",
    "sweep_summary",
    "users_at",
]

PERCENTILES = (50.0, 90.0, 99.0)


def failure_kind(row: dict[str, Any]) -> str:
    """``""`` for a completed request with a valid answer, else its kind: ``timeout``,
    ``client-limit``, ``connect``, ``http-4xx``, ``http-5xx``, ``no-response``, ``stream-error``,
    ``no-content``, ``invalid-output``."""
    err, status = str(row.get("error") or ""), int(row.get("status") or 0)
    if err.startswith("timed out"):
        return "timeout"
    if err.startswith("client limit"):
        return "client-limit"
    if err.startswith("connect"):
        return "connect"
    if status >= 400:
        return f"http-{status // 100}xx"
    if status == 0:
        return "no-response"
    if err:
        return "stream-error"
    if row.get("ttft_ms") is None:
        return "no-content"
    return "invalid-output" if row.get("output_check") else ""


def _itl(row: dict[str, Any]) -> list[float]:
    times, tokens = row.get("chunk_ms") or [], row.get("chunk_tokens") or []
    return [
        (times[k] - times[k - 1]) / tokens[k] for k in range(1, min(len(times), len(tokens))) if tokens[k] > 0
    ]


def request_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """One row's ttft, tpot, e2e, send_error (ms, None where unknown) and itl (list of ms)."""
    rate = row.get("decode_tok_s")
    return {
        "ttft": row.get("ttft_ms"),
        "tpot": 1000.0 / rate if rate else None,
        "e2e": row.get("done_ms"),
        "send_error": row.get("send_error_ms"),
        "itl": _itl(row),
    }


def _pcts(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> dict[str, float] | None:
    if not values:
        return None
    return {f"p{q:g}": round(d.percentile(values, q), 4) for q in qs}


def _samples(rows: Sequence[dict[str, Any]], metric: str) -> list[float]:
    out: list[float] = []
    for r in rows:
        v = request_metrics(r)[metric]
        if metric == "itl":
            out += v
        elif v is not None:
            out.append(float(v))
    return out


def _span_s(rows: Sequence[dict[str, Any]]) -> float:
    """First send to the last end of a response, in seconds."""
    sent = [r for r in rows if r.get("send_ms") is not None]
    if not sent:
        return 0.0
    end = max(float(r["send_ms"]) + float(r.get("done_ms") or 0.0) for r in sent)
    return (end - min(float(r["send_ms"]) for r in sent)) / 1000


def _met(row: dict[str, Any], slo: Sequence[SloTerm]) -> bool:
    m = request_metrics(row)
    for t in slo:
        v = m[t.metric]
        vals = v if isinstance(v, list) else ([] if v is None else [v])
        if t.metric != "itl" and not vals:
            return False
        if not all(t.holds(x) for x in vals):
            return False
    return True


def goodput(rows: Sequence[dict[str, Any]], slo: Sequence[SloTerm]) -> float | None:
    """Completed requests meeting every term's bound on their own figures, per second of the cell."""
    span = _span_s(rows)
    if span <= 0:
        return None
    return sum(1 for r in rows if not failure_kind(r) and _met(r, slo)) / span


def cell_meets(rows: Sequence[dict[str, Any]], slo: Sequence[SloTerm]) -> bool:
    """Every term holds at its percentile over the cell's completed requests (and none failed)."""
    done = [r for r in rows if not failure_kind(r)]
    if not done or len(done) < len(rows):
        return False
    for t in slo:
        xs = _samples(done, t.metric)
        if not xs or not t.holds(d.percentile(xs, t.q)):
            return False
    return True


def load_figures(rows: Sequence[dict[str, Any]], rate: float, slo: Sequence[SloTerm] = ()) -> dict[str, Any]:
    """The figures of one open-loop cell (its rows, in send order) at offered ``rate`` per second."""
    sent = sorted((r for r in rows if r.get("send_ms") is not None), key=lambda r: r["send_ms"])
    done = [r for r in rows if not failure_kind(r)]
    span = _span_s(rows)
    send_span = (sent[-1]["send_ms"] - sent[0]["send_ms"]) / 1000 if len(sent) > 1 else 0.0
    kinds: dict[str, int] = {}
    for r in rows:
        if k := failure_kind(r):
            kinds[k] = kinds.get(k, 0) + 1
    out_tokens = sum(int(r.get("completion_tokens") or 0) for r in done)
    errors = _samples(sent, "send_error")
    in_flight = [int(r.get("in_flight") or 0) for r in sent]
    over = d.is_oversaturated([r["send_ms"] / 1000 for r in sent], in_flight, rate)
    return {
        "offered_rate": rate,
        "requests": len(rows),
        "completed": len(done),
        "achieved_rate": (len(sent) - 1) / send_span if send_span > 0 else None,
        "completed_rate": len(done) / span if span > 0 else None,
        "output_tok_s": out_tokens / span if span > 0 else None,
        "duration_s": round(span, 6),
        **{f"{m}_ms": _pcts(_samples(done, m)) for m in ("ttft", "tpot", "itl", "e2e")},
        "send_error_ms": {**(_pcts(errors, (50.0, 99.0)) or {}), "max": max(errors)} if errors else None,
        "in_flight": {**(_pcts(in_flight, (50.0, 99.0)) or {}), "max": max(in_flight)} if in_flight else None,
        "failures": kinds,
        "oversaturated": over,
        "slo_met": cell_meets(rows, slo) if slo else None,
        "goodput_rps": goodput(rows, slo) if slo else None,
    }


def _mean_concurrency(rows: Sequence[dict[str, Any]]) -> float | None:
    """Little's law: the completed requests' summed time in the system over the cell's span."""
    span = _span_s(rows)
    busy = sum((r.get("done_ms") or 0.0) for r in rows if not failure_kind(r)) / 1000
    return busy / span if span > 0 else None


def users_at(
    cells: Sequence[tuple[float, Sequence[dict[str, Any]]]], speed: float, slo: Sequence[SloTerm] = ()
) -> dict[str, Any] | None:
    """The most users any cell held at ``speed`` tokens per second each (``cells``: (rate, rows)),
    with the cell's rate; None when no cell held one."""
    best: dict[str, Any] | None = None
    for rate, rows in cells:
        done = [r for r in rows if not failure_kind(r)]
        tpot = _samples(done, "tpot")
        if not tpot or d.percentile(tpot, d.USER_SPEED_PERCENTILE) > 1000.0 / speed:
            continue
        if slo and not cell_meets(rows, slo):
            continue
        users = _mean_concurrency(rows)
        if users is not None and (best is None or users > best["users"]):
            best = {"users": round(users, 3), "rate": rate, "speed_tok_s": speed}
    return best


def knee(points: Sequence[tuple[float, float | None]]) -> int | None:
    """Index of the knee among (offered rate, throughput) points in rising rate: the last point
    before the first step that added load but little throughput; None when throughput kept growing."""
    for i in range(1, len(points)):
        (r0, t0), (r1, t1) = points[i - 1], points[i]
        if t0 is None or t1 is None or r1 <= r0 or t0 <= 0:
            continue
        if t1 / t0 - 1 < d.KNEE_EFFICIENCY * (r1 / r0 - 1):
            return i - 1
    return None


def sweep_summary(
    cells: Sequence[tuple[float, Sequence[dict[str, Any]]]],
    slo: Sequence[SloTerm] = (),
    speed: float | None = None,
) -> dict[str, Any]:
    """The headline of a sweep: its knee, the max goodput under the SLO and the users at ``speed``."""
    figs = [load_figures(rows, rate, slo) for rate, rows in cells]
    k = knee([(f["offered_rate"], f["output_tok_s"]) for f in figs])
    good = [(f["goodput_rps"], f["offered_rate"]) for f in figs if f["goodput_rps"] is not None]
    best = max(good) if good else None
    return {
        "knee": None
        if k is None
        else {
            "rate": figs[k]["offered_rate"],
            "output_tok_s": figs[k]["output_tok_s"],
            "completed_rate": figs[k]["completed_rate"],
        },
        "slo": [t.text() for t in slo],
        "max_goodput": None if best is None else {"goodput_rps": round(best[0], 4), "rate": best[1]},
        "users": users_at(cells, speed, slo) if speed else None,
    }
