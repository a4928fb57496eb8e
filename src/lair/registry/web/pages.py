"""Account and community pages: sign up / in / out, publish, edit, compare revisions, fork, vote,
retract. Forms post here; each handler checks CSRF, calls one service function, redirects (303)."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from lair.errors import NotFound, RegistryError
from lair.registry.service import community, read
from lair.registry.service.accounts import (
    authenticate,
    check_name,
    create_user,
    revoke_session,
    rotate_session,
)
from lair.registry.service.scrub import redact
from lair.registry.web.auth import COOKIE, actor_of, check_csrf, limit, write_limit
from lair.registry.web.responses import html
from lair.registry.web.writes import (
    SIGNIN_LIMITS,
    SIGNUP_LIMIT,
    _address,
    _end_session_cookie,
    _session_cookie,
    committed,
)

__all__ = [
    "account_home", "account_page", "compare", "edit_form", "edit_post", "fork_post", "hide_recipe_post",
    "hide_user_post", "publish_form", "publish_post", "retract_post", "sign_in_form", "sign_in_post",
    "sign_out_post", "sign_up_form", "sign_up_post", "token_post", "token_revoke_post", "vote_post",
]  # fmt: skip


def _back(url: str) -> Response:
    return RedirectResponse(url, status_code=303)


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


FormHandler = Callable[[Request, dict[str, str]], Response]


def form_post(fn: FormHandler) -> Callable[[Request], Awaitable[Response]]:
    """A form's endpoint: the body read on the event loop, everything else (the statements, the
    documents the write renders, argon2, the rate limits' Redis) on a worker thread, so a write never
    holds up the requests served meanwhile."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        form = await _form(request)
        return await anyio.to_thread.run_sync(fn, request, form)

    return endpoint


def _page(request: Request, template: str, ctx: dict[str, Any], status: int = 200) -> Response:
    return html(template, ctx, status=status, cacheable=False)


def account_page(request: Request, mode: str, error: str | None = None, status: int = 200) -> Response:
    """The sign-up or sign-in form, with a button per configured OAuth provider."""
    providers = request.app.state.oauth_providers
    return _page(request, "account.html", {"mode": mode, "error": error, "providers": providers}, status)


async def sign_up_form(request: Request) -> Response:
    return account_page(request, "signup")


async def sign_in_form(request: Request) -> Response:
    return account_page(request, "signin")


def _session_for(request: Request, name: str, password: str, new: bool) -> str:
    with committed(request.app.state) as conn:
        if new:
            create_user(conn, name, password)
        actor = authenticate(conn, name, password)
        return rotate_session(conn, actor, request.cookies.get(COOKIE))[0]


def _signed_in(request: Request, name: str, password: str, *, new: bool) -> Response:
    sid = _session_for(request, name, password, new)  # argon2 (about 0.25 s a hash): on the thread
    resp = _back("/")
    _session_cookie(resp, request, sid)
    return resp


@form_post
def sign_up_post(request: Request, f: dict[str, str]) -> Response:
    try:
        limit(request, SIGNUP_LIMIT, "signup", _address(request))
        return _signed_in(request, f.get("name", ""), f.get("password", ""), new=True)
    except RegistryError as exc:
        return account_page(request, "signup", exc.message, exc.status)


@form_post
def sign_in_post(request: Request, f: dict[str, str]) -> Response:
    name = f.get("name", "")
    try:
        check_name(name)  # before it is a rate limit's key
        limit(request, SIGNIN_LIMITS[0], "signin", _address(request), name)
        limit(request, SIGNIN_LIMITS[1], "signin", _address(request))
        return _signed_in(request, name, f.get("password", ""), new=False)
    except RegistryError as exc:
        return account_page(request, "signin", exc.message, exc.status)


def _actor_checked(request: Request, conn: Any, form: dict[str, str]) -> Any:
    actor = actor_of(request, conn)
    if actor is not None:
        check_csrf(request, actor, form.get("csrf"))
        limit(request, write_limit(request), "write", actor.name)
    return actor


