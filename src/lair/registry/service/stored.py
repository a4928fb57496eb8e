"""Stored documents: each visible recipe's JSON document and anonymous page, rendered by the write.

Every write that changes what a recipe's URLs show calls :func:`changed` once, in its own
transaction: it bumps the version counters (the row lock it takes orders concurrent writers, so
the render below reads every write committed before this one) and re-renders the documents of the
recipes named (:func:`refresh_documents`). A read of a recipe's JSON, page or revision is then one
indexed SELECT of bytes (``DOCUMENT_SQL``); no write flushes it, and a write through any process is
seen by the next read in every other.

The rows hold, per recipe, ``(json|page, 0)`` for ``/api/v1/recipes/<slug>.json`` and
``/recipes/<slug>``, and ``(json|page, n)`` for the URLs of its latest revision ``n``. Older revisions'
URLs are rendered by their routes (and kept in the memory cache until the next write): each of their
documents shows the recipe's votes, history and verified rows too, so storing them all would make
every write cost one render per revision (50 revisions of one recipe, revised and voted on by 16
writers at once, held SQLite's write lock past its 10 s timeout that way). A hidden recipe (or one owned
by a hidden user) has no rows: its URLs fall through to the routes, which answer 404. Hiding a user
changes other recipes too: the rows they submitted leave those recipes' documents.

During an upgrade the release before may still be serving the same database (docs/deploy.md,
"Upgrading while serving"), and its writes do not render these rows as this release would (before
migration 0009 not at all). The stamp ``registry_version.documents`` tells them apart: this release's
writes bump it with ``n`` (:func:`~lair.registry.db.version.bump_version`), an older release's bump
``n`` alone. The
rows are read only while ``documents = n``; otherwise each read is rendered by its route, and
:func:`refresh_stale` (run by ``lair serve`` at start, and on a thread of the app's :class:`Refresher`
when a read finds the stamp behind) renders every recipe again and sets ``documents = n`` once no
older release wrote while it ran.

Links are rendered with ``BASE`` and the read puts the request's base URL in its place
(:func:`with_base`), escaped for the document's kind. The pages and documents are built by the same
functions the routes call (:func:`~.page.recipe_page`, :func:`~.document.recipe_document`), so a
stored document and a fresh render are the same bytes (the property test compares them).
"""

from __future__ import annotations

import functools
import hashlib
import html
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import orjson
import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.registry.db.schema import QualityMeasurement, RecipeDocument
from lair.registry.db.tables import MEASUREMENTS, RECIPES, VERSION, visible
from lair.registry.db.version import bump_version
from lair.registry.service.changes import record
from lair.registry.service.timefmt import http_date

__all__ = [
    "BASE",
    "DOCUMENTS",
    "DOCUMENT_SQL",
    "Refresher",
    "changed",
    "documents_stale",
    "refresh_documents",
    "refresh_missing",
    "refresh_stale",
    "render_documents",
    "renderer",
    "restyle",
    "user_recipes",
    "with_base",
]

log = logging.getLogger(__name__)
DOCUMENTS = cast(sa.Table, RecipeDocument.__table__)
QUALITY = cast(sa.Table, QualityMeasurement.__table__)
BASE = "https://lair-base.invalid"
"""What links start with in a stored document; replaced by the request's base URL when read."""
_BASE_B = BASE.encode()
DOCUMENT_SQL = (
    "SELECT d.body, d.etag, d.modified FROM recipe_documents d JOIN registry_version v"
    " ON v.id = 1 AND v.documents = v.n WHERE d.slug = {p} AND d.kind = {p} AND d.revision = {p}"
)
"""The read: one primary-key lookup, and none while the stamp says the rows may be stale (``{p}`` is
the driver's placeholder)."""

_SLUG = sa.select(RECIPES.c.slug).where(RECIPES.c.id == sa.bindparam("rid"), visible())
_DELETE = sa.delete(DOCUMENTS).where(DOCUMENTS.c.recipe_id == sa.bindparam("rid"))
_INSERT = sa.insert(DOCUMENTS)
_FORKS = sa.select(RECIPES.c.id).where(RECIPES.c.upstream_id == sa.bindparam("rid"))


