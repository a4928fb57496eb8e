"""Reads: a recipe with its latest revision, its measurements and its history; one revision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import NotFound
from lair.recipe import Recipe
from lair.registry.db.schema import Report
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, USERS, VERSION, visible
from lair.registry.service.attempts import with_attempts
from lair.registry.service.canonical import revision_model
from lair.registry.service.certificates import with_certificates
from lair.registry.service.git_sources import revision_source
from lair.registry.service.load_rows import load_view
from lair.registry.service.quality_rows import quality_rows
from lair.registry.service.speeds import shown_submitter
from lair.registry.service.standing import has_standings

__all__ = ["RecipeRecord", "RevisionInfo", "get_recipe", "get_revision", "version"]


@dataclass(frozen=True)
class RevisionInfo:
    number: int
    sha256: str
    notes: str
    author: str
    created_at: datetime
    toml: str = ""


@dataclass
class RecipeRecord:
    """Everything a recipe page and its JSON twin show."""

    id: int
    slug: str
    owner: str
    owner_link: str | None
    upstream: str | None
    upstream_revision: int | None
    votes: int
    created_at: datetime
    updated_at: datetime
    revision: RevisionInfo
    recipe: Recipe
    upstream_latest: int | None = None
    history: list[RevisionInfo] = field(default_factory=list)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)
    load: list[dict[str, Any]] = field(default_factory=list)
    """Open-loop load results per report (:func:`.load_rows.load_view`)."""
    source: dict[str, Any] | None = None
    """Where the revision came from when ``lair registry import-git`` loaded it (:mod:`.git_sources`)."""
    rigs: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    """The GPUs (model, count) of each report behind a verified row, from its fingerprint."""


def version(conn: Connection) -> int:
    return int(conn.execute(sa.select(VERSION.c.n).where(VERSION.c.id == 1)).scalar_one())


# The statements of a read, built once at import with bound parameters (building them per call,
# the alias's columns above all, was a quarter of an uncached read).
_UP = RECIPES.alias("up")
_RECIPE_ROW = (
    sa.select(
        RECIPES,
        USERS.c.name.label("owner"),
        USERS.c.link.label("owner_link"),
        _UP.c.slug.label("up_slug"),
        _UP.c.latest_revision.label("up_latest"),
    )
    .join(USERS, USERS.c.id == RECIPES.c.owner_id)
    .outerjoin(_UP, _UP.c.id == RECIPES.c.upstream_id)
    .where(RECIPES.c.slug == sa.bindparam("slug"), visible())
)
_HISTORY = (
    sa.select(REVISIONS.c.number, REVISIONS.c.sha256, REVISIONS.c.notes, REVISIONS.c.created_at, USERS.c.name)
    .join(USERS, USERS.c.id == REVISIONS.c.author_id)
    .where(REVISIONS.c.recipe_id == sa.bindparam("rid"))
    .order_by(REVISIONS.c.number.desc())
)
_REPORTS = cast(sa.Table, Report.__table__)


def _measurements_sql(filer_new: sa.ColumnElement[Any]) -> sa.Select[Any]:
    return (
        sa.select(
            MEASUREMENTS,
            REVISIONS.c.number.label("revision"),
            USERS.c.name.label("submitted_by_name"),
            filer_new,
        )
        .join(REVISIONS, REVISIONS.c.id == MEASUREMENTS.c.revision_id)
        .outerjoin(USERS, USERS.c.id == MEASUREMENTS.c.submitted_by)
        .outerjoin(_REPORTS, _REPORTS.c.id == MEASUREMENTS.c.report_id)
        .where(MEASUREMENTS.c.recipe_id == sa.bindparam("rid"), shown_submitter(MEASUREMENTS.c.submitted_by))
        .where(sa.or_(MEASUREMENTS.c.provenance != "reported", REVISIONS.c.number == sa.bindparam("number")))
        .order_by(MEASUREMENTS.c.context, MEASUREMENTS.c.concurrency, MEASUREMENTS.c.id)
    )


_MEASUREMENTS = _measurements_sql(_REPORTS.c.filer_new)
_MEASUREMENTS_0015 = _measurements_sql(sa.null().label("filer_new"))  # a database before migration 0016
_REVISION = (
    sa.select(REVISIONS, USERS.c.name)
    .join(USERS, USERS.c.id == REVISIONS.c.author_id)
    .where(REVISIONS.c.recipe_id == sa.bindparam("rid"), REVISIONS.c.number == sa.bindparam("number"))
)


def _recipe_row(conn: Connection, slug: str) -> Any:
    row = conn.execute(_RECIPE_ROW, {"slug": slug}).first()
    if row is None:
        raise NotFound(f"no recipe {slug!r}", hint="search with /api/v1/recipes?q=...")
    return row


def _history(conn: Connection, recipe_id: int) -> list[RevisionInfo]:
    rows = conn.execute(_HISTORY, {"rid": recipe_id})
    return [RevisionInfo(r.number, r.sha256, r.notes, r.name, r.created_at) for r in rows]


def _measurements(conn: Connection, recipe_id: int, revision_number: int) -> list[dict[str, Any]]:
    from lair.registry.service.report_files import report_files
    from lair.registry.service.tiers import annotate

    stmt = _MEASUREMENTS if has_standings(conn) else _MEASUREMENTS_0015
    rows = [_measurement(r) for r in conn.execute(stmt, {"rid": recipe_id, "number": revision_number})]
    return annotate(rows, report_files(conn, _report_ids(rows)))


def _report_ids(rows: list[dict[str, Any]]) -> set[str]:
    return {r["report_id"] for r in rows if r["report_id"]}


def _rigs(conn: Connection, rows: list[dict[str, Any]]) -> dict[str, tuple[str, int] | None]:
    from lair.registry.service.report_files import report_gpus

    return report_gpus(conn, _report_ids(rows))


def _measurement(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "revision": r.revision,
        "context": r.context,
        "concurrency": r.concurrency,
        "prefill_tok_s": r.prefill_tok_s,
        "decode_tok_s": r.decode_tok_s,
        "decode_tok_s_per_stream": r.decode_tok_s_per_stream,
        "ttft_ms": r.ttft_ms,
        "provenance": r.provenance,
        "note": r.note,
        "submitted_by": r.submitted_by_name,
        "created_at": r.created_at.isoformat(),
        "retracted": r.retracted_at is not None,
        "retracted_reason": r.retracted_reason,
        "report_id": r.report_id,
        "rig": r.rig_fingerprint,
        "filer_new": r.filer_new,
    }


def _revision(conn: Connection, recipe_id: int, number: int) -> RevisionInfo:
    r = conn.execute(_REVISION, {"rid": recipe_id, "number": number}).first()
    if r is None:
        raise NotFound(f"no revision {number}", hint="see the recipe's revision history")
    return RevisionInfo(r.number, r.sha256, r.notes, r.name, r.created_at, r.toml)


def get_recipe(conn: Connection, slug: str, revision: int | None = None) -> RecipeRecord:
    """The recipe ``slug`` at its latest revision (or at ``revision``)."""
    row = _recipe_row(conn, slug)
    rev = _revision(conn, row.id, revision or row.latest_revision)
    rows = with_attempts(conn, row.slug, _measurements(conn, row.id, rev.number))  # row ids, replications
    rows = with_certificates(conn, rows)  # each row's certificate and energy figures
    return RecipeRecord(
        id=row.id,
        slug=row.slug,
        owner=row.owner,
        owner_link=row.owner_link,
        upstream=row.up_slug,
        upstream_revision=row.upstream_revision,
        upstream_latest=row.up_latest,
        votes=row.votes,
        created_at=row.created_at,
        updated_at=row.updated_at,
        revision=rev,
        recipe=revision_model(rev.sha256, rev.toml)[0],
        history=_history(conn, row.id),
        measurements=rows,
        rigs=_rigs(conn, rows),
        quality=quality_rows(conn, row.id, rev.number),
        load=load_view(conn, row.id),
        source=revision_source(conn, row.id, rev.number),
    )


def get_revision(conn: Connection, slug: str, number: int) -> RecipeRecord:
    return get_recipe(conn, slug, number)
