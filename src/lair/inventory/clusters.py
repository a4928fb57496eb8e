"""The cluster inventory: named clusters of SSH nodes in ``lair.config.clusters_file()`` (TOML).

[clusters.homelab]
known_hosts = "accept-new"          # "strict" | "off"; see lair.runners.ssh
known_hosts_file = "~/.ssh/known_hosts"   # optional
ssh_config = "~/.ssh/config"        # optional OpenSSH config (ProxyJump...)
connect_timeout_s = 10

[clusters.homelab.capabilities]     # what the hosts' container runtime allows (lair.rig.Capabilities)
privileged = false

[[clusters.homelab.nodes]]
name = "n1"
address = "10.0.0.2"
user = "root"                       # default root
port = 22
key = "~/.ssh/id_ed25519"           # optional; default: ~/.ssh/id_* and the agent
rank = 0                            # order of allocation ("the first N free ranks")
gpus = 1
gpu_model = "RTX 4090"
labels = { rack = "a" }
engine_address = "192.168.100.2"    # optional: its address on the engines' network (default: address)
interface = "enp1s0f0"              # optional: gloo/NCCL interface (default: route to the head)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lair.errors import ConfigError
from lair.rig import Capabilities
from lair.runners.ssh import SshOptions

__all__ = ["Cluster", "Inventory", "Node", "SlurmSettings", "adhoc_node"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Node(_Strict):
    """One machine of a cluster. ``ssh`` is filled from the cluster's settings when loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="node name (unique in its cluster)")
    address: str = Field(min_length=1, description="IP or DNS name to SSH to")
    user: str = Field("root", min_length=1, description="SSH login user")
    port: int = Field(22, ge=1, le=65535, description="sshd port")
    key: str | None = Field(None, description="SSH private key path; default ~/.ssh/id_* and the agent")
    rank: int = Field(ge=0, description="allocation order; rank 0 is the first taken")
    gpus: int = Field(0, ge=0, description="GPU count")
    gpu_model: str | None = Field(None, description="GPU model name")
    gpu_devices: str | None = Field(
        None, description='GPUs a run gets on this node: "all", a count or ids ("0,1"); else the recipe\'s'
    )
    labels: dict[str, str] = Field(default_factory=dict, description="free-form tags")
    engine_address: str | None = Field(
        None, description="the node's address on the network the engines talk over (default: address)"
    )
    interface: str | None = Field(
        None,
        description="network interface for gloo/NCCL (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); "
        "default: found on the node from its route to the head",
    )
    local: bool = Field(False, description="run commands on this machine instead of over SSH")
    cluster: str = Field("", exclude=True, description="the cluster it belongs to ('' for ad-hoc)")
    ssh: SshOptions = Field(
        default_factory=SshOptions, exclude=True, description="its cluster's SSH settings"
    )

    @field_validator("key")
    @classmethod
    def _expand_key(cls, v: str | None) -> str | None:
        return str(Path(v).expanduser()) if v else v


class SlurmSettings(_Strict):
    """``[clusters.X.slurm]``: a cluster whose nodes Slurm allocates (``lair.launch.slurm``)."""

    partition: str | None = Field(None, description="sbatch --partition")
    account: str | None = Field(None, description="sbatch --account")
    gres_per_node: str | None = Field(
        None, description='sbatch --gres, e.g. "gpu:4" (default: the recipe\'s GPUs)'
    )
    container: Literal["docker", "apptainer", "enroot", "none"] = Field(
        "docker", description="how container recipes run on the nodes (enroot: through pyxis)"
    )
    time_limit: str | None = Field(None, description='sbatch --time, e.g. "04:00:00"')
    slurm_conf: str | None = Field(None, description="SLURM_CONF for lair's sbatch/squeue/scancel")
    job_dir: str | None = Field(
        None, description="folder shared with the nodes for job scripts and logs (default: the run journal)"
    )