def _etag(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=12).hexdigest()


def _page(template: str, ctx: dict[str, Any]) -> bytes:
    from lair.registry.service.templates import page_env  # the routes' own templates and filters

    return page_env().get_template(template).render(**ctx).encode()


def render_documents(conn: Connection, slug: str) -> list[dict[str, Any]]:
    """The rows of a visible recipe: its JSON and page, and those of its latest revision's URLs,
    rendered as the routes render them (with ``BASE`` for links)."""
    from lair.registry.service import read
    from lair.registry.service.document import recipe_document, revision_document
    from lair.registry.service.page import recipe_page

    rec = read.get_recipe(conn, slug)
    p, at, n, made = recipe_page(rec, BASE), rec.updated_at, rec.revision.number, rec.revision.created_at
    return [
        _row(rec, "json", 0, orjson.dumps(recipe_document(rec, BASE)), at),
        _row(rec, "page", 0, _page("recipe.html", {"p": p, "me": None, "voted": False}), at),
        _row(rec, "json", n, orjson.dumps(revision_document(rec, BASE)), made),
        _row(rec, "page", n, _page("revision.html", {"p": p, "toml": rec.revision.toml}), made),
    ]


def _row(rec: Any, kind: str, revision: int, body: bytes, modified: Any) -> dict[str, Any]:
    return {"slug": rec.slug, "kind": kind, "revision": revision, "recipe_id": rec.id, "body": body,
            "etag": _etag(body), "modified": http_date(modified)}  # fmt: skip


def refresh_documents(conn: Connection, recipe_id: int) -> None:
    """Re-render the stored documents of one recipe (or remove them when it is not visible); a chart
    not drawn yet is left to the engine's drawer when this process has one (:mod:`.drawer`)."""
    from lair.registry.service.chart import chart_store
    from lair.registry.service.chart_queue import drawer_for, note_pending

    conn.execute(_DELETE, {"rid": recipe_id})
    slug = conn.execute(_SLUG, {"rid": recipe_id}).scalar()
    if slug is None:
        return
    drawer = drawer_for(conn.engine)
    with chart_store(conn, defer=drawer is not None) as pending:
        rows = render_documents(conn, slug)
    conn.execute(_INSERT, rows)
    if drawer is not None and pending:  # drawn after the write, then rendered again (.drawer)
        note_pending(conn, recipe_id)
        drawer.submit(recipe_id, pending)


def user_recipes(conn: Connection, user_id: int) -> list[int]:
    """The recipes whose documents show the user: those they own, and those holding their rows."""
    return list(
        conn.execute(
            sa.union(
                sa.select(RECIPES.c.id).where(RECIPES.c.owner_id == user_id),
                sa.select(MEASUREMENTS.c.recipe_id).where(MEASUREMENTS.c.submitted_by == user_id),
                sa.select(QUALITY.c.recipe_id).where(QUALITY.c.submitted_by == user_id),
            )
        ).scalars()
    )


_AT_0009: weakref.WeakSet[Engine] = weakref.WeakSet()


def _stored_schema(conn: Connection) -> bool:
    """Whether the database has the tables of migration 0009 (remembered per engine once it has)."""
    if conn.engine in _AT_0009:
        return True
    if sa.inspect(conn).has_table("recipe_documents"):
        _AT_0009.add(conn.engine)
        return True
    return False


def changed(conn: Connection, recipe_ids: Iterable[int], *, lists: bool = True, forks: bool = False) -> None:
    """The one call of a write that changed recipes: bump the counters first (``lists``: the list
    version, else the vote version), then re-render each recipe's documents (and, with ``forks``,
    those of its forks: a fork's page says when its upstream has a newer revision)."""
    bump_version(conn)
    if not _stored_schema(conn):  # a database before migration 0009 (tests of older migrations)
        return
    column = VERSION.c.lists if lists else VERSION.c.votes
    bump = sa.update(VERSION).where(VERSION.c.id == 1).values({column: column + 1}).returning(column)
    value = conn.execute(bump).scalar_one()
    ids = list(dict.fromkeys(recipe_ids))
    if forks:
        ids += [f for rid in list(ids) for f in conn.execute(_FORKS, {"rid": rid}).scalars() if f not in ids]
    record("lists" if lists else "votes", value, ids)  # for the lists' cache, once committed
    for rid in ids:
        refresh_documents(conn, rid)