@form_post
def sign_out_post(request: Request, f: dict[str, str]) -> Response:
    with committed(request.app.state) as conn:
        _actor_checked(request, conn, f)
        if request.cookies.get(COOKIE):
            revoke_session(conn, request.cookies[COOKIE])
    resp = _back("/")
    _end_session_cookie(resp, request)
    return resp


def _me(request: Request) -> Any:
    with request.app.state.engine.connect() as conn:
        return actor_of(request, conn)


def publish_form(request: Request) -> Response:
    """The form, holding the starter recipe ``lair new`` writes (vLLM in Docker on one node)."""
    from lair.recipe.scaffold import ScaffoldOptions, scaffold

    ctx = {"me": _me(request), "toml": scaffold(ScaffoldOptions()), "notes": "", "error": None, "slug": None}
    return _page(request, "publish.html", ctx | {"starter": True})


def _form_error(request: Request, ctx: dict[str, Any], exc: RegistryError) -> Response:
    if exc.code == "secret":  # the form comes back without the token the user pasted
        ctx = ctx | {"toml": redact(ctx["toml"]), "notes": redact(ctx["notes"])}
    return _page(request, "publish.html", ctx | {"me": _me(request), "error": exc}, exc.status)


@form_post
def publish_post(request: Request, f: dict[str, str]) -> Response:
    text, notes = f.get("toml", ""), f.get("notes", "")
    ctx = {"toml": text, "notes": notes, "slug": None}
    try:
        with committed(request.app.state) as conn:
            actor = _actor_checked(request, conn, f)
            pub = community.publish_recipe(conn, actor, text, notes)
    except RegistryError as exc:
        return _form_error(request, ctx, exc)
    return _back(f"/recipes/{pub.slug}")


def edit_form(request: Request) -> Response:
    slug = request.path_params["slug"]
    with request.app.state.engine.connect() as conn:
        rec = read.get_recipe(conn, slug)
        me = actor_of(request, conn)
    return _page(
        request,
        "publish.html",
        {"me": me, "toml": rec.revision.toml, "notes": "", "error": None, "slug": slug},
    )


@form_post
def edit_post(request: Request, f: dict[str, str]) -> Response:
    slug = request.path_params["slug"]
    ctx = {"toml": f.get("toml", ""), "notes": f.get("notes", ""), "slug": slug}
    try:
        with committed(request.app.state) as conn:
            actor = _actor_checked(request, conn, f)
            community.revise(conn, actor, slug, ctx["toml"], ctx["notes"])
    except RegistryError as exc:
        return _form_error(request, ctx, exc)
    return _back(f"/recipes/{slug}")


@form_post
def fork_post(request: Request, f: dict[str, str]) -> Response:
    slug = request.path_params["slug"]
    with committed(request.app.state) as conn:
        pub = community.fork(conn, _actor_checked(request, conn, f), slug)
    return _back(f"/recipes/{pub.slug}")


@form_post
def vote_post(request: Request, f: dict[str, str]) -> Response:
    slug = request.path_params["slug"]
    with committed(request.app.state) as conn:
        community.vote(conn, _actor_checked(request, conn, f), slug, f.get("vote") != "off")
    return _back(f"/recipes/{slug}")


@form_post
def retract_post(request: Request, f: dict[str, str]) -> Response:
    raw = request.path_params["id"]
    if not raw.isdigit() or not 0 < int(raw) < 2**62:
        raise NotFound(f"no measurement {raw[:30]!r}")
    with committed(request.app.state) as conn:
        who, quality = _actor_checked(request, conn, f), request.url.path.startswith("/quality/")
        community.retract(conn, who, int(raw), f.get("reason", ""), quality=quality)
    back = f.get("back", "/")
    return _back(back if back.startswith("/recipes/") else "/")


@form_post
def hide_recipe_post(request: Request, f: dict[str, str]) -> Response:
    """An admin's "hide this recipe": it leaves search and pages (the API's DELETE shows it again)."""
    slug = request.path_params["slug"]
    with committed(request.app.state) as conn:
        community.hide_recipe(conn, _actor_checked(request, conn, f), slug, True)
    return _back("/")


