"""What every engine module provides: its default command, its serve flags and its multi-node wiring.

A :class:`Role` is one node's place in a run (rank, node count, head address and port, the node's
own address and network interface). An :class:`EngineSpec` turns a rendered recipe plus a role into
the node's :class:`NodeCommand`: the main process and the per-node networking env the engine needs
(its own address, the gloo/NCCL interface). Flags the recipe already writes (in ``entrypoint`` or
``args``, in any spelling the engine accepts) are never added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

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
    interface: str | None = None  # from the cluster's node entry; None: detected on the node
    workdir: str = ""  # the run's folder on the node

    peer_addr: str = ""  # rank 1's address (the head finds its interface by its route there)

    @property
    def head(self) -> bool:
        return self.rank == 0

    @property
    def peer(self) -> str:
        """Where this node's route to the others goes: the head, or (for the head) rank 1."""
        return self.peer_addr if self.head else self.master_addr


SOCKET_IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""What torch.distributed (gloo, NCCL) reads for the interface to bind; both engines use it."""


@dataclass
class NodeCommand:
    """The main process of one node.

    ``argv`` is the full command (entrypoint first). ``env`` is this node's own engine networking
    env (its address, the socket interface); ``detect`` lists env names whose value the node finds
    itself at start (the interface of its route to ``route_to``), when no node entry gives it.
    ``scratch`` are folders the command makes outside the run folder; cleanup removes them too.
    """

    argv: list[str]
    role: str = "head"
    env: dict[str, str] = field(default_factory=dict)
    detect: tuple[str, ...] = ()
    route_to: str = ""
    scratch: list[str] = field(default_factory=list)  # folders it makes outside the run folder


def has_flag(argv: Sequence[str], *names: str) -> bool:
    """True if any of ``names`` appears as ``--flag`` or ``--flag=value`` in argv."""
    from lair.engines.flags import spelled

    return spelled(argv, names)


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
    host_ip_env: str | None = None  # the env var the engine reads for this node's own address
    ray = False  # whether distributed_backend = "ray" is wired for this engine
    secret_flags: ClassVar[dict[str, str]] = {}  # flag -> env the engine reads instead (no argv)
    api_key_env: str | None = None  # env whose value the engine takes as its API key (bearer token)
    server_module: str | None = None  # lair's module that serves it under lair's own Python, if any
    python_modules: tuple[str, ...] = ()  # what that module imports: the modules of ``python_extra``
    python_extra: str | None = None  # lair's extra that installs them (pyproject's optional deps)

    def runs_on_lairs_python(self, recipe: Recipe) -> bool:
        """Whether a native run of ``recipe`` serves through :attr:`server_module` with lair's own
        interpreter (a local node): the default entrypoint, or ``python3 -m`` that module."""
        if self.server_module is None or recipe.runtime != "native":
            return False
        argv = list(recipe.entrypoint)
        return not argv or (argv[0] in ("python", "python3") and self.server_module in argv)

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return []

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        """Append the flags that carry recipe keys (port, host, parallel sizes ...)."""

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        return NodeCommand(argv, role="head" if role.head else "worker")

    def kv_cache_dtypes(self) -> tuple[str, ...]:
        """The KV-cache dtype names this engine accepts; empty: lair does not know them."""
        return ()

    def network(self, recipe: Recipe, role: Role, cmd: NodeCommand) -> None:
        """Per-node networking env of a multi-node run (recipe env wins where it sets a name)."""
        if role.nnodes <= 1 or self.host_ip_env is None:
            return
        env = {self.host_ip_env: role.address}
        detect: list[str] = []
        for name in SOCKET_IFNAME_ENV:
            if role.interface:
                env[name] = role.interface
            else:
                detect.append(name)
        cmd.env = {k: v for k, v in {**cmd.env, **env}.items() if k not in recipe.env}
        cmd.detect = tuple(n for n in detect if n not in recipe.env)
        cmd.route_to = role.peer

    def command(self, recipe: Recipe, role: Role, python: str) -> NodeCommand:
        argv = list(recipe.entrypoint) or self.default_entrypoint(recipe, python)
        argv += recipe.args
        self.serve_flags(recipe, argv)
        cmd = self.distributed(recipe, role, argv)
        self.network(recipe, role, cmd)
        return cmd
