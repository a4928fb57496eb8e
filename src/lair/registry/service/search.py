"""List and search: full-text (SQLite FTS5 / PostgreSQL tsvector + GIN), filters on indexed facet
columns, sorting by votes, update time or decode speed at a context, and keyset cursors.

Query parameters are named after the filters: ``q``, ``gpu``, ``gpus``, ``min_vram``, ``engine``,
``model``, ``tag`` (repeatable, all must match), ``min_context``, ``verified``, ``sort``
(``votes`` | ``updated`` | ``decode`` | ``relevance``), ``context`` (for ``sort=decode``), ``limit``,
``cursor``.

A text query goes through the full-text index, never a scan of the recipes' text. ``sort=relevance``
ranks its matches (bm25 on SQLite, ``ts_rank`` on PostgreSQL: the recipes are joined to the index's
matches, a few ms for a selective query, and ~40 ms in bm25 alone for a word matching a third of
100k recipes); the other sorts walk their index and keep the recipes among the matches (a broad word
stops after a page, ~7 ms at 100k), which is why votes stays the default; ``sort=relevance`` without
``q`` sorts by votes.

``verified=1`` is "verified only" for the filter and the sort alike: it keeps the recipes with
non-retracted verified or replicated rows, and ``sort=decode`` then ranks them by their best verified
row (at ``context`` when given), never by the author's reported numbers. Without it, ``sort=decode``
ranks by the best row of any tier. The verified sort without a context walks the expression index
``ix_recipes_verified_decode``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import RegistryError
from lair.registry.service.facets import norm_key
from lair.registry.service.publish import MEASUREMENTS, RECIPES, REVISIONS, TAGS, visible
from lair.registry.service.speeds import shown_submitter
from lair.registry.service.timefmt import iso, utc

__all__ = ["SORTS", "SearchParams", "SearchResult", "parse_params", "search"]

SORTS = ("votes", "updated", "decode", "relevance")
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_LIMIT = 100


@dataclass(frozen=True)
class SearchParams:
    q: str = ""
    gpu: str | None = None
    gpus: int | None = None
    min_vram: float | None = None
    engine: str | None = None
    model: str | None = None
    tags: tuple[str, ...] = ()
    min_context: int | None = None
    verified: bool = False
    sort: str = "votes"
    context: int | None = None
    limit: int = 20
    cursor: str | None = None


@dataclass
class SearchResult:
    items: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None


def _bad(name: str, why: str) -> RegistryError:
    return RegistryError(422, "invalid", f"query parameter {name}: {why}")


def parse_int(raw: str | None, name: str, lo: int, hi: int) -> int | None:
    if raw in (None, ""):
        return None
    try:
        v = int(raw)
    except ValueError:
        raise _bad(name, f"not an integer: {raw!r}") from None
    if not lo <= v <= hi:
        raise _bad(name, f"must be between {lo} and {hi}")
    return v


def _float(raw: str | None, name: str) -> float | None:
    if raw in (None, ""):
        return None
    try:
        v = float(raw)
    except ValueError:
        raise _bad(name, f"not a number: {raw!r}") from None
    if not 0 <= v <= 1e6:
        raise _bad(name, "must be between 0 and 1000000")
    return v


def _bool(raw: str | None, name: str) -> bool:
    if raw in (None, "", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise _bad(name, "must be true or false")


def parse_params(get: Mapping[str, str], tags: Sequence[str] = ()) -> SearchParams:
    """Validated search parameters from a query string (unknown parameters are ignored)."""
    q = (get.get("q") or "").strip()[:200]
    sort = get.get("sort") or "votes"
    if sort not in SORTS:
        raise _bad("sort", "one of " + ", ".join(SORTS))
    return SearchParams(
        q=q,
        gpu=get.get("gpu") or None,
        gpus=parse_int(get.get("gpus"), "gpus", 1, 4096),
        min_vram=_float(get.get("min_vram"), "min_vram"),
        engine=(get.get("engine") or "").lower() or None,
        model=get.get("model") or None,
        tags=tuple(t.strip().lower() for t in tags if t.strip())[:10],
        min_context=parse_int(get.get("min_context"), "min_context", 1, 10**9),
        verified=_bool(get.get("verified"), "verified"),
        sort=sort,
        context=parse_int(get.get("context"), "context", 1, 10**9),
        limit=parse_int(get.get("limit"), "limit", 1, MAX_LIMIT) or 20,
        cursor=get.get("cursor") or None,
    )


_FTS = sa.table("recipe_fts", sa.column("rowid", sa.Integer))


@dataclass(frozen=True)
class _Text:
    source: Any
    """What the query selects from: the recipes, joined to the index's matches when ranked (SQLite)."""
    match: Any
    rank: Any
    """Higher is more relevant."""


