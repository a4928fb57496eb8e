"""Trust: a recipe from a registry or URL is untrusted until its user accepts what it asks for.

Local files are trusted. An untrusted recipe may not run hooks, mount the Docker/Podman socket,
SSH keys or ``/``, or run privileged, unless an :class:`Acceptance` of exactly those requests (same
:func:`fingerprint`) exists. What is asked is shown to the user by :func:`requests` before accepting.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lair.errors import TrustError

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["Acceptance", "check_trust", "fingerprint", "requests", "risky_requests"]


class Acceptance(BaseModel):
    """A user's acceptance of an untrusted recipe's hooks, devices, mounts and privileges."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(description="sha256 of the accepted requests")
    source: str = Field(description="where the recipe came from (URL, registry id)")
    requests: dict[str, list[str]]
    accepted_at: str


def _hook_text(h: object) -> str:
    script, run, args = getattr(h, "script", None), getattr(h, "run", None), getattr(h, "args", [])
    return f"script {script} {' '.join(args)}".strip() if script else f"sh -c {run}"


def _risky_mount(host: str) -> bool:
    parts = [p for p in host.split("/") if p]
    return host.rstrip("/") == "" or host.endswith(".sock") or ".ssh" in parts


def requests(recipe: Recipe) -> dict[str, list[str]]:
    """Everything a recipe asks of the hosts that a user should see before accepting it."""
    return {
        "before_serve": [_hook_text(h) for h in recipe.before_serve],
        "after_stop": [_hook_text(h) for h in recipe.after_stop],
        "devices": list(recipe.devices),
        "mounts": [f"{m.host}:{m.container}{':ro' if m.read_only else ''}" for m in recipe.extra_mounts],
        "privileged": ["--privileged"] if recipe.privileged else [],
        "manifest": [recipe.extra_mounts_manifest] if recipe.extra_mounts_manifest else [],
    }


def risky_requests(recipe: Recipe) -> list[str]:
    """What an untrusted recipe may not do without acceptance."""
    out = [f"hook {x}" for x in requests(recipe)["before_serve"] + requests(recipe)["after_stop"]]
    out += [f"mount {m.host}" for m in recipe.extra_mounts if _risky_mount(m.host)]
    out += ["privileged mode"] if recipe.privileged else []
    return out


def fingerprint(recipe: Recipe) -> str:
    """sha256 of what a recipe asks for (:func:`requests`), placeholders already resolved."""
    return hashlib.sha256(json.dumps(requests(recipe), sort_keys=True).encode()).hexdigest()


def check_trust(recipe: Recipe, *, trusted: bool, acceptance: Acceptance | None = None) -> None:
    """Raise TrustError if an untrusted recipe asks for something its user has not accepted."""
    if trusted:
        return
    risky = risky_requests(recipe)
    if not risky or (acceptance is not None and acceptance.fingerprint == fingerprint(recipe)):
        return
    lines = "\n".join(f"  {r}" for r in risky)
    raise TrustError(
        f"this recipe is not trusted (it came from a registry or URL) and asks for:\n{lines}",
        hint="read what it runs, then accept it: lair launch ... --accept",
    )
