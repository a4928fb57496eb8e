"""Host capability profiles: what a recipe asks of a host that the host cannot give.

A rig or a cluster says what its hosts accept (:class:`lair.rig.Capabilities`); ``check`` lists every
flag of a recipe the hosts refuse. ``apply`` raises one :class:`CapabilityError` naming all of them
(before anything starts), or, with ``drop=True``, returns the recipe without them and the list of
what was left out so that the plan can say so.

``runtime_ulimits`` is the one thing a profile adds: podman (rootful) raises ``nofile`` and ``nproc``
to :data:`PODMAN_DEFAULT_ULIMIT` for every container unless told otherwise, and a host whose profile
caps them lower refuses that container. There the plan passes ``--ulimit NAME=CAP:CAP`` for each
capped limit the recipe leaves unset (Docker passes its daemon's own limits on and needs none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lair.errors import CapabilityError

if TYPE_CHECKING:
    from lair.recipe import Recipe
    from lair.rig import Capabilities

__all__ = [
    "PODMAN_DEFAULT_ULIMIT",
    "Unsupported",
    "apply_capabilities",
    "check_capabilities",
    "runtime_ulimits",
]

PODMAN_DEFAULT_ULIMIT = 1048576
"""podman's own ``nofile`` and ``nproc`` (soft and hard) for a rootful container given no ``--ulimit``."""


@dataclass(frozen=True)
class Unsupported:
    """One recipe setting a host refuses: ``field`` (recipe key, with ``.name`` for ulimits), the
    flag as written on a command line, and why."""

    field: str
    flag: str
    reason: str


def _ulimit_value(text: str) -> int:
    """The highest number in ``soft[:hard]``; -1 / unlimited -> -1."""
    parts = [p.strip().lower() for p in text.split(":")]
    if any(p in ("-1", "unlimited") for p in parts):
        return -1
    return max(int(p) for p in parts)


def _ulimit_caps(caps: Capabilities) -> dict[str, int]:
    """The ulimits a profile caps, by name (``nproc`` may be uncapped: -1)."""
    out = {"nofile": caps.max_ulimit_nofile}
    if caps.max_ulimit_nproc != -1:
        out["nproc"] = caps.max_ulimit_nproc
    return out


def _ulimits(recipe: Recipe, caps: Capabilities) -> list[Unsupported]:
    out: list[Unsupported] = []
    capped = _ulimit_caps(caps)
    for name, value in recipe.ulimits.items():
        flag = f"--ulimit {name}={value}"
        v = _ulimit_value(value)
        if name == "memlock" and v == -1 and not caps.ulimit_memlock_unlimited:
            out.append(Unsupported(f"ulimits.{name}", flag, "the host refuses an unlimited memlock"))
        if name in capped and (v == -1 or v > capped[name]):
            why = f"the host accepts {name} up to {capped[name]}"
            out.append(Unsupported(f"ulimits.{name}", flag, why))
    return out


def runtime_ulimits(recipe: Recipe, caps: Capabilities) -> dict[str, str]:
    """Ulimits the container runtime needs on these hosts that the recipe does not set (podman only)."""
    if recipe.runtime != "podman":
        return {}
    return {
        name: f"{cap}:{cap}"
        for name, cap in _ulimit_caps(caps).items()
        if cap < PODMAN_DEFAULT_ULIMIT and name not in recipe.ulimits
    }


def _native(recipe: Recipe) -> list[Unsupported]:
    from lair.recipe.runtime_rules import NATIVE_REASON, native_unsupported

    return [Unsupported(f, flag, NATIVE_REASON) for f, flag in native_unsupported(recipe)]


def check_capabilities(recipe: Recipe, caps: Capabilities) -> list[Unsupported]:
    """Every setting of ``recipe`` the hosts described by ``caps`` refuse."""
    if recipe.runtime not in caps.runtimes:
        return [Unsupported("runtime", recipe.runtime, f"the hosts run {', '.join(caps.runtimes)} only")]
    if recipe.runtime == "native":
        return _native(recipe)
    out: list[Unsupported] = []
    if recipe.gpus and recipe.gpus != "none" and not caps.gpus:
        out.append(Unsupported("gpus", f"--gpus {recipe.gpus}", "the host has no GPU container runtime"))
    if recipe.privileged and not caps.privileged:
        out.append(Unsupported("privileged", "--privileged", "the host refuses privileged containers"))
    if recipe.devices and not caps.devices:
        out += [Unsupported("devices", f"--device {d}", "the host refuses --device") for d in recipe.devices]
    return out + _ulimits(recipe, caps)


def _without(recipe: Recipe, problems: list[Unsupported]) -> Recipe:
    update: dict[str, object] = {}
    ulimits = dict(recipe.ulimits)
    for p in problems:
        if p.field.startswith("ulimits."):
            ulimits.pop(p.field.split(".", 1)[1], None)
            update["ulimits"] = ulimits
        elif p.field == "gpus":
            update["gpus"] = "none"
        elif p.field in ("privileged",):
            update["privileged"] = False
        elif p.field in ("extra_mounts", "devices", "cap_add"):
            update[p.field] = []
        elif p.field == "ulimits":
            update["ulimits"] = {}
        else:
            update[p.field] = None
    return recipe.model_copy(update=update)


def apply_capabilities(recipe: Recipe, caps: Capabilities, *, drop: bool = False) -> tuple[Recipe, list[str]]:
    """The recipe the hosts can run and the flags left out; CapabilityError unless ``drop``."""
    problems = check_capabilities(recipe, caps)
    if not problems:
        return recipe, []
    if problems[0].field == "runtime" or not drop:
        lines = "\n".join(f"  {p.flag}: {p.reason}" for p in problems)
        raise CapabilityError(
            f"the hosts cannot run this recipe as written:\n{lines}",
            hint="set the rig's [capabilities] if they are wrong, or plan without these flags: "
            "--drop-unsupported",
        )
    return _without(recipe, problems), [f"{p.flag} ({p.reason})" for p in problems]
