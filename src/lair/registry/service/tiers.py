"""Tiers of speed rows: reported (typed by the author), verified (an accepted report from one rig),
replicated (``MIN_RIGS`` or more distinct rigs agree within ``MAX_SPREAD``).

Verified rows of one revision, context and concurrency form a group. Each rig counts once (its rows
are reduced to their median decode speed), and so does each report (a report is one rig). The
spread is (max - min) / median of the rigs' decode speeds. Retracted rows stay in the list, struck,
and never count.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lair.bench.definitions import percentile

__all__ = ["MAX_SPREAD", "MIN_RIGS", "annotate"]

MIN_RIGS = 2
MAX_SPREAD = 0.10
"""Largest relative spread of decode speeds across rigs that still counts as agreeing (10%)."""


def _group_stats(rows: list[dict[str, Any]]) -> tuple[int, float | None]:
    per_rig: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("decode_tok_s") is not None:
            per_rig[r.get("rig") or r.get("report_id") or str(r["id"])].append(float(r["decode_tok_s"]))
    speeds = [percentile(v, 50) for v in per_rig.values()]
    if len(speeds) < 2:
        return len(per_rig), None
    mid = percentile(speeds, 50)
    return len(per_rig), (max(speeds) - min(speeds)) / mid if mid > 0 else None


def _links(rid: str, files: list[str]) -> dict[str, str]:
    where = f"/reports/{rid}/files"
    links = {"report": f"/reports/{rid}", "fingerprint": f"{where}/fingerprint.json"}
    links["raw_timings"] = f"{where}/requests.jsonl"
    logs = [f for f in files if f.startswith("logs/")]
    if logs:
        links["logs"] = f"{where}/{logs[0]}"
    return links


def annotate(rows: list[dict[str, Any]], files: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Each row with ``tier``, ``rigs``, ``spread`` (verified rows) and ``links`` (site paths) to its
    report's page, fingerprint, raw timings and engine log; ``files`` lists each report's raw files."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["provenance"] != "reported" and not r.get("retracted"):
            groups[(r["revision"], r["context"], r["concurrency"])].append(r)
    out = []
    for r in rows:
        if r["provenance"] == "reported" or not r.get("report_id"):
            out.append(r | {"tier": r["provenance"], "rigs": None, "spread": None, "links": {}})
            continue
        rigs, spread = _group_stats(groups.get((r["revision"], r["context"], r["concurrency"]), []))
        replicated = rigs >= MIN_RIGS and spread is not None and spread <= MAX_SPREAD
        tier = "replicated" if replicated and not r.get("retracted") else "verified"
        out.append(
            r
            | {
                "tier": tier,
                "rigs": rigs,
                "spread": spread,
                "links": _links(r["report_id"], files.get(r["report_id"], [])),
            }
        )
    return out
