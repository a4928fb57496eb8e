"""Stored documents stay what a fresh render gives, whatever the writes (SQLite and PostgreSQL).

Hypothesis draws sequences of writes through the service layer (votes and unvotes by several
accounts, revisions, forks, retractions of speed and quality rows, hiding and showing recipes and
users, new recipes) and a real report upload through the API; after each sequence every recipe's
stored rows must be byte for byte what :func:`render_documents` renders from the tables at that
moment, and a hidden recipe (or one of a hidden user) must have none. At the end, the stored bytes
the app serves are compared with what the routes render when no stored row exists. Writes of the
release before (the rolling upgrade: ``n`` bumped, no document rendered) are shown at once, then
rendered into the stored rows by the app, and the refresh never stamps rows an older write left stale.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from upload_site import Site, make_site

from lair.errors import RegistryError
from lair.registry.db.tables import MEASUREMENTS, QUALITY, RECIPES, REVISIONS, USERS, visible
from lair.registry.db.version import now
from lair.registry.service import community
from lair.registry.service.accounts import create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import publish
from lair.registry.service.stored import DOCUMENTS, documents_stale, refresh_stale, render_documents
from lair.testing.registry import charts_drawn
from lair.testing.uploads import encode, tar_gz

NAMES = ("alice", "bob", "carol")


@pytest.fixture
def world(db_url: str, engine: Engine) -> Iterator[tuple[Site, dict[str, Actor]]]:
    for site in make_site(db_url, engine):
        with engine.begin() as conn:
            actors = {n: Actor(create_user(conn, n), n, False) for n in NAMES}
            actors["root"] = Actor(create_user(conn, "root", admin=True), "root", True)
        yield site, actors


def _slugs(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.select(RECIPES.c.slug).order_by(RECIPES.c.id)).scalars())


def _pick(seq: list[Any], i: int) -> Any:
    return seq[i % len(seq)]


def _op(conn: sa.Connection, actors: dict[str, Actor], op: tuple[str, int, int, bool]) -> None:
    kind, i, j, flag = op
    slug = _pick(_slugs(conn), i)
    who = actors[_pick([*NAMES, "root"], j)]
    if kind == "vote":
        community.vote(conn, who, slug, flag)
    elif kind == "revise":
        rid, toml = conn.execute(
            sa.select(RECIPES.c.id, REVISIONS.c.toml)
            .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
            .where(RECIPES.c.slug == slug, REVISIONS.c.number == RECIPES.c.latest_revision)
        ).one()
        community.revise(conn, actors["root"], slug, toml, f"revision {i} {j} of {rid}")
    elif kind == "fork":
        community.fork(conn, who, slug)
    elif kind in ("retract", "retract_quality"):
        table = QUALITY if kind == "retract_quality" else MEASUREMENTS
        ids = list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())
        if ids:
            community.retract(conn, actors["root"], _pick(ids, j), f"reason {i}", quality=table is QUALITY)
    elif kind == "hide_recipe":
        community.hide_recipe(conn, actors["root"], slug, flag)
    elif kind == "hide_user":
        owner = conn.execute(
            sa.select(USERS.c.name)
            .join(RECIPES, RECIPES.c.owner_id == USERS.c.id)
            .where(RECIPES.c.slug == slug)
        ).scalar_one()
        community.hide_user(conn, actors["root"], _pick([owner, *NAMES, "uploader"], j), flag)
    elif kind == "publish":
        toml = conn.execute(sa.select(REVISIONS.c.toml).order_by(REVISIONS.c.id)).scalars().first()
        publish(conn, str(toml), owner=who.name, slug=f"new-{i}-{j}")


OPS = st.tuples(
    st.sampled_from(
        ["vote", "vote", "revise", "fork", "retract", "retract_quality", "hide_recipe", "hide_user",
         "publish", "upload"]
    ),
    st.integers(0, 50),
    st.integers(0, 50),
    st.booleans(),
)  # fmt: skip


def _upload(site: Site) -> int:
    """The tiny-cpu report (201 once; then 409, a duplicate; 422 while tiny-cpu is hidden, 401 while
    the uploader is)."""
    headers = {"content-type": "application/gzip", "authorization": site.client.headers["x-token"]}
    got = site.client.post("/api/v1/reports", content=tar_gz(encode(site.report())), headers=headers)
    assert got.status_code in (201, 401, 409, 422), got.text
    charts_drawn(site.client.app)  # the upload's new rows: charts drawn after the write, then stored
    return got.status_code


def _stored(conn: sa.Connection, slug: str) -> dict[tuple[str, int], tuple[bytes, str, str]]:
    d = DOCUMENTS.c
    rows = conn.execute(sa.select(d.kind, d.revision, d.body, d.etag, d.modified).where(d.slug == slug))
    return {(r.kind, r.revision): (bytes(r.body), r.etag, r.modified) for r in rows}


def _check_all(engine: Engine) -> int:
    """Every recipe's stored rows against a fresh render; the number of visible recipes."""
    shown = 0
    with engine.connect() as conn:
        visible_slugs = set(conn.execute(sa.select(RECIPES.c.slug).where(visible())).scalars())
        for slug in _slugs(conn):
            stored = _stored(conn, slug)
            if slug not in visible_slugs:
                assert stored == {}, f"{slug} is hidden but has stored documents"
                continue
            shown += 1
            fresh = {
                (r["kind"], r["revision"]): (r["body"], r["etag"], r["modified"])
                for r in render_documents(conn, slug)
            }
            assert stored.keys() == fresh.keys(), slug
            for key, (body, etag, modified) in fresh.items():
                assert stored[key][0] == body, f"{slug} {key}: stored bytes differ from a fresh render"
                assert stored[key][1:] == (etag, modified), f"{slug} {key}"
    return shown


