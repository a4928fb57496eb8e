"""One Slurm run driven from this process: placeholder plan, the main job, the allocation become
the plan's nodes, the job folder's files, the after_stop job, readiness, serving, the end."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import LaunchError
from lair.launch.slurm.jobs import (
    ACTIVE_STATES,
    POLL_S,
    SlurmJob,
    check_output,
    finish,
    job_name,
    job_state,
    job_states,
    slurm_cmd,
    status_file,
    submit,
    tail,
)

if TYPE_CHECKING:
    from lair.inventory import Cluster, Node
    from lair.launch.journal import Journal, RunRecord
    from lair.launch.node import Progress
    from lair.launch.outcome import LaunchResult, OnReady
    from lair.launch.resolve import Prepared, Request
    from lair.plan import Plan
    from lair.recipe import Recipe

__all__ = ["launch_slurm", "prepare_placeholders", "slurm_cluster", "slurm_plan"]

ALLOC_WAIT_S = 600.0  # pending in the queue, then the batch script's first lines


# ---- placement ---------------------------------------------------------------------------------------
def slurm_cluster(req: Request) -> Cluster | None:
    """The request's cluster when it is a Slurm cluster (``--nodes`` never is)."""
    from lair.inventory import load_inventory
    from lair.launch.resolve import load_source
    from lair.recipe import load_recipe
    from lair.rig import load_rig

    if req.hosts or req.place is not None:
        return None
    name = req.cluster
    if not name:
        recipe = load_recipe(load_source(req.recipe)[0])
        name = recipe.cluster or (load_rig(req.rig).cluster if req.rig else None)
    if not name:
        return None
    c = load_inventory().get(name)
    return c if c.kind == "slurm" else None


def _placeholders(recipe: Recipe, _run_id: str) -> list[Node]:
    from lair.inventory import Node

    return [
        Node(name=f"slurm-node{i}", address=f"slurm-node{i}", rank=i) for i in range(recipe.required_nodes)
    ]


def _allocated(job: SlurmJob, names: list[str]) -> list[Node]:
    """The allocation's nodes in rank order, each at its ``NodeAddr``."""
    from lair.inventory import Node

    out = check_output(
        slurm_cmd(job, "scontrol", "show", "node", "-o", ",".join(names)), "scontrol show node"
    )
    addr = {}
    for line in out.splitlines():
        f = dict(w.split("=", 1) for w in line.split() if "=" in w)
        addr[f.get("NodeName", "")] = f.get("NodeAddr") or f.get("NodeHostName") or f.get("NodeName", "")
    return [Node(name=n, address=addr.get(n, n), rank=i) for i, n in enumerate(names)]


def _settings(c: Cluster) -> Any:
    from lair.plan.sbatch import SlurmJobSettings

    s = c.slurm
    assert s is not None
    return SlurmJobSettings(s.partition, s.account, s.gres_per_node, s.container, s.time_limit)


# ---- files in the job folder ---------------------------------------------------------------------------
def _write(path: Path, text: str | bytes, mode: int) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _write_plan(plan: Plan, recipe: Recipe, c: Cluster, job_dir: Path) -> None:
    from lair.launch.node import env_file_text
    from lair.plan.sbatch import node_scripts

    settings = _settings(c)
    scripts, copies = node_scripts(plan, recipe, settings, str(job_dir))
    for rel, text in scripts.items():
        _write(job_dir / rel, text, 0o700)
    for rel, src in copies.items():
        _write(job_dir / rel, Path(src).read_bytes(), 0o700)
    shell_env = plan.run.runtime == "native" or settings.container in ("apptainer", "enroot")
    for n in plan.nodes:
        values = plan.env_values(n)
        if shell_env:  # the command sources one file (docker mounts the secrets file of the plan)
            values = {**plan.secret_env(), **values}
        env = env_file_text(values, "native" if shell_env else plan.run.runtime)
        _write(job_dir / f"r{n.rank}" / "env", env, 0o600)
        if n.secrets_file and not shell_env:
            secrets = env_file_text(plan.secret_env(), "native")
            _write(job_dir / f"r{n.rank}" / "secrets", secrets, 0o600)


