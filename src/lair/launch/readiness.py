"""Readiness: poll the head's health and /v1/models until both answer 200, while every node's
process must stay up (an early exit fails at once with its last log lines)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.launch.node import NodeExec

__all__ = ["check_alive", "http_ok", "wait_ready"]

POLL_S = 0.1
MAX_POLL_S = 1.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # nodes are never behind a proxy


def _get(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


async def http_ok(url: str) -> bool:
    return await asyncio.to_thread(_get, url)


async def check_alive(execs: Sequence[NodeExec]) -> None:
    """Raise LaunchError naming the first node whose main process is gone, with its last log lines."""
    states = await asyncio.gather(*(ex.alive() for ex in execs))
    for ex, (ok, why) in zip(execs, states, strict=True):
        if not ok:
            tail = await ex.log_tail()
            raise LaunchError(
                f"{ex.node.name}: {why} during start-up; last log lines:\n    "
                + "\n    ".join(tail.splitlines() or ["(no output)"]),
                hint="fix the recipe or the node, then launch again",
            )


async def wait_ready(execs: Sequence[NodeExec], urls: Sequence[str], timeout_s: float) -> float:
    """Seconds until every URL answered 200; LaunchError on timeout or an early exit."""
    t0 = time.monotonic()
    pending, poll = list(urls), POLL_S
    while True:
        await check_alive(execs)
        while pending and await http_ok(pending[0]):
            pending.pop(0)
        if not pending:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            tail = await execs[0].log_tail()
            raise LaunchError(
                f"not ready after {timeout_s:g}s: {pending[0]} does not answer 200; last log lines of "
                f"{execs[0].node.name}:\n    " + "\n    ".join(tail.splitlines() or ["(no output)"]),
                hint="raise ready_timeout_s if the engine is only slow to load",
            )
        await asyncio.sleep(poll)
        poll = min(poll * 1.5, MAX_POLL_S)
