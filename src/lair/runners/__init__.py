"""Remote execution: one :class:`Runner` interface for every command lair runs on a node.

    Runner (base.py)        run / start / is_alive / kill / put_file / read_file / tail / follow / close
    ├── LocalRunner         asyncio subprocesses on this machine
    └── SshRunner           asyncssh, one connection per node, channels per command

:func:`runner_for` picks the implementation for a node; :func:`run_all` drives many nodes in parallel.
Runners never import recipes or the inventory (layering); a node is anything with ``name``,
``address``, ``user``, ``port``, ``key`` (and optionally ``local`` and ``ssh``).
"""

from __future__ import annotations

from lair.runners.local import LocalRunner
from lair.runners.parallel import Outcome, raise_for_errors, run_all
from lair.runners.seam import Argv, CommandResult, ProcessHandle, Runner, shell_command
from lair.runners.ssh import EnvVia, KnownHostsPolicy, SshOptions, SshRunner, SshTarget, connect_options

__all__ = [
    "LOCAL_ADDRESSES",
    "Argv",
    "CommandResult",
    "EnvVia",
    "KnownHostsPolicy",
    "LocalRunner",
    "Outcome",
    "ProcessHandle",
    "Runner",
    "SshOptions",
    "SshRunner",
    "SshTarget",
    "connect_options",
    "is_local",
    "raise_for_errors",
    "run_all",
    "runner_for",
    "shell_command",
]

LOCAL_ADDRESSES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_local(node: SshTarget) -> bool:
    """A node is this machine when it says ``local = true`` or its address is a loopback name."""
    return bool(getattr(node, "local", False)) or node.address in LOCAL_ADDRESSES


def runner_for(node: SshTarget, options: SshOptions | None = None) -> Runner:
    """The runner for ``node``: local for this machine, else SSH with ``options`` (or the node's
    own ``ssh`` settings, which the inventory fills from its cluster)."""
    if is_local(node):
        return LocalRunner(node.name or node.address)
    return SshRunner(node, options or getattr(node, "ssh", None) or SshOptions())
