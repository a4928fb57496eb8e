"""Community writes, each authorized here (never only in templates): publish, revise, fork, vote,
retract, hide; and the diff between two revisions.

    anonymous -> 401; signed in without the right -> 403; missing -> 404; clash -> 409;
    too large -> 413; invalid (with located errors) -> 422
"""

from __future__ import annotations

import difflib
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from lair.errors import Conflict, Invalid, Issue, NotFound, TooLarge
from lair.recipe import Recipe, is_secret_name
from lair.recipe.placeholders import find_refs
from lair.registry.db.schema import Vote
from lair.registry.db.tables import MEASUREMENTS, QUALITY, RECIPES, REVISIONS, USERS, visible
from lair.registry.db.version import bump_version, now
from lair.registry.service.actor import Actor
from lair.registry.service.canonical import check_depth, check_recipe, parse_recipe
from lair.registry.service.facets import slugify
from lair.registry.service.permissions import PERMISSIONS, Resource, ensure, need
from lair.registry.service.publish import Published, add_revision, publish
from lair.registry.service.scrub import refuse_issues, refuse_secrets, scan, scan_recipe
from lair.registry.service.speeds import refresh_for_user, refresh_speeds
from lair.registry.service.stored import changed, user_recipes
from lair.registry.service.votes import count_vote

__all__ = [
    "MAX_RECIPE_BYTES",
    "diff",
    "fork",
    "has_voted",
    "hide_recipe",
    "publish_recipe",
    "retract",
    "revise",
    "vote",
]

MAX_RECIPE_BYTES = 256 * 1024
MAX_NOTES = 4000
VOTES = cast(sa.Table, Vote.__table__)


_RECIPE = sa.select(RECIPES.c.id, RECIPES.c.owner_id, RECIPES.c.latest_revision).where(
    RECIPES.c.slug == sa.bindparam("slug"), visible()
)


def _recipe_row(conn: Connection, slug: str) -> Any:
    row = conn.execute(_RECIPE, {"slug": slug}).first()
    if row is None:
        raise NotFound(f"no recipe {slug!r}")
    return row


def _secrets_in(recipe: Recipe, warnings: list[Issue]) -> list[str]:
    """Why the recipe holds a plain-text value where a secret goes (token formats:
    ``refuse_secrets``); ``warnings`` are the recipe checks' own, of the same text."""
    found = [
        f"{k} is a secret written in plain text"
        for k, v in recipe.env.items()
        if is_secret_name(k) and v and not find_refs(v)
    ]
    found += [
        w.render().splitlines()[0] for w in warnings if w.code == "secret-plaintext" and "env." not in w.path
    ]
    return found


def _checked(text: str, notes: str) -> Recipe:
    if len(text.encode()) > MAX_RECIPE_BYTES:
        raise TooLarge(f"a recipe is at most {MAX_RECIPE_BYTES // 1024} KiB")
    if len(notes) > MAX_NOTES:
        raise TooLarge(f"revision notes are at most {MAX_NOTES} characters")
    check_depth(text)  # before anything parses the text (the secret scan parses it too)
    # before the recipe checks, whose located errors may quote a value: raw text, parsed values
    # (escapes, continuations), placeholder defaults
    refuse_issues(scan_recipe(text) + scan(notes, "notes"))
    result = check_recipe(text)  # one parse: its warnings and its model serve the rest of the write
    assert result.recipe is not None  # check_recipe raised otherwise
    leaks = _secrets_in(result.recipe, result.warnings)
    if leaks:
        hint = 'use a secret placeholder: {API_KEY} with [placeholders.API_KEY] type = "secret"'
        raise Invalid("the recipe contains a secret: " + "; ".join(leaks), code="secret", hint=hint)
    return result.recipe


def publish_recipe(conn: Connection, actor: Actor | None, text: str, notes: str = "") -> Published:
    who = ensure(actor, "publish-recipe")
    recipe = _checked(text, notes)
    slug = recipe.meta.slug or slugify(recipe.meta.title or recipe.display_name)
    return publish(conn, recipe, owner=who.name, notes=notes or None, slug=slug)


