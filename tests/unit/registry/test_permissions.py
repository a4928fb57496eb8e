"""The named permissions: every rule of the table against every kind of actor (expected answers
written by hand from the rules as the registry documents them), and the guard that the service and
web layers authorize in one place: no module there but ``permissions`` raises a 403 or an anonymous
401 of its own (a route neither), and every named permission is checked by some write."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lair.errors import Forbidden, RegistryError, Unauthorized
from lair.registry.service.accounts import SCOPES
from lair.registry.service.actor import Actor
from lair.registry.service.permissions import PERMISSIONS, Resource, ensure

SERVICE = Path(__file__).resolve().parents[3] / "src" / "lair" / "registry" / "service"
WEB = SERVICE.parent / "web"
OWNER, AUTHOR, OTHER, ADMIN = 1, 2, 3, 4
RES = Resource(owner_id=OWNER, submitter_id=AUTHOR, user_name="victim")
ACTORS = {
    "anonymous": None,
    "read token": Actor(OTHER, "reader", scopes=("read",)),
    "other user": Actor(OTHER, "other"),
    "owner": Actor(OWNER, "owner"),
    "row author": Actor(AUTHOR, "author"),
    "admin": Actor(ADMIN, "root", is_admin=True, scopes=SCOPES),
}
# action -> the actors allowed (every other signed-in one with the scope: 403; anonymous: 401)
ALLOWED = {
    "publish-recipe": {"other user", "owner", "row author", "admin"},
    "revise-recipe": {"owner", "admin"},
    "fork-recipe": {"other user", "owner", "row author", "admin"},
    "vote": {"other user", "owner", "row author", "admin"},
    "retract-row": {"owner", "row author", "admin"},
    "hide-recipe": {"admin"},
    "hide-user": {"admin"},
    "upload-report": {"other user", "owner", "row author", "admin"},
    "issue-token": {"other user", "owner", "row author", "admin"},
    "revoke-token": {"other user", "owner", "row author", "admin"},
}


def test_the_table_lists_exactly_the_actions_of_the_registry() -> None:
    assert set(PERMISSIONS) == set(ALLOWED)


@pytest.mark.parametrize("action", sorted(ALLOWED))
@pytest.mark.parametrize("who", list(ACTORS))
def test_each_rule_for_each_actor(action: str, who: str) -> None:
    actor = ACTORS[who]
    if who in ALLOWED[action]:
        assert ensure(actor, action, RES) is actor
        return
    with pytest.raises(RegistryError) as refused:
        ensure(actor, action, RES)
    assert refused.value.status == (401 if actor is None else 403)
    if who == "read token":
        assert refused.value.message == "this token lacks the 'publish' scope"


def test_an_admin_never_hides_their_own_account() -> None:
    with pytest.raises(RegistryError) as refused:
        ensure(ACTORS["admin"], "hide-user", Resource(user_name="root"))
    assert (refused.value.status, refused.value.message) == (403, "an admin cannot hide their own account")


def _refusals(kind: type[RegistryError]) -> list[tuple[str, str]]:
    """(module, error code) of every ``kind(...)`` raised in the service and web layers (and of every
    ``RegistryError(status, code, ...)`` of its status, the untyped spelling), in source order."""
    found = []
    for p in sorted([*SERVICE.glob("*.py"), *WEB.glob("*.py")]):
        calls = [n for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
            code = _code_of(call, kind)
            if code is not None:
                found.append((f"{p.parent.name}/{p.name}", code))
    return found


def _code_of(call: ast.Call, kind: type[RegistryError]) -> str | None:
    name = call.func.id if isinstance(call.func, ast.Name) else ""
    args = [a.value for a in call.args[:2] if isinstance(a, ast.Constant)]
    if name == "RegistryError" and len(args) == 2 and args[0] == kind.status:
        return str(args[1])
    if name != kind.__name__:
        return None
    given = [k.value.value for k in call.keywords if k.arg == "code" and isinstance(k.value, ast.Constant)]
    return str(given[0]) if given else kind.code


def test_authorization_lives_in_one_place() -> None:
    sources = {p.name: p.read_text() for p in SERVICE.glob("*.py")}
    # identities.py refuses a hidden account's provider sign-in: authentication, not a write's right;
    # auth.py's 403 is a request without its CSRF token, before anyone is asked what they may do
    assert _refusals(Forbidden) == [
        ("service/identities.py", "forbidden"), ("service/permissions.py", "forbidden"),
        ("service/permissions.py", "forbidden"), ("web/auth.py", "csrf"),
    ]  # fmt: skip
    # 401: anonymous (permissions.need, the only "sign in first"), a wrong password, a bad token
    assert _refusals(Unauthorized) == [
        ("service/accounts.py", "unauthorized"), ("service/permissions.py", "unauthorized"),
        ("web/auth.py", "unauthorized"),
    ]  # fmt: skip
    every = [p.read_text() for p in [*SERVICE.glob("*.py"), *WEB.glob("*.py")]]
    assert sum(text.count('"sign in first"') for text in every) == 1
    writes = [text for name, text in sources.items() if name != "permissions.py"]
    checked = {m for text in writes for m in re.findall(r'ensure\(\s*\w+,\s*"([a-z-]+)"', text)}
    assert checked == set(PERMISSIONS)
