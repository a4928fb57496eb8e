"""``lair launch``: allocate, run the plan stage by stage on every node in parallel, wait until ready,
then serve in the foreground (Ctrl-C / SIGTERM stop cleanly) or detach. Any failure rolls back:
stop, ``after_stop`` hooks, cleanup on every node, leases released, and only then the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from lair.errors import LaunchError
from lair.launch.journal import Journal, RunRecord
from lair.launch.node import NodeExec, Progress
from lair.launch.outcome import LaunchResult, OnReady, node_records

if TYPE_CHECKING:
    from lair.inventory import Node
    from lair.launch.resolve import Prepared, Request
    from lair.plan import Plan, Stage

__all__ = ["LaunchResult", "Session", "launch", "node_records", "teardown"]

WATCH_S = 1.0


class Session:
    """A run being driven from this process: its plan, journal, runners and node executors."""

    def __init__(
        self, plan: Plan, record: RunRecord, journal: Journal, nodes: Sequence[Node], progress: Progress
    ):
        from lair.plan.secrets import redactor
        from lair.runners import runner_for

        self.plan, self.record, self.journal = plan, record, journal
        self.redact = redactor(plan.secret_values())
        self.tearing_down = False  # from then on signals no longer cancel anything
        self.pause_before: frozenset[Stage] = frozenset()  # fault injection, see fault_injection
        self.t0 = time.monotonic()
        self._progress = progress
        self.execs = [
            NodeExec(plan, n, runner_for(node), rec, self.say)
            for n, node, rec in zip(plan.nodes, nodes, record.nodes, strict=True)
        ]
        for ex in self.execs:
            ex.journal_save = self.save
            ex.redact = self.redact

    def say(self, msg: str) -> None:
        line = self.redact(f"[{time.monotonic() - self.t0:6.2f}s] {msg}")
        self.journal.event(line)
        self._progress(line)

    def save(self, state: str | None = None) -> None:
        if state:
            self.record.state = state  # type: ignore[assignment]
        self.record.error = self.redact(self.record.error)
        for n in self.record.nodes:
            n.errors = [self.redact(e) for e in n.errors]
        self.journal.save(self.record)

    async def stage(self, stage: Stage) -> None:
        """Run ``stage`` on every node at once. The first failure cancels the other nodes' steps
        (their commands' process groups are killed) and is raised once they have all ended."""
        tasks = [asyncio.create_task(ex.run_stage(stage)) for ex in self.execs]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.save()
        failed = [
            (ex, t) for ex, t in zip(self.execs, tasks, strict=True) if not t.cancelled() and t.exception()
        ]
        for ex, t in failed:
            ex.record.errors.append(f"{stage.value}: {t.exception()}")
        if failed:
            raise failed[0][1].exception()  # type: ignore[misc]

    async def close(self) -> None:
        for ex in self.execs:
            with contextlib.suppress(Exception):
                await ex.runner.close()


async def teardown(s: Session, *, failed: bool) -> list[str]:
    """Stop, after_stop, cleanup on every node; release leases once every process is verified gone.

    Returns the problems met (an unverified stop makes the run ``stop-failed`` and keeps its leases)."""
    s.tearing_down = True
    fd = await s.journal.lock_stop()  # one teardown per run at a time
    try:
        on_disk = s.journal.load()
        if on_disk.state in ("stopped", "failed"):  # someone else finished it while we waited
            s.record = on_disk
            await s.close()
            return []
        return await _teardown(s, failed)
    finally:
        s.journal.unlock(fd)


async def _teardown(s: Session, failed: bool) -> list[str]:
    from lair.inventory import release, set_holder
    from lair.plan import Stage

    s.save("stopping")
    for ex in s.execs:
        if ex.record.started:
            with contextlib.suppress(Exception):
                s.journal.save_log(ex.node.rank, s.redact(await ex.log_tail(500)))
    problems: dict[str, list[str]] = {}
    for stage in (Stage.STOP, Stage.AFTER_STOP, Stage.CLEANUP):
        results = await asyncio.gather(*(ex.run_stage(stage) for ex in s.execs), return_exceptions=True)
        for ex, r in zip(s.execs, results, strict=True):
            if isinstance(r, BaseException):
                msg = f"{ex.node.name}: {stage.value}: {r}"
                problems.setdefault(stage.value, []).append(msg)
                ex.record.errors.append(msg)
                s.say(f"warning: {msg}")
    stop_failed = bool(problems.get("stop"))
    if stop_failed:
        set_holder(s.record.run_id, None)
        s.record.error = "; ".join(problems["stop"])
    else:
        release(s.record.run_id)
    s.save("stop-failed" if stop_failed else ("failed" if failed else "stopped"))
    await s.close()
    return [m for ms in problems.values() for m in ms]


class _Signals:
    """SIGINT/SIGTERM/SIGHUP: the first cancels start-up (or ends serving); later ones are only reported."""

    def __init__(self, s: Session, task: asyncio.Task[object]) -> None:
        self.s, self.task, self.stop, self.count = s, task, asyncio.Event(), 0
        self.serving = False
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.handle, sig)

    def handle(self, sig: int) -> None:
        self.count += 1
        name = signal.Signals(sig).name
        if self.count > 1 or self.s.tearing_down:
            self.s.say(f"{name}: already stopping, please wait (nothing will be left behind)")
            return
        self.s.say(f"{name}: stopping")
        self.stop.set()
        if not self.serving and not self.s.tearing_down:
            self.task.cancel()

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)


