"""Charts drawn off the write (SQLite and PostgreSQL): while a drawer is started for the engine, a write
that changes a recipe's charts stores its page with a placeholder and notes the recipe in
``chart_pending``; the drawer's own process draws the charts, and the page is rendered again with them
inline, byte for byte what an inline render of the same rows gives (matplotlib in this process: an
independent drawing). A write that leaves the charts as they were (a vote) defers nothing, and a
drawer started later takes up what was left pending. The test recipe's rows have no prefill speed:
its page has one chart, decode."""

from __future__ import annotations

import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine

from lair.registry.db.tables import RECIPES
from lair.registry.service import community
from lair.registry.service.accounts import create_user
from lair.registry.service.actor import Actor
from lair.registry.service.chart import chart_store
from lair.registry.service.chart_queue import PENDING, drawer_for, note_pending
from lair.registry.service.drawer import ChartDrawer
from lair.registry.service.publish import publish
from lair.registry.service.stored import DOCUMENTS, render_documents

SLUG = "llama31-8b-rtx4090-sglang"


def _page(engine: Engine) -> bytes:
    d = DOCUMENTS.c
    with engine.connect() as conn:
        return bytes(
            conn.execute(
                sa.select(d.body).where(d.slug == SLUG, d.kind == "page", d.revision == 0)
            ).scalar_one()
        )


def _pending(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(PENDING.c.recipe_id)).scalars())


def _rid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == SLUG)).scalar_one())


def _fresh_page(engine: Engine) -> bytes:
    """The page rendered now with its charts drawn here (no chart store: matplotlib in this process)."""
    with engine.connect() as conn:
        rows = render_documents(conn, SLUG)
    return next(bytes(r["body"]) for r in rows if r["kind"] == "page" and r["revision"] == 0)


def test_a_write_leaves_its_charts_to_the_drawer_which_renders_the_page_again(engine: Engine) -> None:
    drawer = ChartDrawer(engine)
    assert drawer.start() and drawer_for(engine) is drawer
    try:
        with engine.begin() as conn:
            publish(conn, LLAMA.read_text(), owner="author")  # rows typed by the author: a decode chart
        page = _page(engine)
        # right after the write: no chart drawn but a placeholder, the recipe noted for the drawer
        assert page.count(b'class="chart-pending"') == 1 and b'class="chart"' not in page
        assert _pending(engine) in ([_rid(engine)], [])  # [] once the drawer was done already
        assert drawer.idle(120)
        page = _page(engine)
        assert page.count(b'class="chart"') == 1 and b"chart-pending" not in page
        assert _pending(engine) == []
        assert page == _fresh_page(engine)  # the drawer process's SVGs are matplotlib's own here
        with engine.begin() as conn:  # a vote changes no chart: nothing deferred, charts inline at once
            community.vote(conn, Actor(create_user(conn, "voter"), "voter", False), SLUG, True)
        voted = _page(engine)
        assert voted.count(b'class="chart"') == 1 and _pending(engine) == [] and voted != page
    finally:
        drawer.close()
    assert drawer_for(engine) is None


def test_a_drawer_that_starts_takes_up_what_a_stopped_process_left_pending(engine: Engine) -> None:
    with engine.begin() as conn:  # what a write left when its process stopped before drawing:
        publish(conn, LLAMA.read_text(), owner="author")
        conn.execute(sa.text("DELETE FROM chart_svgs"))
        rid = _rid_in(conn)
        with chart_store(conn, defer=True) as deferred:  # the page with its placeholders, and the note
            rows = render_documents(conn, SLUG)
        conn.execute(sa.delete(DOCUMENTS).where(DOCUMENTS.c.recipe_id == rid))
        conn.execute(sa.insert(DOCUMENTS), rows)
        note_pending(conn, rid)
    assert len(deferred) == 1 and _page(engine).count(b'class="chart-pending"') == 1
    drawer = ChartDrawer(engine)
    assert drawer.start()
    try:
        assert drawer.idle(120)
        assert _pending(engine) == [] and _page(engine) == _fresh_page(engine)
    finally:
        drawer.close()


def _rid_in(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == SLUG)).scalar_one())


def test_the_drawers_re_render_goes_first_as_a_routes_write_does(engine: Engine) -> None:
    """Given the app's write priority, the drawer's transaction counts as a running write while it
    commits (the event loop steps aside for it as for a route's write)."""
    from sqlalchemy import event

    from lair.registry.web.priority import WritePriority

    priority = WritePriority(0.02, 0.2)
    at_commit: list[int] = []
    drawer = ChartDrawer(engine, writing=priority.writing)
    assert drawer.start()
    try:
        with engine.begin() as conn:
            publish(conn, LLAMA.read_text(), owner="author")
        event.listen(engine, "commit", lambda _c: at_commit.append(priority.writes))
        assert drawer.idle(120)
        assert _page(engine).count(b'class="chart"') == 1
    finally:
        drawer.close()
    assert at_commit and set(at_commit) == {1} and priority.writes == 0
