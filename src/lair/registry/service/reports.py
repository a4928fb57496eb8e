"""Accepting run reports: unpack, verify, store the raw files, record the verified speed rows.

``submit_report`` refuses before anything is written (archive, a secret in a file the checks cover,
verification: 413/422 with every reason; the same raw timings uploaded again: 409). It goes in three
steps, so that a write transaction (SQLite's write lock) spans only the inserts: :func:`check_report`
(unpack, screen, verify, the replicated rows and their reports' blobs fetched: reads only),
:func:`put_blobs` (the raw files into the blob store, no transaction open) and :func:`record_report`
(the rows, in the caller's write transaction). An accepted
report gets a row in ``reports``, its raw files in the blob store under ``reports/<id>/`` (engine logs
with their tokens redacted, :func:`~.secrets.screen_report`; no row without its blobs, no blob without
its row), one measurement per cell (``verified``, or ``reported-by-report`` with why: not physically
checked) and one quality row per evaluated suite (verified or
reported-by-report, :mod:`.rescore`), tied to the revision the report names; the recipe's speed
facets (:mod:`.speeds`) are recomputed for the filters and sorts.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, event
from sqlalchemy.exc import IntegrityError

from lair.errors import Conflict, NotFound
from lair.registry.db.tables import LOAD, MEASUREMENTS, QUALITY, RECIPES, REPORTS, REVISIONS, visible
from lair.registry.db.version import now
from lair.registry.service import attempts
from lair.registry.service.actor import Actor
from lair.registry.service.archive import refuse, unpack
from lair.registry.service.blobs import BlobStore, report_key
from lair.registry.service.certificates import record_certificates
from lair.registry.service.load_rows import load_records
from lair.registry.service.permissions import ensure
from lair.registry.service.scrub import redact_log, screen_report
from lair.registry.service.speeds import refresh_speeds
from lair.registry.service.standing import DEFAULT_NEW_ACCOUNT_DAYS, filing_standing
from lair.registry.service.stored import changed
from lair.registry.service.verify import Found, Verified, verify_report
from lair.replication import RowRef

__all__ = [
    "REPORTS",
    "Checked",
    "check_report",
    "discard_blobs",
    "find_revision",
    "get_report",
    "put_blobs",
    "read_report_file",
    "record_report",
    "submit_report",
]

log = logging.getLogger(__name__)

_KEPT = re.compile(
    r"^(results\.json|requests\.jsonl|load\.jsonl|sessions\.jsonl|fingerprint\.json|report\.md"
    r"|eval_samples\.jsonl"
    r"|[\w.-]+\.recipe\.toml"
    r"|logs/[\w.-]+\.log)$"
)
"""The raw files kept and served (as plain text); report.html is not served from the registry's origin."""
MAX_LOG_NAME_BYTES = 80
"""A log's file name (after ``logs/``), UTF-8: its key percent-encodes each non-ASCII byte in three,
within the 255 bytes a file name may have in the blob store's folders."""


def _log_names(files: dict[str, bytes]) -> None:
    """Refuse (422, naming the member) a log whose name is over :data:`MAX_LOG_NAME_BYTES`."""
    over = sorted(n for n in files if n.startswith("logs/") and len(n[5:].encode()) > MAX_LOG_NAME_BYTES)
    if over:
        limit = f"the limit is {MAX_LOG_NAME_BYTES}"
        reasons = [f"{n[:60]}...: a log's name of {len(n[5:].encode())} bytes (UTF-8); {limit}" for n in over]
        raise refuse("invalid_archive", reasons)


def find_revision(conn: Connection, sha256: str) -> tuple[int, int, Found] | None:
    """(recipe id, revision id, the revision) of the oldest visible revision with this model sha256."""
    stmt = (
        sa.select(
            REVISIONS.c.id, REVISIONS.c.number, REVISIONS.c.toml, RECIPES.c.id.label("rid"), RECIPES.c.slug
        )
        .join(RECIPES, RECIPES.c.id == REVISIONS.c.recipe_id)
        .where(REVISIONS.c.sha256 == sha256, visible())
        .order_by(RECIPES.c.id, REVISIONS.c.number)
        .limit(1)
    )
    r = conn.execute(stmt).first()
    return (int(r.rid), int(r.id), Found(r.slug, int(r.number), r.toml)) if r else None


def _duplicate(conn: Connection, digest: str) -> Conflict | None:
    found = conn.execute(sa.select(REPORTS.c.id).where(REPORTS.c.digest == digest)).scalar()
    if found is None:
        return None
    why = f"duplicate of report {found}: the same raw timings were uploaded already"
    return Conflict(why, code="duplicate", reasons=[why])


