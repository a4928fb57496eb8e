"""Replication attempts: a report uploaded with ``?replicates=SLUG@REV#ROW`` (``lair reproduce
--submit``) is linked to the row it replicates, with the registry's own verdict.

The upload names a row (or ``#report-<id>``: every row of a report) of one revision; the report must
be of that revision and hold the row's cell (context, concurrency), else it is refused (422, nothing
stored). Once the report is accepted, each target row is compared with the attempt's row of the same
cell by :mod:`lair.replication`'s rule: the target's band comes from its own report's raw timings,
recomputed here by the bench's aggregation (:func:`cell_stats`: never the uploader's summary), and
the attempt's figures are the registry's recomputation of the new report. The attempt is stored
(``replication_attempts``, migration 0010) as ``replicated`` or ``not-reproduced``. Each row of a
recipe's page and JSON then carries its ``row_id`` and its ``replication`` (:func:`with_attempts`).

An attempt *counts* towards its row's status only when it could be evidence (:func:`not_counted`
says why else): another account than the row's, on another rig (its rig fingerprint), and both the
row and the attempt ``verified``. An attempt on one's own row, or from the row's own rig, is the same
measurement again (``lair rebench`` files such attempts to watch its own rig: they are stored and
shown, as "own"); an unverified attempt is the report's word, and the band of an unverified row
was never held to anything (its repeats may span any range). So a forged slow upload never marks
someone's row not-reproduced, and a friend's second account on the same machine never replicates
it. A row with no counted attempt is ``pending``. Each attempt says who filed it, and whether that
account was new when it did (:mod:`.standing`).
"""

from __future__ import annotations

import json
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.errors import Invalid
from lair.registry.db.schema import ReplicationAttempt
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, USERS, visible
from lair.registry.db.version import now
from lair.registry.service.blobs import BlobStore
from lair.registry.service.standing import account_standing, standing_columns
from lair.registry.service.verify import VERIFIED
from lair.replication import NOT_REPRODUCED, REPLICATED, RowRef, compare, parse_row_id, verdict
from lair.report.raw_cells import cell_stats

__all__ = [
    "ATTEMPTS",
    "PENDING",
    "Target",
    "cell_stats",
    "check_targets",
    "has_attempts",
    "not_counted",
    "parse_replicates",
    "record_attempts",
    "rig_label",
    "row_id",
    "target_stats",
    "with_attempts",
]

ATTEMPTS = cast(sa.Table, ReplicationAttempt.__table__)
PENDING = "pending"
"""The replication status of a row no attempt has been uploaded for yet."""
PARAM = "replicates"


def row_id(slug: str, revision: int, measurement_id: int) -> str:
    """The stable id of a row, as shown on its page: ``slug@revision#id``."""
    return str(RowRef(slug, revision, measurement_id))


def parse_replicates(raw: str | None) -> RowRef | None:
    """The ``replicates`` query parameter of an upload (None: absent); a bad one is 422 naming it."""
    if raw is None:
        return None
    try:
        return parse_row_id(raw.strip())
    except ValueError as exc:
        raise Invalid(
            str(exc), location=f"query parameter {PARAM}", reasons=[f"query.{PARAM}: {exc}"]
        ) from None


@dataclass(frozen=True)
class Target:
    """A row an upload replicates: its id, recipe, cell, figures and the report behind it, and who
    filed it from which rig with what tier."""

    id: int
    recipe_id: int
    context: int
    concurrency: int
    figures: dict[str, Any]
    report_id: str | None
    submitted_by: int | None = None
    rig: str | None = None
    provenance: str = ""


OWN_ACCOUNT = "own row: filed by the account that filed the row"
OWN_RIG = "own rig: run on the rig the row was measured on (the same rig fingerprint)"
ROW_UNVERIFIED = "the row is not verified: its band was never physically checked"
ATTEMPT_UNVERIFIED = "the attempt is not verified"


def not_counted(
    row: tuple[int | None, str | None, str], attempt: tuple[int | None, str | None, str]
) -> str | None:
    """Why an attempt does not count towards its row's status (None: it counts); ``row`` and
    ``attempt`` are each (account id, rig fingerprint, tier)."""
    if attempt[0] == row[0]:
        return OWN_ACCOUNT
    if attempt[1] is not None and attempt[1] == row[1]:
        return OWN_RIG
    if row[2] != VERIFIED:
        return ROW_UNVERIFIED
    if attempt[2] != VERIFIED:
        return ATTEMPT_UNVERIFIED
    return None