def revise(conn: Connection, actor: Actor | None, slug: str, text: str, notes: str) -> Published:
    who = need(actor, PERMISSIONS["revise-recipe"].scope)  # 401/403 before the recipe is looked up
    row = _recipe_row(conn, slug)
    ensure(who, "revise-recipe", Resource(owner_id=row.owner_id))
    recipe = _checked(text, notes)
    return add_revision(conn, slug, recipe, author=who.name, notes=notes)


def fork(conn: Connection, actor: Actor | None, slug: str) -> Published:
    """Copy the latest revision under the forker's name (``<slug>-<user>``, numbered if taken)."""
    who = ensure(actor, "fork-recipe")
    row = _recipe_row(conn, slug)
    toml = conn.execute(
        sa.select(REVISIONS.c.toml).where(
            REVISIONS.c.recipe_id == row.id, REVISIONS.c.number == row.latest_revision
        )
    ).scalar_one()
    refuse_issues(scan_recipe(toml))  # a revision published before a token format was known
    base = f"{slug}-{who.name}"[:190]
    new, n = base, 1
    while conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == new)).first():
        n += 1
        new = f"{base}-{n}"
    notes = f"Forked from {slug} revision {row.latest_revision}."
    toml = _fork_title(toml, who.name)
    return publish(conn, toml, owner=who.name, notes=notes, slug=new, upstream=(row.id, row.latest_revision))


def _fork_title(toml: str, who: str) -> str:
    """The revision with its title marked as a fork (``... (fork by NAME)``), so that lists and
    llms.txt never show two recipes of one title."""
    from lair.recipe import export_text

    recipe = parse_recipe(toml, "recipe.toml")
    title = recipe.meta.title or recipe.display_name
    mark = f" (fork by {who})"
    if not title.endswith(mark):
        meta = recipe.meta.model_copy(update={"title": title[: 300 - len(mark)] + mark})
        recipe = recipe.model_copy(update={"meta": meta})
    return export_text(recipe, "toml")


_VOTE_ON = {
    "sqlite": sqlite_insert(VOTES).on_conflict_do_nothing(),
    "postgresql": pg_insert(VOTES).on_conflict_do_nothing(),
}
"""INSERT ... ON CONFLICT DO NOTHING (a second vote of the same user is no vote)."""
_VOTE_OFF = sa.delete(VOTES).where(
    VOTES.c.user_id == sa.bindparam("uid"), VOTES.c.recipe_id == sa.bindparam("rid")
)


_COUNT_VOTES = (
    sa.update(RECIPES)
    .where(RECIPES.c.id == sa.bindparam("rid"))
    .values(
        votes=sa.select(sa.func.count())
        .select_from(VOTES)
        .where(VOTES.c.recipe_id == sa.bindparam("rid"))
        .scalar_subquery()
    )
    .returning(RECIPES.c.votes)
)


def vote(conn: Connection, actor: Actor | None, slug: str, on: bool) -> int:
    """Set or clear the actor's one vote; returns the exact count."""
    who = ensure(actor, "vote")  # a vote changes state: the publish scope, as every write
    # the version row first: it serializes writers, so the count below (a new statement, a new
    # snapshot under READ COMMITTED) sees every vote committed before this one
    bump_version(conn)
    row = _recipe_row(conn, slug)
    if on:
        conn.execute(
            _VOTE_ON[conn.dialect.name], {"user_id": who.id, "recipe_id": row.id, "created_at": now()}
        )
    else:
        conn.execute(_VOTE_OFF, {"uid": who.id, "rid": row.id})
    votes = int(conn.execute(_COUNT_VOTES, {"rid": row.id}).scalar_one())
    count_vote(conn, row.id, votes)  # the count put in the stored documents; lists show it within 1 s
    return votes


