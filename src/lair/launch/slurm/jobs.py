"""Slurm's commands as lair uses them, and the record of a run's two jobs (``<run>/slurm.json``).

``SLURM_CONF`` comes from the cluster's ``slurm_conf`` for every command. ``squeue --json`` of
Slurm 22.05 ignores ``-j``: every job is read and filtered here. A heterogeneous job is one job per
component (ids ``J``, ``J+1`` ..., each with ``het_job_id`` J): the run's job is J, and it is active
while any of its components is; its steps show as ``J+K.S``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.launch.journal import Journal

__all__ = [
    "ACTIVE_STATES",
    "SlurmJob",
    "check_output",
    "components",
    "finish",
    "job_name",
    "job_state",
    "job_states",
    "slurm_cmd",
    "status_file",
    "steps_left",
    "submit",
    "tail",
]

POLL_S = 0.2
END_WAIT_S = 120.0  # a cancelled job, then the after_stop job, to leave squeue
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
INFO = "slurm.json"


@dataclasses.dataclass
class SlurmJob:
    """What the journal keeps of a run's jobs (``<run>/slurm.json``)."""

    job_dir: str
    job_id: int
    epilogue_id: int | None = None
    slurm_conf: str | None = None
    stop_requested: bool = False

    def save(self, j: Journal) -> None:
        tmp = j.dir / f".{INFO}.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2), encoding="utf-8")
        tmp.replace(j.dir / INFO)

    @classmethod
    def load(cls, j: Journal) -> SlurmJob:
        return cls(**json.loads((j.dir / INFO).read_text(encoding="utf-8")))


def slurm_cmd(
    job: SlurmJob | str | None, *argv: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    conf = job.slurm_conf if isinstance(job, SlurmJob) else job
    env = {**os.environ, **({"SLURM_CONF": conf} if conf else {})}
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise LaunchError(
            f"{argv[0]} is not installed here", hint="lair must run where Slurm's commands do"
        ) from None
    return res


def check_output(res: subprocess.CompletedProcess[str], what: str) -> str:
    if res.returncode != 0:
        raise LaunchError(f"{what} failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    return res.stdout


def submit(conf: str | None, script: Path, *extra: str) -> int:
    out = check_output(slurm_cmd(conf, "sbatch", "--parsable", *extra, str(script)), "sbatch")
    return int(out.strip().split(";")[0])


def job_states(job: SlurmJob) -> dict[int, dict[str, Any]]:
    """Every job squeue knows (22.05 ignores -j with --json: filtered here), by id."""
    res = slurm_cmd(job, "squeue", "--json", "--all")
    data = json.loads(check_output(res, "squeue --json"))
    return {int(x["job_id"]): x for x in data.get("jobs", [])}


def components(states: dict[int, dict[str, Any]], job_id: int) -> list[dict[str, Any]]:
    """The job's records: itself, or every component of the heterogeneous job it leads."""
    return [x for i, x in states.items() if i == job_id or x.get("het_job_id") == job_id]


def job_state(job: SlurmJob, job_id: int | None) -> str:
    """The job's state (of a heterogeneous job: of a component still active, else of its first)."""
    if job_id is None:
        return "NONE"
    parts = components(job_states(job), job_id)
    active = [str(x["job_state"]) for x in parts if x["job_state"] in ACTIVE_STATES]
    return active[0] if active else str(parts[0]["job_state"]) if parts else "GONE"


def steps_left(job: SlurmJob) -> list[str]:
    """The steps still in squeue of the run's jobs (``J.S``, a component's ``J+K.S``)."""
    states = job_states(job)
    jobs = [i for i in (job.job_id, job.epilogue_id) if i is not None]
    ids = {str(x["job_id"]) for i in jobs for x in components(states, i)} | {str(i) for i in jobs}
    out = check_output(slurm_cmd(job, "squeue", "--steps", "--noheader", "--format=%i"), "squeue --steps")
    return [s for s in out.split() if s.split(".")[0].split("+")[0] in ids]


def status_file(job: SlurmJob, name: str) -> str | None:
    p = Path(job.job_dir) / "status" / name
    return p.read_text(encoding="utf-8").strip() if p.exists() else None


def tail(path: Path, n: int = 20) -> str:
    if not path.exists():
        return "(no output)"
    return (
        "\n    ".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]) or "(no output)"
    )


def finish(job: SlurmJob, say: Callable[[str], None]) -> list[str]:
    problems: list[str] = []
    if job_state(job, job.job_id) in ACTIVE_STATES:
        say(f"scancel {job.job_id}")
        slurm_cmd(job, "scancel", str(job.job_id))
    for job_id, what in ((job.job_id, "job"), (job.epilogue_id, "after_stop job")):
        deadline = time.monotonic() + END_WAIT_S
        while job_state(job, job_id) in ACTIVE_STATES and time.monotonic() < deadline:
            time.sleep(POLL_S)
        state = job_state(job, job_id)
        if state in ACTIVE_STATES:
            problems.append(f"{what} {job_id} is still {state} after {END_WAIT_S:g}s")
        elif job_id is not None:
            say(f"{what} {job_id}: {state}")
    epi = status_file(job, "epilogue")
    if job.epilogue_id is not None and epi != "0":
        problems.append(
            f"after_stop exited {epi or 'without a status'}; see {job.job_dir}/logs/after_stop-r*.log"
        )
    left = steps_left(job)
    if left:
        problems.append(f"job steps still in squeue: {', '.join(left)}")
    return problems


def job_name(run_id: str) -> str:
    return f"lair-{run_id}"
