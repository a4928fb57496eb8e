"""``lair status``, ``lair logs``, ``lair stop`` of a Slurm run, from any shell (the journal has
its jobs: ``slurm.json``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import LaunchError
from lair.launch.slurm.jobs import (
    ACTIVE_STATES,
    INFO,
    SlurmJob,
    components,
    finish,
    job_state,
    job_states,
    status_file,
)

if TYPE_CHECKING:
    from lair.launch.journal import Journal, RunRecord
    from lair.launch.node import Progress

__all__ = ["is_slurm", "slurm_logs", "slurm_status", "stop_slurm"]


def is_slurm(j: Journal) -> bool:
    return (j.dir / INFO).exists()


def stop_slurm(j: Journal, progress: Progress) -> RunRecord:
    """Cancel the run's job, wait for its after_stop job, verify no job or step is left."""
    job, record = SlurmJob.load(j), j.load()
    job.stop_requested = True
    job.save(j)
    record.state = "stopping"
    j.save(record)
    problems = finish(job, progress)
    if any("still" in p for p in problems):
        record.state, record.error = "stop-failed", "; ".join(problems)
        j.save(record)
        raise LaunchError("could not verify that the jobs ended:\n  " + "\n  ".join(problems))
    record.state = "stopped"
    record.error = "; ".join(problems)
    j.save(record)
    return record


def slurm_status(j: Journal, d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (a run as data) with the job's squeue state; nodes are alive while it runs."""
    job = SlurmJob.load(j)
    states = job_states(job)
    info = states.get(job.job_id)
    state = str(info["job_state"]) if info else "GONE"
    parts = components(states, job.job_id) if info and info.get("het_job_id") == job.job_id else []
    d["slurm"] = {
        "job_id": job.job_id,
        "after_stop_job_id": job.epilogue_id,
        "job_state": state,
        "job_dir": job.job_dir,
        "het_components": [
            {k: x.get(k) for k in ("job_id", "het_job_offset", "nodes", "job_state")} for x in parts
        ],
    }
    for n in d["nodes"]:
        n["alive"] = state == "RUNNING" and status_file(job, "main") is None
    return d


def slurm_logs(j: Journal, ranks: list[int], follow: bool, lines: int, emit: Callable[[str], None]) -> None:
    """The serve step's output of each rank (``JOB/logs/serve-rN.log``), with ``-f`` as it grows."""
    job = SlurmJob.load(j)
    record = j.load()
    paths = {r: Path(job.job_dir) / "logs" / f"serve-r{r}.log" for r in ranks}
    prefix = len(ranks) > 1
    offsets: dict[int, int] = {}
    for r, p in paths.items():
        text = p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""
        for line in text.splitlines()[-lines:]:
            emit(f"{record.nodes[r].name}| {line}" if prefix else line)
        offsets[r] = len(text.encode())
    while follow and job_state(job, job.job_id) in ACTIVE_STATES:
        time.sleep(0.5)
        for r, p in paths.items():
            if p.exists() and p.stat().st_size > offsets[r]:
                with p.open("rb") as f:
                    f.seek(offsets[r])
                    data = f.read()
                offsets[r] += len(data)
                for line in data.decode(errors="replace").splitlines():
                    emit(f"{record.nodes[r].name}| {line}" if prefix else line)
