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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import Invalid
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, TAGS, visible
from lair.registry.service.facets import norm_key
from lair.registry.service.speeds import shown_submitter
from lair.registry.service.timefmt import iso, utc

__all__ = ["SORTS", "SearchParams", "SearchResult", "on_page", "parse_params", "search"]

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
    ids: list[int] = field(default_factory=list)
    """The items' recipe ids."""
    end: tuple[Any, int] | None = None
    """The last item's sort key and id when more items follow (None: the page holds every match)."""


def _bad(name: str, why: str) -> Invalid:
    return Invalid(why, location=f"query parameter {name}")


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


def _words(q: str) -> list[str]:
    return _WORD.findall(q)[:12]


def _match(dialect: str, words: list[str]) -> str:
    """The full-text query of ``words`` (FTS5 MATCH, or to_tsquery's text): every word, the last one
    also as a prefix (the word being typed: "vllm h2" finds h200), the others whole, as Meilisearch
    and Algolia's ``prefixLast`` do. A short word as a prefix merges the index entries of every term
    it begins ("1" begins every id from 1 to 19999): at 100k recipes, making every word a prefix
    put the median text search at 7.6 ms in the query alone, the last one only at 2.8 ms."""
    last = len(words) - 1
    if dialect == "sqlite":
        return " AND ".join('"' + w + '"' + "*" * (k == last) for k, w in enumerate(words))
    return " & ".join(w + ":*" * (k == last) for k, w in enumerate(words))


def _text(dialect: str, ranked: bool) -> _Text:
    if dialect == "sqlite":
        if not ranked:
            sub = sa.text("SELECT rowid FROM recipe_fts WHERE recipe_fts MATCH :m")
            return _Text(RECIPES, RECIPES.c.id.in_(sub.columns(sa.column("rowid", sa.Integer))), None)
        source = RECIPES.join(_FTS, _FTS.c.rowid == RECIPES.c.id)
        rank = -sa.func.bm25(sa.literal_column("recipe_fts"))
        return _Text(source, sa.text("recipe_fts MATCH :m"), rank)
    tsq = sa.func.to_tsquery("english", sa.bindparam("m", type_=sa.Text))
    tsv: Any = sa.literal_column("recipes.search_tsv")
    ts_rank = sa.cast(sa.func.ts_rank(tsv, tsq), sa.Double)  # real -> float8: a cursor's key compares exactly
    return _Text(RECIPES, tsv.op("@@")(tsq), ts_rank)


@dataclass(frozen=True)
class _Shape:
    """What a query's statement depends on besides the values it binds (one statement per shape,
    built once: building and compiling it was most of a search's time)."""

    dialect: str
    sort: str
    verified: bool
    context: bool
    text: bool
    ranked: bool
    filters: tuple[str, ...]
    tags: int
    cursor: bool


def _shape_and_values(dialect: str, p: SearchParams) -> tuple[_Shape, dict[str, Any]]:
    words = _words(p.q) if p.q else []
    values: dict[str, Any] = {"limit": p.limit + 1}
    filters = []
    for name, value in (
        ("gpu_key", norm_key(p.gpu) if p.gpu else ...),
        ("gpu_count", p.gpus if p.gpus is not None else ...),
        ("vram_gb", p.min_vram if p.min_vram is not None else ...),
        ("engine", p.engine or ...),
        ("model_key", norm_key(p.model) if p.model else ...),
        ("max_context", p.min_context if p.min_context is not None else ...),
    ):
        if value is None:
            filters.append(name + " null")  # a key of nothing but punctuation: NULL, as it always matched
        elif value is not ...:
            filters.append(name)
            values[name] = value
    values |= {f"tag{i}": t for i, t in enumerate(p.tags)}
    if words:
        values["m"] = _match(dialect, words)
    if p.context is not None:
        values["context"] = p.context
    ranked = bool(words) and p.sort == "relevance"
    shape = _Shape(dialect, p.sort, p.verified, p.context is not None, bool(words), ranked, tuple(filters),
                   len(p.tags), bool(p.cursor))  # fmt: skip
    return shape, values


_AT_LEAST = frozenset({"vram_gb", "max_context"})
"""The filters that are lower bounds (the others are equalities)."""


def _filter(spec: str) -> Any:
    name, _, null = spec.partition(" ")
    col = RECIPES.c[name]
    if null:
        return col.is_(None)
    return col >= sa.bindparam(name) if name in _AT_LEAST else col == sa.bindparam(name)


def _filters(shape: _Shape) -> list[Any]:
    r, out = RECIPES.c, [visible()]
    out += [_filter(f) for f in shape.filters]
    if shape.verified:
        out.append(r.verified_rows > 0)
    has_tag = sa.select(TAGS.c.recipe_id).where(TAGS.c.recipe_id == r.id)
    out += [has_tag.where(TAGS.c.tag == sa.bindparam(f"tag{i}")).exists() for i in range(shape.tags)]
    return out


_NONE = sa.literal_column("-1.0", sa.Float)
"""The sort key of a recipe without the number (a literal, so the expression index matches)."""