def _served_equals_route(site: Site, engine: Engine, slug: str) -> None:
    """The bytes the app serves from the stored rows == what the routes render without them."""
    from lair.registry.service.stored import refresh_documents

    with engine.connect() as conn:
        rid, n = conn.execute(
            sa.select(RECIPES.c.id, RECIPES.c.latest_revision).where(RECIPES.c.slug == slug)
        ).one()
    urls = [f"/api/v1/recipes/{slug}.json", f"/recipes/{slug}", f"/recipes/{slug}/revisions/{n}",
            f"/api/v1/recipes/{slug}/revisions/{n}.json"]  # fmt: skip
    stored = [site.client.get(u) for u in urls]
    with engine.begin() as conn:
        conn.execute(sa.delete(DOCUMENTS).where(DOCUMENTS.c.recipe_id == rid))
    live = [site.client.get(u) for u in urls]
    with engine.begin() as conn:
        refresh_documents(conn, rid)
    for u, a, b in zip(urls, stored, live, strict=True):
        assert a.status_code == b.status_code == 200, u
        assert a.content == b.content, f"{u}: stored and rendered bodies differ"
        assert a.headers["last-modified"] == b.headers["last-modified"], u
        assert a.headers["content-type"] == b.headers["content-type"], u


def test_stored_documents_match_a_fresh_render_after_random_writes(
    world: tuple[Site, dict[str, Actor]], engine: Engine
) -> None:
    site, actors = world
    site.client.headers["x-token"] = site.client.headers.pop("authorization")  # reads are anonymous
    assert _check_all(engine) > 0  # the seeded examples were rendered by their publish
    assert _upload(site) == 201 and _check_all(engine) > 0  # the upload's write rendered tiny-cpu

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(OPS, min_size=1, max_size=6))
    def run(ops: list[tuple[str, int, int, bool]]) -> None:
        for op in ops:
            if op[0] == "upload":
                _upload(site)
                continue
            try:
                with engine.begin() as conn:
                    _op(conn, actors, op)
            except RegistryError:
                pass  # a refused write (403, 404, 409, 422) changes nothing: checked below all the same
        _check_all(engine)

    run()
    with engine.connect() as conn:
        slugs = list(
            conn.execute(sa.select(RECIPES.c.slug).where(visible()).order_by(RECIPES.c.id)).scalars()
        )
    assert slugs
    for slug in slugs[:4]:
        _served_equals_route(site, engine, slug)


def test_lair_serve_renders_the_documents_a_database_from_before_0009_lacks(db_url: str) -> None:
    """A database upgraded to 0009 has recipes and no stored rows: until they are rendered the routes
    serve them (tested above); ``prepare`` (what ``lair serve`` runs first) renders them all once."""
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.serve import prepare
    from lair.registry.service.publish import seed_examples

    engine = make_engine(db_url)
    migrate(engine)
    with engine.begin() as conn:
        seeded = len(seed_examples(conn))
        conn.execute(sa.delete(DOCUMENTS))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(DOCUMENTS)).scalar_one() == 0
    prepare(db_url, seed=False)
    assert seeded > 0 and _check_all(engine) == seeded  # every recipe's rows, equal to a fresh render
    engine.dispose()