def _submit_main(plan: Plan, recipe: Recipe, c: Cluster, job_dir: Path) -> int:
    from lair.plan.sbatch import heterogeneous, main_script, pyxis_options, sbatch_options

    settings = _settings(c)
    extra = ""
    if plan.run.runtime != "native" and settings.container == "enroot":
        extra = " ".join(pyxis_options(plan, recipe, str(job_dir))) + " "
    opts = sbatch_options(recipe, settings)
    name, het = job_name(plan.run.run_id), heterogeneous(plan)
    script = main_script(str(job_dir), recipe.required_nodes, name, opts, extra, het=het)
    _write(job_dir / "main.sbatch", script, 0o700)
    for sub in ("logs", "status"):  # sbatch opens its output file before the script runs
        (job_dir / sub).mkdir(mode=0o700, exist_ok=True)
    return submit(settings_conf(c), job_dir / "main.sbatch")


def settings_conf(c: Cluster) -> str | None:
    return c.slurm.slurm_conf if c.slurm else None


def _submit_epilogue(job: SlurmJob, c: Cluster, nodes: list[Node]) -> int:
    from lair.plan.sbatch import epilogue_script

    s = _settings(c)
    opts = [f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(n.name for n in nodes)}"]
    opts += [f"--partition={s.partition}"] * bool(s.partition) + [f"--account={s.account}"] * bool(s.account)
    script = epilogue_script(job.job_dir, len(nodes), f"lair-after-{job.job_id}", opts)
    path = Path(job.job_dir) / "after_stop.sbatch"
    _write(path, script, 0o700)
    return submit(job.slurm_conf, path, f"--dependency=afterany:{job.job_id}")


# ---- the run ----------------------------------------------------------------------------------------------
class _Run:
    """One Slurm run driven from this process: journal, jobs, progress."""

    def __init__(self, req: Request, c: Cluster, progress: Progress) -> None:
        self.req, self.c, self.progress, self.t0 = req, c, progress, time.monotonic()
        self.stop_signal = False
        self.job: SlurmJob
        self.journal: Journal
        self.record: RunRecord
        self.plan: Plan

    def say(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.2f}s] {msg}"
        if hasattr(self, "journal"):
            self.journal.event(line)
        self.progress(line)

    def save(self, state: str | None = None) -> None:
        if state:
            self.record.state = state  # type: ignore[assignment]
        self.journal.save(self.record)


def _wait_nodes(run: _Run) -> list[str]:
    deadline, said = time.monotonic() + ALLOC_WAIT_S, ""
    while time.monotonic() < deadline:
        if run.stop_signal:
            raise KeyboardInterrupt
        names = status_file(run.job, "nodes")
        if names:
            return _distinct(run.job, names.split())
        info = job_states(run.job).get(run.job.job_id)
        state = str(info["job_state"]) if info else "GONE"
        if state not in ACTIVE_STATES:
            raise LaunchError(
                f"job {run.job.job_id} ended before it started ({state})", hint=_log_hint(run.job)
            )
        reason = f"{state} ({info.get('state_reason', '')})" if info else state
        if reason != said:
            run.say(f"job {run.job.job_id}: {reason}")
            said = reason
        time.sleep(POLL_S)
    raise LaunchError(f"job {run.job.job_id} got no nodes in {ALLOC_WAIT_S:g}s", hint="see squeue")


def _distinct(job: SlurmJob, names: list[str]) -> list[str]:
    """The allocation's nodes, one rank each: a node listed twice (by two components of a
    heterogeneous job, which Slurm 22.05 does not do) would leave a rank without a node."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise LaunchError(
            f"job {job.job_id}: Slurm gave {', '.join(twice)} to more than one rank",
            hint="each rank needs a node of its own: use a partition that gives nodes whole "
            "(OverSubscribe=EXCLUSIVE)",
        )
    return names


def _log_hint(job: SlurmJob) -> str:
    return f"see the job's output in {job.job_dir}/logs"


def _failure(run: _Run) -> str | None:
    """Why the main job is not serving (None while it is): its verdict, the failed stage's log."""
    job = run.job
    verdict = status_file(job, "main")
    state = job_state(job, job.job_id)
    if verdict is None and state in ACTIVE_STATES:
        return None
    if state == "CANCELLED" and not job.stop_requested:
        return f"job {job.job_id} was cancelled outside lair (scancel)"
    for stage in ("before_serve", "serve"):
        for n in run.plan.nodes:
            rc = status_file(job, f"{stage}-r{n.rank}.rc")
            if rc not in (None, "0"):
                log = Path(job.job_dir) / "logs" / f"{stage}-r{n.rank}.log"
                return f"{stage} failed on {n.name} (exit {rc}); its output:\n    {tail(log)}"
    batch = Path(job.job_dir) / "logs" / f"{job_name(run.plan.run.run_id)}-{job.job_id}.out"
    return f"job {job.job_id}: {verdict or state}; the batch script's output:\n    {tail(batch)}"


