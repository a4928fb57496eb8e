"""The registry's verified speed rows as efficiencies (measured / roofline), what ``lair fit --predict
--registry URL`` and ``benchmarks/predict_loo.py --db`` learn from (:mod:`lair.fit.predict`).

A row counts when it is verified (stored provenance ``verified``: an accepted report, recomputed and
held under the roofline of the GPUs its fingerprint names; replicated rows are verified rows too), not
retracted, of a shown recipe and submitter, and rated: its recipe's model is in the registry's own
table and its fingerprint names a catalog GPU. The rating is the recipe page's own
(:func:`~lair.registry.service.fitting.rated_rows`, on the row's own revision); the match keys are the
revision's engine, the model class and the weight format of the table's facts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.fit.predict import EfficiencyRow, model_class
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, visible
from lair.registry.service.attempts import row_id
from lair.registry.service.canonical import revision_model
from lair.registry.service.fitting import rated_rows, table_facts
from lair.registry.service.report_files import report_gpus
from lair.registry.service.speeds import shown_submitter

__all__ = ["MAX_ROWS", "efficiency_rows"]

MAX_ROWS = 50_000
"""Rows read at most (newest first)."""

_M = MEASUREMENTS
_STMT = (
    sa.select(
        _M.c.id,
        _M.c.context,
        _M.c.concurrency,
        _M.c.prefill_tok_s,
        _M.c.decode_tok_s,
        _M.c.report_id,
        _M.c.provenance,
        RECIPES.c.slug,
        REVISIONS.c.number,
        REVISIONS.c.sha256,
        REVISIONS.c.toml,
    )
    .join(RECIPES, RECIPES.c.id == _M.c.recipe_id)
    .join(REVISIONS, REVISIONS.c.id == _M.c.revision_id)
    .where(_M.c.provenance == "verified", _M.c.retracted_at.is_(None), _M.c.report_id.is_not(None))
    .where(visible(), shown_submitter(_M.c.submitted_by))
    .order_by(_M.c.created_at.desc(), _M.c.id.desc())
    .limit(MAX_ROWS)
)


def _frac(pct: float | None) -> float | None:
    return round(pct / 100.0, 4) if pct is not None else None


def _rows_of(slug: str, number: int, recipe: Any, rows: list[Any], rigs: Any) -> list[EfficiencyRow]:
    facts, _ = table_facts(recipe)
    if facts is None:
        return []
    ratings, _ = rated_rows(recipe, [r._asdict() for r in rows], rigs)
    out = []
    for r, rate in zip(rows, ratings, strict=True):
        if rate.get("decode_pct") is None and rate.get("prefill_pct") is None:
            continue  # no roofline (an unknown GPU): nothing to learn from
        out.append(
            EfficiencyRow(
                id=row_id(slug, number, r.id),
                engine=recipe.engine,
                model_class=model_class(facts),
                weight_format=facts.weight_format,
                decode=_frac(rate.get("decode_pct")),
                prefill=_frac(rate.get("prefill_pct")),
                decode_tok_s=r.decode_tok_s,
                decode_roofline_tok_s=rate.get("decode_roofline_tok_s"),
                gpu=rate.get("gpus", ""),
                context=r.context,
                concurrency=r.concurrency or 1,
                link=f"/recipes/{slug}#row-{r.id}",
                source="registry",
            )
        )
    return out


def efficiency_rows(conn: Connection, engine: str | None = None) -> list[EfficiencyRow]:
    """Every verified row the registry can rate, as an efficiency (newest first); with ``engine``,
    only the rows of revisions that run it (the fit widget's prediction: fewer rows to rate)."""
    found = list(conn.execute(_STMT))
    rigs = report_gpus(conn, {r.report_id for r in found})
    by_revision: dict[tuple[str, int, str], list[Any]] = defaultdict(list)
    texts: dict[str, str] = {}
    for r in found:
        by_revision[(r.slug, r.number, r.sha256)].append(r)
        texts[r.sha256] = r.toml
    out: list[EfficiencyRow] = []
    for (slug, number, sha), rows in by_revision.items():
        recipe = revision_model(sha, texts[sha])[0]
        if engine is None or recipe.engine == engine:
            out += _rows_of(slug, number, recipe, rows, rigs)
    return out