async def _start(s: Session) -> float:
    from lair.launch.fault_injection import pause_before
    from lair.launch.readiness import wait_ready
    from lair.plan import Stage

    for stage in (Stage.PREPARE, Stage.BEFORE_SERVE, Stage.STAGE_MOUNTS, Stage.START, Stage.SERVE):
        await pause_before(stage, s.pause_before, s.say)
        await s.stage(stage)
    await pause_before(Stage.READY, s.pause_before, s.say)
    ready = s.plan.head.stage(Stage.READY)[0]
    s.say(f"waiting for {', '.join(ready.urls or [])} (up to {ready.timeout_s:g}s)")
    timeout = ready.timeout_s or s.plan.run.ready_timeout_s
    took = await wait_ready(s.execs, ready.urls or [], timeout, s.plan.api_key(ready))
    s.say(f"ready in {took:.2f}s: {s.plan.run.endpoint}")
    return took


async def _serve(s: Session, sig: _Signals) -> str:
    """Foreground: until a signal or until a node's process exits. Returns why it ended."""
    from lair.launch.readiness import check_alive

    sig.serving = True
    while not sig.stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sig.stop.wait(), WATCH_S)
        if sig.stop.is_set():
            return "signal"
        try:
            await check_alive(s.execs, "while serving")
        except LaunchError as exc:
            s.say(f"error: {exc.message}")
            return "exited"
    return "signal"


async def _main(s: Session, detach: bool, on_ready: OnReady | None = None) -> LaunchResult:
    from lair.plan import Stage

    task = asyncio.current_task()
    assert task is not None
    sig = _Signals(s, task)
    ready = s.plan.head.stage(Stage.READY)
    key = s.plan.api_key(ready[0]) if ready else None
    result = LaunchResult(s.record.run_id, s.plan.run.endpoint, "starting", api_key=key)
    result.secrets = s.plan.secret_values()
    try:
        try:
            result.ready_s = await _start(s)
        except BaseException as exc:  # anything at all: roll back first, then let it go on
            if isinstance(exc, asyncio.CancelledError):
                task.uncancel()
            await _fail(s, exc)
        s.save("running")
        result.state = "running"
        if detach:
            return await _detach(s, result)
        try:
            ended = await (_work(s, on_ready, result) if on_ready else _serve(s, sig))
        except Exception:
            s.say("stopping after an error")
            await teardown(s, failed=True)
            raise
        problems = await teardown(s, failed=ended == "exited")
        result.state = s.record.state
        if ended == "exited":
            raise LaunchError("the engine exited while serving; the run is stopped", hint=_logs_hint(s))
        _raise_if_unverified(s, problems)
        return result
    finally:
        sig.remove()


async def _work(s: Session, on_ready: OnReady, result: LaunchResult) -> str:
    """Run ``on_ready`` (e.g. a benchmark) against the ready run, then stop it."""
    try:
        await asyncio.to_thread(on_ready, result)
    except asyncio.CancelledError:
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        return "signal"
    return "done"


