"""``lair status``, ``lair logs``, ``lair stop``: work on runs from any shell, through the journal.

Stopping a foreground run asks its lair process (SIGTERM) to stop it and waits for the journal to say
so; a detached run, or one whose lair process died, is torn down from here. Either way the answer
comes only after every container/process was verified gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from lair.errors import LaunchError
from lair.launch.journal import ACTIVE, Journal, RunRecord, list_journals

if TYPE_CHECKING:
    from lair.inventory import Node
    from lair.launch.node import Progress
    from lair.launch.run import Session

__all__ = ["follow_logs", "run_status", "runs", "stop_all", "stop_run"]

STOP_WAIT_S = 300.0


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie child of the caller is not a live controller
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]  # noqa: SIM115
        return state != "Z"
    return True


def _node(rec_node: dict[str, Any], cluster: str) -> Node:
    from lair.inventory import Node, load_inventory

    node = Node.model_validate(rec_node)
    if cluster:
        with contextlib.suppress(Exception):
            return node.model_copy(
                update={"cluster": cluster, "ssh": load_inventory().get(cluster).ssh_options()}
            )
    return node


def _session(j: Journal, progress: Progress) -> Session:
    from lair.launch.run import Session
    from lair.plan import Plan

    record = j.load()
    plan = Plan.model_validate(j.plan_data())
    return Session(plan, record, j, [_node(n.node, n.cluster) for n in record.nodes], progress)


def _slurm_journal(run_id: str) -> bool:
    from lair.launch.slurm import is_slurm

    return is_slurm(Journal(run_id))


def runs() -> list[RunRecord]:
    """Every run in the journal, oldest first."""
    return sorted((j.load() for j in list_journals()), key=lambda r: r.created_at)


def _effective_state(r: RunRecord) -> str:
    if r.state in ("starting", "running", "stopping") and not r.detached and not _pid_alive(r.controller_pid):
        return "orphaned"
    return r.state


async def _alive(s: Session) -> list[tuple[bool | None, str]]:
    """Per node: whether its process is up (None: the node could not be asked) and why not known."""

    async def one(ex: Any) -> tuple[bool | None, str]:
        try:
            return (bool((await ex.alive())[0]) if ex.record.started else False), ""
        except Exception as exc:  # an unreachable node is "unknown", never "not alive"
            from lair.errors import LairError

            text = exc.message if isinstance(exc, LairError) else str(exc) or type(exc).__name__
            how = "ssh" if not ex.node.local else "local"
            return None, f"{how}: {text.splitlines()[0]}"

    try:
        return list(await asyncio.gather(*(one(ex) for ex in s.execs)))
    finally:
        await s.close()


def shown_runs(records: list[RunRecord], last: int | None) -> list[RunRecord]:
    """Every active run (orphaned ones too) and the ``last`` most recent of the others, oldest first
    (``last`` None: every run)."""
    if last is None:
        return records
    ended = [r for r in records if r.state not in ACTIVE]
    keep = {id(r) for r in ended[max(0, len(ended) - last) :]}
    return [r for r in records if r.state in ACTIVE or id(r) in keep]


def run_status(
    run_id: str | None = None, *, live: bool = True, last: int | None = None
) -> list[dict[str, Any]]:
    """Runs as data (``run_id``: that one; else the active ones and the ``last`` ended ones, None:
    all); ``live`` asks each active run's nodes whether its process is up."""
    out: list[dict[str, Any]] = []
    for r in shown_runs(runs(), None if run_id else last):
        if run_id and r.run_id != run_id:
            continue
        d = r.model_dump(mode="json", exclude={"nodes"})
        d["state"] = _effective_state(r)
        d["nodes"] = [n.model_dump(mode="json", exclude={"node"}) for n in r.nodes]
        if live and r.state in ACTIVE and _slurm_journal(r.run_id):
            from lair.launch.slurm import slurm_status

            d = slurm_status(Journal(r.run_id), d)
        elif live and r.state in ACTIVE:
            alive = asyncio.run(_alive(_session(Journal(r.run_id), lambda _m: None)))
            for n, (a, why) in zip(d["nodes"], alive, strict=True):
                n["alive"] = a
                if why:
                    n["check_error"] = why
        out.append(d)
    if run_id and not out:
        raise LaunchError(f"no run {run_id!r}", hint="see runs with `lair status`")
    return out


