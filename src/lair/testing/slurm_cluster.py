"""A throw-away Slurm cluster on this machine (root; Debian's ``slurm-wlm`` and ``munge``).

    with SlurmCluster(nodes=2) as sc:       # private munged + slurmctld + 2 slurmd (n1, n2)
        sc.env                              # {"SLURM_CONF": ...} for sbatch, squeue, scancel ...
        sc.write_cluster("test-slurm", clusters_toml)   # a lair cluster of kind "slurm"

    with NetnsNodes(2) as nodes, SlurmCluster(netns=nodes) as sc:   # each slurmd in a node's
        ...                                                          # network namespace, at its address

Everything lives under one folder (``slurm_up.sh`` / ``slurm_down.sh`` beside this module): its own
munge key and socket, state, logs and ports, so the host's Slurm (if any) is left alone. Without
``netns`` every slurmd runs on 127.0.0.1 (the nodes share this machine's address); with it, each
slurmd (and so every step it runs) lives in one node's network namespace and Slurm knows the node
at that address, while slurmctld listens on the nodes' bridge. ``up_s`` / ``down_s`` are measured.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.testing.nodes import NetnsNodes

__all__ = ["SlurmCluster", "live_slurmstepd"]

HERE = Path(__file__).resolve().parent


def _ports_free(base: int, count: int) -> bool:
    for port in range(base, base + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _port_base(nodes: int) -> int:
    """A base port with ctld (base), dbd (+1) and every slurmd (+11 ...) free."""
    for base in range(20000 + (os.getpid() % 200) * 50, 60000, 50):
        if _ports_free(base, 3) and _ports_free(base + 11, nodes):
            return base
    raise RuntimeError("no free ports for a test Slurm cluster")


def live_slurmstepd() -> list[int]:
    """Pids of slurmstepd processes that still run (zombies left for slurmd to reap are not)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        name, state = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()[0]
        if name == "slurmstepd" and state != "Z":
            out.append(int(p.name))
    return out


class SlurmCluster:
    def __init__(self, nodes: int = 2, cpus: int = 4, netns: NetnsNodes | None = None) -> None:
        self.nodes, self.cpus, self.netns = (len(netns.nodes) if netns else nodes), cpus, netns
        self.base = Path(tempfile.mkdtemp(prefix="lair-slurm-", dir="/var/tmp"))
        self.base.rmdir()  # slurm_up.sh creates it (and refuses one that exists)
        self.up_s = self.down_s = 0.0

    @property
    def conf(self) -> str:
        return str(self.base / "etc" / "slurm.conf")

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def _script(self, name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(HERE / name)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )

    def up(self) -> SlurmCluster:
        if not shutil.which("slurmctld") or not shutil.which("munged"):
            raise RuntimeError("slurm-wlm and munge are not installed (scripts/host-setup.sh installs them)")
        env = {
            "SLURM_BASE": str(self.base),
            "SLURM_NODES": str(self.nodes),
            "SLURM_NODE_CPUS": str(self.cpus),
            "SLURM_PORT_BASE": str(_port_base(self.nodes)),
        }
        if self.netns is not None:
            env["SLURM_NETNS"] = " ".join(f"{n.netns}={n.address}" for n in self.netns.nodes)
            env["SLURM_CTLD_ADDR"] = f"{self.netns.subnet}.1"
        t0 = time.monotonic()
        res = self._script("slurm_up.sh", env)
        self.up_s = time.monotonic() - t0
        if res.returncode != 0:
            self.down()
            raise RuntimeError(f"slurm_up.sh failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return self

    def down(self) -> None:
        t0 = time.monotonic()
        self._script("slurm_down.sh", {"SLURM_BASE": str(self.base)})
        self.down_s = time.monotonic() - t0

    def squeue(self) -> str:
        """Every job (and its steps) the cluster still knows as pending or running."""
        args = ["squeue", "--noheader", "-t", "PD,R,CG,S,CF", "--format=%i %T"]
        jobs = subprocess.run(
            args, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=30
        )
        steps = subprocess.run(
            ["squeue", "--steps", "--noheader", "--format=%i"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        return (jobs.stdout + steps.stdout).strip()

    def write_cluster(self, name: str, clusters_toml: Path, *, container: str = "none") -> None:
        from lair.inventory import parse_inventory
        from lair.inventory.store import add_cluster

        data = {"kind": "slurm", "slurm": {"container": container, "slurm_conf": self.conf}}
        add_cluster(name, parse_inventory({"clusters": {name: data}}, "test").get(name), path=clusters_toml)

    def __enter__(self) -> SlurmCluster:
        return self.up()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.down()
