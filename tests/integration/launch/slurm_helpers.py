"""What the Slurm launch tests ask of Slurm itself and of this machine after a run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from launch_helpers import wait_for

from lair.testing.slurm_cluster import SlurmCluster, live_slurmstepd


def _engine_processes(run_id: str) -> list[str]:
    """Processes whose environment says they belong to the run (engine, hooks, step scripts), as
    ``PID COMMAND``."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            env = (p / "environ").read_bytes().split(b"\0")
            if f"LAIR_RUN_ID={run_id}".encode() in env:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                out.append(f"{p.name} {cmd[:200]}")
        except OSError:
            continue
    return out


def assert_nothing_left(sc: SlurmCluster, run_id: str) -> None:
    assert sc.squeue() == "", "jobs or steps left in squeue"
    assert _engine_processes(run_id) == []
    # a step daemon finishes its own bookkeeping (to slurmctld) just after the job left squeue
    wait_for(lambda: live_slurmstepd() == [], timeout=15, what="every slurmstepd to exit")
    assert list(Path("/tmp").glob(f"lair-{run_id}-r*")) == []


def het_components(sc: SlurmCluster, job_id: int) -> list[tuple[int, str, str]]:
    """(offset, nodes, name) of each component of job ``job_id`` by Slurm's own ``squeue --json``
    (jobs stay there MinJobAge after they ended); [] for a job that is not heterogeneous."""
    res = subprocess.run(
        ["squeue", "--json", "--all"],
        env={**os.environ, **sc.env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    jobs = json.loads(res.stdout)["jobs"]
    assert any(j["job_id"] == job_id for j in jobs)
    return sorted((j["het_job_offset"], j["nodes"], j["name"]) for j in jobs if j["het_job_id"] == job_id)


def scontrol_job(sc: SlurmCluster, job_id: int) -> str:
    res = subprocess.run(
        ["scontrol", "show", "job", str(job_id)], env={**os.environ, **sc.env}, capture_output=True, text=True
    )
    return res.stdout
