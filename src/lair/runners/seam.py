"""The runner seam: one interface for every command lair runs on a node, local or over SSH.

A :class:`Runner` runs short commands (:meth:`Runner.run`), starts long-running detached processes
(:meth:`Runner.start`, they survive the lair process), signals them, moves small files and reads logs.
Transports implement three primitives (``_exec``, ``_stream``, ``close``); everything else is shell on
the node, so local and SSH behave the same. Env values are never logged or put in a command line.
"""

from __future__ import annotations

import os
import shlex
import signal
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from lair.errors import RunnerError

__all__ = ["Argv", "CommandResult", "ProcessHandle", "Runner", "shell_command"]

Argv = Sequence[str] | str
"""A command: a list of arguments (run as is) or a string (run with ``sh -c``)."""

STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left: its exit code and its decoded output."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass(frozen=True)
class ProcessHandle:
    """A detached process on a node: ``pid`` is also its process group and session id."""

    host: str
    pid: int
    log_path: str
    pid_path: str


def shell_command(argv: Argv) -> str:
    """The ``sh -c`` text for ``argv`` (a string is taken as shell already)."""
    return argv if isinstance(argv, str) else shlex.join(argv)


def argv_list(argv: Argv) -> list[str]:
    """``argv`` as a list, for error messages (a string becomes ``sh -c STRING``)."""
    return ["sh", "-c", argv] if isinstance(argv, str) else list(argv)


def stderr_tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# wait (up to ~5 s) until the child has called setsid(), so its pid is a process group to signal
_WAIT_SESSION = (
    "for _ in $(seq 500); do "
    "[ \"$(sed 's/.*) //' /proc/$pid/stat 2>/dev/null | cut -d' ' -f3)\" != \"$pid\" ] || break; "
    "[ -e /proc/$pid ] || break; sleep 0.01; done"
)


def env_guard(env: Mapping[str, str] | None) -> str:
    """Shell that fails with exit code 97 when an env name did not arrive (sshd without AcceptEnv).

    Only names appear here, never values."""
    checks = [
        f'[ "${{{n}+x}}" ] || {{ echo "lair: env {n} was not passed (sshd AcceptEnv?)" >&2; exit 97; }}'
        for n in (env or {})
    ]
    return "; ".join(checks)


_TREE_AWK = r"""'BEGIN { n = split(seeds, s, " "); for (i = 1; i <= n; i++) seed[s[i]] = 1 }
{ if ($5 ~ /^Z/) next; ppid[$1] = $2; if ($3 == p || $4 == p || ($1 in seed)) mark[$1] = 1 }
END { do { more = 0
           for (x in ppid) if (!(x in mark) && (ppid[x] in mark)) { mark[x] = 1; more = 1 } } while (more)
      for (x in mark) print x }'"""