_FIGURES = ("prefill_tok_s", "decode_tok_s", "decode_tok_s_per_stream", "ttft_ms")


def _bad(why: str) -> Invalid:
    return Invalid(why, location=f"query parameter {PARAM}", reasons=[f"query.{PARAM}: {why}"])


def check_targets(conn: Connection, ref: RowRef) -> list[Target]:
    """The rows ``ref`` names (not retracted, of a visible recipe's revision); 422 when there are none."""
    m = MEASUREMENTS
    stmt = (
        sa.select(m)
        .join(RECIPES, RECIPES.c.id == m.c.recipe_id)
        .join(REVISIONS, REVISIONS.c.id == m.c.revision_id)
        .where(RECIPES.c.slug == ref.slug, REVISIONS.c.number == ref.revision, visible())
        .where(m.c.retracted_at.is_(None))
        .where(m.c.id == ref.row if ref.row is not None else m.c.report_id == ref.report)
        .order_by(m.c.id)
    )
    rows = [
        Target(
            r.id, r.recipe_id, r.context, r.concurrency, {k: getattr(r, k) for k in _FIGURES}, r.report_id,
            r.submitted_by, r.rig_fingerprint, r.provenance,
        )
        for r in conn.execute(stmt)
    ]  # fmt: skip
    if not rows:
        raise _bad(f"no row {ref} (it is not a row of that revision, or it was retracted)")
    return rows


def check_cells(
    ref: RowRef, slug: str, revision: int, cells: list[dict[str, Any]], targets: list[Target]
) -> None:
    """The uploaded report must be of the target's revision and hold each target's cell."""
    if (slug, revision) != (ref.slug, ref.revision):
        raise _bad(f"the report is of {slug}@{revision}; {ref} is a row of {ref.slug}@{ref.revision}")
    have = {(int(c["context"]), int(c["concurrency"])) for c in cells}
    missing = [t for t in targets if (t.context, t.concurrency) not in have]
    if missing:
        t = missing[0]
        raise _bad(
            f"the report has no cell of context {t.context} x{t.concurrency}, which row {t.id} measured"
        )


def target_stats(store: BlobStore, t: Target) -> dict[str, Any] | None:
    """The figures of ``t``'s cell from its report's raw files (None: a row typed by its author)."""
    if t.report_id is None:  # a row typed by its author: the band of its own value
        return None
    where = f"reports/{t.report_id}"
    return cell_stats(
        store.get(f"{where}/results.json"), store.get(f"{where}/requests.jsonl"), t.context, t.concurrency
    )


_CELL_KEYS = {"decode_tok_s": "decode_tok_s_aggregate", "ttft_ms": "ttft_ms_p50"}


def record_attempts(
    conn: Connection,
    targets: list[Target],
    stats: list[dict[str, Any] | None],
    report_id: str,
    rig: str,
    user_id: int | None,
) -> list[dict[str, Any]]:
    """Compare each target (with its figures, ``stats``: :func:`target_stats`, read before the write
    transaction) with the stored report's row of its cell and store the attempts; what the upload's
    answer says of each (row id, outcome, figures)."""
    m = MEASUREMENTS
    mine = {
        (r.context, r.concurrency): r
        for r in conn.execute(sa.select(m).where(m.c.report_id == report_id).order_by(m.c.id))
    }
    out = []
    for t, t_stats in zip(targets, stats, strict=True):
        a = mine[(t.context, t.concurrency)]
        yours = {_CELL_KEYS.get(k, k): getattr(a, k) for k in _FIGURES}
        comps = compare(t.figures, t_stats, yours)
        outcome = verdict(comps)
        decode = next((c.delta_pct for c in comps if c.metric == "decode_tok_s"), None)
        doc = [c.as_dict() for c in comps]
        conn.execute(
            sa.insert(ATTEMPTS).values(
                target_id=t.id, report_id=report_id, attempt_id=a.id, outcome=outcome, delta_pct=decode,
                comparison=json.dumps(doc), rig_fingerprint=rig, submitted_by=user_id, created_at=now(),
            )
        )  # fmt: skip
        why = not_counted((t.submitted_by, t.rig, t.provenance), (user_id, rig, a.provenance))
        out.append(
            {"row": t.id, "attempt_row": a.id, "outcome": outcome, "delta_pct": decode, "figures": doc,
             "counted": why is None, "not_counted": why}
        )  # fmt: skip
    return out