def _text(conn: Connection, q: str, ranked: bool) -> _Text | None:
    words = _WORD.findall(q)[:12]
    if not words:
        return None
    if conn.dialect.name == "sqlite":
        match = " AND ".join('"' + w.replace('"', "") + '"*' for w in words)
        if not ranked:
            sub = sa.text("SELECT rowid FROM recipe_fts WHERE recipe_fts MATCH :m").bindparams(m=match)
            return _Text(RECIPES, RECIPES.c.id.in_(sub.columns(sa.column("rowid", sa.Integer))), None)
        source = RECIPES.join(_FTS, _FTS.c.rowid == RECIPES.c.id)
        rank = -sa.func.bm25(sa.literal_column("recipe_fts"))
        return _Text(source, sa.text("recipe_fts MATCH :m").bindparams(m=match), rank)
    tsq = sa.func.to_tsquery("english", " & ".join(w.replace("'", "") + ":*" for w in words))
    tsv: Any = sa.literal_column("recipes.search_tsv")
    ts_rank = sa.cast(sa.func.ts_rank(tsv, tsq), sa.Double)  # real -> float8: a cursor's key compares exactly
    return _Text(RECIPES, tsv.op("@@")(tsq), ts_rank)


def _filters(p: SearchParams) -> list[Any]:
    r, out = RECIPES.c, [visible()]
    if p.gpu:
        out.append(r.gpu_key == norm_key(p.gpu))
    if p.gpus is not None:
        out.append(r.gpu_count == p.gpus)
    if p.min_vram is not None:
        out.append(r.vram_gb >= p.min_vram)
    if p.engine:
        out.append(r.engine == p.engine)
    if p.model:
        out.append(r.model_key == norm_key(p.model))
    if p.min_context is not None:
        out.append(r.max_context >= p.min_context)
    if p.verified:
        out.append(r.verified_rows > 0)
    out += [r.id.in_(sa.select(TAGS.c.recipe_id).where(TAGS.c.tag == t)) for t in p.tags]
    return out


_NONE = sa.literal_column("-1.0", sa.Float)
"""The sort key of a recipe without the number (a literal, so the expression index matches)."""


def _decode_at(context: int | None, verified: bool) -> Any:
    """Best decode speed of a recipe's current rows (latest revision's reported + every verified one),
    or of its verified rows only."""
    m, rv = MEASUREMENTS, REVISIONS
    current: Any = m.c.provenance == "verified"
    if not verified:  # any tier: every row from a report, and the latest revision's reported ones
        current = sa.or_(rv.c.number == RECIPES.c.latest_revision, m.c.provenance != "reported")
    where = [
        m.c.recipe_id == RECIPES.c.id,
        m.c.retracted_at.is_(None),
        current,
        shown_submitter(m.c.submitted_by),
    ]
    if context is not None:
        where.append(m.c.context == context)
    best = (
        sa.select(sa.func.max(m.c.decode_tok_s))
        .select_from(m.join(rv, rv.c.id == m.c.revision_id))
        .where(*where)
        .correlate(RECIPES)
        .scalar_subquery()
    )
    return sa.func.coalesce(best, _NONE)


