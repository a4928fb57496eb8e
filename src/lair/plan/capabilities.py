"""Host capability profiles: what a recipe asks of a host that the host cannot give.

A rig or a cluster says what its hosts accept (:class:`lair.rig.Capabilities`); ``check`` lists every
flag of a recipe the hosts refuse. ``apply`` raises one :class:`CapabilityError` naming all of them
(before anything starts), or, with ``drop=True``, returns the recipe without them and the list of
what was left out so that the plan can say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lair.errors import CapabilityError

if TYPE_CHECKING:
    from lair.recipe import Recipe
    from lair.rig import Capabilities

__all__ = ["Unsupported", "apply_capabilities", "check_capabilities"]

_CONTAINER_ONLY = ("shm_size", "memory_limit", "cpus", "ipc", "extra_mounts_manifest")


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


def _ulimits(recipe: Recipe, caps: Capabilities) -> list[Unsupported]:
    out: list[Unsupported] = []
    for name, value in recipe.ulimits.items():
        flag = f"--ulimit {name}={value}"
        v = _ulimit_value(value)
        if name == "memlock" and v == -1 and not caps.ulimit_memlock_unlimited:
            out.append(Unsupported(f"ulimits.{name}", flag, "the host refuses an unlimited memlock"))
        if name == "nofile" and (v == -1 or v > caps.max_ulimit_nofile):
            why = f"the host accepts nofile up to {caps.max_ulimit_nofile}"
            out.append(Unsupported(f"ulimits.{name}", flag, why))
    return out


def _native(recipe: Recipe) -> list[Unsupported]:
    out = [
        Unsupported(f, f, "the native runtime has no container to apply it to")
        for f in _CONTAINER_ONLY
        if getattr(recipe, f)
    ]
    for key in ("extra_mounts", "devices", "ulimits"):
        if getattr(recipe, key):
            out.append(Unsupported(key, key, "the native runtime has no container to apply it to"))
    if recipe.gpus:
        out.append(Unsupported("gpus", f"--gpus {recipe.gpus}", "the native runtime has no container"))
    if recipe.privileged:
        out.append(Unsupported("privileged", "--privileged", "the native runtime has no container"))
    return out


def check_capabilities(recipe: Recipe, caps: Capabilities) -> list[Unsupported]:
    """Every setting of ``recipe`` the hosts described by ``caps`` refuse."""
    if recipe.runtime not in caps.runtimes:
        return [Unsupported("runtime", recipe.runtime, f"the hosts run {', '.join(caps.runtimes)} only")]
    if recipe.runtime == "native":
        return _native(recipe)
    out: list[Unsupported] = []
    if recipe.gpus and not caps.gpus:
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
        elif p.field in ("privileged",):
            update["privileged"] = False
        elif p.field in ("extra_mounts", "devices"):
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
