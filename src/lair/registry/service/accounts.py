"""Accounts: users with argon2 password hashes, browser sessions and API tokens.

Tokens and session ids are random (``secrets``), handed out once and stored only as their sha256;
an :class:`Actor` is who a request acts as. Authorization lives in :mod:`.community`, not in templates.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta
from functools import cache
from typing import cast

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import Conflict, Invalid, Issue, NotFound, Unauthorized
from lair.registry.db.schema import ApiToken, Session
from lair.registry.db.tables import USERS
from lair.registry.db.version import bump_version, now
from lair.registry.service.actor import SCOPES, Actor
from lair.registry.service.permissions import ensure, need

__all__ = [
    "SCOPES",
    "Actor",
    "authenticate",
    "create_session",
    "create_token",
    "create_user",
    "revoke_session",
    "revoke_token",
    "rotate_session",
    "session_actor",
    "token_actor",
]

SESSIONS = cast(sa.Table, Session.__table__)
TOKENS = cast(sa.Table, ApiToken.__table__)
NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")
"""A user name, matched whole (``fullmatch``)."""
SESSION_DAYS = 14
MIN_PASSWORD = 10


def _hasher() -> object:
    from argon2 import PasswordHasher

    return PasswordHasher()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> None:
    """422 with the field path unless ``name`` is a user name (checked before it is used anywhere,
    a rate limit's key included: a 200 KiB name is refused, never counted)."""
    if not NAME_RE.fullmatch(name):  # fullmatch: ``$`` alone would let "admin\n" through
        why = "a user name is 1-40 lowercase letters, digits and inner hyphens"
        field = Issue("body", 1, 1, "name", why, code="invalid")
        raise Invalid(why, location="name", errors=[field])


def create_user(conn: Connection, name: str, password: str | None = None, *, admin: bool = False) -> int:
    check_name(name)
    if password is not None and len(password) < MIN_PASSWORD:
        raise Invalid(f"a password has at least {MIN_PASSWORD} characters")
    if conn.execute(sa.select(USERS.c.id).where(USERS.c.name == name)).first():
        raise Conflict(f"the name {name!r} is taken")
    pw = _hasher().hash(password) if password is not None else None  # type: ignore[attr-defined]
    values = {"name": name, "display_name": name, "is_admin": admin, "password_hash": pw, "created_at": now()}
    uid = int(conn.execute(sa.insert(USERS).values(**values).returning(USERS.c.id)).scalar_one())
    bump_version(conn)
    return uid


def authenticate(conn: Connection, name: str, password: str) -> Actor:
    """The user for a name and password; one message for an unknown name and a wrong password."""
    from argon2.exceptions import VerifyMismatchError

    row = conn.execute(sa.select(USERS).where(USERS.c.name == name, USERS.c.hidden == sa.false())).first()
    hasher = _hasher()
    stored = row.password_hash if row is not None and row.password_hash else None
    try:
        hasher.verify(stored or _dummy_hash(), password)  # type: ignore[attr-defined]
        if stored is None:
            raise VerifyMismatchError
    except Exception:
        raise Unauthorized("wrong user name or password") from None
    assert row is not None
    return Actor(row.id, row.name, bool(row.is_admin))


@cache
def _dummy_hash() -> str:
    """Verified against when the user does not exist, so both failures take the same time."""
    return str(_hasher().hash(secrets.token_hex(16)))  # type: ignore[attr-defined]


def create_session(conn: Connection, actor: Actor) -> tuple[str, str]:
    """A new session (rotated on every sign-in): (cookie value, CSRF token)."""
    sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    t = now()
    values = {"id": _digest(sid), "user_id": actor.id, "csrf": csrf, "created_at": t}
    conn.execute(sa.insert(SESSIONS).values(**values, expires_at=t + timedelta(days=SESSION_DAYS)))
    return sid, csrf


def rotate_session(conn: Connection, actor: Actor, old_sid: str | None) -> tuple[str, str]:
    """Sign ``actor`` in: the browser's previous session (if any) is revoked, a new one is made."""
    if old_sid:
        revoke_session(conn, old_sid)
    return create_session(conn, actor)


def session_actor(conn: Connection, sid: str | None) -> Actor | None:
    if not sid:
        return None
    s, u = SESSIONS, USERS
    row = conn.execute(
        sa.select(u.c.id, u.c.name, u.c.is_admin, s.c.csrf)
        .join(u, u.c.id == s.c.user_id)
        .where(
            s.c.id == _digest(sid), s.c.revoked_at.is_(None), s.c.expires_at > now(), u.c.hidden == sa.false()
        )
    ).first()
    return Actor(row.id, row.name, bool(row.is_admin), SCOPES, row.csrf) if row else None


def revoke_session(conn: Connection, sid: str) -> None:
    conn.execute(sa.update(SESSIONS).where(SESSIONS.c.id == _digest(sid)).values(revoked_at=now()))


def create_token(conn: Connection, user_id: int, name: str = "", scopes: tuple[str, ...] = SCOPES) -> str:
    """A new API token, returned once (``lair_...``); only its sha256 is kept."""
    return _insert_token(conn, user_id, name, scopes)[0]


def _insert_token(conn: Connection, user_id: int, name: str, scopes: tuple[str, ...]) -> tuple[str, int]:
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise Invalid(f"scopes are {', '.join(SCOPES)}")
    token = "lair_" + secrets.token_urlsafe(32)
    values = {
        "user_id": user_id,
        "name": name[:100],
        "token_hash": _digest(token),
        "scopes": ",".join(scopes),
    }
    tid = conn.execute(sa.insert(TOKENS).values(**values, created_at=now()).returning(TOKENS.c.id))
    return token, int(tid.scalar_one())


MAX_TOKEN_NAME = 100
TOKEN_SCOPES = {"read": ("read",), "publish": SCOPES}  # a publish token reads too


def issue_token(conn: Connection, actor: Actor | None, name: str, scope: str) -> tuple[str, int]:
    """A signed-in user's new token (a browser session, or a bearer with the publish scope: a
    read-only token never mints a stronger one): (the value, shown once; its id)."""
    who = ensure(actor, "issue-token")
    name = name.strip()
    if not name or len(name) > MAX_TOKEN_NAME:
        raise Invalid(f"1-{MAX_TOKEN_NAME} characters are required", location="name")
    if scope not in TOKEN_SCOPES:
        raise Invalid(f"one of {', '.join(TOKEN_SCOPES)}", location="scope")
    return _insert_token(conn, who.id, name, TOKEN_SCOPES[scope])


def token_actor(conn: Connection, token: str) -> Actor | None:
    t, u = TOKENS, USERS
    row = conn.execute(
        sa.select(u.c.id, u.c.name, u.c.is_admin, t.c.scopes, t.c.id.label("tid"))
        .join(u, u.c.id == t.c.user_id)
        .where(t.c.token_hash == _digest(token), t.c.revoked_at.is_(None), u.c.hidden == sa.false())
    ).first()
    if row is None:
        return None
    conn.execute(sa.update(t).where(t.c.id == row.tid).values(last_used_at=now()))
    return Actor(row.id, row.name, bool(row.is_admin), tuple(row.scopes.split(",")))


def revoke_token(conn: Connection, actor: Actor | None, token_id: int) -> None:
    """Revoke one of the actor's own tokens (another user's is a 404, as a missing one)."""
    who = ensure(actor, "revoke-token")
    res = conn.execute(
        sa.update(TOKENS).where(TOKENS.c.id == token_id, TOKENS.c.user_id == who.id).values(revoked_at=now())
    )
    if res.rowcount == 0:
        raise NotFound(f"no token {token_id}")


def list_tokens(conn: Connection, actor: Actor) -> list[dict[str, object]]:
    """The actor's tokens (never their values): name, scopes, created, last used, revoked."""
    from lair.registry.service.timefmt import iso

    rows = conn.execute(sa.select(TOKENS).where(TOKENS.c.user_id == actor.id).order_by(TOKENS.c.id))
    return [
        {
            "id": r.id,
            "name": r.name,
            "scopes": r.scopes.split(","),
            "created_at": iso(r.created_at),
            "last_used_at": iso(r.last_used_at) if r.last_used_at else None,
            "revoked": r.revoked_at is not None,
        }
        for r in rows
    ]


__all__ += ["issue_token", "list_tokens", "need"]


def whoami(actor: Actor | None) -> dict[str, object]:
    """The signed-in account as ``GET /api/v1/me`` shows it: name, admin, scopes (401 without one)."""
    actor = need(actor, "read")
    return {"name": actor.name, "admin": actor.is_admin, "scopes": list(actor.scopes)}


__all__ += ["whoami"]