class Runner(ABC):
    """Runs commands on one node. Every method is a coroutine except :meth:`follow` (an async iterator).

    ``host`` names the node in errors and logs."""

    host: str

    # -- transport primitives ------------------------------------------------------------------
    @abstractmethod
    async def _exec(
        self, script: str, *, env: Mapping[str, str] | None, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        """Run ``script`` with ``sh -c`` in its own process group; kill the group on timeout.

        Returns ``(returncode, stdout, stderr)``; raises :class:`TimeoutError` after killing."""

    @abstractmethod
    def _stream(self, script: str) -> AsyncIterator[str]:
        """Lines a long-running ``sh -c`` script prints; closing the iterator kills the script."""

    @abstractmethod
    async def close(self) -> None:
        """Release the transport (the SSH connection); detached processes keep running."""

    # -- commands ------------------------------------------------------------------------------
    async def run(
        self,
        argv: Argv,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = True,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run a command to completion. A non-zero exit raises :class:`RunnerError` when ``check``;
        a timeout kills the command's whole process group and always raises."""
        script = shell_command(argv)
        try:
            rc, out, err = await self._exec(script, env=env, stdin=stdin, timeout=timeout)
        except TimeoutError:
            raise RunnerError(
                f"timed out after {timeout:g} s (process group killed)", host=self.host, argv=argv_list(argv)
            ) from None
        result = CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and rc != 0:
            raise RunnerError(
                "command failed",
                host=self.host,
                argv=argv_list(argv),
                returncode=rc,
                stderr_tail=stderr_tail(result.stderr),
            )
        return result

    async def start(
        self,
        argv: Argv,
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> ProcessHandle:
        """Start a detached process (new session, stdin from /dev/null, stdout+stderr appended to
        ``log_path``, pid written to ``log_path + '.pid'``). It outlives this runner and lair."""
        pid_path = log_path + ".pid"
        body = argv if isinstance(argv, str) else "exec " + shlex.join(argv)
        inner = (f"cd {shlex.quote(cwd)} && " if cwd else "") + body
        log_dir = shlex.quote(os.path.dirname(log_path) or ".")
        script = (
            f"mkdir -p {log_dir} || exit 1; "
            f"setsid sh -c {shlex.quote(inner)} >>{shlex.quote(log_path)} 2>&1 </dev/null & "
            f'pid=$!; echo "$pid" >{shlex.quote(pid_path)}; {_WAIT_SESSION}; echo "$pid"'
        )
        res = await self.run(script, env=env, timeout=30)
        return ProcessHandle(self.host, int(res.stdout.split()[-1]), log_path, pid_path)

    async def is_alive(self, pid: int) -> bool:
        """True while ``pid`` exists and is not a zombie."""
        state = f"s=$(sed 's/.*) //' /proc/{int(pid)}/stat 2>/dev/null | cut -c1)"
        script = f'{state}; [ -n "$s" ] && [ "$s" != Z ]'
        return (await self.run(script, check=False, timeout=30)).returncode == 0

    async def process_tree(self, pid: int, also: Sequence[int] = ()) -> list[int]:
        """Live processes of ``pid``'s process group and session, ``also`` (pids seen before), and
        every descendant of any of them (zombies left out): what a stop must end."""
        seeds = " ".join(str(int(p)) for p in (pid, *also))
        script = f"ps -e -o pid=,ppid=,pgid=,sid=,stat= | awk -v p={int(pid)} -v seeds='{seeds}' " + _TREE_AWK
        res = await self.run(script, check=False, timeout=30)
        return sorted({int(x) for x in res.stdout.split() if x.isdigit()})

    async def kill(self, pid: int, sig: int = signal.SIGTERM, *, group: bool = True) -> bool:
        """Send ``sig`` to the process group ``pid`` (or just the process); False if nothing was there."""
        target = f"-{int(pid)}" if group else str(int(pid))  # dash: no "--"
        res = await self.run(f"kill -{int(sig)} {target} 2>/dev/null", check=False, timeout=30)
        return res.returncode == 0

    # -- files ---------------------------------------------------------------------------------
    async def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        """Write ``data`` atomically to ``path`` with ``mode`` (created 0600 first, so secrets never
        sit world-readable, then chmod'ed and renamed into place); parent folders are created."""
        q = shlex.quote(path)
        tmp = shlex.quote(f"{path}.lair-tmp")
        parent = shlex.quote(os.path.dirname(path) or ".")
        script = f"umask 077 && mkdir -p {parent} && cat >{tmp} && chmod {mode:o} {tmp} && mv -f {tmp} {q}"
        await self.run(script, stdin=data, timeout=60)

    async def read_file(self, path: str) -> bytes:
        script = f"cat {shlex.quote(path)}"
        rc, out, err = await self._exec(script, env=None, stdin=None, timeout=60)
        if rc != 0:
            raise RunnerError(
                "cannot read file",
                host=self.host,
                argv=["cat", path],
                returncode=rc,
                stderr_tail=stderr_tail(err.decode(errors="replace")),
            )
        return out

    async def tail(self, path: str, n: int = 50) -> str:
        """The last ``n`` lines of a file ("" if it does not exist)."""
        res = await self.run(f"tail -n {int(n)} {shlex.quote(path)} 2>/dev/null", check=False, timeout=30)
        return res.stdout

    def follow(self, path: str, *, n: int | None = None) -> AsyncIterator[str]:
        """Lines of ``path`` as they are written (``tail -F``: waits for the file, survives rotation).

        ``n=None`` starts at the first line, else at the last ``n``. Stop by closing the iterator
        (``aclose()`` or leaving ``async for`` via break inside ``contextlib.aclosing``)."""
        start = "+1" if n is None else str(int(n))
        return self._stream(f"exec tail -n {start} -F {shlex.quote(path)} 2>/dev/null")

    def stream(self, argv: Argv) -> AsyncIterator[str]:
        """Lines a long-running command prints on stdout (e.g. ``docker logs -f``); closing the
        iterator kills it. (Added for ``lair logs -f`` on containers.)"""
        return self._stream(shell_command(argv) + " 2>&1")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.host}>"

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
