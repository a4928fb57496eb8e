"""Open-loop load cells of an uploaded report (``lair bench --rate/--sweep``), recomputed from the raw
per-request rows of ``load.jsonl`` with the client's own functions (:mod:`lair.bench.load`), as the
speed cells are from ``requests.jsonl`` (:mod:`.recompute`).

What the registry checks before it stores a cell:

- the schedule: each row's ``scheduled_ms`` is the arrival process replayed from the section's seed
  (:func:`lair.bench.arrivals.schedule`, seed + step), so the offered rate is the one claimed;
- the clocks: a row's send error is its send minus its schedule; its first chunk, its chunks and
  its end are after its send and in order; a cell's rows are indices 0..n-1 of one rate;
- the figures: achieved and completed rates, output tok/s, TTFT / TPOT / ITL / E2E percentiles,
  failures by kind, over-saturation, the SLO verdict and goodput, recomputed by
  :func:`~lair.bench.load.load_figures`, agree with the cell within rounding (``REL_TOL``); each
  sweep's knee, max goodput and users at the speed by :func:`~lair.bench.load.sweep_summary`.

Any disagreement refuses the report (422, each reason naming its cell). A cell that agrees is stored
with the registry's own figures: ``verified``, or ``reported-by-report`` with the reason when its
answers failed the validity gate (``invalid-output``) or its client was the bottleneck
(``client-bound``). Load cells are shown apart from the speed table and never ranked with it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from lair.bench import definitions as d
from lair.bench.arrivals import schedule
from lair.bench.load import load_figures, sweep_summary
from lair.bench.slo import SloTerm, parse_slo
from lair.errors import ConfigError

__all__ = ["LOAD_FILE", "REL_TOL", "check_load", "same_figure"]

LOAD_FILE = "load.jsonl"
REL_TOL = 2e-3
"""Relative disagreement allowed between a claimed figure and its recomputation (the rows are the
same floats the client computed from, so agreement is exact but for rounding of the claims)."""
_ABS_TOL = 1e-3
_SCHEDULE_TOL_MS = 0.01
"""``scheduled_ms`` is written to the microsecond (3 decimals)."""
_SEND_ERROR_TOL_MS = 0.002
_FIGURES = ("achieved_rate", "completed_rate", "output_tok_s", "goodput_rps")
_PCTS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "send_error_ms")
_EXACT = ("requests", "completed", "failures", "oversaturated", "slo_met")
_NOT_VERIFIED = {
    "invalid-output": "invalid-output: answers failed the validity gate",
    "client-bound": "client-bound: the client's CPU was the bottleneck",
}


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=_ABS_TOL)


def _pcts_close(a: Any, b: Any) -> bool:
    if not a or not b:
        return not a and not b
    return set(a) == set(b) and all(_close(a[k], b[k]) for k in a)


def _disagreements(where: str, cell: dict[str, Any], again: dict[str, Any]) -> list[str]:
    out = []
    for key in _FIGURES:
        if not _close(cell.get(key), again[key]):
            out.append(f"{where}: {key} {cell.get(key)!r} but the rows give {again[key]!r}")
    for key in _PCTS:
        if not _pcts_close(cell.get(key), again[key]):
            out.append(f"{where}: {key} {cell.get(key)!r} but the rows give {again[key]!r}")
    for key in _EXACT:
        if cell.get(key) != again[key]:
            out.append(f"{where}: {key} {cell.get(key)!r} but the rows give {again[key]!r}")
    return out


def _row_reasons(where: str, rows: list[dict[str, Any]], offsets: list[float]) -> list[str]:
    """The schedule replayed and the clocks of each row (module docstring)."""
    out = []
    if [r["index"] for r in rows] != list(range(len(rows))):
        return [f"{where}: load.jsonl rows are not indices 0..{len(rows) - 1} in order"]
    for r, planned in zip(rows, offsets, strict=True):
        at = f"{where} request {r['index']}"
        if abs(r["scheduled_ms"] - planned * 1000) > _SCHEDULE_TOL_MS:
            out.append(
                f"{at}: scheduled_ms {r['scheduled_ms']} but the arrival process gives {planned * 1000:.3f}"
            )
        send, err = r.get("send_ms"), r.get("send_error_ms")
        if send is None:
            continue
        if err is None or abs(send - r["scheduled_ms"] - err) > _SEND_ERROR_TOL_MS:
            out.append(f"{at}: send_error_ms {err!r} is not send_ms - scheduled_ms")
        done, ttft, chunks = r.get("done_ms"), r.get("ttft_ms"), r.get("chunk_ms") or []
        if ttft is not None and (ttft <= 0 or (done is not None and ttft > done)):
            out.append(f"{at}: ttft_ms {ttft} is not within (0, done_ms]")
        if chunks and done is not None and chunks[-1] > done:
            out.append(f"{at}: a chunk at {chunks[-1]} ms after the end ({done} ms)")
        if len(chunks) > max(int(r.get("completion_tokens") or 0), 1):
            out.append(f"{at}: {len(chunks)} chunks for {r.get('completion_tokens')} completion tokens")
    return out


def _tier(flags: list[str]) -> tuple[str, str]:
    why = [text for flag, text in _NOT_VERIFIED.items() if flag in flags]
    return ("reported-by-report", "; ".join(why)) if why else ("verified", "")


def _slo(section: dict[str, Any], reasons: list[str]) -> list[SloTerm]:
    try:
        return parse_slo(",".join(section.get("slo") or [])) if section.get("slo") else []
    except ConfigError as exc:
        reasons.append(f"results.json: bench.load.slo: {exc}")
        return []


def check_load(
    section: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows to store: one per rate cell and one per sweep, every reason to refuse the report)."""
    if not section:
        return [], ["load.jsonl holds requests but results.json has no bench.load"] if rows else []
    reasons: list[str] = []
    slo = _slo(section, reasons)
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(int(r["context"]), int(r["step"]))].append(r)
    out: list[dict[str, Any]] = []
    per_context: dict[int, list[tuple[float, list[dict[str, Any]]]]] = defaultdict(list)
    for cell in section.get("cells") or []:
        key = (int(cell["context"]), int(cell["step"]))
        rate = float(cell["offered_rate"])
        where = f"load cell ctx {key[0]} @ {rate:g}/s"
        got = sorted(groups.pop(key, []), key=lambda r: r["index"])
        if not got or any(r["rate"] != rate for r in got):
            reasons.append(f"{where}: load.jsonl lacks its requests (step {key[1]} at {rate:g}/s)")
            continue
        offsets = schedule(rate, len(got), section.get("arrival", "poisson"), section.get("burstiness", 1.0),
                           int(section.get("seed") or 0) + key[1])  # fmt: skip
        reasons += _row_reasons(where, got, offsets)
        again = load_figures(got, rate, slo)
        reasons += _disagreements(where, cell, again)
        flags = sorted(set(cell.get("flags") or []) | _flags(again, cell))
        tier, note = _tier(flags)
        per_context[key[0]].append((rate, got))
        out.append({"kind": "rate", "context": key[0], "step": key[1], "offered_rate": rate,
                    "cache": cell.get("cache", "cold"), "figures": again, "flags": flags,
                    "provenance": tier, "note": note})  # fmt: skip
    reasons += [f"load.jsonl has requests of ctx {c} step {s} that no load cell reports" for c, s in groups]
    for sw in section.get("sweeps") or []:
        ctx = int(sw["context"])
        where = f"load sweep at ctx {ctx}"
        again = sweep_summary(per_context.get(ctx, []), slo, section.get("user_speed"))
        for part in ("knee", "max_goodput", "users"):
            if not same_figure(sw.get(part), again[part]):
                reasons.append(f"{where}: {part} {sw.get(part)!r} but the cells give {again[part]!r}")
        summary = again | {"stopped": str(sw.get("stopped") or "")}
        out.append({"kind": "sweep", "context": ctx, "step": None, "offered_rate": None, "cache": "cold",
                    "figures": summary, "flags": [], "provenance": "verified", "note": ""})  # fmt: skip
    return out, reasons


def _flags(figures: dict[str, Any], cell: dict[str, Any]) -> set[str]:
    """The flags the rows and the cell's client figure show (a claimed flag is kept; one the rows
    show is added)."""
    flags = set()
    if float(cell.get("client_cpu_fraction") or 0.0) > d.CLIENT_CPU_BOUND_FRACTION:
        flags.add("client-bound")
    if figures["failures"].get("invalid-output"):
        flags.add("invalid-output")
    if any(k != "invalid-output" for k in figures["failures"]):
        flags.add("errors")
    if figures["oversaturated"] is True:
        flags.add("oversaturated")
    return flags


def same_figure(a: Any, b: Any) -> bool:
    """Whether a claimed figure (a number, or a dict of them, nested) is its recomputation within
    rounding; other values must be equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(same_figure(a[k], b[k]) for k in a)
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return _close(a, b)
    return bool(a == b)
