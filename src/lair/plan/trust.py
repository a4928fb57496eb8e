"""Trust: a recipe from a registry or URL is untrusted until its user accepts what it asks for.

Local files are trusted. An untrusted recipe runs nothing until an :class:`Acceptance` of exactly
what it asks for exists (same :func:`fingerprint`). What it asks for (:func:`requests`) is bound
into the fingerprint: the image, the entrypoint and args, the env names (and the values of env that
changes what gets loaded), mounts, devices, GPUs, privileges, capabilities, namespaces and hooks.
:func:`risks` says, line by line and with the reason, what of it reaches beyond the engine's own
sandbox; the acceptance prompt shows every line, and for a recipe that changed since its source
was last accepted, the difference (:func:`diff_requests`).

Risky for an untrusted recipe (each is one line of :func:`risks`):

- the image itself (it runs with everything below), or a native process (runs as the node's user);
- any hook (``before_serve``/``after_stop`` run on the node itself, outside any container);
- any mount that is read-write, or of a system path (``/``, ``/etc``, ``/var/run``, ``/run``,
  ``/proc``, ``/sys``, ``/dev``, ``/root``, ``/home``, ``/boot``, ``/usr``, ...), a socket, an
  ``.ssh`` folder or the Docker/Podman socket (paths normalised first: ``/tmp/../etc`` is ``/etc``);
  a manifest of mounts a hook writes;
- any device, privileged mode, added capabilities, the host's IPC or PID namespace;
- env that changes what gets loaded (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``PYTHONPATH``, ...).

Secret values never enter the requests: secret placeholders stand as ``{NAME}`` (:func:`trust_view`).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lair.errors import TrustError

if TYPE_CHECKING:
    from lair.recipe import Hook, Recipe

__all__ = [
    "LOADER_ENV",
    "SYSTEM_PATHS",
    "Acceptance",
    "check_trust",
    "diff_requests",
    "fingerprint",
    "requests",
    "risks",
    "risky_requests",
    "trust_view",
]

SYSTEM_PATHS = (
    "/",
    "/etc",
    "/var/run",
    "/run",
    "/proc",
    "/sys",
    "/dev",
    "/root",
    "/home",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/var/lib",
    "/var/log",
)
"""A mount of one of these, or of anything under them, is risky (``/`` itself only as a whole)."""

LOADER_ENV = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PATH",
        "NODE_OPTIONS",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "BASH_ENV",
        "ENV",
        "JAVA_TOOL_OPTIONS",
        "GCONV_PATH",
        "MALLOC_CONF",
        "HF_HUB_ENABLE_HF_TRANSFER",
    }
)
"""Env names that change which code a process loads; their values are part of the fingerprint."""

_SOCKET_NAMES = ("docker.sock", "podman.sock", "containerd.sock", "crio.sock")


class Acceptance(BaseModel):
    """A user's acceptance of what an untrusted recipe asks for."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(description="sha256 of the accepted requests")
    source: str = Field(description="where the recipe came from (URL, registry id)")
    requests: dict[str, list[str]]
    accepted_at: str


def trust_view(recipe: Recipe, values: Mapping[str, str]) -> Recipe:
    """``recipe`` rendered with ``values``, secret placeholders left as ``{NAME}`` (never their values)."""
    from lair.recipe import render_recipe

    masked = {n: "{" + n + "}" for n, p in recipe.placeholders.items() if p.type == "secret"}
    return render_recipe(recipe, {**values, **masked}, secrets_from_env=False)


def _hook_text(h: Hook) -> str:
    return f"script {h.script} {shlex.join(h.args)}".strip() if h.script else f"sh -c {h.run}"


def _mount_text(host: str, container: str, read_only: bool) -> str:
    return f"{host}:{container}{':ro' if read_only else ''}"


def requests(recipe: Recipe) -> dict[str, list[str]]:
    """Everything a recipe asks of the hosts that its fingerprint binds (placeholders resolved)."""
    r = recipe
    container = r.runtime != "native"
    return {
        "runtime": [r.runtime],
        "image": [r.docker_image or ""] if container else [],
        "entrypoint": [shlex.join(r.entrypoint)] if r.entrypoint else [],
        "args": [shlex.join(r.args)] if r.args else [],
        "env": sorted(f"{k}={v}" if k in LOADER_ENV else k for k, v in r.env.items()),
        "mounts": [_mount_text(m.host, m.container, m.read_only) for m in r.extra_mounts],
        "manifest": [r.extra_mounts_manifest] if r.extra_mounts_manifest else [],
        "devices": list(r.devices),
        "gpus": [r.gpus] if r.gpus else [],
        "privileged": ["--privileged"] if r.privileged else [],
        "cap_add": list(r.cap_add),
        "namespaces": [f"ipc={r.ipc}"] * bool(r.ipc) + [f"pid={r.pid}"] * bool(r.pid),
        "before_serve": [_hook_text(h) for h in r.before_serve],
        "after_stop": [_hook_text(h) for h in r.after_stop],
    }