def refresh_missing(conn: Connection, batch: int = 500) -> int:
    """Render the documents of every visible recipe that has none (a database from before migration
    0009, or one filled in bulk behind the service layer); returns how many were rendered."""
    have = sa.select(DOCUMENTS.c.recipe_id).where(DOCUMENTS.c.kind == "json", DOCUMENTS.c.revision == 0)
    stmt = sa.select(RECIPES.c.id).where(visible(), RECIPES.c.id.not_in(have)).order_by(RECIPES.c.id)
    ids = list(conn.execute(stmt).scalars())
    for rid in ids:
        refresh_documents(conn, rid)
    return len(ids)


_STAMP = sa.select(VERSION.c.n, VERSION.c.documents).where(VERSION.c.id == 1)
# Setting the stamp bumps ``lists`` too: lists and searches key their cache on (lists, votes, the
# gap n - documents), and the gap going back to a value it had must not revive an entry of then.
_START = (
    sa.update(VERSION)
    .where(VERSION.c.id == 1, VERSION.c.documents.is_(None))
    .values(documents=VERSION.c.n - 1, lists=VERSION.c.lists + 1)
)
_HOLD = sa.update(VERSION).where(VERSION.c.id == 1).values(documents=VERSION.c.documents)
_STAMP_CURRENT = (
    sa.update(VERSION)
    .where(VERSION.c.id == 1, VERSION.c.n - VERSION.c.documents == sa.bindparam("gap"))
    .values(documents=VERSION.c.n, lists=VERSION.c.lists + 1, renderer=sa.bindparam("r"))
)
_RENDERER = sa.select(VERSION.c.renderer).where(VERSION.c.id == 1)
_SET_RENDERER = sa.update(VERSION).where(VERSION.c.id == 1).values(renderer=sa.bindparam("r"))
_ELECTION = 0x1A12D0C5
"""The PostgreSQL advisory lock the refresh of one process holds: one refresh per database."""
CHECK_EVERY = 50
"""Recipes rendered between two looks at the stamp (a write of an older release: start again later)."""


def documents_stale(conn: Connection) -> bool:
    """Whether a write left the stored documents stale: one of a release that bumps ``n`` alone."""
    n, documents = conn.execute(_STAMP).one()
    return bool(documents != n)


def _gap(conn: Connection) -> int:
    n, documents = conn.execute(_STAMP).one()
    return int(n - documents)


@contextmanager
def _elected(engine: Engine) -> Iterator[bool]:
    """True for the one process that refreshes (PostgreSQL: a session advisory lock on a
    connection of its own; SQLite: every process, its writes are serialized anyway)."""
    if engine.dialect.name != "postgresql":
        yield True
        return
    with engine.connect() as conn:
        got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _ELECTION}).scalar())
        conn.commit()
        try:
            yield got
        finally:
            if got:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _ELECTION})
                conn.commit()


def refresh_stale(engine: Engine, stop: threading.Event | None = None) -> bool:
    """Render every recipe's documents again when a write of an older release left them stale (the
    rolling upgrade, docs/deploy.md), then stamp them current, unless another such write came in
    meanwhile (the gap ``n - documents`` it started from moved: this release's own writes keep it,
    render what they change, and wait for each recipe's render on the version row's lock). True
    when the documents are current afterwards."""
    with engine.begin() as conn:
        conn.execute(_START)  # a stamp that was never set counts as one write behind
        gap = _gap(conn)
    if gap == 0:
        return True
    with _elected(engine) as elected:
        return elected and _render_all(engine, gap, stop) and _stamp_current(engine, gap)


