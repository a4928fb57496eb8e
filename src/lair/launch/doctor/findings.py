"""What ``lair doctor`` reports: the facts read on each node and the findings drawn from them.

DoctorReport
├── nodes: [NodeFacts]      one per node: reachability, clock, OS, disks, runtimes, GPUs, network
└── findings: [Finding]     check id, severity, node, what is wrong, the line that fixes it
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SEVERITIES",
    "AllReduce",
    "BusyPort",
    "Disk",
    "DoctorReport",
    "Finding",
    "Gpu",
    "Interface",
    "NodeFacts",
    "Route",
    "RuntimeInfo",
    "Severity",
]

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Finding(_Model):
    """One problem found: ``check`` is the doctor check's id (``net.mtu``), ``fix`` one line to act on."""

    check: str = Field(description="the check's id, e.g. net.mtu, clock.skew, recipe.heads")
    severity: Severity
    node: str | None = Field(None, description="the node it is about (None: the recipe or the rig)")
    what: str = Field(description="what is wrong, with the numbers that show it")
    fix: str = Field(description="what to do about it")

    def render(self) -> str:
        where = f"{self.node}: " if self.node else ""
        return f"{self.severity}: [{self.check}] {where}{self.what}\n    fix: {self.fix}"


class Disk(_Model):
    path: str = Field(description="where models or caches go")
    free_bytes: int
    mount: str = Field(description="the mount point holding it")


class RuntimeInfo(_Model):
    name: Literal["docker", "podman"]
    installed: bool
    running: bool = False
    version: str | None = None
    error: str | None = Field(None, description="what the engine said when it did not answer")
    runtimes: list[str] = Field(default_factory=list, description="OCI runtimes it knows (nvidia?)")
    root_dir: str | None = Field(None, description="where its images live")


class Gpu(_Model):
    index: int
    name: str
    memory_total_mib: int
    memory_free_mib: int
    driver: str
    persistence: str = Field(description="Enabled / Disabled (nvidia-smi's persistence mode)")


class Interface(_Model):
    name: str
    mtu: int
    up: bool
    addresses: list[str] = Field(default_factory=list, description="IPv4 CIDRs")


class Route(_Model):
    to: str
    dev: str | None = None
    src: str | None = None
    via: str | None = None
    error: str | None = Field(None, description="what `ip route get` said when there is no route")


class BusyPort(_Model):
    port: int
    pid: str = ""
    pgid: str = ""
    command: str = ""


class NodeFacts(_Model):
    name: str
    address: str
    rank: int
    reachable: bool
    error: str | None = Field(None, description="why it could not be reached or logged into")
    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    clock_skew_s: float | None = Field(None, description="node clock minus this machine's")
    clock_uncertainty_s: float | None = Field(None, description="half the round trip of the clock read")
    disks: list[Disk] = Field(default_factory=list)
    shm_bytes: int | None = Field(None, description="size of /dev/shm")
    runtimes: list[RuntimeInfo] = Field(default_factory=list)
    cdi_specs: list[str] = Field(default_factory=list, description="CDI spec files (/etc/cdi, /var/run/cdi)")
    nvidia_ctk: bool = Field(False, description="nvidia-ctk (NVIDIA container toolkit) is installed")
    gpus: list[Gpu] = Field(default_factory=list)
    nvidia_smi: str | None = Field(None, description="nvidia-smi's error when it is there but failed")
    interfaces: list[Interface] = Field(default_factory=list)
    route: Route | None = Field(None, description="this node's route to the head")
    busy_ports: list[BusyPort] = Field(default_factory=list)
    files: dict[str, bool] = Field(
        default_factory=dict, description="paths the recipe needs on the node, and whether each exists"
    )
    raw: str = Field("", exclude=True, description="the probe's output, for the bundle")

    def interface(self, name: str | None) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def runtime(self, name: str) -> RuntimeInfo | None:
        return next((r for r in self.runtimes if r.name == name), None)


class AllReduce(_Model):
    """The opt-in all-reduce probe: one tensor summed over every node, timed on rank 0."""

    backend: str = Field(description="gloo (CPU) or nccl (GPUs)")
    nodes: int
    size_bytes: int
    iterations: int
    seconds: float = Field(description="mean time of one all-reduce")
    algbw_gbs: float = Field(description="size / time, GB/s")
    busbw_gbs: float = Field(description="algbw x 2(n-1)/n: what each link carried (nccl-tests' busbw)")
    correct: bool = Field(description="every element of the result is what the sums make it")


class DoctorReport(_Model):
    ok: bool = Field(description="no finding of severity error")
    recipe: str | None = None
    head: str | None = Field(None, description="the address ranks meet at (the head's engine address)")
    checks: list[str] = Field(description="the checks that ran")
    nodes: list[NodeFacts]
    findings: list[Finding]
    allreduce: AllReduce | None = Field(None, description="the all-reduce probe (--allreduce)")

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]
