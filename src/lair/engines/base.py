"""What every engine module provides: its default command, its serve flags and its multi-node wiring.

A :class:`Role` is one node's place in a run (rank, node count, head address and port). An
:class:`EngineSpec` turns a rendered recipe plus a role into the node's :class:`NodeCommand`.
Flags the recipe already writes (in ``entrypoint`` or ``args``) are never added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["EngineSpec", "NodeCommand", "Role", "add_flag", "has_flag"]


@dataclass(frozen=True)
class Role:
    """One node's place in a run: rank 0 is the head (it serves the API)."""

    rank: int
    nnodes: int
    master_addr: str
    master_port: int
    address: str = ""

    @property
    def head(self) -> bool:
        return self.rank == 0


@dataclass
class NodeCommand:
    """The main process of one node.

    ``argv`` is the full command (entrypoint first). ``serve`` is a second command run on the head
    after every node started (Ray: the cluster first, then ``vllm serve`` on the head), else empty.
    """

    argv: list[str]
    serve: list[str] = field(default_factory=list)
    role: str = "head"


def has_flag(argv: Sequence[str], *names: str) -> bool:
    """True if any of ``names`` appears as ``--flag`` or ``--flag=value`` in argv."""
    return any(a == n or a.startswith(n + "=") for a in argv for n in names)


def add_flag(argv: list[str], name: str, value: object = None, *aliases: str) -> None:
    """Append ``name [value]`` unless the flag (or an alias) is already there; None values are skipped."""
    if has_flag(argv, name, *aliases):
        return
    if value is None or value is False:
        return
    argv.append(name)
    if value is not True:
        argv.append(str(value))


class EngineSpec:
    """Base engine: the recipe's entrypoint + args, with no flags of its own (``custom``)."""

    name = "custom"
    multinode = True  # the same command runs on every node, told its rank through LAIR_* env

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return []

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        """Append the flags that carry recipe keys (port, host, parallel sizes ...)."""

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        return NodeCommand(argv, role="head" if role.head else "worker")

    def command(self, recipe: Recipe, role: Role, python: str) -> NodeCommand:
        argv = list(recipe.entrypoint) or self.default_entrypoint(recipe, python)
        argv += recipe.args
        self.serve_flags(recipe, argv)
        return self.distributed(recipe, role, argv)
