"""The ASGI app: ``create_app(db_url)`` (also the factory ``lair serve`` hands to granian)."""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from lair.errors import RegistryError, Unavailable
from lair.registry.db.engine import Checkpointer, connect_url, dialect_of, make_engine
from lair.registry.oauth import Provider, load_providers
from lair.registry.service.blobs import blob_store
from lair.registry.service.drawer import ChartDrawer
from lair.registry.service.outage import unavailable
from lair.registry.service.stored import Refresher
from lair.registry.settings import Settings
from lair.registry.web import matrix_routes, pages, report_routes, routes, writes
from lair.registry.web.auth import RateLimits
from lair.registry.web.cache import ResponseCache, make_versions
from lair.registry.web.hosts import allowed_hosts as hosts_for
from lair.registry.web.lists import ChangeLog
from lair.registry.web.middleware import CacheMiddleware, unavailable_response
from lair.registry.web.priority import WritePriority
from lair.registry.web.responses import error_response

__all__ = ["create_app", "factory"]

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _error(
    request: Request, status: int, code: str, message: str, extra: dict[str, Any] | None = None
) -> Response:
    return error_response(request.url.path, status, code, message, extra)


async def _registry_error(request: Request, exc: Exception) -> Response:
    """The one handler of the registry's typed errors (:mod:`lair.errors`): each class's ``status``
    and ``code`` into the error envelope (an HTML page off the API); ``Retry-After`` on a 503 that
    names a wait."""
    assert isinstance(exc, RegistryError)
    if isinstance(exc, Unavailable) and exc.retry_after is not None:
        return unavailable_response(request.url.path, exc)
    extra = {k: v for k, v in exc.as_dict().items() if k in ("hint", "errors", "reasons")}
    return _error(request, exc.status, exc.code, exc.message, extra)


_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "too_large"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return _error(request, exc.status_code, _CODES.get(exc.status_code, "error"), message)


async def _outage(request: Request, exc: Exception) -> Response:
    """A database or disk failure that is an outage (:mod:`~lair.registry.service.outage`): 503 with
    ``Retry-After``; any other is raised on, to the 500 handler."""
    u = unavailable(exc)
    if u is None:
        raise exc
    return unavailable_response(request.url.path, u)


async def _server_error(request: Request, exc: Exception) -> Response:
    return _error(request, 500, "internal", "internal server error")