@form_post
def hide_user_post(request: Request, f: dict[str, str]) -> Response:
    """An admin's "hide this user": their sign-in and tokens stop working, their recipes disappear."""
    name = request.path_params["name"]
    with committed(request.app.state) as conn:
        community.hide_user(conn, _actor_checked(request, conn, f), name, True)
    return _back("/")


def _tokens_page(
    request: Request,
    conn: Any,
    me: Any,
    new: dict[str, str] | None = None,
    error: Any = None,
    status: int = 200,
) -> Response:
    """The signed-in user's account page: the new token (``new``: shown on this response only, never
    again), the token form (with ``error``), and the tokens with their last use and revoke buttons."""
    from lair.registry.service.accounts import TOKEN_SCOPES, list_tokens

    ctx = {"mode": "account", "me": me, "tokens": list_tokens(conn, me), "new": new, "error": error,
           "scopes": list(TOKEN_SCOPES), "providers": []}  # fmt: skip
    return _page(request, "account.html", ctx, status)


def account_home(request: Request) -> Response:
    with request.app.state.engine.connect() as conn:
        me = actor_of(request, conn)
        return _tokens_page(request, conn, me) if me is not None else _back("/signin")


@form_post
def token_post(request: Request, f: dict[str, str]) -> Response:
    """Create an API token from the account page's form; the page that answers shows it once."""
    from lair.registry.service.accounts import issue_token

    try:
        with committed(request.app.state) as conn:
            me = _actor_checked(request, conn, f)
            token, _ = issue_token(conn, me, f.get("name", ""), f.get("scope", ""))
            return _tokens_page(request, conn, me, {"token": token, "name": f["name"].strip()})
    except RegistryError as exc:
        with request.app.state.engine.connect() as conn:
            if (me := actor_of(request, conn)) is None:
                raise
            return _tokens_page(request, conn, me, error=exc, status=exc.status)


@form_post
def token_revoke_post(request: Request, f: dict[str, str]) -> Response:
    from lair.registry.service.accounts import revoke_token

    raw = request.path_params["id"]
    if not raw.isdigit() or not 0 < int(raw) < 2**62:
        raise NotFound(f"no token {raw[:30]!r}")
    with committed(request.app.state) as conn:
        revoke_token(conn, _actor_checked(request, conn, f), int(raw))
    return _back("/account")


def side_by_side(a: str, b: str) -> list[tuple[str, str, str]]:
    """Rows of (tag, left, right) for a two-column diff."""
    left, right = a.splitlines(), b.splitlines()
    rows: list[tuple[str, str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right).get_opcodes():
        n = max(i2 - i1, j2 - j1)
        for k in range(n):
            lt = left[i1 + k] if i1 + k < i2 else ""
            rt = right[j1 + k] if j1 + k < j2 else ""
            rows.append((tag, lt, rt))
    return rows


def compare(request: Request) -> Response:
    """Two revisions of a recipe (or a fork against its upstream's latest), unified and side by side."""
    from lair.registry.service.search import parse_int

    slug, q = request.path_params["slug"], request.query_params
    with request.app.state.engine.connect() as conn:
        rec = read.get_recipe(conn, slug)
        me = actor_of(request, conn)
        if q.get("upstream") and rec.upstream:
            up = read.get_recipe(conn, rec.upstream)
            a_text, b_text = up.revision.toml, rec.revision.toml
            labels = (f"{rec.upstream}@{up.revision.number}", f"{slug}@{rec.revision.number}")
        else:
            a = parse_int(q.get("from"), "from", 1, 10**9) or max(rec.revision.number - 1, 1)
            b = parse_int(q.get("to"), "to", 1, 10**9) or rec.revision.number
            a_text, b_text = (
                read.get_revision(conn, slug, a).revision.toml,
                read.get_revision(conn, slug, b).revision.toml,
            )
            labels = (f"{slug}@{a}", f"{slug}@{b}")
    unified = "".join(difflib.unified_diff(a_text.splitlines(True), b_text.splitlines(True), *labels))
    ctx = {"slug": slug, "labels": labels, "unified": unified, "rows": side_by_side(a_text, b_text),
           "history": rec.history, "quote": quote, "me": me}  # fmt: skip
    return _page(request, "compare.html", ctx)