def _wait_ready(run: _Run) -> float:
    from lair.launch.readiness import http_get
    from lair.plan import Stage

    ready = run.plan.head.stage(Stage.READY)[0]
    key = run.plan.api_key(ready)
    urls, t0 = list(ready.urls or []), time.monotonic()
    run.say(f"waiting for {', '.join(urls)} (up to {ready.timeout_s:g}s)")
    while urls:
        if run.stop_signal:
            raise KeyboardInterrupt
        why = _failure(run)
        if why:
            raise LaunchError(why, hint=_log_hint(run.job))
        while urls and http_get(urls[0], key)[0] == 200:
            urls.pop(0)
        if urls and time.monotonic() - t0 > (ready.timeout_s or run.plan.run.ready_timeout_s):
            raise LaunchError(f"not ready after {ready.timeout_s:g}s: {urls[0]}", hint=_log_hint(run.job))
        time.sleep(POLL_S)
    return time.monotonic() - t0


def _end(run: _Run, *, failed: bool, why: str = "") -> list[str]:
    """Cancel the main job (if it still runs), let the after_stop job run, verify nothing is left."""
    run.job.stop_requested = run.job.stop_requested or not why
    run.job.save(run.journal)
    run.save("stopping")
    problems = finish(run.job, run.say)
    for n in run.record.nodes:
        n.errors += [p for p in problems if n.name in p]
    if problems and any("still" in p for p in problems):
        run.record.error = "; ".join(problems)
        run.save("stop-failed")
    else:
        run.record.error = why
        run.save("failed" if failed else "stopped")
    return problems


def _new_run(req: Request, c: Cluster, progress: Progress) -> tuple[_Run, Prepared]:
    from lair.launch.journal import Journal, RunRecord
    from lair.launch.resolve import rendered_recipe

    run = _Run(req, c, progress)
    dry = prepare_placeholders(req)
    run_id = dry.plan.run.run_id
    run.journal = Journal(run_id)
    p = dry.plan
    run.record = RunRecord.starting(p, [])
    run.plan = p
    run.journal.create(p.model_dump_json(indent=2), run.record)
    custom = c.slurm.job_dir if c.slurm else None
    job_dir = Path(custom).expanduser() / run_id if custom else run.journal.dir / "slurm"
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    run.job = SlurmJob(
        str(job_dir), _submit_main(p, rendered_recipe(dry, req), c, job_dir), slurm_conf=settings_conf(c)
    )
    run.job.save(run.journal)
    run.say(f"run {run_id}: submitted job {run.job.job_id} ({c.name})")
    return run, dry


def _place(run: _Run, dry: Prepared) -> None:
    """The allocation's nodes become the plan's; the node scripts are written; the job goes on."""
    from lair.launch.outcome import node_records
    from lair.launch.resolve import prepare, rendered_recipe

    nodes = _allocated(run.job, _wait_nodes(run))
    req = dataclasses.replace(run.req, place=lambda _r, _id: nodes, run_id=run.record.run_id)
    prep = prepare(req, lease=False)
    run.plan = prep.plan
    run.record.endpoint = prep.plan.run.endpoint
    run.record.nodes = node_records(prep.plan, nodes)
    for n in run.record.nodes:
        n.started = True
        n.log_path = f"{run.job.job_dir}/logs/serve-r{n.rank}.log"
    run.journal.save_plan(prep.plan.model_dump_json(indent=2))
    run.save()
    run.say(f"job {run.job.job_id} on {', '.join(f'{n.name} ({n.address})' for n in nodes)}")
    _write_plan(prep.plan, rendered_recipe(prep, req), run.c, Path(run.job.job_dir))
    run.job.epilogue_id = _submit_epilogue(run.job, run.c, nodes)
    run.job.save(run.journal)
    (Path(run.job.job_dir) / "go").touch()
    run.say(f"plan written; after_stop job {run.job.epilogue_id} waits for job {run.job.job_id}")


