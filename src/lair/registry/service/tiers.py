"""Tiers of speed rows: reported (typed by the author), reported-by-report (an accepted report that
could not be physically checked: its ``note`` says why), verified (an accepted report, recomputed
from its raw timings and held under the roofline of the GPUs its fingerprint names), replicated
(verified by ``MIN_ACCOUNTS`` or more accounts on ``MIN_RIGS`` or more distinct rigs agreeing within
``MAX_SPREAD``).

Verified rows of one revision, context and concurrency form a group (which of its rows are
independent is :func:`lair.replication.evidence`, the rule quality rows share). Each rig counts once (its rows
are reduced to their median decode speed), and so does each report (a report is one rig). The
spread is (max - min) / median of the rigs' decode speeds. A rig fingerprint is what the uploader's
machine said about itself, so rigs alone prove nothing: one account with two fingerprints is still
one uploader, and never replicates itself. With two or more accounts and two or more rigs in a group
there are always two rows from different accounts on different rigs (rows that pairwise share an
account or a rig all share the same one), so the group is replicated when they also agree. Rows
with no submitter count as one unknown account. Retracted rows stay in the list, struck, and never
count.

An account costs nothing, so two of them are no proof of two people. Each row says how many of its
group's accounts were *new* when they filed (``new_accounts``: younger than the registry's
``new_account_days`` or with nothing filed before, :mod:`.standing`), and a replicated row that would
not be replicated without them says so (``new_account_replication``): shown as such, not hidden, since
a new account is also how every honest replicator starts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lair.bench.definitions import percentile
from lair.replication import MIN_ACCOUNTS, MIN_RIGS, evidence

__all__ = ["MAX_SPREAD", "MIN_ACCOUNTS", "MIN_RIGS", "annotate"]

MAX_SPREAD = 0.10
"""Largest relative spread of decode speeds across rigs that still counts as agreeing (10%)."""

_CHECKED = "verified"
"""The only stored tier that counts towards replication (a reported-by-report row was not checked)."""


def _group_stats(rows: list[dict[str, Any]]) -> tuple[int, int, float | None, int]:
    """(rigs, accounts, spread, new accounts) of a group's verified rows with a decode speed."""
    ev = evidence(rows, "decode_tok_s")
    speeds = [percentile(v, 50) for v in ev.per_rig.values()]
    if len(speeds) < 2:
        return ev.rigs, ev.accounts, None, ev.new_accounts
    mid = percentile(speeds, 50)
    return ev.rigs, ev.accounts, (max(speeds) - min(speeds)) / mid if mid > 0 else None, ev.new_accounts


def _links(rid: str, files: list[str]) -> dict[str, str]:
    where = f"/reports/{rid}/files"
    links = {"report": f"/reports/{rid}", "fingerprint": f"{where}/fingerprint.json"}
    links["raw_timings"] = f"{where}/requests.jsonl"
    logs = [f for f in files if f.startswith("logs/")]
    if logs:
        links["logs"] = f"{where}/{logs[0]}"
    return links


def _replicated(rigs: int, accounts: int, spread: float | None) -> bool:
    return rigs >= MIN_RIGS and accounts >= MIN_ACCOUNTS and spread is not None and spread <= MAX_SPREAD


def annotate(rows: list[dict[str, Any]], files: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Each row with ``tier``, ``rigs``, ``accounts``, ``spread``, ``new_accounts`` and
    ``new_account_replication`` (verified rows) and ``links`` (site paths) to its report's page,
    fingerprint, raw timings and engine log; ``files`` lists each report's raw files. A row's
    ``submitted_by`` names its account, ``filer_new`` whether it was new when it filed the row."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["provenance"] == _CHECKED and not r.get("retracted"):
            groups[(r["revision"], r["context"], r["concurrency"])].append(r)
    out = []
    for r in rows:
        none: dict[str, Any] = {"rigs": None, "accounts": None, "spread": None, "new_accounts": None}
        none["new_account_replication"] = False
        if not r.get("report_id") or r["provenance"] == "reported":
            out.append(r | {"tier": r["provenance"]} | none | {"links": {}})
            continue
        links = _links(r["report_id"], files.get(r["report_id"], []))
        if r["provenance"] != _CHECKED:  # reported-by-report: its note says why
            out.append(r | {"tier": r["provenance"]} | none | {"links": links})
            continue
        rigs, accounts, spread, new = _group_stats(
            groups.get((r["revision"], r["context"], r["concurrency"]), [])
        )
        replicated = _replicated(rigs, accounts, spread) and not r.get("retracted")
        tier = "replicated" if replicated else "verified"
        flags = {"new_accounts": new, "new_account_replication": replicated and accounts - new < MIN_ACCOUNTS}
        out.append(
            r | {"tier": tier, "rigs": rigs, "accounts": accounts, "spread": spread, "links": links} | flags
        )
    return out
