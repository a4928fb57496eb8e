"""The engine processes of a running launch, as the bench's machine certificate needs them
(:class:`lair.bench.EngineProcesses`): from the run's journal, each local node's native process
(its PID) or container (its main PID from ``docker inspect``, and the cgroup that holds it). An
engine on another host is not this machine's: its CPU is recorded as unknown, with why.
"""

from __future__ import annotations

import subprocess
from typing import Any

from lair.bench import EngineProcesses
from lair.bench.machine import cgroup_of

__all__ = ["engine_processes"]

_INSPECT_TIMEOUT_S = 10


def _container_pid(container_id: str) -> int | None:
    """The container's main process on this machine (``docker inspect``), None when unknown."""
    try:
        res = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.Pid}}", container_id],
            capture_output=True,
            text=True,
            timeout=_INSPECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = res.stdout.strip()
    return int(out) if res.returncode == 0 and out.isdigit() and int(out) > 0 else None


def _local(node: Any) -> bool:
    from lair.runners import LOCAL_ADDRESSES

    return bool(node.node.get("local")) or node.node.get("address") in LOCAL_ADDRESSES


def engine_processes(run_id: str) -> EngineProcesses:
    """What this machine knows of run ``run_id``'s engine processes (never raises: an unreadable
    journal or a container docker cannot inspect is an "unknown" with its reason)."""
    from lair.launch import Journal

    try:
        nodes = Journal(run_id).load().nodes
    except Exception as exc:  # any failure to read it: the engine's CPU is unknown
        return EngineProcesses(note=f"engine CPU unknown: run {run_id}'s journal unreadable ({exc})")
    remote = [n.name for n in nodes if not _local(n)]
    if remote:
        return EngineProcesses(
            note=f"engine CPU unknown: the engine runs on {', '.join(remote)} over SSH, "
            "not on the bench's machine"
        )
    pids = [n.pid for n in nodes if n.pid]
    containers = [pid for n in nodes if n.container_id and (pid := _container_pid(n.container_id))]
    if len(containers) == 1 and not pids and (group := cgroup_of(containers[0])):
        return EngineProcesses(pids=containers, cgroup=group)
    if pids or containers:
        return EngineProcesses(pids=pids + containers)
    return EngineProcesses(note=f"engine CPU unknown: run {run_id} recorded no process or container")