def _measurements(
    v: Verified, ids: tuple[int, int], report_id: str, user: int | None
) -> list[dict[str, Any]]:
    base: dict[str, Any] = {"recipe_id": ids[0], "revision_id": ids[1], "submitted_by": user}
    base |= {"rig_fingerprint": v.rig, "report_id": report_id, "created_at": now()}
    keys = ("context", "concurrency", "prefill_tok_s", "decode_tok_s", "decode_tok_s_per_stream", "ttft_ms")
    tier = ("provenance", "note")  # verified, or reported-by-report and why (verify.row_tier)
    return [base | {k: r[k] for k in (*keys, *tier)} for r in v.rows]


def _record(
    conn: Connection,
    v: Verified,
    ids: tuple[int, int],
    report_id: str,
    user_id: int | None,
    kept: list[str],
    then: Callable[[], None] = lambda: None,
    new_account_days: float = DEFAULT_NEW_ACCOUNT_DAYS,
) -> None:
    at = now()
    conn.execute(
        sa.insert(REPORTS).values(
            id=report_id, digest=v.digest, recipe_id=ids[0], revision_id=ids[1], submitted_by=user_id,
            rig_fingerprint=v.rig, fingerprint=json.dumps(v.fingerprint, sort_keys=True),
            files=json.dumps(kept), run_name=v.run_name[:500], created_at=at,
            **filing_standing(conn, user_id, at, new_account_days),
        )
    )  # fmt: skip
    if v.rows:
        conn.execute(sa.insert(MEASUREMENTS), _measurements(v, ids, report_id, user_id))
        record_certificates(conn, report_id, v.rows)
    if v.quality:
        base: dict[str, Any] = {"recipe_id": ids[0], "revision_id": ids[1], "submitted_by": user_id}
        base |= {"rig_fingerprint": v.rig, "report_id": report_id, "created_at": now()}
        conn.execute(sa.insert(QUALITY), [base | q for q in v.quality])
    if v.load:
        conn.execute(sa.insert(LOAD), load_records(v.load, ids, report_id, user_id, v.rig))
    then()  # rows that need the report's rows (replication attempts), before the documents render
    refresh_speeds(conn, ids[0])
    changed(conn, [ids[0]])


def _store(conn: Connection, store: BlobStore, report_id: str, record: Callable[[], None]) -> None:
    """The rows of a report whose blobs are stored (:func:`put_blobs`). Whatever fails (the database
    gone, the same report committed through another process at the same moment), the blobs are
    deleted and the rows go with the transaction, so no row is left without its blobs nor a blob
    without its row; that holds for a failure of the caller's commit too (:func:`_undo_on_rollback`)."""
    armed = _undo_on_rollback(conn, store, report_id)
    try:
        record()
    except BaseException as exc:
        armed.clear()
        _discard(store, report_id)
        if isinstance(exc, IntegrityError):
            why = "duplicate: uploaded already"
            raise Conflict("this report was uploaded already", code="duplicate", reasons=[why]) from None
        raise


def _undo_on_rollback(conn: Connection, store: BlobStore, report_id: str) -> set[bool]:
    """Delete the report's blobs if this transaction rolls back (the caller's commit failed, or the
    caller raised after ``submit_report`` returned). The next transaction on ``conn`` disarms it: the
    commit went through. Returns the flag (non-empty: armed)."""
    armed = {True}

    def rolled_back(_conn: Connection) -> None:
        if armed:
            armed.clear()
            _discard(store, report_id)

    event.listen(conn, "rollback", rolled_back)
    event.listen(conn, "begin", lambda _conn: armed.clear())
    return armed


def discard_blobs(store: BlobStore, checked: Checked) -> None:
    """Delete the blobs :func:`put_blobs` stored for ``checked`` (its transaction never opened)."""
    _discard(store, checked.report_id)


def _discard(store: BlobStore, report_id: str) -> None:
    try:
        store.delete_prefix(f"reports/{report_id}")
    except Exception:  # the store is down too: the blobs stay orphaned; the first error is the one to report
        log.warning("could not delete the blobs of report %s after a failed upload", report_id)


@dataclass(frozen=True)
class Checked:
    """An upload unpacked, screened and verified, nothing written yet (:func:`check_report`)."""

    verified: Verified
    ids: tuple[int, int]
    """The recipe's and the revision's ids."""
    kept: dict[str, bytes]
    """The raw files kept, logs redacted."""
    user_id: int
    targets: list[attempts.Target]
    stats: list[dict[str, Any] | None]
    """Each target's figures from its report's raw files, fetched from the blob store."""
    replicates: RowRef | None = None
    report_id: str = field(default_factory=lambda: secrets.token_hex(8))


