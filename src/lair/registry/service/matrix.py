"""What the report-backed rows add up to: a matrix of engine version x GPU x driver, per recipe and
per model, and the speed history across engine versions with regressions flagged.

The rows are the non-retracted speed rows from accepted reports (shown submitters only) whose tier is
``verified`` or ``replicated`` (:mod:`.tiers`); ``unchecked=True`` adds ``reported-by-report`` rows (a
CPU-only rig has no roofline, so its rows are never verified), each cell saying its tiers. The engine
(name and version), the GPUs and the driver come from each report's fingerprint (the CPU model on a
CPU-only rig, driver ``—``).

One (context, concurrency) pair is shown at a time (default: the pair with the most rows). A cell
is the median decode and prefill of its rows, their count, the latest date, and ``pass`` or
``fail``: ``fail`` when one of its rows is a verified replication attempt that did not reproduce its
row (``failed_by`` names the account that filed it, whether it was new then, and the row).

History: per GPU, the median decode at each engine version (in version order); a version whose
median is more than :data:`REGRESSION` below the previous version's is flagged a regression.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from statistics import median
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import Invalid, NotFound
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, USERS, visible
from lair.registry.service.speeds import shown_submitter
from lair.registry.service.standing import standing_columns
from lair.registry.service.tiers import annotate

__all__ = ["REGRESSION", "matrix", "version_key"]

REGRESSION = 0.10
"""A drop in median decode speed from one engine version to the next larger than this is flagged."""
CHECKED = ("verified", "replicated")
MAX_ROWS = 20_000
"""Rows read for one matrix at most (newest first)."""


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts ``0.9.2 < 0.10.0 < 0.12.0`` and ``2026.9.1 < 2026.10.11549`` (numbers as numbers)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+_ ]+", version) if p)


def _engine(fp: dict[str, Any]) -> tuple[str, str]:
    e: dict[str, Any] = fp["engine"] if isinstance(fp.get("engine"), dict) else {}
    name, version = str(e.get("name") or "?"), str(e.get("version") or "")
    if not version and fp.get("engine_version"):
        version = str(fp["engine_version"]).removeprefix(name).strip()
    return name, version or "?"


def _hardware(fp: dict[str, Any]) -> tuple[str, str]:
    gpus = fp.get("gpus") if isinstance(fp.get("gpus"), dict) else None
    if gpus and gpus.get("models"):
        models = ", ".join(str(m) for m in gpus["models"])
        return f"{gpus.get('count') or len(gpus['models'])}x {models}", str(gpus.get("driver") or "—")
    cpu: dict[str, Any] = fp["cpu"] if isinstance(fp.get("cpu"), dict) else {}
    return f"CPU {cpu.get('model') or '?'}", "—"


_KEYS = (
    "id",
    "slug",
    "revision",
    "context",
    "concurrency",
    "decode_tok_s",
    "prefill_tok_s",
    "provenance",
    "report_id",
)


def _rows(conn: Connection, where: sa.ColumnElement[bool]) -> list[dict[str, Any]]:
    from lair.registry.db.tables import REPORTS

    m = MEASUREMENTS
    stmt = (
        sa.select(
            m,
            REVISIONS.c.number.label("revision"),
            RECIPES.c.slug,
            USERS.c.name.label("submitted_by_name"),
            REPORTS.c.fingerprint,
            standing_columns(conn, REPORTS)[-1],
        )
        .join(REPORTS, REPORTS.c.id == m.c.report_id)
        .join(RECIPES, RECIPES.c.id == m.c.recipe_id)
        .join(REVISIONS, REVISIONS.c.id == m.c.revision_id)
        .outerjoin(USERS, USERS.c.id == m.c.submitted_by)
        .where(where, visible(), shown_submitter(m.c.submitted_by), m.c.retracted_at.is_(None))
        .order_by(m.c.created_at.desc(), m.c.id.desc())
        .limit(MAX_ROWS)
    )
    out = []
    for r in conn.execute(stmt):
        fp = json.loads(r.fingerprint)
        row = {k: getattr(r, k) for k in _KEYS}
        row |= {"rig": r.rig_fingerprint, "submitted_by": r.submitted_by_name, "retracted": False}
        row["filer_new"] = r.filer_new
        row |= {"created_at": r.created_at.isoformat(), "engine": _engine(fp), "hardware": _hardware(fp)}
        out.append(row)
    return out


def _failed_attempts(conn: Connection, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The rows among ``ids`` that are verified replication attempts which did not reproduce their
    row, each with who filed it (account, whether it was new then) and the row it did not reproduce.
    An unverified attempt is the report's word: it never fails a cell."""
    from lair.registry.db.tables import REPORTS
    from lair.registry.service.attempts import ATTEMPTS, has_attempts

    if not ids or not has_attempts(conn):
        return {}
    a, mine = ATTEMPTS, MEASUREMENTS.alias("mine")
    stmt = (
        sa.select(a.c.attempt_id, a.c.target_id, USERS.c.name, standing_columns(conn, REPORTS)[-1])
        .join(mine, mine.c.id == a.c.attempt_id)
        .join(REPORTS, REPORTS.c.id == a.c.report_id)
        .outerjoin(USERS, USERS.c.id == a.c.submitted_by)
        .where(a.c.attempt_id.in_(ids), a.c.outcome == "not-reproduced", mine.c.provenance == "verified")
        .order_by(a.c.id)
    )
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in conn.execute(stmt):
        out[int(r.attempt_id)].append(
            {"row": int(r.target_id), "submitted_by": r.name, "new_account": r.filer_new}
        )
    return out