def _routes() -> list[Any]:
    r = routes
    return [
        Route("/", r.home),
        Route("/recipes", r.home),
        Route("/recipes.json", r.api_list),
        Route("/signup", pages.sign_up_form, methods=["GET"]),
        Route("/signup", pages.sign_up_post, methods=["POST"]),
        Route("/signin", pages.sign_in_form, methods=["GET"]),
        Route("/signin", pages.sign_in_post, methods=["POST"]),
        Route("/signout", pages.sign_out_post, methods=["POST"]),
        Route("/account", pages.account_home, methods=["GET"]),
        Route("/account/tokens", pages.token_post, methods=["POST"]),
        Route("/account/tokens/{id}/revoke", pages.token_revoke_post, methods=["POST"]),
        Route("/publish", pages.publish_form, methods=["GET"]),
        Route("/publish", pages.publish_post, methods=["POST"]),
        Route("/recipes/{slug}/edit", pages.edit_form, methods=["GET"]),
        Route("/recipes/{slug}/edit", pages.edit_post, methods=["POST"]),
        Route("/recipes/{slug}/compare", pages.compare),
        Route("/recipes/{slug}/fork", pages.fork_post, methods=["POST"]),
        Route("/recipes/{slug}/vote", pages.vote_post, methods=["POST"]),
        Route("/measurements/{id}/retract", pages.retract_post, methods=["POST"]),
        Route("/quality/{id}/retract", pages.retract_post, methods=["POST"]),
        Route("/recipes/{slug}/hide", pages.hide_recipe_post, methods=["POST"]),
        Route("/users/{name}/hide", pages.hide_user_post, methods=["POST"]),
        Route("/recipes/{name}", r.recipe),
        Route("/recipes/{slug}/revisions/{name}", r.revision),
        Route("/recipes/{slug}/placeholders", r.placeholders),
        Route("/recipes/{slug}/placeholders.json", r.placeholders_json),
        Route("/recipes/{slug}/fit", r.fit),
        Route("/recipes/{slug}/fit.json", r.fit_json),
        Route("/recipes/{slug}/cost", r.cost),
        Route("/recipes/{slug}/cost.json", r.cost_json),
        Route("/recipes/{slug}/matrix", matrix_routes.recipe_matrix),
        Route("/recipes/{slug}/matrix.json", matrix_routes.recipe_matrix_json),
        Route("/models/{model:path}/matrix", matrix_routes.model_matrix),
        Route("/models/{model:path}/matrix.json", matrix_routes.model_matrix_json),
        Route("/api/v1/recipes", r.api_list, methods=["GET", "HEAD"]),
        Route("/api/v1/recipes", writes.create_recipe, methods=["POST"]),
        Route("/api/v1/recipes/{slug}/revisions", writes.create_revision, methods=["POST"]),
        Route("/api/v1/recipes/{slug}/diff", writes.diff),
        Route("/api/v1/recipes/{slug}/fork", writes.fork, methods=["POST"]),
        Route("/api/v1/recipes/{slug}/vote", writes.vote, methods=["PUT", "DELETE"]),
        Route("/api/v1/recipes/{slug}/hidden", writes.hide, methods=["PUT", "DELETE"]),
        Route("/api/v1/users/{name}/hidden", writes.hide_user, methods=["PUT", "DELETE"]),
        Route("/api/v1/measurements/{id}/retract", writes.retract, methods=["POST"]),
        Route("/api/v1/quality/{id}/retract", writes.retract, methods=["POST"]),
        Route("/api/v1/users", writes.sign_up, methods=["POST"]),
        Route("/api/v1/me", writes.me, methods=["GET"]),
        Route("/api/v1/tokens", writes.tokens, methods=["GET"]),
        Route("/api/v1/tokens", writes.create_token, methods=["POST"]),
        Route("/api/v1/tokens/{id}", writes.revoke_token, methods=["DELETE"]),
        Route("/api/v1/session", writes.sign_in, methods=["POST"]),
        Route("/api/v1/session", writes.sign_out, methods=["DELETE"]),
        Route("/api/v1/recipes/{name}", r.api_recipe),
        Route("/api/v1/recipes/{slug}/revisions/{name}", r.api_revision),
        Route("/api/v1/recipes/{slug}/placeholders", r.placeholders_json),
        Route("/api/v1/recipes/{slug}/fit", r.fit_json),
        Route("/api/v1/recipes/{slug}/cost", r.cost_json),
        Route("/api/v1/reports", report_routes.submit, methods=["POST"]),
        Route("/api/v1/reports/{name}", report_routes.report_json),
        Route("/reports/{name}", report_routes.report_page),
        Route("/reports/{rid}/files/{path:path}", report_routes.report_file),
        Route("/api/v1/gpus", r.gpus),
        Route("/api/v1/efficiencies", r.efficiencies),
        Route("/api/v1/health", r.health),
        Route("/api/v1/openapi.json", r.openapi),
        Route("/llms.txt", r.llms),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def create_app(
    db_url: str | None = None,
    *,
    settings: Settings | None = None,
    public_url: str | None = None,
    cache_bytes: int | None = None,
    blobs: str | None = None,
    oauth: Mapping[str, Provider] | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> Any:
    """The app of ``settings`` (default: :meth:`Settings.from_env`, the registry's one settings
    table); the keyword arguments override single settings: the database, the blob store (see
    ``blob_store``), the sign-in providers, the public URL and allowed hosts (the names answered and
    where absolute URLs come from, :mod:`~lair.registry.web.hosts`), the response cache's size."""
    conf = settings or Settings.from_env()
    url = connect_url(db_url or conf.db)
    providers = load_providers(conf.environ) if oauth is None else oauth
    engine = make_engine(url)
    versions = make_versions(url)
    refresher = Refresher(engine)  # stored documents an older release's writes left stale
    checkpoints = Checkpointer(engine) if dialect_of(url) == "sqlite" else None
    changes = ChangeLog()  # what this process's writes changed: cached lists kept across them
    priority = WritePriority.of(dialect_of(url))  # every write of the process goes first (web/priority.py)
    drawer = ChartDrawer(engine, changes.add, priority.writing) if conf.charts == "deferred" else None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        if checkpoints is not None:
            checkpoints.start()  # the WAL copied back off the write path
        if drawer is not None:
            await anyio.to_thread.run_sync(drawer.start)  # the charts drawn off the write
        yield
        if drawer is not None:
            await anyio.to_thread.run_sync(drawer.close)
        if checkpoints is not None:
            checkpoints.close()
        refresher.close()
        await versions.close()
        engine.dispose()

    public = (public_url or conf.public_url).rstrip("/")
    auth = [Mount("/auth", _oauth(providers, public))] if providers else []
    app = Starlette(
        routes=_routes() + auth,
        exception_handlers={
            RegistryError: _registry_error,
            HTTPException: _http_error,
            DBAPIError: _outage,
            sqlite3.Error: _outage,
            OSError: _outage,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.settings = conf
    app.state.limits = RateLimits(conf.redis)
    app.state.changes = changes
    app.state.priority = priority
    app.state.drawer = drawer
    app.state.engine = engine
    app.state.blobs = blob_store(blobs or conf.blobs or None, db_url=url, engine=engine)
    app.state.public_url = public
    names = allowed_hosts if allowed_hosts is not None else [",".join(conf.allowed_hosts)]
    app.state.allowed_hosts = hosts_for(public, names)
    app.state.oauth_providers = [{"name": p.name, "title": p.title} for p in providers.values()]
    size = cache_bytes if cache_bytes is not None else conf.cache_mb << 20
    front = CacheMiddleware(app, versions, ResponseCache(size) if size > 0 else None, refresher.poke)
    return behind_proxies(front, conf.forwarded_allow_ips)


def behind_proxies(app: Any, proxies: tuple[str, ...]) -> Any:
    """``app`` reading the client's address (and scheme) from ``X-Forwarded-For``/``-Proto`` when
    the peer is one of ``proxies`` (granian's own proxy-headers wrapper: the rightmost address that
    is not a trusted proxy), else as it is. ``app.app`` stays the Starlette app either way."""
    if not proxies:
        return app
    from granian.utils.proxies import wrap_asgi_with_proxy_headers

    wrapped = wrap_asgi_with_proxy_headers(app, list(proxies))
    wrapped.app = app.app
    return wrapped


def _oauth(providers: Mapping[str, Provider], public_url: str) -> Any:
    from lair.registry.web.oauth_routes import oauth_app  # authlib is loaded only when configured

    return oauth_app(providers, https=public_url.startswith("https://"))


SWITCH_INTERVAL_S = 0.0001
"""How long a thread holds the GIL while another waits for it. Python's 5 ms made a write on a worker
thread wait up to 5 ms for the GIL after each of its ~30 statements while the event loop was busy with
reads (write p99 0.5-1.2 s under a read load). At 0.5 ms a vote's p99 under 32 connections of reads
was 58-65 ms, at 0.1 ms 43 ms, with the reads' own figures no worse (2,000 recipes, 10 writes/s:
6,247 req/s p99 28.6 ms at 0.5 ms, 7,417 p99 19.3 ms at 0.1 ms). Nothing is forced while no other
thread waits for the GIL."""


def _warm_writes(engine: Any, drawer: ChartDrawer | None = None) -> None:
    """What the first write of a process loads and compiles (the page templates, the recipe checks,
    the canonical export, the markdown and TOML modules, matplotlib's first figure), loaded before
    serving: one recipe's documents rendered and its revision checked, one chart drawn, nothing
    stored. The first revision after a start took 0.2 s more than the next (0.8 s more when it drew
    a chart), over a second under a read load. With the app's chart ``drawer`` the chart is drawn by
    its process (started here), and this one never loads matplotlib for a write."""
    import sqlalchemy as sa

    from lair.recipe import check_text
    from lair.registry.db.tables import RECIPES, REVISIONS, visible
    from lair.registry.service.canonical import canonical, parse_recipe
    from lair.registry.service.chart import chart_store
    from lair.registry.service.scrub import scan_recipe
    from lair.registry.service.stored import render_documents
    from lair.report.charts import Chart, Series, render

    latest = sa.and_(REVISIONS.c.recipe_id == RECIPES.c.id, REVISIONS.c.number == RECIPES.c.latest_revision)
    one = sa.select(RECIPES.c.slug, REVISIONS.c.toml).join(REVISIONS, latest).where(visible()).limit(1)
    try:
        if drawer is not None:
            drawer.warm()
        else:
            render(Chart("warm", "warm", "tok/s", [Series(1, [(1.0, 1.0), (2.0, 2.0)], tier="reported")], ""))
        with engine.connect() as conn:  # rolled back at the end: the charts it may keep, too
            row = conn.execute(one).first()
            if row is None:
                return
            scan_recipe(row.toml)
            check_text(row.toml, "recipe.toml", "toml")
            canonical(parse_recipe(row.toml))
            with chart_store(conn, defer=drawer is not None):
                render_documents(conn, row.slug)
    except Exception:  # never in the way of serving: the first write pays, as it would have
        log.warning("warming the write path up failed", exc_info=True)


MALLOC_ARENAS = 2
"""glibc's malloc gives threads that allocate at once arenas of their own (up to 8 per core), and
memory freed in one stays in it: with the write threads beside the event loop the worker's RSS after
100,000 distinct requests was 307 MB, above the 300 MB budget, at a cache of 64 MB."""


def _few_arenas() -> None:
    """At most :data:`MALLOC_ARENAS` malloc arenas in this process (``mallopt(M_ARENA_MAX)``; a no-op
    off glibc)."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-8, MALLOC_ARENAS)  # M_ARENA_MAX
    except (OSError, AttributeError):
        log.debug("no mallopt here: malloc keeps its own arena count")


def factory() -> Any:
    """For granian's ``--factory``: the database comes from ``LAIR_REGISTRY_DB``.

    The objects built at start-up (modules, models, templates) are moved out of the garbage
    collector's reach and young collections are made rarer: a full collection over them took tens of
    milliseconds, which showed up as the p99 of cached responses."""
    import gc

    _few_arenas()
    app = create_app(settings=Settings.from_env())
    _warm_writes(app.app.state.engine, app.app.state.drawer)
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return app
