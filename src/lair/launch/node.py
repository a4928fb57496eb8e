"""One node of a run: interprets its plan steps over its runner and keeps its journal record."""

from __future__ import annotations

import asyncio
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lair.errors import LaunchError, RunnerError

if TYPE_CHECKING:
    from lair.launch.journal import NodeRecord
    from lair.plan import NodePlan, Plan, Stage, Step
    from lair.runners import Runner

__all__ = ["NodeExec", "Progress"]

Progress = Callable[[str], None]
LOG_TAIL = 30
MAIN_FIRST_S = 5.0  # at stop, how long the main process alone has to end its own tree
ROOT_CAUSE_LINES = 2000  # how far back a failed engine's log is searched for the first error


def env_file_text(env: dict[str, str], runtime: str) -> bytes:
    """Docker/Podman env-file lines are ``NAME=value`` verbatim; the native one is sourced by sh."""
    if runtime == "native":
        return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()).encode()
    return "".join(f"{k}={v}\n" for k, v in env.items()).encode()


# What a container runtime's refusal of a start means, as (stderr text, message, hint)
REFUSALS = (
    (
        "image not known",
        "image {image} is not in podman's storage on the node (lair runs podman with --pull never)",
        "pull or load it there first: `podman pull IMAGE`, or `docker save IMAGE | podman load`",
    ),
    (
        "could not select device driver",
        "the host has no GPU container runtime ({image} asked for GPUs)",
        "install the NVIDIA container toolkit on the node, or say the hosts have none: the rig's or "
        'cluster\'s [capabilities] gpus = false (the plan then refuses GPU runs), or gpus = "none" in '
        "the recipe",
    ),
    (
        "error setting rlimit",
        "the host refuses the container's ulimits",
        "podman gives every container nofile and nproc of 1048576 unless told otherwise: set "
        "max_ulimit_nofile and max_ulimit_nproc in the rig's [capabilities] (or the cluster's) to "
        "what the host accepts, and the plan passes them as --ulimit NAME=CAP:CAP",
    ),
)


def explain_start_failure(exc: RunnerError, image: str) -> RunnerError:
    """``exc`` with a plain message and a hint when it is a refusal lair knows, else ``exc``."""
    for text, message, hint in REFUSALS:
        if text in exc.stderr_tail:
            return RunnerError(
                message.format(image=image),
                host=exc.host,
                argv=exc.argv,
                returncode=exc.returncode,
                stderr_tail=exc.stderr_tail,
                hint=hint,
            )
    return exc


def _image_index(argv: list[str]) -> int:
    i = argv.index("--env-file") + 2
    return i + 2 if argv[i] == "--entrypoint" else i