def _pairs(rows: list[dict[str, Any]]) -> list[dict[str, int]]:
    count: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        count[(r["context"], r["concurrency"])] += 1
    ranked = sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"context": c, "concurrency": n, "rows": k} for (c, n), k in ranked]


def _med(values: list[float | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return median(xs) if xs else None


Failed = dict[int, list[dict[str, Any]]]


def _cell(rows: list[dict[str, Any]], failed: Failed) -> dict[str, Any]:
    fails = [
        f | {"attempt_row_id": f"{r['slug']}@{r['revision']}#{r['id']}"}
        for r in rows
        for f in failed.get(r["id"], [])
    ]
    return {
        "decode_tok_s": _med([r["decode_tok_s"] for r in rows]),
        "prefill_tok_s": _med([r["prefill_tok_s"] for r in rows]),
        "rows": len(rows),
        "status": "fail" if fails else "pass",
        "failed_by": fails,
        "date": max(r["created_at"] for r in rows)[:10],
        "tiers": sorted({r["tier"] for r in rows}),
        "recipes": sorted({r["slug"] for r in rows}),
        "row_ids": [f"{r['slug']}@{r['revision']}#{r['id']}" for r in rows],
    }


def _history(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_gpu: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_gpu[r["hardware"][0]][r["engine"]].append(r)
    series = []
    for gpu in sorted(by_gpu):
        points: list[dict[str, Any]] = []
        prev: tuple[str, float | None] | None = None
        for eng in sorted(by_gpu[gpu], key=lambda e: (e[0], version_key(e[1]))):
            decode = _med([r["decode_tok_s"] for r in by_gpu[gpu][eng]])
            change = None
            if prev is not None and prev[0] == eng[0] and prev[1] and decode is not None:
                change = (decode - prev[1]) / prev[1]
            points.append({
                "engine": eng[0], "version": eng[1], "decode_tok_s": decode, "rows": len(by_gpu[gpu][eng]),
                "change": change, "regression": change is not None and change < -REGRESSION,
            })  # fmt: skip
            prev = (eng[0], decode)
        series.append(
            {"gpu": gpu, "points": points, "regressions": sum(bool(p["regression"]) for p in points)}
        )
    return series


def _table(rows: list[dict[str, Any]], failed: Failed) -> dict[str, Any]:
    cols = sorted({r["hardware"] for r in rows})
    engines = sorted({r["engine"] for r in rows}, key=lambda e: (e[0], version_key(e[1])))
    grid: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        grid[(r["engine"], r["hardware"])].append(r)
    return {
        "columns": [{"gpu": g, "driver": d} for g, d in cols],
        "rows": [
            {
                "engine": e[0],
                "version": e[1],
                "cells": [_cell(grid[(e, c)], failed) if grid.get((e, c)) else None for c in cols],
            }
            for e in engines
        ],
    }


def matrix(
    conn: Connection,
    *,
    slug: str | None = None,
    model: str | None = None,
    unchecked: bool = False,
    context: int | None = None,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The matrix and history of one recipe (``slug``) or of every recipe of one model (``model``:
    the recipes' model key, as the search's ``model`` filter)."""
    if slug is not None:
        rid = conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug, visible())).scalar()
        if rid is None:
            raise NotFound(f"no recipe {slug!r}")
        where = MEASUREMENTS.c.recipe_id == rid
    else:
        from lair.registry.service.facets import norm_key

        key = norm_key(model)
        if key is None:
            raise Invalid("required", location="query parameter model", hint="e.g. ?model=Qwen/Qwen3-8B")
        where = RECIPES.c.model_key == key
    every = annotate(_rows(conn, where), {})
    tiers = (*CHECKED, "reported-by-report") if unchecked else CHECKED
    rows = [r for r in every if r["tier"] in tiers]
    pairs = _pairs(rows)
    pick = (
        (context, concurrency or 1)
        if context
        else (pairs[0]["context"], pairs[0]["concurrency"])
        if pairs
        else None
    )
    shown = [r for r in rows if pick and (r["context"], r["concurrency"]) == pick]
    failed = _failed_attempts(conn, [r["id"] for r in shown])
    out: dict[str, Any] = {
        "ok": True,
        "slug": slug,
        "model": model,
        "unchecked": unchecked,
        "tiers": list(tiers),
    }
    out["hidden_unchecked"] = sum(1 for r in every if r["tier"] == "reported-by-report")
    out |= {"pairs": pairs, "context": pick[0] if pick else None, "concurrency": pick[1] if pick else None}
    out |= {"engines": len({r["engine"] for r in shown}), "matrix": _table(shown, failed)}
    return out | {"history": _history(shown), "regression_threshold": REGRESSION}