async def _fail(s: Session, exc: BaseException) -> None:
    what = "interrupted" if isinstance(exc, asyncio.CancelledError) else "failed"
    s.say(f"launch {what}: rolling back")
    problems = await teardown(s, failed=True)
    _raise_if_unverified(s, problems)
    if isinstance(exc, asyncio.CancelledError):
        raise KeyboardInterrupt from None
    raise exc


def _raise_if_unverified(s: Session, problems: list[str]) -> None:
    if s.record.state == "stop-failed":
        raise LaunchError(
            "could not verify that everything stopped:\n  " + "\n  ".join(problems),
            hint=f"retry with `lair stop {s.record.run_id}`; the nodes stay leased until then",
        )


def _logs_hint(s: Session) -> str:
    return f"see the last log lines: lair logs {s.record.run_id}"


async def _detach(s: Session, result: LaunchResult) -> LaunchResult:
    from lair.inventory import set_holder

    set_holder(s.record.run_id, None)
    s.record.detached, s.record.controller_pid = True, None
    s.save("running")
    await s.close()
    result.state = "running"
    return result


def launch(
    req: Request,
    *,
    detach: bool = False,
    progress: Progress = lambda _m: None,
    on_ready: OnReady | None = None,
) -> LaunchResult:
    """Launch a recipe; returns when it is ready (detached) or once it stopped (foreground, or after
    ``on_ready(result)`` returned: it runs in a thread while the run serves, then the run stops)."""
    from lair.launch.fault_injection import pause_stages
    from lair.launch.resolve import prepare
    from lair.launch.slurm import launch_slurm, slurm_cluster

    cluster = slurm_cluster(req)
    if cluster is not None:  # Slurm allocates the nodes: its job replaces lair's leases
        return launch_slurm(req, cluster, detach=detach, progress=progress, on_ready=on_ready)
    pauses = pause_stages()  # before anything is leased: a typo'd stage name fails here
    if req.doctor and req.place is None:
        doctor_first(req, progress)
    with _signals_interrupt():  # until the event loop owns the signals: a signal here releases the leases
        prep = prepare(req, lease=True)
        try:
            session = _new_session(prep, pauses, progress)
        except BaseException:
            from lair.inventory import release

            release(prep.plan.run.run_id)
            raise
    result = asyncio.run(_main(session, detach, on_ready))
    result.started_at = session.record.created_at
    return result


def doctor_first(req: Request, progress: Progress) -> None:
    """The doctor's fast checks on the nodes the run would take, before it leases them: a
    LaunchError naming each failed check. A recipe that cannot even be planned is left to the
    leasing ``prepare``, which raises what it always raised."""
    from lair.launch.doctor import FAST_CHECKS, fast_findings
    from lair.launch.resolve import prepare

    try:
        prep = prepare(req, lease=False)
    except Exception:
        return
    t0 = time.monotonic()
    found = fast_findings(prep)
    if found:
        lines = [f"{f.node + ': ' if f.node else ''}{f.what} [doctor check {f.check}]" for f in found]
        fixes = list(dict.fromkeys(f.fix for f in found))
        raise LaunchError(
            "\n".join(lines),
            hint="\n".join(fixes) + f"\n(nothing was leased; `lair doctor {req.recipe}` runs every check)",
        )
    took = time.monotonic() - t0
    progress(f"doctor: {len(FAST_CHECKS)} fast checks passed on {len(prep.nodes)} nodes ({took:.2f}s)")


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt (as SIGINT does) while the block runs."""

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _new_session(prep: Prepared, pauses: frozenset[Stage], progress: Progress) -> Session:
    p = prep.plan
    record = RunRecord.starting(p, node_records(p, prep.nodes))
    journal = Journal(p.run.run_id)
    journal.create(p.model_dump_json(indent=2), record)
    session = Session(p, record, journal, prep.nodes, progress)
    session.pause_before = pauses
    session.say(f"run {p.run.run_id} on {', '.join(f'{n.name} ({n.address})' for n in p.nodes)}")
    if prep.acceptance is not None:
        asked = "; ".join(f"{k}: {v}" for k, vs in prep.acceptance.requests.items() for v in vs)
        session.say(f"untrusted recipe from {prep.acceptance.source}, accepted: {asked or 'nothing risky'}")
    return session
