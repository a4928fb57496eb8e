"""What fits best: candidate models ranked by predicted decode speed among those that fit.

Each candidate is one :func:`lair.fit.summary.fit_summary` (with its ``prediction``) or the reason its
facts could not be read. The order: those that fit, by expected total decode tok/s (fastest first);
then those that fit only with weights offloaded to host RAM (the roofline does not count the offloaded
weights' trips over the host link, so their prediction is optimistic); then those that do not fit, and
those whose facts are unknown. Only the first two groups get a rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["RANK_CONTEXT", "candidate", "rank", "unknown_candidate"]

RANK_CONTEXT = 8192
"""Tokens per sequence a ranking compares at when none is named (the same for every candidate)."""

_GROUP = {"fits": 0, "fits-with-offload": 1, "does-not-fit": 2}
_UNKNOWN = "unknown"


def _why(s: dict[str, Any]) -> str:
    if s["verdict"] == "fits":
        return (
            f"{s['max_concurrency_at_context']} x {s['context']:,} tokens fit the KV budget "
            f"(asked {s['concurrency']})"
        )
    if s["verdict"] == "fits-with-offload":
        gib = (s["offload_bytes"] + s["ssd_offload_bytes"]) / (1 << 30)
        return f"{gib:,.1f} GiB of weights off the GPUs (not counted in the prediction)"
    return str(s["reasons"][-1]) if s["reasons"] else s["verdict"]


def candidate(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One ranked entry from a candidate's fit summary (with its ``prediction``)."""
    p = summary["prediction"]
    eff = p["decode_efficiency"]
    return {
        "name": name,
        "model": summary["model"],
        "verdict": summary["verdict"],
        "why": _why(summary),
        "weight_format": summary["model_facts"]["weight_format"],
        "model_class": p["key"]["model_class"],
        "decode_total_tok_s": p["decode_total_tok_s"],
        "decode_per_stream_tok_s": p["decode_per_stream_tok_s"],
        "decode_roofline_total_tok_s": summary["decode_aggregate_roofline_tok_s"],
        "efficiency": {k: eff[k] for k in ("low", "expected", "high", "basis", "rows", "row_ids")},
        "prediction": p,
    }


def unknown_candidate(name: str, why: str) -> dict[str, Any]:
    """An entry for a candidate whose model facts could not be read."""
    return {"name": name, "model": name, "verdict": _UNKNOWN, "why": why, "prediction": None}


def _order(c: dict[str, Any]) -> tuple[int, float]:
    speed = c["decode_total_tok_s"]["expected"] if c.get("prediction") is not None else 0.0
    return _GROUP.get(c["verdict"], 3), -speed


def rank(candidates: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates in ranking order, each with its ``rank`` (1, 2, ...; None when it does not fit
    or is unknown). Ties keep the order given."""
    ordered = sorted(candidates, key=_order)
    ranked = [c for c in ordered if _GROUP.get(c["verdict"], 3) < 2]
    numbers = {id(c): i for i, c in enumerate(ranked, start=1)}
    return [c | {"rank": numbers.get(id(c))} for c in ordered]