def check_report(
    conn: Connection, data: bytes, *, actor: Actor | None, store: BlobStore, replicates: RowRef | None = None
) -> Checked:
    """Everything an upload needs before it writes (``data``: the report folder as ``.tar.gz``):
    ``actor`` signed in with the publish scope, the archive unpacked and screened, the report verified
    against the revision it names and not a duplicate, and with ``replicates`` the rows it replicates
    (:mod:`.attempts`) and their reports' figures, read from ``store``. Reads only: ``conn`` need not
    be a write transaction. A row retracted or a recipe hidden before :func:`record_report` runs does
    not undo the check; the same timings committed meanwhile are a 409 there."""
    user_id = ensure(actor, "upload-report").id
    targets = attempts.check_targets(conn, replicates) if replicates else []
    files = unpack(data)
    _log_names(files)
    kept = screen_report({n: files[n] for n in sorted(files) if _KEPT.fullmatch(n)})  # logs redacted
    ids: dict[str, tuple[int, int]] = {}

    def find(sha: str) -> Found | None:
        hit = find_revision(conn, sha)
        if hit is None:
            return None
        ids["ids"] = hit[:2]
        return hit[2]

    v = verify_report(files, find)
    if (dup := _duplicate(conn, v.digest)) is not None:
        raise dup
    if replicates:
        attempts.check_cells(replicates, v.found.slug, v.found.revision, v.rows, targets)
    stats = [attempts.target_stats(store, t) for t in targets]
    return Checked(v, ids["ids"], kept, user_id, targets, stats, replicates)


def put_blobs(store: BlobStore, checked: Checked) -> None:
    """The report's raw files into ``store``, before its write transaction opens; when one fails,
    those put already are deleted."""
    try:
        for name, data in checked.kept.items():
            store.put(report_key(checked.report_id, name), data)
    except BaseException:
        _discard(store, checked.report_id)
        raise


def record_report(
    conn: Connection,
    store: BlobStore,
    checked: Checked,
    *,
    new_account_days: float = DEFAULT_NEW_ACCOUNT_DAYS,
) -> dict[str, Any]:
    """The rows of a checked report whose blobs :func:`put_blobs` stored (``conn``: the write
    transaction; commit is the caller's, and the blobs are deleted if it rolls back). The report
    keeps its account's standing (:mod:`.standing`: new when younger than ``new_account_days``)."""
    v, c, linked = checked.verified, checked, []

    def link() -> None:
        linked.extend(attempts.record_attempts(conn, c.targets, c.stats, c.report_id, v.rig, c.user_id))

    def record() -> None:
        _record(conn, v, c.ids, c.report_id, c.user_id, list(c.kept), link, new_account_days)

    _store(conn, store, c.report_id, record)
    out = {"ok": True, "id": c.report_id, "slug": v.found.slug, "revision": v.found.revision, "rows": v.rows}
    return out | {"quality": v.quality, "load": v.load} | ({"replication": linked} if c.replicates else {})


def submit_report(
    conn: Connection,
    data: bytes,
    *,
    actor: Actor | None,
    store: BlobStore,
    replicates: RowRef | None = None,
    new_account_days: float = DEFAULT_NEW_ACCOUNT_DAYS,
) -> dict[str, Any]:
    """Verify and store one report on one connection (:func:`check_report`, :func:`put_blobs`,
    :func:`record_report`); commit is the caller's. The web route runs the three apart, the first
    two outside its write transaction."""
    checked = check_report(conn, data, actor=actor, store=store, replicates=replicates)
    put_blobs(store, checked)
    return record_report(conn, store, checked, new_account_days=new_account_days)


def get_report(conn: Connection, report_id: str) -> dict[str, Any]:
    """A stored report's summary: revision, rig, fingerprint and the names of its raw files."""
    r = conn.execute(
        sa.select(REPORTS, RECIPES.c.slug, REVISIONS.c.number)
        .join(RECIPES, RECIPES.c.id == REPORTS.c.recipe_id)
        .join(REVISIONS, REVISIONS.c.id == REPORTS.c.revision_id)
        .where(REPORTS.c.id == report_id)
    ).first()
    if r is None:
        raise NotFound(f"no report {report_id!r}")
    return {
        "ok": True, "id": r.id, "slug": r.slug, "revision": r.number, "rig_fingerprint": r.rig_fingerprint,
        "fingerprint": json.loads(r.fingerprint), "files": json.loads(r.files), "run_name": r.run_name,
        "created_at": r.created_at.isoformat(),
    }  # fmt: skip


def read_report_file(conn: Connection, store: BlobStore, report_id: str, name: str) -> bytes:
    """One raw file of a stored report (only the files it lists); a log is redacted again, for
    reports stored before a token format was known."""
    if name not in get_report(conn, report_id)["files"]:
        raise NotFound(f"report {report_id} has no file {name!r}")
    data = store.get(report_key(report_id, name))
    return redact_log(data) if name.startswith("logs/") else data
