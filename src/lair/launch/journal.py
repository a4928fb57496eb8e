"""The run journal: one folder per run under ``lair.config.runs_dir()``, so that another shell can
see and stop a run.

    <runs>/<run_id>/plan.json     the plan as launched (no env values)
    <runs>/<run_id>/run.json      RunRecord: state, controller pid, per node how to reach it,
                                  its container / pid / log path and how far it got
    <runs>/<run_id>/events.log    progress lines
    <runs>/<run_id>/logs/rN.log   each node's last log lines (secrets redacted), saved when the run stops
    <runs>/<run_id>/stop.lock     held (flock) by whoever tears the run down: one teardown at a time

Writes replace the file atomically (write + rename): a reader never sees half a record.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.plan import Plan

__all__ = ["Journal", "NodeRecord", "RunRecord", "RunState", "list_journals"]

RunState = Literal["starting", "running", "stopping", "stopped", "failed", "stop-failed"]
ACTIVE: tuple[str, ...] = ("starting", "running", "stopping", "stop-failed")
STOP_LOCK_POLL_S = 0.05


class NodeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int
    name: str
    address: str
    node: dict[str, Any] = Field(description="how to reach it (lair.inventory.Node fields)")
    cluster: str = ""
    container: str | None = None
    container_id: str | None = None
    pid: int | None = None
    log_path: str | None = None
    started: bool = Field(False, description="the start step was attempted (something may run)")
    stage: str = ""
    errors: list[str] = Field(default_factory=list)


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    recipe: str
    name: str
    runtime: str
    endpoint: str
    state: RunState
    controller_pid: int | None = Field(description="the foreground lair process; None when detached")
    detached: bool = False
    created_at: float
    updated_at: float
    error: str = ""
    nodes: list[NodeRecord]

    @classmethod
    def starting(cls, plan: Plan, nodes: list[NodeRecord]) -> RunRecord:
        """The record of a run that starts now, controlled by this process."""
        now = time.time()
        run = plan.run
        return cls(
            run_id=run.run_id,
            recipe=run.recipe,
            name=run.name,
            runtime=run.runtime,
            endpoint=run.endpoint,
            state="starting",
            controller_pid=os.getpid(),
            created_at=now,
            updated_at=now,
            nodes=nodes,
        )


class Journal:
    """Reads and writes one run's folder."""

    def __init__(self, run_id: str, root: Path | None = None) -> None:
        from lair import config

        self.run_id = run_id
        self.dir = (root or config.runs_dir()) / run_id

    @property
    def exists(self) -> bool:
        return (self.dir / "run.json").exists()

    def _write(self, name: str, text: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.dir / name)

    def create(self, plan_json: str, record: RunRecord) -> None:
        """Start the journal of a new run; a run id that exists already is refused (never overwritten)."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.dir.mkdir()
        except FileExistsError:
            raise LaunchError(
                f"a run {self.run_id!r} exists already", hint="launch again (a new id is drawn)"
            ) from None
        self._write("plan.json", plan_json)
        self.save(record)

    def save_plan(self, plan_json: str) -> None:
        """Replace the plan of a run whose nodes became known later (a scheduler's allocation)."""
        self._write("plan.json", plan_json)

    def try_lock_stop(self) -> int | None:
        """The run's stop lock if no one holds it (the fd for :meth:`unlock`), else None; never blocks."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "stop.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    async def lock_stop(self) -> int:
        """Wait until this process holds the run's stop lock; returns the fd for :meth:`unlock`.

        It polls without blocking, on the event loop, so a cancellation (Ctrl-C) can only land
        while the lock is not held: a blocking flock in a worker thread went on to take the lock
        after the wait for it was cancelled, and nothing released it (the retried stop then waited
        on its own process forever)."""
        while (fd := self.try_lock_stop()) is None:
            await asyncio.sleep(STOP_LOCK_POLL_S)
        return fd

    @staticmethod
    def unlock(fd: int) -> None:
        os.close(fd)  # closing the descriptor releases the flock

    def save(self, record: RunRecord) -> None:
        record.updated_at = time.time()
        self._write("run.json", record.model_dump_json(indent=2))

    def load(self) -> RunRecord:
        try:
            return RunRecord.model_validate_json((self.dir / "run.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LaunchError(f"no run {self.run_id!r}", hint="see runs with `lair status`") from None

    def plan_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.dir / "plan.json").read_text(encoding="utf-8"))
        return data

    def event(self, line: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / "events.log").open("a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    def save_log(self, rank: int, text: str) -> None:
        d = self.dir / "logs"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"r{rank}.log").write_text(text, encoding="utf-8")

    def saved_log(self, rank: int) -> str | None:
        p = self.dir / "logs" / f"r{rank}.log"
        return p.read_text(encoding="utf-8") if p.exists() else None


def list_journals(root: Path | None = None) -> list[Journal]:
    """Every run journal, oldest first."""
    from lair import config

    d = root or config.runs_dir()
    if not d.is_dir():
        return []
    runs = [p for p in d.iterdir() if (p / "run.json").exists()]
    return [Journal(p.name, d) for p in sorted(runs, key=lambda p: (p / "run.json").stat().st_mtime)]