def has_voted(conn: Connection, user_id: int, recipe_id: int) -> bool:
    """Whether the user's one vote is on the recipe (the page's vote button shows it)."""
    stmt = sa.select(VOTES.c.user_id).where(VOTES.c.user_id == user_id, VOTES.c.recipe_id == recipe_id)
    return conn.execute(stmt).first() is not None


def retract(
    conn: Connection, actor: Actor | None, measurement_id: int, reason: str, *, quality: bool = False
) -> None:
    """A measurement's author, the recipe's owner or an admin strikes a row (a speed row, or a quality
    row with ``quality``); it stays, with the reason."""
    who = need(actor, PERMISSIONS["retract-row"].scope)  # 401/403 before anything is read
    reason = reason.strip()
    if not reason:
        raise Invalid("a retraction needs a reason")
    refuse_secrets(reason=reason)
    m = QUALITY if quality else MEASUREMENTS
    row = conn.execute(
        sa.select(m.c.id, m.c.recipe_id, m.c.submitted_by, m.c.retracted_at, RECIPES.c.owner_id)
        .join(RECIPES, RECIPES.c.id == m.c.recipe_id)
        .where(m.c.id == measurement_id)
    ).first()
    if row is None:
        raise NotFound(f"no measurement {measurement_id}")
    ensure(who, "retract-row", Resource(owner_id=row.owner_id, submitter_id=row.submitted_by))
    if row.retracted_at is not None:
        raise Conflict("already retracted")
    conn.execute(
        sa.update(m)
        .where(m.c.id == measurement_id)
        .values(retracted_at=now(), retracted_reason=reason[:1000], retracted_by=who.id)
    )
    refresh_speeds(conn, row.recipe_id)  # a struck row no longer ranks or counts as verified
    changed(conn, [row.recipe_id])


def hide_recipe(conn: Connection, actor: Actor | None, slug: str, hidden: bool = True) -> None:
    ensure(actor, "hide-recipe")
    rid = conn.execute(
        sa.update(RECIPES).where(RECIPES.c.slug == slug).values(hidden=hidden).returning(RECIPES.c.id)
    ).scalar()
    if rid is None:
        raise NotFound(f"no recipe {slug!r}")
    changed(conn, [rid])  # hidden: its documents go (its URLs are 404); shown: rendered again


def hide_user(conn: Connection, actor: Actor | None, name: str, hidden: bool = True) -> None:
    """Hide (or show again) a user: they can no longer sign in or use their tokens, their recipes
    leave search, pages and the API (see :func:`~lair.registry.db.tables.visible`), and so do the
    speed and quality rows they submitted to anyone's recipe (:func:`~.speeds.shown_submitter`).
    Nothing is deleted."""
    ensure(actor, "hide-user", Resource(user_name=name))
    uid = conn.execute(sa.select(USERS.c.id).where(USERS.c.name == name)).scalar()
    if uid is None:
        raise NotFound(f"no user {name!r}")
    conn.execute(sa.update(USERS).where(USERS.c.id == uid).values(hidden=hidden))
    refresh_for_user(conn, uid)  # their rows on others' recipes leave (or rejoin) the speed facets
    changed(conn, user_recipes(conn, uid))  # their recipes' documents, and those holding their rows


def diff(conn: Connection, slug: str, a: int, b: int) -> str:
    """Unified diff of two revisions' canonical TOML."""
    row = _recipe_row(conn, slug)
    stmt = sa.select(REVISIONS.c.number, REVISIONS.c.toml).where(
        REVISIONS.c.recipe_id == row.id, REVISIONS.c.number.in_([a, b])
    )
    texts = {int(r.number): str(r.toml) for r in conn.execute(stmt)}
    for n in (a, b):
        if n not in texts:
            raise NotFound(f"no revision {n}")
    lines = difflib.unified_diff(
        texts[a].splitlines(True), texts[b].splitlines(True), f"{slug}@{a}", f"{slug}@{b}"
    )
    return "".join(lines)


__all__ += ["hide_user"]