class Cluster(_Strict):
    """A named set of nodes plus how to reach them and what they allow."""

    name: str = Field("", exclude=True)
    kind: Literal["ssh", "slurm"] = Field(
        "ssh", description="ssh: lair's nodes and leases; slurm: Slurm allocates"
    )
    slurm: SlurmSettings | None = None
    known_hosts: Literal["accept-new", "strict", "off"] = "accept-new"
    env_via: Literal["stdin", "file", "accept-env"] = "stdin"
    known_hosts_file: str | None = None
    ssh_config: str | None = None
    connect_timeout_s: float = Field(10.0, gt=0)
    capabilities: Capabilities | None = None
    nodes: list[Node] = Field(default_factory=list)

    @model_validator(mode="after")
    def _kind(self) -> Cluster:
        if self.kind == "slurm" and self.nodes:
            raise ValueError("a slurm cluster lists no nodes: Slurm allocates them")
        if self.kind == "slurm" and self.slurm is None:
            self.slurm = SlurmSettings()
        if self.kind == "ssh" and self.slurm is not None:
            raise ValueError('[slurm] settings need kind = "slurm"')
        return self

    @model_validator(mode="after")
    def _unique(self) -> Cluster:
        for attr in ("name", "rank", "address"):
            seen: set[Any] = set()
            for n in self.nodes:
                v = getattr(n, attr)
                if attr == "address" and n.port != 22:
                    v = f"{v}:{n.port}"
                if v in seen:
                    raise ValueError(f"two nodes with {attr} {v!r}")
                seen.add(v)
        return self

    def ssh_options(self) -> SshOptions:
        def path(p: str | None) -> str | None:
            return str(Path(p).expanduser()) if p else None

        return SshOptions(
            known_hosts=self.known_hosts,
            env_via=self.env_via,
            known_hosts_file=path(self.known_hosts_file),
            ssh_config=path(self.ssh_config),
            connect_timeout_s=self.connect_timeout_s,
        )

    def bound(self, name: str) -> Cluster:
        """This cluster with its name and every node's ``cluster``/``ssh`` filled in, ranks sorted."""
        opts = self.ssh_options()
        nodes = sorted((n.model_copy(update={"cluster": name, "ssh": opts}) for n in self.nodes), key=_rank)
        return self.model_copy(update={"name": name, "nodes": nodes})

    def node(self, host: str) -> Node | None:
        """The node whose name or address is ``host``."""
        return next((n for n in self.nodes if host in (n.name, n.address)), None)


def _rank(n: Node) -> int:
    return n.rank


class Inventory(_Strict):
    """The whole clusters file."""

    clusters: dict[str, Cluster] = Field(default_factory=dict)

    @field_validator("clusters")
    @classmethod
    def _names(cls, v: dict[str, Cluster]) -> dict[str, Cluster]:
        import re

        for name in v:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"invalid cluster name {name!r} (letters, digits, '.', '_', '-')")
        return {k: c.bound(k) for k, c in v.items()}

    def get(self, name: str) -> Cluster:
        if name not in self.clusters:
            from difflib import get_close_matches

            near = get_close_matches(name, list(self.clusters), n=1)
            hint = f"did you mean {near[0]!r}?" if near else "add it: lair cluster add NAME --node ..."
            raise ConfigError(f"no cluster named {name!r}", hint=hint)
        return self.clusters[name]

    def find(self, host: str) -> Node | None:
        """The first node (any cluster, by name order) named or addressed ``host``."""
        for name in sorted(self.clusters):
            node = self.clusters[name].node(host)
            if node is not None:
                return node
        return None


def adhoc_node(host: str, rank: int) -> Node:
    """A node given with ``--nodes`` that is in no cluster: root@host:22, default keys."""
    user, _, address = host.rpartition("@")
    name = address.replace(":", "-") if all(c.isalnum() or c in "._-:" for c in address) else f"node{rank}"
    return Node(name=name, address=address, user=user or "root", rank=rank)


def parse_inventory(data: dict[str, Any], source: str) -> Inventory:
    """Validate the parsed TOML; errors name the file and the dotted key."""
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{source}: {loc}: {first['msg']}"
            + (f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""),
            hint="see docs/clusters.md for the format",
        ) from None