def _render_all(engine: Engine, gap: int, stop: threading.Event | None) -> bool:
    """Every recipe's rows rendered again, one transaction each; False when the gap moved."""
    with engine.connect() as conn:
        ids = list(conn.execute(sa.select(RECIPES.c.id).order_by(RECIPES.c.id)).scalars())
    for i, rid in enumerate(ids):
        if stop is not None and stop.is_set():
            return False
        with engine.begin() as conn:
            conn.execute(_HOLD)  # the lock a write takes first: one recipe's render at a time
            if i % CHECK_EVERY == 0 and _gap(conn) != gap:
                return False
            refresh_documents(conn, rid)  # hidden ones: their rows removed
    return True


def _stamp_current(engine: Engine, gap: int) -> bool:
    """``documents = n`` unless an older release wrote since the gap was read."""
    with engine.begin() as conn:
        return bool(conn.execute(_STAMP_CURRENT, {"gap": gap, "r": renderer()}).rowcount)


RENDERED_BY = (
    "registry/web/templates",
    "registry/web/responses.py",
    "registry/service/page.py",
    "registry/service/document.py",
    "registry/service/chart.py",
    "report/charts.py",  # the speed charts' SVG, stored inline in the page
    "registry/service/markdown.py",
    "registry/service/timefmt.py",
    "registry/service/tiers.py",
    "registry/service/attempts.py",
)
"""What shapes a stored document's bytes besides the data (below ``lair/``): the templates and the
view code of the page and the JSON document, and the rules that tier a row and count its replication
attempts (a release that changes them says otherwise of the same rows)."""


def fingerprint(root: Path, version: str) -> str:
    """sha256 of ``version`` and every file of :data:`RENDERED_BY` under ``root`` (names and bytes)."""
    h = hashlib.sha256(version.encode() + b"\0")
    for rel in RENDERED_BY:
        top = root / rel
        files = sorted(f for f in top.rglob("*") if f.is_file()) if top.is_dir() else [top]
        for f in files:
            if "__pycache__" not in f.parts:
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def renderer() -> str:
    """This release's :func:`fingerprint`: what ``registry_version.renderer`` holds once every stored
    document was rendered by it (migration 0015)."""
    import lair

    return fingerprint(Path(lair.__file__).parent, lair.__version__)


def restyle(engine: Engine) -> int:
    """Render every recipe's documents again when another release's templates rendered them (the
    stamp ``renderer`` differs from :func:`renderer`; NULL: a release before migration 0015), then
    stamp them; the number of recipes rendered. ``lair serve`` runs it before serving, while the
    release before may go on serving the rows it rendered; on PostgreSQL one process does it. The
    pass is :func:`refresh_stale`'s, and stops (no stamp) when an older release's write moves the gap."""
    mine = renderer()
    with engine.connect() as conn:
        if conn.execute(_RENDERER).scalar() == mine:
            return 0
        gap, count = _gap(conn), conn.execute(sa.select(sa.func.count()).select_from(RECIPES)).scalar_one()
    with _elected(engine) as elected:
        if not (elected and _render_all(engine, gap, None)):
            return 0
        with engine.begin() as conn:
            conn.execute(_SET_RENDERER, {"r": mine})
    return int(count)


class Refresher:
    """:func:`refresh_stale` on a thread of its own, started by :meth:`poke` (the app pokes it when
    a read finds the stamp behind): one run at a time, a new one ``RETRY_S`` after the last."""

    RETRY_S = 2.0

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last = float("-inf")

    def poke(self) -> None:
        with self._lock:
            busy = self._thread is not None and self._thread.is_alive()
            if busy or self._stop.is_set() or time.monotonic() - self._last < self.RETRY_S:
                return
            self._last = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="lair-documents", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            refresh_stale(self.engine, self._stop)
        except Exception:  # an outage: the next poke after RETRY_S tries again
            log.warning("rendering the stale stored documents failed", exc_info=True)
        finally:
            self._last = time.monotonic()

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def with_base(body: bytes, kind: str, base: str) -> bytes:
    """A stored body with its links starting at ``base`` (escaped for JSON or HTML)."""
    repl = orjson.dumps(base)[1:-1] if kind == "json" else html.escape(base).encode()
    return body.replace(_BASE_B, repl)
