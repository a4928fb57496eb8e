"""Accounts reached through an OAuth provider (GitHub, Hugging Face).

An identity is the provider's name and its stable subject (GitHub's numeric user id, the OIDC ``sub``),
never the login, which its owner can rename. The first sign-in with an identity creates an account
named after the provider login (made unique), or links the identity to the account the browser is
already signed in as; every later sign-in with it is that account. No provider token is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import BadGateway, Forbidden
from lair.registry.db.schema import ExternalIdentity
from lair.registry.db.tables import USERS
from lair.registry.db.version import now
from lair.registry.service.accounts import NAME_RE, create_user
from lair.registry.service.actor import Actor

__all__ = ["IDENTITIES", "Identity", "sign_in_external", "user_name_for"]

IDENTITIES = cast(sa.Table, ExternalIdentity.__table__)
MAX_NAME = 40


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in: ``subject`` is its stable id, ``login`` its user name."""

    provider: str
    subject: str
    login: str

    def __post_init__(self) -> None:
        if not self.subject or len(self.subject) > 255:
            raise BadGateway(f"{self.provider} sent no usable user id")


def _slug(login: str, fallback: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", login.lower()).strip("-")[:MAX_NAME].strip("-")
    return s or fallback


def user_name_for(conn: Connection, login: str, fallback: str) -> str:
    """A free user name from a provider login: lowercased, other characters as ``-``; ``-2``, ``-3``...
    appended while the name is taken."""
    base = _slug(login, fallback)
    taken = {r[0] for r in conn.execute(sa.select(USERS.c.name).where(USERS.c.name.like(f"{base[:30]}%")))}
    if base not in taken:
        return base
    n = 2
    while True:
        tail = f"-{n}"
        name = base[: MAX_NAME - len(tail)].rstrip("-") + tail
        if name not in taken:
            assert NAME_RE.fullmatch(name), name
            return name
        n += 1


def _user(conn: Connection, uid: int) -> Actor:
    row = conn.execute(sa.select(USERS).where(USERS.c.id == uid)).one()
    if row.hidden:
        raise Forbidden("this account is hidden by the site's admins")
    return Actor(row.id, row.name, bool(row.is_admin))


def sign_in_external(conn: Connection, who: Identity, signed_in: Actor | None = None) -> Actor:
    """The account of ``who``: the linked one; else ``signed_in`` (now linked); else a new account."""
    t = IDENTITIES
    found = conn.execute(
        sa.select(t.c.id, t.c.user_id).where(t.c.provider == who.provider, t.c.subject == who.subject)
    ).first()
    if found is not None:
        conn.execute(
            sa.update(t).where(t.c.id == found.id).values(login=who.login[:255], last_sign_in_at=now())
        )
        return _user(conn, found.user_id)
    uid = signed_in.id if signed_in else create_user(conn, user_name_for(conn, who.login, who.provider))
    values = {"provider": who.provider, "subject": who.subject, "user_id": uid, "login": who.login[:255]}
    conn.execute(sa.insert(t).values(**values, created_at=now(), last_sign_in_at=now()))
    return _user(conn, uid)
