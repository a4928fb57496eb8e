"""The local runner: commands as asyncio subprocesses on this machine, each in its own session so
that a timeout kills the whole process group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from lair.runners.seam import Runner

__all__ = ["LocalRunner"]


class LocalRunner(Runner):
    """Runs on this machine. ``host`` is only a label for errors (default ``localhost``)."""

    def __init__(self, host: str = "localhost") -> None:
        self.host = host

    async def _exec(
        self, script: str, *, env: Mapping[str, str] | None, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            script,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **env} if env else None,
            start_new_session=True,  # own process group: a timeout kills children too
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except (TimeoutError, asyncio.CancelledError):
            _killpg(proc.pid)
            with contextlib.suppress(TimeoutError):  # drain the pipes so the transport closes
                await asyncio.wait_for(proc.communicate(), 5)
            raise
        return proc.returncode or 0, out, err

    async def _stream(self, script: str) -> AsyncIterator[str]:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            script,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            _killpg(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()

    async def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".lair-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        tmp.replace(p)

    async def close(self) -> None:
        return None


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
