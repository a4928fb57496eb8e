"""The ``docker run`` / ``podman run`` command of one node (same CLI; only the binary differs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lair.plan.mounts import hub_mount, volume_arg

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["ContainerSpec", "run_argv"]


@dataclass(frozen=True)
class ContainerSpec:
    """What differs per node: container name, labels, env-file path and the command."""

    binary: str
    name: str
    labels: dict[str, str]
    env_file: str
    command: list[str]
    extra: list[str] = field(default_factory=list)
    """flags placed before ``--env-file``: GPU access, the secrets file mount"""


def _resources(r: Recipe) -> list[str]:
    out: list[str] = []
    if r.shm_size:
        out += ["--shm-size", r.shm_size]
    if r.memory_limit:  # --memory-swap equal to --memory: no swap for the container
        out += ["--memory", r.memory_limit, "--memory-swap", r.memory_limit]
    if r.cpus is not None:
        out += ["--cpus", f"{r.cpus:g}"]
    for name, value in r.ulimits.items():
        out += ["--ulimit", f"{name}={value}"]
    return out


def _access(r: Recipe) -> list[str]:
    out = ["--network", "host"]
    if r.ipc:
        out += ["--ipc", r.ipc]
    if r.pid:
        out += ["--pid", r.pid]
    if r.privileged:
        out += ["--privileged"]
    for c in r.cap_add:
        out += ["--cap-add", c]
    for d in r.devices:
        out += ["--device", d]
    return out


def _mounts(r: Recipe) -> list[str]:
    out: list[str] = []
    for m in r.extra_mounts:
        if hub_mount(m) is None:  # hub repos are staged per file (see lair.plan.mounts)
            out += ["-v", volume_arg(m.host, m.container, m.read_only)]
    return out


def _pull(binary: str) -> list[str]:
    """``run`` never pulls: the plan's pull step does (progress on stderr, its own timeout, the
    ``--pull`` policy), and podman's short-name resolution could pick any search registry."""
    return ["--pull", "never"]


def run_argv(r: Recipe, spec: ContainerSpec) -> list[str]:
    """Full ``run -d`` argv up to and including the command; the image comes last before it.

    Manifest mounts (per-file, read on the node) are inserted by launch right before the image, at
    the index of ``--env-file`` + 2.
    """
    argv = [spec.binary, "run", "-d", *_pull(spec.binary), "--name", spec.name]
    for k, v in spec.labels.items():
        argv += ["--label", f"{k}={v}"]
    argv += _access(r) + _resources(r) + _mounts(r) + spec.extra
    argv += ["--env-file", spec.env_file]
    if spec.command:
        argv += ["--entrypoint", spec.command[0]]
    argv.append(r.docker_image or "")
    return argv + spec.command[1:]
