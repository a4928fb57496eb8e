"""Write routes of the JSON API: thin wrappers over :mod:`lair.registry.service.community`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio.to_thread
import orjson
from sqlalchemy import Connection
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response

from lair.errors import Invalid, NotFound, TooLarge
from lair.registry.service import community
from lair.registry.service.accounts import check_name
from lair.registry.service.actor import Actor
from lair.registry.service.changes import recording
from lair.registry.service.permissions import need
from lair.registry.web.auth import actor_of, check_csrf, limit, write_limit
from lair.registry.web.responses import json_response

__all__ = ["committed", "create_recipe", "create_revision", "diff", "fork", "retract", "vote"]

MAX_BODY = community.MAX_RECIPE_BYTES + 16 * 1024
SIGNIN_LIMITS = ("10/minute", "30/hour")  # per name and address, then per address
SIGNUP_LIMIT = "5/minute"


async def _json_body(request: Request) -> dict[str, Any]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge(f"a request body is at most {MAX_BODY // 1024} KiB")
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        raise Invalid("the body is not JSON") from None
    if not isinstance(data, dict):
        raise Invalid("the body is a JSON object")
    return data


def _str(data: dict[str, Any], key: str, required: bool = True) -> str:
    v = data.get(key, None if required else "")
    if not isinstance(v, str) or (required and not v):
        raise Invalid("a string is required", location=key)
    return v


@contextmanager
def committed(state: State) -> Iterator[Connection]:
    """The transaction of a write route (``state``: the app's). Once it committed, the recipes
    behind each counter bump it made go to the app's change log, so the cached lists and searches
    they are not on are kept (:mod:`lair.registry.web.lists`); a write that opens its transaction
    elsewhere is unknown to the log and every cached list renders again after it. While it runs the
    event loop steps aside for it (:mod:`lair.registry.web.priority`)."""
    with state.priority.writing(), recording() as notes:
        with state.engine.begin() as conn:
            yield conn
        state.changes.add(notes)


@contextmanager
def _writing(request: Request) -> Iterator[tuple[Connection, Actor | None]]:
    """One transaction, the actor, CSRF for cookie sessions, the write rate limit per actor/address."""
    with committed(request.app.state) as conn:
        actor = actor_of(request, conn)
        check_csrf(request, actor)
        who = actor.name if actor else (request.client.host if request.client else "-")
        limit(request, write_limit(request), "write", who)
        yield conn, actor


def _run_sync(request: Request, fn: Callable[[Connection, Actor | None], Any]) -> Any:
    with _writing(request) as (conn, actor):
        return fn(conn, actor)


async def _run(request: Request, fn: Callable[[Connection, Actor | None], Any]) -> Any:
    """The write on a worker thread: its statements, and the render of the documents it changed,
    never hold the event loop (other requests go on being served)."""
    return await anyio.to_thread.run_sync(_run_sync, request, fn)


def _created(data: dict[str, Any]) -> Response:
    return json_response({"ok": True} | data, status=201, cacheable=False)


async def create_recipe(request: Request) -> Response:
    data = await _json_body(request)
    text, notes = _str(data, "toml"), _str(data, "notes", False)
    pub = await _run(request, lambda c, a: community.publish_recipe(c, a, text, notes))
    return _created({"slug": pub.slug, "revision": pub.revision, "sha256": pub.sha256})


async def create_revision(request: Request) -> Response:
    data = await _json_body(request)
    slug, text, notes = request.path_params["slug"], _str(data, "toml"), _str(data, "notes", False)
    pub = await _run(request, lambda c, a: community.revise(c, a, slug, text, notes))
    return _created({"slug": pub.slug, "revision": pub.revision, "sha256": pub.sha256})


async def fork(request: Request) -> Response:
    slug = request.path_params["slug"]
    pub = await _run(request, lambda c, a: community.fork(c, a, slug))
    return _created({"slug": pub.slug, "upstream": slug, "revision": pub.revision})


async def vote(request: Request) -> Response:
    slug, on = request.path_params["slug"], request.method == "PUT"
    votes = await _run(request, lambda c, a: community.vote(c, a, slug, on))
    return json_response({"ok": True, "votes": votes}, cacheable=False)


async def retract(request: Request) -> Response:
    data = await _json_body(request)
    raw, reason = request.path_params["id"], _str(data, "reason")
    if not raw.isdigit() or not 0 < int(raw) < 2**62:
        raise NotFound(f"no measurement {raw[:30]!r}")
    quality = request.url.path.startswith("/api/v1/quality/")
    await _run(request, lambda c, a: community.retract(c, a, int(raw), reason, quality=quality))
    return json_response({"ok": True, "retracted": int(raw)}, cacheable=False)


async def hide(request: Request) -> Response:
    slug, hidden = request.path_params["slug"], request.method == "PUT"
    await _run(request, lambda c, a: community.hide_recipe(c, a, slug, hidden))
    return json_response({"ok": True, "slug": slug, "hidden": hidden}, cacheable=False)


async def hide_user(request: Request) -> Response:
    name, hidden = request.path_params["name"], request.method == "PUT"
    await _run(request, lambda c, a: community.hide_user(c, a, name, hidden))
    return json_response({"ok": True, "name": name, "hidden": hidden}, cacheable=False)


def diff(request: Request) -> Response:
    from lair.registry.service.search import parse_int

    q = request.query_params
    a = parse_int(q.get("from"), "from", 1, 10**9)
    b = parse_int(q.get("to"), "to", 1, 10**9)
    if a is None or b is None:
        raise Invalid("query parameters from and to are required")
    with request.app.state.engine.connect() as conn:
        text = community.diff(conn, request.path_params["slug"], a, b)
    return json_response({"ok": True, "from": a, "to": b, "diff": text})


__all__ += ["hide", "hide_user"]


def _address(request: Request) -> str:
    return request.client.host if request.client else "-"


def _behind_https(request: Request) -> bool:
    """The request came over https, or the site's public URL is https (a TLS-terminating proxy in
    front of the server speaks plain http to it)."""
    return request.url.scheme == "https" or request.app.state.public_url.startswith("https://")


def _session_cookie(resp: Response, request: Request, sid: str) -> None:
    from lair.registry.service.accounts import SESSION_DAYS
    from lair.registry.web.auth import COOKIE

    secure = _behind_https(request)
    resp.set_cookie(COOKIE, sid, max_age=SESSION_DAYS * 86400, httponly=True, samesite="lax", secure=secure)


def _end_session_cookie(resp: Response, request: Request) -> None:
    from lair.registry.web.auth import COOKIE

    resp.delete_cookie(COOKIE, httponly=True, samesite="lax", secure=_behind_https(request))


async def sign_up(request: Request) -> Response:
    from lair.registry.service.accounts import authenticate, create_session, create_user

    data = await _json_body(request)
    name, password = _str(data, "name"), _str(data, "password")

    def made() -> tuple[str, str]:  # the limit's Redis and argon2 (about 0.25 s) on a worker thread
        limit(request, SIGNUP_LIMIT, "signup", _address(request))
        with committed(request.app.state) as conn:
            create_user(conn, name, password)
            return create_session(conn, authenticate(conn, name, password))

    sid, csrf = await anyio.to_thread.run_sync(made)
    resp = json_response({"ok": True, "name": name, "csrf": csrf}, status=201, cacheable=False)
    _session_cookie(resp, request, sid)
    return resp


async def sign_in(request: Request) -> Response:
    """A new session each time (rotated); the old cookie, if any, is revoked."""
    from lair.registry.service.accounts import authenticate, rotate_session
    from lair.registry.web.auth import COOKIE

    data = await _json_body(request)
    name, password = _str(data, "name"), _str(data, "password")
    check_name(name)  # before it is a rate limit's key

    def signed_in() -> tuple[Actor, str, str]:  # the limits' Redis and argon2 on a worker thread
        limit(request, SIGNIN_LIMITS[0], "signin", _address(request), name)
        limit(request, SIGNIN_LIMITS[1], "signin", _address(request))
        with committed(request.app.state) as conn:
            actor = authenticate(conn, name, password)
            return actor, *rotate_session(conn, actor, request.cookies.get(COOKIE))

    actor, sid, csrf = await anyio.to_thread.run_sync(signed_in)
    resp = json_response({"ok": True, "name": actor.name, "csrf": csrf}, cacheable=False)
    _session_cookie(resp, request, sid)
    return resp


def sign_out(request: Request) -> Response:
    from lair.registry.service.accounts import revoke_session
    from lair.registry.web.auth import COOKIE

    sid = request.cookies.get(COOKIE)
    with committed(request.app.state) as conn:
        check_csrf(request, actor_of(request, conn))
        if sid:
            revoke_session(conn, sid)
    resp = json_response({"ok": True}, cacheable=False)
    _end_session_cookie(resp, request)
    return resp


__all__ += ["sign_in", "sign_out", "sign_up"]


def tokens(request: Request) -> Response:
    from lair.registry.service.accounts import list_tokens

    with request.app.state.engine.begin() as conn:
        actor = need(actor_of(request, conn), "read")
        return json_response({"ok": True, "tokens": list_tokens(conn, actor)}, cacheable=False)


def me(request: Request) -> Response:
    """Who the request's token (or session) acts as: ``lair login`` checks a token with it."""
    from lair.registry.service.accounts import whoami

    with request.app.state.engine.begin() as conn:
        return json_response({"ok": True} | whoami(actor_of(request, conn)), cacheable=False)


async def revoke_token(request: Request) -> Response:
    from lair.registry.service.accounts import revoke_token as revoke

    raw = request.path_params["id"]
    if not raw.isdigit() or not 0 < int(raw) < 2**62:
        raise NotFound(f"no token {raw[:30]!r}")

    await _run(request, lambda c, a: revoke(c, a, int(raw)))
    return json_response({"ok": True, "revoked": int(raw)}, cacheable=False)


async def create_token(request: Request) -> Response:
    """``{"name", "scope"}`` -> 201 with the token's value, the only time it is shown."""
    from lair.registry.service.accounts import issue_token

    data = await _json_body(request)
    name, scope = _str(data, "name"), _str(data, "scope")
    token, tid = await _run(request, lambda c, a: issue_token(c, a, name, scope))
    return _created({"token": token, "id": tid, "name": name.strip(), "scope": scope})


__all__ += ["create_token", "me", "revoke_token", "tokens"]