def _mount_risk(host: str, read_only: bool) -> str | None:
    """Why a bind mount of ``host`` is risky, or None."""
    path = posixpath.normpath("/" + host.lstrip("/")) if host.startswith("/") else host
    parts = [p for p in path.split("/") if p]
    why: list[str] = [f"it is {path}"] if path != host.rstrip("/") and host != "/" else []
    if not read_only:
        why.append("read-write")
    if path == "/":
        why.append("the host's whole filesystem")
    elif any(path == p or path.startswith(p + "/") for p in SYSTEM_PATHS if p != "/"):
        why.append("a system path")
    if ".ssh" in parts:
        why.append("SSH keys")
    if path.endswith(".sock") or any(p in _SOCKET_NAMES for p in parts):
        why.append("a socket (a container runtime's socket gives root on the host)")
    if not host.startswith("/"):
        why.append("not an absolute path")
    return ", ".join(why) or None


def risks(recipe: Recipe) -> list[str]:
    """What an untrusted ``recipe`` may not do without acceptance, one line each with the reason."""
    r = recipe
    out: list[str] = []
    if r.runtime == "native":
        argv = shlex.join(r.entrypoint + r.args) or f"the {r.engine} engine's default command"
        out.append(f"native process on the node, as its user: {argv}")
    else:
        out.append(f"image {r.docker_image}: its code runs with everything below")
    for stage, hooks in (("before_serve", r.before_serve), ("after_stop", r.after_stop)):
        out += [f"hook {_hook_text(h)} ({stage}, runs on the node itself)" for h in hooks]
    for m in r.extra_mounts:
        why = _mount_risk(m.host, m.read_only)
        if why:
            out.append(f"mount {_mount_text(m.host, m.container, m.read_only)} ({why})")
    if r.extra_mounts_manifest:
        out.append(f"mounts listed in {r.extra_mounts_manifest} (written on the node)")
    out += [f"device {d} (host hardware in the container)" for d in r.devices]
    out += ["privileged mode (every device and capability of the host)"] if r.privileged else []
    out += [f"cap-add {c} (a kernel capability beyond the default set)" for c in r.cap_add]
    out += [f"ipc {r.ipc} (the host's IPC namespace)"] if r.ipc == "host" else []
    out += [f"pid {r.pid} (sees and signals every process of the host)"] if r.pid == "host" else []
    out += [f"env {k}={v} (changes what gets loaded)" for k, v in r.env.items() if k in LOADER_ENV]
    return out


def risky_requests(recipe: Recipe) -> list[str]:
    """Alias of :func:`risks` (the name earlier versions used)."""
    return risks(recipe)


def fingerprint(recipe: Recipe) -> str:
    """sha256 of what a recipe asks for (:func:`requests`), placeholders already resolved."""
    return hashlib.sha256(json.dumps(requests(recipe), sort_keys=True).encode()).hexdigest()


def diff_requests(old: Mapping[str, list[str]], new: Mapping[str, list[str]]) -> list[str]:
    """``- key: value`` / ``+ key: value`` lines between two request sets (accepted -> now)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        before, after = list(old.get(key, [])), list(new.get(key, []))
        out += [f"- {key}: {v}" for v in before if v not in after]
        out += [f"+ {key}: {v}" for v in after if v not in before]
    return out


def check_trust(
    recipe: Recipe,
    *,
    trusted: bool,
    acceptance: Acceptance | None = None,
    previous: Acceptance | None = None,
) -> None:
    """Raise TrustError unless ``recipe`` is trusted or ``acceptance`` matches its fingerprint.

    ``previous`` (the last acceptance of the same source) adds the changes to the message."""
    if trusted or (acceptance is not None and acceptance.fingerprint == fingerprint(recipe)):
        return
    found = risks(recipe)
    changes = diff_requests(previous.requests, requests(recipe)) if previous else []
    text = "this recipe is not trusted (it came from a registry or URL) and asks for:\n"
    text += "\n".join(f"  {r}" for r in found)
    if changes:
        text += "\nchanged since you accepted it" + (f" on {previous.accepted_at}" if previous else "")
        text += ":\n" + "\n".join(f"  {c}" for c in changes)
    raise TrustError(
        text,
        hint="read what it runs, then accept it: lair plan|launch ... --accept",
        risks=found,
        diff=changes,
    )