def _serve(run: _Run) -> str:
    """Foreground: until a signal, or until the job ends by itself. Returns why it ended."""
    while not run.stop_signal:
        why = _failure(run)
        if why:
            return why
        time.sleep(1.0)
    return ""


def launch_slurm(
    req: Request, c: Cluster, *, detach: bool, progress: Progress, on_ready: OnReady | None
) -> LaunchResult:
    from lair.launch.outcome import LaunchResult

    run, dry = _new_run(req, c, progress)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def handle(sig: int, _frame: object) -> None:
        run.say(f"{signal.Signals(sig).name}: stopping")
        run.stop_signal = True

    for s in old:
        signal.signal(s, handle)
    try:
        return _drive(run, dry, detach, on_ready, LaunchResult)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _drive(run: _Run, dry: Prepared, detach: bool, on_ready: OnReady | None, result_cls: Any) -> LaunchResult:
    from lair.plan import Stage

    result = result_cls(
        run.record.run_id, run.plan.run.endpoint, "starting", started_at=run.record.created_at
    )
    try:
        _place(run, dry)
        result.endpoint = run.plan.run.endpoint
        ready = run.plan.head.stage(Stage.READY)
        result.api_key = run.plan.api_key(ready[0]) if ready else None
        result.ready_s = _wait_ready(run)
    except BaseException as exc:
        why = (
            "interrupted" if isinstance(exc, KeyboardInterrupt) else (getattr(exc, "message", "") or str(exc))
        )
        run.say(f"launch failed: {why.splitlines()[0]}; cancelling, after_stop runs")
        problems = _end(run, failed=True, why=why)
        if isinstance(exc, LaunchError):
            raise LaunchError(_with_after_stop(exc.message, run, problems), hint=exc.hint) from None
        raise
    run.say(f"ready in {result.ready_s:.2f}s: {run.plan.run.endpoint}")
    run.save("running")
    result.state = "running"
    if detach:
        run.record.detached, run.record.controller_pid = True, None
        run.save("running")
        return result  # type: ignore[no-any-return]
    why = ""
    if on_ready is not None:
        try:
            on_ready(result)
        except KeyboardInterrupt:
            why = ""
    else:
        why = _serve(run)
    problems = _end(run, failed=bool(why), why=why)
    result.state = run.record.state
    if why:
        raise LaunchError(_with_after_stop(why, run, problems), hint=_log_hint(run.job))
    if run.record.state == "stop-failed":
        raise LaunchError("could not verify that the jobs ended:\n  " + "\n  ".join(problems))
    return result  # type: ignore[no-any-return]


def _with_after_stop(msg: str, run: _Run, problems: list[str]) -> str:
    epi = status_file(run.job, "epilogue")
    ran = "after_stop ran on every node" if epi == "0" else f"after_stop: {epi or 'did not run'}"
    extra = "".join(f"\n  {p}" for p in problems)
    return (
        f"{msg}\n({ran}; job {run.job.job_id} and its after_stop job {run.job.epilogue_id} are gone){extra}"
    )


def slurm_plan(req: Request, c: Cluster) -> tuple[Prepared, str]:
    """What ``lair plan`` shows for a Slurm cluster: the plan on placeholder nodes, the main job."""
    from lair.launch.resolve import rendered_recipe
    from lair.plan.sbatch import heterogeneous, main_script, sbatch_options

    prep = prepare_placeholders(req)
    opts = sbatch_options(rendered_recipe(prep, req), _settings(c))
    job_dir = f"<{c.slurm.job_dir if c.slurm and c.slurm.job_dir else 'the run journal'}>/slurm"
    name, het = job_name(prep.plan.run.run_id), heterogeneous(prep.plan)
    return prep, main_script(job_dir, prep.recipe.required_nodes, name, opts, het=het)


def prepare_placeholders(req: Request) -> Prepared:
    from lair.launch.resolve import prepare

    return prepare(dataclasses.replace(req, place=_placeholders), lease=False)