def rig_label(fp: dict[str, Any]) -> str:
    """A rig in a few words, from a report's fingerprint: its GPUs, else its CPU."""
    gpus = fp.get("gpus") or {}
    if isinstance(gpus, dict) and gpus.get("models"):
        return f"{gpus.get('count') or len(gpus['models'])}x {', '.join(map(str, gpus['models']))}"
    cpu = fp.get("cpu") or {}
    return f"CPU {cpu.get('model') or '?'} ({cpu.get('count') or '?'} threads)"


_AT_0010: weakref.WeakSet[Engine] = weakref.WeakSet()


def has_attempts(conn: Connection) -> bool:
    """Whether the database has migration 0010's table (remembered per engine once it has)."""
    if conn.engine in _AT_0010:
        return True
    if sa.inspect(conn).has_table("replication_attempts"):
        _AT_0010.add(conn.engine)
        return True
    return False


_ROW = MEASUREMENTS.alias("row")
_MINE = MEASUREMENTS.alias("mine")


def _attempts(conn: Connection, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    from lair.registry.db.tables import REPORTS

    a = ATTEMPTS
    stmt = (
        sa.select(
            a,
            USERS.c.name.label("by"),
            REPORTS.c.fingerprint,
            *standing_columns(conn, REPORTS),
            _ROW.c.submitted_by.label("row_by"),
            _ROW.c.rig_fingerprint.label("row_rig"),
            _ROW.c.provenance.label("row_tier"),
            _MINE.c.provenance.label("tier"),
            _MINE.c.note,
        )
        .join(REPORTS, REPORTS.c.id == a.c.report_id)
        .join(_ROW, _ROW.c.id == a.c.target_id)
        .join(_MINE, _MINE.c.id == a.c.attempt_id)
        .outerjoin(USERS, USERS.c.id == a.c.submitted_by)
        .where(a.c.target_id.in_(ids))
        .where(
            sa.or_(
                a.c.submitted_by.is_(None),
                a.c.submitted_by.not_in(sa.select(USERS.c.id).where(USERS.c.hidden)),
            )
        )
        .order_by(a.c.target_id, a.c.created_at, a.c.id)
    )
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in conn.execute(stmt):
        why = not_counted((r.row_by, r.row_rig, r.row_tier), (r.submitted_by, r.rig_fingerprint, r.tier))
        if why == ATTEMPT_UNVERIFIED and r.note:
            why = f"{why}: {r.note}"
        out[r.target_id].append(
            {
                "outcome": r.outcome, "delta_pct": r.delta_pct, "rig": rig_label(json.loads(r.fingerprint)),
                "rig_fingerprint": r.rig_fingerprint, "submitted_by": r.by, "report_id": r.report_id,
                "attempt_row": r.attempt_id, "created_at": r.created_at.isoformat(), "tier": r.tier,
                "counted": why is None, "not_counted": why, "account": account_standing(r),
                "figures": json.loads(r.comparison), "links": {"report": f"/reports/{r.report_id}"},
            }
        )  # fmt: skip
    return out


def _status(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's status from its counted attempts that gave a verdict (the others are listed, never
    counted): pending until one did."""
    counted = [x for x in attempts if x["counted"]]
    ok = sum(1 for x in counted if x["outcome"] == REPLICATED)
    bad = sum(1 for x in counted if x["outcome"] == NOT_REPRODUCED)
    status = PENDING if not (ok or bad) else REPLICATED if not bad else NOT_REPRODUCED if not ok else "mixed"
    new = sum(1 for x in counted if x["outcome"] == REPLICATED and x["account"]["new"])
    left = len(attempts) - len(counted)
    return {
        "status": status, "replicated": ok, "not_reproduced": bad, "not_counted": left,
        "replicated_by_new_accounts": new, "attempts": attempts,
    }  # fmt: skip


def with_attempts(conn: Connection, slug: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its ``row_id`` and its ``replication``: the status of its counted attempts
    (``pending``, ``replicated``, ``not-reproduced``, ``mixed``), the counts (``not_counted``: the
    attempts that are not evidence; ``replicated_by_new_accounts``: counted replications filed by an
    account that was new) and every attempt (rig, account and its standing, outcome, decode delta,
    each figure against its band, ``counted`` and why not)."""
    ids = [int(r["id"]) for r in rows]
    found = _attempts(conn, ids) if ids and has_attempts(conn) else {}
    return [
        r
        | {
            "row_id": row_id(slug, int(r["revision"]), int(r["id"])),
            "replication": _status(found.get(int(r["id"]), [])),
        }
        for r in rows
    ]