def _decode_at(context: bool, verified: bool) -> Any:
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
    if context:
        where.append(m.c.context == sa.bindparam("context"))
    best = (
        sa.select(sa.func.max(m.c.decode_tok_s))
        .select_from(m.join(rv, rv.c.id == m.c.revision_id))
        .where(*where)
        .correlate(RECIPES)
        .scalar_subquery()
    )
    return sa.func.coalesce(best, _NONE)


def _sort_key(shape: _Shape, text: _Text | None) -> Any:
    if shape.sort == "relevance" and text is not None and text.rank is not None:
        return text.rank
    if shape.sort == "updated":
        return RECIPES.c.updated_at
    if shape.sort == "decode":
        if shape.context:
            return _decode_at(True, shape.verified)
        best = RECIPES.c.best_verified_decode_tok_s if shape.verified else RECIPES.c.best_decode_tok_s
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


_COLUMNS = [RECIPES.c[name] for name in (
    "id", "slug", "title", "summary", "engine", "gpu_model", "gpu_count", "vram_gb", "model_id",
    "max_context", "license", "votes", "latest_revision", "updated_at", "best_decode_tok_s",
    "best_verified_decode_tok_s", "verified_rows",
)]  # fmt: skip
"""What a list item shows (not the recipe's search text)."""


@lru_cache(maxsize=512)
def _statement(shape: _Shape) -> sa.Select[Any]:
    """The page of ``shape``: the recipes' columns and sort key, limited, then each one's tags (JSON)
    for the page's rows only."""
    text = _text(shape.dialect, shape.ranked) if shape.text else None
    key = _sort_key(shape, text).label("sort_key")
    stmt = sa.select(*_COLUMNS, key).where(*_filters(shape))
    if text is not None:
        stmt = stmt.select_from(text.source).where(text.match)
    if shape.cursor:
        after: Any = sa.bindparam("after")
        stmt = stmt.where(sa.or_(key < after, sa.and_(key == after, RECIPES.c.id < sa.bindparam("after_id"))))
    page = stmt.order_by(key.desc(), RECIPES.c.id.desc()).limit(sa.bindparam("limit")).subquery("page")
    agg = sa.func.json_group_array if shape.dialect == "sqlite" else sa.func.json_agg
    tags = sa.select(sa.cast(agg(TAGS.c.tag), sa.Text)).where(TAGS.c.recipe_id == page.c.id).scalar_subquery()
    return sa.select(page, tags.label("tags")).order_by(page.c.sort_key.desc(), page.c.id.desc())


def search(conn: Connection, p: SearchParams) -> SearchResult:
    shape, values = _shape_and_values(conn.dialect.name, p)
    after = _decode_cursor(p)
    if after is not None:
        values |= {"after": after[0], "after_id": after[1]}
    rows = list(conn.execute(_statement(shape), values))
    more = len(rows) > p.limit
    rows = rows[: p.limit]
    items = [_item(r, orjson.loads(r.tags) if r.tags else []) for r in rows]
    end = (rows[-1].sort_key, rows[-1].id) if more and rows else None
    nxt = _encode_cursor(p, *end) if end else None
    return SearchResult(items, nxt, [r.id for r in rows], end)


@lru_cache(maxsize=512)
def _matching(shape: _Shape, ended: bool) -> sa.Select[Any]:
    """The ids among ``:ids`` that match ``shape`` after its cursor (and, ``ended``, sort at or
    before the page's last row)."""
    text = _text(shape.dialect, shape.ranked) if shape.text else None
    key = _sort_key(shape, text)
    stmt = sa.select(RECIPES.c.id).where(
        *_filters(shape), RECIPES.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    if text is not None:
        stmt = stmt.select_from(text.source).where(text.match)
    if shape.cursor:
        after: Any = sa.bindparam("after")
        stmt = stmt.where(sa.or_(key < after, sa.and_(key == after, RECIPES.c.id < sa.bindparam("after_id"))))
    if ended:
        end: Any = sa.bindparam("end")
        stmt = stmt.where(sa.or_(key > end, sa.and_(key == end, RECIPES.c.id >= sa.bindparam("end_id"))))
    return stmt.limit(1)


def on_page(
    conn: Connection, p: SearchParams, recipe_ids: Collection[int], end: tuple[Any, int] | None
) -> bool:
    """Whether one of ``recipe_ids`` is, as the tables are now, on the page of ``p`` that ended at
    ``end`` (:attr:`SearchResult.end`): the check a cached page gets after a write changed those
    recipes, instead of the whole search again."""
    if not recipe_ids:
        return False
    shape, values = _shape_and_values(conn.dialect.name, p)
    values["ids"] = sorted(recipe_ids)
    after = _decode_cursor(p)
    if after is not None:
        values |= {"after": after[0], "after_id": after[1]}
    if end is not None:
        values |= {"end": end[0], "end_id": end[1]}
    return conn.execute(_matching(shape, end is not None), values).first() is not None


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