def _older_release_vote(engine: Engine, slug: str, user_id: int) -> int:
    """A vote as a release before migration 0012 writes it, in its own transaction: ``n`` bumped
    alone (a release before 0009 renders no stored document either, the case written here), the vote
    row and the recipe's count; the count."""
    from lair.registry.service.community import VOTES

    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE registry_version SET n = n + 1 WHERE id = 1"))
        rid = conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug)).scalar_one()
        conn.execute(sa.insert(VOTES).values(user_id=user_id, recipe_id=rid, created_at=now()))
        count = sa.select(sa.func.count()).select_from(VOTES).where(VOTES.c.recipe_id == rid)
        conn.execute(sa.update(RECIPES).where(RECIPES.c.id == rid).values(votes=count.scalar_subquery()))
        return int(conn.execute(count).scalar_one())


def _listed_votes(site: Site, slug: str, limit: int = 20) -> int:
    items = site.client.get("/api/v1/recipes", params={"q": slug, "limit": limit}).json()["items"]
    return int(next(i["votes"] for i in items if i["slug"] == slug))


def _stale(engine: Engine) -> bool:
    with engine.connect() as conn:
        return documents_stale(conn)


def test_a_write_of_an_older_release_is_served_then_rendered_into_the_stored_documents(
    world: tuple[Site, dict[str, Actor]], engine: Engine
) -> None:
    """The rolling upgrade (docs/deploy.md): the release before writes without rendering; this
    release's reads show the write at once (the routes render while the stamp is behind, lists and
    searches miss their cache), and the app renders every recipe again and stamps them current."""
    site, actors = world
    site.client.headers.pop("authorization")  # anonymous reads: the ones stored documents serve
    assert not _stale(engine)  # written by this release only (seeded, accounts)
    json_url = "/api/v1/recipes/tiny-cpu.json"
    before = site.client.get(json_url).json()["votes"]
    assert _listed_votes(site, "tiny-cpu") == _listed_votes(site, "tiny-cpu", 5) == before  # cached
    votes = _older_release_vote(engine, "tiny-cpu", actors["alice"].id)
    assert votes == before + 1 and _stale(engine)
    assert site.client.get(json_url).json()["votes"] == votes  # rendered by the route
    assert site.client.get("/recipes/tiny-cpu").status_code == 200
    assert _listed_votes(site, "tiny-cpu") == votes  # not the cached listing
    deadline = time.monotonic() + 30
    while _stale(engine):  # the read above started the app's refresh: poll it (reads poke it again)
        assert time.monotonic() < deadline, "the app did not render the stale documents again"
        site.client.get(json_url)
        time.sleep(0.05)
    assert _listed_votes(site, "tiny-cpu", 5) == votes  # cached before the vote: not revived after
    _check_all(engine)  # every stored row is a fresh render again: the older release's vote in it
    with engine.connect() as conn:
        stored = orjson.loads(_stored(conn, "tiny-cpu")[("json", 0)][0])
    assert stored["votes"] == votes
    _served_equals_route(site, engine, "tiny-cpu")  # served from the stored rows again


def test_the_refresh_stamps_nothing_when_an_older_release_wrote_while_it_ran(
    world: tuple[Site, dict[str, Actor]], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stamp is set only when the gap ``n - documents`` the refresh started from held: a vote of
    the release before, committed after the renders and before the stamp, leaves it stale."""
    from lair.registry.service import stored

    _site, actors = world
    _older_release_vote(engine, "tiny-cpu", actors["alice"].id)
    real = stored._stamp_current

    def late_write(engine: Engine, gap: int) -> bool:
        _older_release_vote(engine, "tiny-cpu", actors["bob"].id)
        return real(engine, gap)

    monkeypatch.setattr(stored, "_stamp_current", late_write)
    assert refresh_stale(engine) is False and _stale(engine)
    with engine.begin() as conn:  # this release's own write keeps the gap: the next refresh stamps
        community.vote(conn, actors["carol"], "tiny-cpu", True)
    monkeypatch.setattr(stored, "_stamp_current", real)
    assert refresh_stale(engine) is True and not _stale(engine)
    _check_all(engine)


def test_migration_0012_leaves_a_database_with_recipes_stale_and_an_empty_one_current(db_url: str) -> None:
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.publish import seed_examples

    engine = make_engine(db_url)
    migrate(engine, "0011")
    migrate(engine)
    assert not _stale(engine)  # nothing stored, nothing stale
    migrate(engine, "0011")
    with engine.begin() as conn:
        seed_examples(conn)  # written while the stamp is not there: n alone
    migrate(engine)
    assert _stale(engine)
    assert refresh_stale(engine) is True and not _stale(engine)
    _check_all(engine)
    engine.dispose()
