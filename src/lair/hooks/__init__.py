"""Hooks: the ``before_serve`` / ``after_stop`` steps of a plan, run on one node.

A named script from the script library was planned as an ``upload`` step (copied to the node's run
folder, mode 0755) followed by an ``exec`` step; inline shell as an ``exec`` of ``sh -c``. Each runs
with its ``timeout_s`` (the whole process group is killed after it); ``on_failure = "fail"`` raises,
``"warn"`` reports and goes on. Launch runs ``after_stop`` hooks on every node in every outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lair.errors import RunnerError

if TYPE_CHECKING:
    from lair.plan import Step
    from lair.runners import Runner

__all__ = ["HookResult", "run_hook", "upload"]

OUTPUT_TAIL_LINES = 20


@dataclass(frozen=True)
class HookResult:
    """One hook run on one node: ``ok``, or the error (a warned failure keeps ``ok=False``)."""

    host: str
    name: str
    ok: bool
    output: str = ""
    error: RunnerError | None = None


async def upload(runner: Runner, step: Step) -> None:
    """Copy a library script (``step.source``) to ``step.path`` on the node."""
    assert step.source and step.path
    data = Path(step.source).read_bytes()
    await runner.put_file(step.path, data, mode=int(step.mode or "0755", 8))


async def run_hook(runner: Runner, step: Step) -> HookResult:
    """Run one hook ``exec`` step; raise RunnerError when it fails and ``on_failure`` is ``fail``."""
    assert step.argv is not None
    try:
        res = await runner.run(step.argv, timeout=step.timeout_s, check=True)
    except RunnerError as exc:
        if step.on_failure == "fail":
            raise
        return HookResult(runner.host, step.name, False, exc.stderr_tail, exc)
    tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-OUTPUT_TAIL_LINES:])
    return HookResult(runner.host, step.name, True, tail)