def _wait_for_controller(j: Journal, pid: int, progress: Progress) -> RunRecord | None:
    """Ask the run's foreground lair process to stop it; the final record, or None if it died first."""
    progress(f"asking lair process {pid} to stop run {j.run_id}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        r = j.load()
        if r.state not in ("starting", "running", "stopping"):
            return r
        if not _pid_alive(pid):
            r = j.load()
            return r if r.state not in ("starting", "running", "stopping") else None
        time.sleep(0.1)
    raise LaunchError(f"run {j.run_id}: lair process {pid} did not finish stopping in {STOP_WAIT_S:g}s")


def stop_run(run_id: str, *, progress: Progress = lambda _m: None) -> RunRecord:
    """Stop a run and verify that nothing of it is left; LaunchError if that cannot be verified."""
    from lair.launch.run import teardown

    j = Journal(run_id)
    r = j.load()
    if r.state in ("stopped", "failed"):
        return r
    if not r.detached and r.controller_pid and _pid_alive(r.controller_pid) and r.state != "stop-failed":
        done = _wait_for_controller(j, r.controller_pid, progress)
        if done is not None and done.state != "stop-failed":
            return done
    if _slurm_journal(run_id):
        from lair.launch.slurm import stop_slurm

        return stop_slurm(j, progress)
    s = _session(j, progress)
    problems = asyncio.run(teardown(s, failed=False))
    if s.record.state == "stop-failed":
        raise LaunchError(
            "could not verify that everything stopped:\n  " + "\n  ".join(problems),
            hint=f"retry `lair stop {run_id}` once the nodes are reachable",
        )
    return s.record


def stop_all(*, progress: Progress = lambda _m: None) -> list[RunRecord]:
    return [stop_run(r.run_id, progress=progress) for r in runs() if r.state in ACTIVE]


async def _node_lines(s: Session, rank: int, follow: bool, lines: int) -> AsyncIterator[str]:
    ex = s.execs[rank]
    if ex.node.container is not None:
        argv = [ex.binary, "logs", "--tail", str(lines), *(["-f"] if follow else []), ex.node.container]
        stream = ex.runner.stream(argv) if follow else None
        if stream is None:
            res = await ex.runner.run(argv, check=False, timeout=60)
            for line in (res.stdout + res.stderr).splitlines():
                yield line
            return
        async for line in stream:
            yield line
    elif ex.record.log_path:
        if follow:
            async for line in ex.runner.follow(ex.record.log_path, n=lines):
                yield line
        else:
            for line in (await ex.runner.tail(ex.record.log_path, lines)).splitlines():
                yield line


def follow_logs(
    run_id: str, *, node: str | None, follow: bool, lines: int, emit: Callable[[str], None]
) -> None:
    """Print a run's logs (``emit`` per line, prefixed by the node name when several)."""
    j = Journal(run_id)
    r = j.load()
    ranks = [n.rank for n in r.nodes if node in (None, str(n.rank), n.name)]
    if not ranks:
        raise LaunchError(f"run {run_id} has no node {node!r}", hint="give a rank or a node name")
    prefix = len(ranks) > 1
    if _slurm_journal(run_id):  # the job's output files, whatever the run's state
        from lair.launch.slurm import slurm_logs

        slurm_logs(j, ranks, follow, lines, emit)
        return
    if r.state not in ACTIVE:
        for rank in ranks:
            for line in (j.saved_log(rank) or "").splitlines()[-lines:]:
                emit(f"{r.nodes[rank].name}| {line}" if prefix else line)
        return
    asyncio.run(_logs(j, ranks, follow, lines, prefix, emit))


async def _logs(
    j: Journal, ranks: list[int], follow: bool, lines: int, prefix: bool, emit: Callable[[str], None]
) -> None:
    s = _session(j, lambda _m: None)

    async def one(rank: int) -> None:
        name = s.execs[rank].node.name
        async for line in _node_lines(s, rank, follow, lines):
            emit(f"{name}| {line}" if prefix else line)

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop following: the remote readers are killed
        loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
    try:
        await asyncio.gather(*(one(rank) for rank in ranks))
    except asyncio.CancelledError:
        pass
    finally:
        await s.close()
