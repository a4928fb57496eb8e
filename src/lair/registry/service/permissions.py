"""Named permissions, checked in one place (datasette's ``ensure_permission``): every write of the
registry's service layer starts with ``ensure(actor, "action", Resource(...))``, and the rules are the
table :data:`PERMISSIONS` below, one line each, so a test can list them all and a route never decides.

    anonymous -> 401; a token without the action's scope -> 403; signed in without the right -> 403

A resource carries only what the rules read: the recipe's owner, the row's submitter, the account a
moderation write names. Existence (404) and conflicts (409) are the write's own business, after this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lair.errors import Forbidden, Unauthorized

if TYPE_CHECKING:
    from lair.registry.service.actor import Actor

__all__ = ["PERMISSIONS", "Permission", "Resource", "ensure", "need"]


@dataclass(frozen=True)
class Resource:
    """What a rule may look at."""

    owner_id: int | None = None
    """The recipe's owner."""
    submitter_id: int | None = None
    """The speed or quality row's submitter."""
    user_name: str | None = None
    """The account a moderation write names."""


Rule = Callable[["Actor", Resource], str]
"""Why the actor may not (empty: it may)."""


def _anyone(actor: Actor, res: Resource) -> str:
    return ""


def _owner(actor: Actor, res: Resource) -> str:
    return "" if actor.is_admin or actor.id == res.owner_id else "only the owner can update this recipe"


def _author_or_owner(actor: Actor, res: Resource) -> str:
    if actor.is_admin or actor.id in (res.submitter_id, res.owner_id):
        return ""
    return "only the measurement's author or the recipe's owner can retract it"


def _admin(what: str) -> Rule:
    return lambda actor, res: "" if actor.is_admin else f"only an admin can {what}"


def _admin_not_self(actor: Actor, res: Resource) -> str:
    if not actor.is_admin:
        return "only an admin can hide a user"
    return "an admin cannot hide their own account" if actor.name == res.user_name else ""


@dataclass(frozen=True)
class Permission:
    name: str
    scope: str
    """The token scope the action needs (a browser session has every scope)."""
    rule: Rule
    description: str
    hint: str = ""


PERMISSIONS: dict[str, Permission] = {
    p.name: p
    for p in (
        Permission("publish-recipe", "publish", _anyone, "publish a new recipe"),
        Permission("revise-recipe", "publish", _owner, "add a revision", "fork it: a fork is your own copy"),
        Permission("fork-recipe", "publish", _anyone, "copy a recipe under one's own name"),
        Permission("vote", "publish", _anyone, "set or clear one's vote (it changes a count and a ranking)"),
        Permission(
            "retract-row", "publish", _author_or_owner, "strike a speed or quality row (with a reason)"
        ),
        Permission("hide-recipe", "publish", _admin("hide a recipe"), "hide or show a recipe"),
        Permission("hide-user", "publish", _admin_not_self, "hide or show an account and all it wrote"),
        Permission("upload-report", "publish", _anyone, "upload a run report for verification"),
        Permission("issue-token", "publish", _anyone, "mint an API token (a read token never mints more)"),
        Permission("revoke-token", "publish", _anyone, "revoke one of one's own tokens"),
    )
}


def need(actor: Actor | None, scope: str = "publish") -> Actor:
    """``actor``, when signed in (else 401) with ``scope`` (else 403)."""
    if actor is None:
        raise Unauthorized("sign in first", hint="send Authorization: Bearer <token>")
    if not actor.can(scope):
        raise Forbidden(f"this token lacks the {scope!r} scope")
    return actor


def ensure(actor: Actor | None, action: str, resource: Resource | None = None) -> Actor:
    """The actor, when ``action`` (a key of :data:`PERMISSIONS`) is allowed on ``resource``; else 401 or
    403 with the reason."""
    p = PERMISSIONS[action]
    who = need(actor, p.scope)
    why = p.rule(who, resource or Resource())
    if why:
        raise Forbidden(why, hint=p.hint)
    return who