def _sort_key(p: SearchParams, text: _Text | None) -> Any:
    if p.sort == "relevance" and text is not None:
        return text.rank
    if p.sort == "updated":
        return RECIPES.c.updated_at
    if p.sort == "decode":
        if p.context is not None:
            return _decode_at(p.context, p.verified)
        best = RECIPES.c.best_verified_decode_tok_s if p.verified else RECIPES.c.best_decode_tok_s
        return sa.func.coalesce(best, _NONE)
    return RECIPES.c.votes


def _encode_cursor(p: SearchParams, value: Any, rid: int) -> str:
    v = utc(value).isoformat() if isinstance(value, datetime) else value
    raw = json.dumps([p.sort, p.context, p.verified, v, rid], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_MAX_KEY = 2**53
"""Bound of a cursor's sort key and id: what this registry's votes, speeds and ids can be (a
database integer holds no more than 2**63, and 1e308 or 10**30 must be a 422, never an overflow)."""


def _id(rid: Any) -> bool:
    return type(rid) is int and 0 <= rid <= _MAX_KEY


def _key(value: Any, kind: type) -> bool:
    """A sort key of ``kind`` (an int for votes; a float or an int for speeds), finite and bounded."""
    ok = type(value) is int or (kind is float and type(value) is float)
    return ok and -_MAX_KEY <= value <= _MAX_KEY


def _decode_cursor(p: SearchParams) -> tuple[Any, int] | None:
    if not p.cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(p.cursor + "=" * (-len(p.cursor) % 4))
        sort, context, verified, value, rid = json.loads(raw)
        if (sort, context, verified) != (p.sort, p.context, p.verified) or not _id(rid):
            raise ValueError("cursor of another query")
        if sort == "updated":
            value = utc(datetime.fromisoformat(value[:64]))
        elif not _key(value, int if sort == "votes" or (sort == "relevance" and not p.q) else float):
            raise ValueError("bad value")
        return value, rid
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise _bad("cursor", "not a cursor this query returned") from None


def search(conn: Connection, p: SearchParams) -> SearchResult:
    text = _text(conn, p.q, p.sort == "relevance") if p.q else None
    key = _sort_key(p, text).label("sort_key")
    stmt = sa.select(RECIPES, key).where(*_filters(p))
    if text is not None:
        stmt = stmt.select_from(text.source).where(text.match)
    after = _decode_cursor(p)
    if after is not None:
        stmt = stmt.where(sa.or_(key < after[0], sa.and_(key == after[0], RECIPES.c.id < after[1])))
    rows = list(conn.execute(stmt.order_by(key.desc(), RECIPES.c.id.desc()).limit(p.limit + 1)))
    more = len(rows) > p.limit
    rows = rows[: p.limit]
    tags = _tags(conn, [r.id for r in rows])
    items = [_item(r, tags.get(r.id, [])) for r in rows]
    nxt = _encode_cursor(p, rows[-1].sort_key, rows[-1].id) if more and rows else None
    return SearchResult(items, nxt)


def _tags(conn: Connection, ids: list[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    if ids:
        for rid, tag in conn.execute(
            sa.select(TAGS.c.recipe_id, TAGS.c.tag).where(TAGS.c.recipe_id.in_(ids))
        ):
            out.setdefault(rid, []).append(tag)
    return out


def _item(r: Any, tags: list[str]) -> dict[str, Any]:
    return {
        "slug": r.slug,
        "title": r.title,
        "summary": r.summary[:300],
        "engine": r.engine,
        "gpu_model": r.gpu_model,
        "gpu_count": r.gpu_count,
        "vram_gb": r.vram_gb,
        "model": r.model_id,
        "max_context": r.max_context,
        "license": r.license,
        "tags": sorted(tags),
        "votes": r.votes,
        "revision": r.latest_revision,
        "updated_at": iso(r.updated_at),
        "best_decode_tok_s": r.best_decode_tok_s,
        "best_verified_decode_tok_s": r.best_verified_decode_tok_s,
        "verified": r.verified_rows > 0,
    }
