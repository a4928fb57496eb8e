"""Readiness: poll the head's health and /v1/models until both answer 200 (with the run's API key as
a bearer token when the engine has one), while every node's process must stay up (an early exit fails
at once with the root cause from its log). Then the answer must be the run's own: its process still
runs and /v1/models lists the run's served model name.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.launch.node import NodeExec

__all__ = ["check_alive", "http_get", "http_ok", "root_cause", "wait_ready"]

POLL_S = 0.1
MAX_POLL_S = 1.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # nodes are never behind a proxy
FATAL = re.compile(
    r"(?i)(traceback \(most recent call last\)|\berror\b|\bfatal\b|exception|couldn't|could not|cannot|"
    r"failed|out of memory|segmentation fault|core dumped|\bkilled\b|address already in use|not found|"
    r"no such file)"
)
ROOT_CAUSE_MAX = 12
_FIX = "fix the recipe or the node, then launch again"


def http_get(url: str, api_key: str | None = None) -> tuple[int, bytes]:
    """``(status, body)`` of a GET (bearer ``api_key``), no proxy, 2 s; ``(0, b"")`` when unreachable."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with _OPENER.open(req, timeout=2) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return 0, b""


async def http_ok(url: str, api_key: str | None = None) -> bool:
    return (await asyncio.to_thread(http_get, url, api_key))[0] == 200


def root_cause(log: str) -> list[str]:
    """The first traceback (through its exception line) and the first known fatal lines of a log."""
    lines = log.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            j = i + 1
            while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
                j += 1
            out = lines[i : j + 1][-ROOT_CAUSE_MAX:]
            break
    fatal = [ln for ln in lines if FATAL.search(ln) and ln not in out]
    return out + fatal[: max(0, ROOT_CAUSE_MAX - len(out))]


async def _failure(ex: NodeExec, what: str, hint: str = _FIX) -> LaunchError:
    from lair.launch.node import ROOT_CAUSE_LINES

    log = await ex.log_tail(ROOT_CAUSE_LINES)
    cause = root_cause(log)
    tail = log.splitlines()[-15:]
    text = f"{ex.node.name}: {what}"
    if cause:
        text += "\n  root cause (first error lines of the log):\n    " + "\n    ".join(cause)
    text += "\n  last log lines:\n    " + "\n    ".join(tail or ["(no output)"])
    run_id = ex.plan.run.run_id
    text += f"\n  whole log: {ex.log_where()}"
    text += f" (a rollback removes it; its last 500 lines stay: lair logs {run_id})"
    return LaunchError(text, hint=hint)


async def check_alive(execs: Sequence[NodeExec], when: str = "during start-up") -> None:
    """Raise LaunchError naming the first node whose main process is gone, with the root cause."""
    states = await asyncio.gather(*(ex.alive() for ex in execs))
    for ex, (ok, why) in zip(execs, states, strict=True):
        if not ok:
            raise await _failure(ex, f"{why} {when}")


async def _check_own(execs: Sequence[NodeExec], models_url: str, api_key: str | None) -> None:
    """The server that answered is the run's: its process runs and it serves the run's model."""
    await check_alive(execs)
    want = execs[0].plan.run.served_model
    if not want or not models_url:
        return
    status, body = await asyncio.to_thread(http_get, models_url, api_key)
    try:
        ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])]
    except (ValueError, AttributeError):
        ids = []
    if want not in ids:
        raise LaunchError(
            f"the server answering {models_url} is not this run's: it serves {ids or 'nothing'} "
            f"(HTTP {status}), the run serves {want!r}",
            hint="another server holds the port: stop it, or give the recipe another port",
        )


async def wait_ready(
    execs: Sequence[NodeExec], urls: Sequence[str], timeout_s: float, api_key: str | None = None
) -> float:
    """Seconds until every URL answered 200 and the answer is the run's own; LaunchError on timeout,
    an early exit or a stranger's server."""
    t0 = time.monotonic()
    pending, poll = list(urls), POLL_S
    while True:
        await check_alive(execs)
        while pending and await http_ok(pending[0], api_key):
            pending.pop(0)
        if not pending:
            models = next((u for u in urls if u.endswith("/v1/models")), "")
            await _check_own(execs, models, api_key)
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise await _failure(
                execs[0],
                f"not ready after {timeout_s:g}s: {pending[0]} does not answer 200",
                "raise ready_timeout_s if the engine is only slow to load",
            )
        await asyncio.sleep(poll)
        poll = min(poll * 1.5, MAX_POLL_S)