class NodeExec:
    """Runs the steps of one node; ``record`` is updated as it goes (the caller saves it)."""

    def __init__(
        self, plan: Plan, node: NodePlan, runner: Runner, record: NodeRecord, progress: Progress
    ) -> None:
        self.plan, self.node, self.runner, self.record, self.progress = plan, node, runner, record, progress
        self.binary = "podman" if plan.run.runtime == "podman" else "docker"
        self.unreachable = False
        self.journal_save: Callable[[], None] = lambda: None  # the session saves the record here
        self.redact: Callable[[str], str] = lambda text: text  # every secret value -> ***

    def say(self, msg: str) -> None:
        self.progress(f"{self.node.name}: {msg}")

    async def run_stage(self, stage: Stage) -> None:
        if self.unreachable:  # every step would wait for the same connect timeout again
            if stage.value == "stop" and not self.record.started:
                return  # nothing was started there: nothing to stop
            raise LaunchError(f"{self.node.name}: skipped {stage.value}: the node was unreachable")
        self.record.stage = stage.value
        for step in self.node.stage(stage):
            t0 = time.monotonic()
            try:
                await self.step(step)
            except RunnerError as exc:
                self.unreachable = exc.returncode is None and "cannot connect" in exc.message
                raise
            if step.kind not in ("ready",):
                self.say(f"{step.name} ({time.monotonic() - t0:.2f}s)")

    async def step(self, s: Step) -> None:
        from lair.hooks import run_hook, upload

        if s.kind == "upload":
            await upload(self.runner, s)
        elif s.kind == "env_file":
            assert s.path
            if self.node.local:  # over SSH, put_file creates the folder under umask 077
                Path(s.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if s.secrets:  # sourced by sh inside the container: shell-quoted like the native one
                text = env_file_text(self.plan.secret_env(), "native")
            else:
                text = env_file_text(self.plan.env_values(self.node), self.plan.run.runtime)
            await self.runner.put_file(s.path, text, mode=0o600)
        elif s.kind == "check":
            from lair.launch.preflight import check_ports

            await check_ports(self.runner, self.node.name, self.node.address, s)
        elif s.kind == "pull":
            from lair.launch.preflight import pull_image

            await pull_image(self.runner, self.node.name, s, self.say)
        elif s.kind == "exec" and s.stage.value in ("before_serve", "after_stop"):
            res = await run_hook(self.runner, s)
            if not res.ok:
                self.say(f"warning: {s.name} failed (on_failure = warn): {res.error}")
        elif s.kind == "exec":
            assert s.argv is not None
            await self.runner.run(s.argv, timeout=s.timeout_s or 120)
        elif s.kind == "script":
            await self.runner.run(["sh", "-c", s.script or ""], timeout=s.timeout_s or 600)
        elif s.kind == "start":
            await self.start(s)
        elif s.kind == "stop":
            await self.stop_step(s)
        elif s.kind == "cleanup":
            await self.runner.run(["rm", "-rf", s.path or ""], timeout=60)

    # -- main process ----------------------------------------------------------------------------
    async def _manifest_args(self, manifest: str | None) -> list[str]:
        from lair.plan.mounts import manifest_volume_args, parse_manifest

        args: list[str] = []
        for path in (manifest or "").split(";"):
            if path:
                text = (await self.runner.read_file(path)).decode()
                args += manifest_volume_args(parse_manifest(text, where=f"{self.node.name}:{path}"))
        return args

    async def start(self, s: Step) -> None:
        assert s.argv is not None
        self.record.started = True  # journaled first: a lair killed right now still leaves a trail
        if self.node.container is None:
            self.record.log_path = f"{self.node.workdir}/engine.log"
            self.journal_save()
            handle = await self.runner.start(s.argv, log_path=self.record.log_path)
            self.record.pid = handle.pid
            self.journal_save()
            return
        argv = list(s.argv)
        i = _image_index(argv)
        argv[i:i] = await self._manifest_args(s.manifest)
        self.record.container = self.node.container
        self.journal_save()
        try:
            res = await self.runner.run(argv, timeout=600)
        except RunnerError as exc:
            raise explain_start_failure(exc, self.plan.run.image or "") from None
        self.record.container_id = res.stdout.strip()[:12]
        self.journal_save()

    async def alive(self) -> tuple[bool, str]:
        """Whether the main process runs, and a word on how it ended."""
        if self.node.container is not None:
            fmt = "{{.State.Running}} {{.State.ExitCode}}"
            res = await self.runner.run(
                [self.binary, "inspect", "-f", fmt, self.node.container], check=False, timeout=30
            )
            if res.returncode != 0:
                return False, "container is gone"
            running, code = [*res.stdout.split(), "", ""][:2]
            return running == "true", f"container exited with code {code}"
        if self.record.pid is None:
            return False, "process was never started"
        return await self.runner.is_alive(self.record.pid), "process exited"

    async def log_tail(self, n: int = LOG_TAIL) -> str:
        """The last ``n`` lines of the main process's output, secrets redacted."""
        if self.node.container is not None:
            res = await self.runner.run(
                [self.binary, "logs", "--tail", str(n), self.node.container], check=False, timeout=30
            )
            return self.redact((res.stdout + res.stderr).strip())
        text = (await self.runner.tail(self.record.log_path, n)).strip() if self.record.log_path else ""
        return self.redact(text)

    def log_where(self) -> str:
        """Where the whole log is: the file on the node, or the container's ``logs`` command."""
        if self.node.container is not None:
            return f"`{self.binary} logs {self.node.container}` on {self.node.name}"
        return f"{self.record.log_path} on {self.node.name}" if self.record.log_path else "(no log)"

    # -- stop ------------------------------------------------------------------------------------
    async def stop_step(self, s: Step) -> None:
        if not self.record.started:
            return
        if s.argv is not None:  # docker/podman stop, rm: "no such container" is fine, verified below
            await self.runner.run(s.argv, check=False, timeout=(s.timeout_s or 30) + 30)
            if s.argv[1] == "rm":
                await self.verify_container_gone()
            return
        await self.stop_process(s.timeout_s or 30)

    async def verify_container_gone(self) -> None:
        assert self.node.container
        flt = f"name=^/?{self.node.container}$"
        res = await self.runner.run([self.binary, "ps", "-aq", "--filter", flt], timeout=30)
        if res.stdout.strip():
            raise LaunchError(f"{self.node.name}: container {self.node.container} is still there after rm -f")

    async def _pid(self) -> int | None:
        if self.record.pid is None and self.record.log_path:  # interrupted between start and record
            res = await self.runner.run(["cat", self.record.log_path + ".pid"], check=False, timeout=30)
            self.record.pid = int(res.stdout.strip()) if res.stdout.strip().isdigit() else None
        return self.record.pid

    async def _signal_all(self, pid: int, pids: list[int], sig: int) -> None:
        await self.runner.kill(pid, sig)  # the group (the leader may be gone, its group not)
        for p in pids:
            if p != pid:
                await self.runner.kill(p, sig, group=False)

    async def _wait_tree(self, pid: int, seen: list[int], seconds: float) -> tuple[list[int], list[int]]:
        """Poll until nothing of the tree is left or ``seconds`` passed: (left, every pid seen)."""
        deadline, left = time.monotonic() + seconds, seen
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            left = await self.runner.process_tree(pid, seen)
            seen = sorted({*seen, *left})
        return left, seen

    async def stop_process(self, grace: float) -> None:
        """SIGTERM the main process alone first (as ``docker stop`` does), then its group, session
        and every descendant; SIGKILL what is left after ``grace``; verified: nothing may be left.

        The main process first: a server that stops its own children in order (``ray start
        --block``, vLLM's API server) is gone in seconds, where a signal to the whole tree at once
        leaves them waiting on each other (a Ray node: about 33 s instead of 2)."""
        pid = await self._pid()
        if pid is None:
            return
        seen = await self.runner.process_tree(pid)
        await self.runner.kill(pid, signal.SIGTERM, group=False)
        left, seen = await self._wait_tree(pid, seen, min(grace / 3, MAIN_FIRST_S))
        if left:
            await self._signal_all(pid, left, signal.SIGTERM)
            left, seen = await self._wait_tree(pid, seen, grace)
        if left:
            await self._signal_all(pid, left, signal.SIGKILL)
            end = time.monotonic() + 5
            while left and time.monotonic() < end:
                await asyncio.sleep(0.1)
                left = await self.runner.process_tree(pid, seen)
        if left:
            raise LaunchError(f"{self.node.name}: processes {left} of pid {pid} survived SIGKILL")


__all__ += ["env_file_text", "explain_start_failure"]
