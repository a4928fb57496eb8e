"""Writes: users, recipes (revision 1), new revisions, and the bundled examples.

Every write bumps ``registry_version`` in its own transaction and re-renders the stored documents of
the recipes it changed (:func:`~.stored.changed`). Revision numbers come from one ``UPDATE ...
RETURNING`` on the recipe row, so concurrent revisions get unique, gapless numbers on SQLite and
PostgreSQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import Conflict, NotFound
from lair.recipe import Recipe
from lair.registry.db.tables import MEASUREMENTS, QUALITY, RECIPES, REVISIONS, TAGS, USERS
from lair.registry.db.version import now
from lair.registry.service.canonical import canonical, parse_recipe
from lair.registry.service.facets import Facets, facets_of, slugify
from lair.registry.service.speeds import refresh_speeds

__all__ = ["Published", "add_revision", "ensure_user", "publish", "publish_many", "seed_examples"]


@dataclass(frozen=True)
class Published:
    slug: str
    revision: int
    sha256: str


def _changed(conn: Connection, recipe_ids: list[int], *, forks: bool = False) -> None:
    from lair.registry.service.stored import changed  # it renders through read, which imports this

    changed(conn, recipe_ids, forks=forks)


def ensure_user(conn: Connection, name: str, *, display_name: str = "", link: str | None = None) -> int:
    found = conn.execute(sa.select(USERS.c.id).where(USERS.c.name == name)).scalar()
    if found is not None:
        return int(found)
    values = {"name": name, "display_name": display_name or name, "link": link, "created_at": now()}
    return int(conn.execute(sa.insert(USERS).values(**values).returning(USERS.c.id)).scalar_one())


def _index_text(conn: Connection, recipe_id: int, text: str) -> None:
    if conn.dialect.name == "sqlite":  # PostgreSQL keeps a generated tsvector column instead
        conn.execute(sa.text("DELETE FROM recipe_fts WHERE rowid = :id"), {"id": recipe_id})
        conn.execute(
            sa.text("INSERT INTO recipe_fts (rowid, body) VALUES (:id, :t)"), {"id": recipe_id, "t": text}
        )


def _set_tags(conn: Connection, recipe_id: int, tags: tuple[str, ...]) -> None:
    conn.execute(sa.delete(TAGS).where(TAGS.c.recipe_id == recipe_id))
    if tags:
        conn.execute(sa.insert(TAGS), [{"recipe_id": recipe_id, "tag": t[:100]} for t in tags])


def _add_measurements(conn: Connection, recipe: Recipe, recipe_id: int, revision_id: int, user: int) -> None:
    rows = [
        {
            "recipe_id": recipe_id,
            "revision_id": revision_id,
            "context": r.context,
            "concurrency": r.concurrency or 1,
            "prefill_tok_s": r.prefill_tok_s,
            "decode_tok_s": r.decode_tok_s,
            "decode_tok_s_per_stream": r.decode_tok_s_per_stream,
            "ttft_ms": r.ttft_ms,
            "provenance": "reported",  # typed by the author: the author's word, whatever the file says
            "note": r.note,
            "submitted_by": user,
            "created_at": now(),
        }
        for r in recipe.meta.performance
    ]
    if rows:
        conn.execute(sa.insert(MEASUREMENTS), rows)
    quality = [
        {
            "recipe_id": recipe_id,
            "revision_id": revision_id,
            "suite": q.suite[:200],
            "score": q.score,
            "unit": q.unit[:20],
            "note": q.note,
            "metric": "",
            "provenance": "reported",
            "submitted_by": user,
            "created_at": now(),
        }
        for q in recipe.meta.quality
    ]
    if quality:
        conn.execute(sa.insert(QUALITY), quality)


def _insert_revision(
    conn: Connection, recipe_id: int, number: int, recipe: Recipe, notes: str, author: int
) -> tuple[int, str]:
    text, sha = canonical(recipe)
    values = {"recipe_id": recipe_id, "number": number, "toml": text, "sha256": sha}
    values |= {"notes": notes, "author_id": author, "created_at": now()}
    rev_id = int(conn.execute(sa.insert(REVISIONS).values(**values).returning(REVISIONS.c.id)).scalar_one())
    _add_measurements(conn, recipe, recipe_id, rev_id, author)
    return rev_id, sha


def _write_facets(conn: Connection, recipe_id: int, f: Facets) -> None:
    conn.execute(sa.update(RECIPES).where(RECIPES.c.id == recipe_id).values(**f.columns(), updated_at=now()))
    _set_tags(conn, recipe_id, f.tags)
    _index_text(conn, recipe_id, f.search_text)


def _first_note(recipe: Recipe) -> str:
    return recipe.meta.revisions[0].note if recipe.meta.revisions else "Initial version."


def publish(
    conn: Connection,
    text: str | Recipe,
    *,
    owner: str,
    notes: str | None = None,
    slug: str | None = None,
    upstream: tuple[int, int] | None = None,
    fmt: str = "toml",
) -> Published:
    """Create a recipe and its revision 1 from recipe text (checked by lair's recipe core) or from
    a model its caller checked."""
    recipe = text if isinstance(text, Recipe) else parse_recipe(text, f"recipe.{fmt}", fmt)
    slug = slug or recipe.meta.slug or slugify(recipe.meta.title or recipe.display_name)
    if conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug)).first():
        raise Conflict(f"a recipe named {slug!r} exists", hint="pick another slug")
    owner_id = ensure_user(conn, owner)
    f = facets_of(recipe)
    values = {"slug": slug, "owner_id": owner_id, "latest_revision": 1, "created_at": now()}
    values |= {"upstream_id": upstream[0] if upstream else None}
    values |= {"upstream_revision": upstream[1] if upstream else None}
    values |= f.columns() | {"updated_at": now()}
    recipe_id = int(conn.execute(sa.insert(RECIPES).values(**values).returning(RECIPES.c.id)).scalar_one())
    _, sha = _insert_revision(conn, recipe_id, 1, recipe, notes or _first_note(recipe), owner_id)
    _set_tags(conn, recipe_id, f.tags)
    _index_text(conn, recipe_id, f.search_text)
    _changed(conn, [recipe_id])
    return Published(slug, 1, sha)


def add_revision(conn: Connection, slug: str, text: str | Recipe, *, author: str, notes: str) -> Published:
    """A new immutable revision of ``slug`` (recipe text, or a model its caller checked); its
    number is the next one, taken atomically."""
    recipe = text if isinstance(text, Recipe) else parse_recipe(text)
    stmt = (
        sa.update(RECIPES)
        .where(RECIPES.c.slug == slug)
        .values(latest_revision=RECIPES.c.latest_revision + 1)
        .returning(RECIPES.c.id, RECIPES.c.latest_revision)
    )
    row = conn.execute(stmt).first()
    if row is None:
        raise NotFound(f"no recipe {slug!r}")
    author_id = ensure_user(conn, author)
    _, sha = _insert_revision(conn, row.id, row.latest_revision, recipe, notes, author_id)
    _write_facets(conn, row.id, facets_of(recipe))
    refresh_speeds(conn, row.id)  # the verified rows of earlier revisions still count
    _changed(conn, [row.id], forks=True)
    return Published(slug, int(row.latest_revision), sha)


def _insert_returning(conn: Connection, table: sa.Table, rows: list[dict[str, object]]) -> list[int]:
    stmt = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return [int(r.id) for r in conn.execute(stmt, rows)]


def publish_many(conn: Connection, recipes: list[tuple[str, Recipe]], *, owner: str) -> int:
    """Bulk import of checked recipes as (slug, model) pairs, each at revision 1, in one transaction
    (imports and benchmarks: one statement per table instead of one per row)."""
    owner_id, t = ensure_user(conn, owner), now()
    facets = [facets_of(r) for _, r in recipes]
    rows = [
        {"slug": slug, "owner_id": owner_id, "latest_revision": 1, "created_at": t, "updated_at": t}
        | f.columns()
        for (slug, _), f in zip(recipes, facets, strict=True)
    ]
    ids = _insert_returning(conn, RECIPES, rows)
    revs = []
    for rid, (_, recipe) in zip(ids, recipes, strict=True):
        text, sha = canonical(recipe)
        revs.append(
            {"recipe_id": rid, "number": 1, "toml": text, "sha256": sha, "notes": _first_note(recipe)}
        )
        revs[-1] |= {"author_id": owner_id, "created_at": t}
    rev_ids = _insert_returning(conn, REVISIONS, revs)
    for rid, rev_id, (_, recipe), f in zip(ids, rev_ids, recipes, facets, strict=True):
        _add_measurements(conn, recipe, rid, rev_id, owner_id)
        _set_tags(conn, rid, f.tags)
        _index_text(conn, rid, f.search_text)
    _changed(conn, ids)
    return len(ids)


def bundled_examples() -> list[Path]:
    """The example recipes shipped with lair (the repo's ``examples/``, or the installed copy)."""
    here = Path(__file__).resolve()
    for base in (here.parents[4] / "examples", here.parents[2] / "examples"):
        if base.is_dir():
            return sorted(p for p in base.glob("*/recipe.toml"))
    return []


def seed_examples(conn: Connection, paths: list[Path] | None = None) -> list[str]:
    """Publish every bundled example not published yet; returns the slugs added."""
    added = []
    for path in paths if paths is not None else bundled_examples():
        text = path.read_text(encoding="utf-8")
        recipe = parse_recipe(text, str(path))
        slug = recipe.meta.slug or slugify(recipe.meta.title or path.parent.name)
        if conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug)).first():
            continue
        owner = recipe.meta.listed_by or "lair-examples"
        added.append(publish(conn, text, owner=owner, slug=slug).slug)
    return added
