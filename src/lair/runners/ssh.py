"""The SSH runner: one asyncssh connection per node, reused for every command (each command is a
channel on it). All connection options live in :func:`connect_options`.

Host keys (``SshOptions.known_hosts``):

- ``"accept-new"`` (default): like OpenSSH's ``StrictHostKeyChecking=accept-new``. The first key a
  node shows is recorded in lair's own known_hosts file (``<state>/known_hosts`` or
  ``known_hosts_file``); a different key later is refused.
- ``"strict"``: the key must already be in ``known_hosts_file`` (default ``~/.ssh/known_hosts``).
- ``"off"``: no check (throwaway test nodes only).

Env values never appear in a command line (``SshOptions.env_via``):

- ``"stdin"`` (default, any sshd, no extra round trip): sent as ``export K='v'`` lines ahead of the
  command's stdin; the command's shell reads exactly those bytes (``head -c N``) and evaluates them.
- ``"file"``: written to a 0600 file in the login folder over its own channel, sourced by the
  command's shell and deleted before the command runs.
- ``"accept-env"``: SSH environment requests (no extra round trip); the node's sshd must accept the
  names (``AcceptEnv``), and a name that did not arrive fails the command (exit 97).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import re
import secrets
import shlex
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol

from lair.errors import RunnerError
from lair.runners.seam import Runner, env_guard

__all__ = ["EnvVia", "KnownHostsPolicy", "SshOptions", "SshRunner", "SshTarget", "connect_options"]

KnownHostsPolicy = Literal["accept-new", "strict", "off"]
EnvVia = Literal["stdin", "file", "accept-env"]
PGID_MARK = b"@lair-pgid "
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SshOptions:
    """Per-cluster SSH settings (``[clusters.NAME]`` keys of the same names)."""

    known_hosts: KnownHostsPolicy = "accept-new"
    env_via: EnvVia = "stdin"
    known_hosts_file: str | None = None
    ssh_config: str | None = None
    connect_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    max_sessions: int = 8


class SshTarget(Protocol):
    """What the runner needs to know about a node (``lair.inventory.Node`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def key(self) -> str | None: ...


def default_known_hosts_file() -> Path:
    from lair import config

    return config.state_dir() / "known_hosts"


def connect_options(target: SshTarget, opts: SshOptions) -> dict[str, Any]:
    """Every ``asyncssh.connect`` keyword lair sets, each with the reason."""
    options: dict[str, Any] = {
        "host": target.address,  # IP or DNS name of the node
        "port": target.port,  # sshd port (22 unless the inventory says otherwise)
        "username": target.user,  # remote login (the inventory's ``user``, root for ad-hoc nodes)
        "connect_timeout": opts.connect_timeout_s,  # TCP connect + handshake + auth must finish in time
        "keepalive_interval": opts.keepalive_s,  # notice a dead node during long follows/waits
        "keepalive_count_max": 3,  # ... after 3 unanswered keepalives
        "agent_forwarding": False,  # never hand the user's agent to a node
        "x11_forwarding": False,  # no display forwarding
        "request_pty": False,  # no pty: clean stdout/stderr split, exit codes, binary stdin
        "known_hosts": _known_hosts_arg(opts),  # host key policy (see the module docstring)
    }
    if target.key:
        options["client_keys"] = [target.key]  # explicit key; otherwise ~/.ssh/id_* and the agent
    if opts.ssh_config:
        options["config"] = [opts.ssh_config]  # OpenSSH config file (ProxyJump, User, IdentityFile...)
    return options


def _known_hosts_arg(opts: SshOptions) -> Any:
    if opts.known_hosts == "off":
        return None
    if opts.known_hosts == "strict":
        return opts.known_hosts_file or ()  # () = asyncssh's default ~/.ssh/known_hosts
    return str(Path(opts.known_hosts_file or default_known_hosts_file()))


def _asyncssh() -> ModuleType:
    """asyncssh, imported without the warning that cryptography (51 and later) gives when asyncssh
    names its DSA key types at import: lair neither makes nor accepts DSA keys, and the warning
    would land on a user's terminal (or fail a test run that makes warnings errors)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DSA is deprecated")
        import asyncssh

    return asyncssh


def _host_pattern(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _known(path: Path, address: str, port: int) -> bool:
    """Whether ``path`` has an entry for the node, read by asyncssh itself (hashed ``|1|`` hosts,
    patterns, ``@cert-authority`` and ``@revoked`` lines), so "known" means what its check will use."""
    asyncssh = _asyncssh()

    if not path.exists():
        return False
    try:
        found = asyncssh.read_known_hosts(str(path)).match(address, address, port)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise RunnerError(f"cannot read known_hosts {path}: {exc}", host=address) from exc
    return any(found[:3])  # host keys, CA keys, revoked keys


def _record_host_key(path: Path, pattern: str, key_line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # parallel first connections append whole lines
        f.write(f"{pattern} {key_line.strip()}\n")


class SshRunner(Runner):
    """Runs commands on one node over a single reused SSH connection."""

    def __init__(self, target: SshTarget, options: SshOptions | None = None) -> None:
        self.target = target
        self.options = options or SshOptions()
        self.host = target.name or target.address
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._sessions = asyncio.Semaphore(self.options.max_sessions)  # stay under sshd MaxSessions

    # -- connection ----------------------------------------------------------------------------
    async def connection(self) -> Any:
        """The node's connection (opened on first use, reopened if it dropped)."""
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> Any:
        asyncssh = _asyncssh()

        opts = connect_options(self.target, self.options)
        pattern = _host_pattern(self.target.address, self.target.port)
        accept_new = self.options.known_hosts == "accept-new"
        first_use = accept_new and not _known(
            Path(opts["known_hosts"]), self.target.address, self.target.port
        )
        if first_use:
            opts["known_hosts"] = None
        try:
            conn = await asyncssh.connect(**opts)
        except (OSError, TimeoutError, asyncssh.Error) as exc:
            raise RunnerError(
                f"cannot connect to {self.target.user}@{self.target.address}:{self.target.port}: "
                f"{exc.__class__.__name__}: {exc}",
                host=self.host,
                hint="check the node's address, sshd, the key and its known_hosts entry",
            ) from exc
        if first_use:
            key = conn.get_server_host_key()
            if key is not None:
                line = key.export_public_key("openssh").decode()
                _record_host_key(Path(_known_hosts_arg(self.options)), pattern, line)
        return conn

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                self._conn.close()
                with contextlib.suppress(Exception):
                    await self._conn.wait_closed()
                self._conn = None

    # -- primitives ----------------------------------------------------------------------------
    def _wrap(
        self, script: str, env: Mapping[str, str] | None, env_file: str | None, env_bytes: int = 0
    ) -> str:
        """Run ``script`` as the leader of a new session whose id is printed first on stderr,
        so that a timeout can kill the whole group on the node."""
        if env_file:
            f = shlex.quote(env_file)
            prelude = f". ./{f}; rm -f ./{f}"
        elif env_bytes:
            prelude = f'eval "$(head -c {env_bytes})"'
        else:
            prelude = env_guard(env)
        inner = f'echo "@lair-pgid $$" >&2; {prelude + "; " if prelude else ""}{script}'
        return f"exec setsid -w sh -c {shlex.quote(inner)}"

    def _exports(self, env: Mapping[str, str]) -> bytes:
        """``env`` as shell ``export K='v'`` lines (names checked, values quoted)."""
        bad = [k for k in env if not _ENV_NAME.match(k)]
        if bad:
            raise RunnerError(f"invalid environment variable name(s): {', '.join(bad)}", host=self.host)
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).encode()

    async def _env_file(self, env: Mapping[str, str] | None) -> str | None:
        """Write ``env`` as ``export`` lines to a fresh 0600 file in the login folder."""
        if not env or self.options.env_via != "file":
            return None
        name = f".lair-env-{secrets.token_hex(8)}"
        await self.put_file(name, self._exports(env), mode=0o600)
        return name

    async def _exec(
        self, script: str, *, env: Mapping[str, str] | None, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        asyncssh = _asyncssh()

        conn = await self.connection()
        async with self._sessions:
            env_file = await self._env_file(env)
            head = self._exports(env) if env and self.options.env_via == "stdin" else b""
            channel_env = env if self.options.env_via == "accept-env" else None
            try:
                proc = await self._open(conn, self._wrap(script, env, env_file, len(head)), channel_env)
            except RunnerError:
                if env_file:  # the command never ran to source and delete it
                    with contextlib.suppress(Exception):
                        await conn.run(f"rm -f ./{env_file}", check=False)
                raise
            pgid: list[int] = []
            try:
                data = head + stdin if stdin else head or None
                return await asyncio.wait_for(self._communicate(proc, data, pgid), timeout)
            except (TimeoutError, asyncio.CancelledError):
                await self._kill_group(conn, pgid)
                raise
            except (OSError, asyncssh.Error) as exc:  # connection lost mid-command
                raise RunnerError(f"SSH connection lost: {exc}", host=self.host) from exc
            finally:
                proc.close()

    async def _open(self, conn: Any, command: str, env: Mapping[str, str] | None) -> Any:
        asyncssh = _asyncssh()

        try:
            return await conn.create_process(command, env=dict(env or {}), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise RunnerError(f"cannot open an SSH channel: {exc}", host=self.host) from exc

    @staticmethod
    async def _communicate(proc: Any, stdin: bytes | None, pgid: list[int]) -> tuple[int, bytes, bytes]:
        first = await proc.stderr.readline()
        if first.startswith(PGID_MARK):
            pgid.append(int(first[len(PGID_MARK) :]))
            first = b""
        if stdin:
            proc.stdin.write(stdin)
        proc.stdin.write_eof()
        out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
        result = await proc.wait()
        rc = result.exit_status if result.exit_status is not None else 255
        return rc, out, first + err

    async def _kill_group(self, conn: Any, pgid: list[int]) -> None:
        if not pgid:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.run(f"kill -9 -{pgid[0]}", check=False), 10)

    async def _stream(self, script: str) -> AsyncIterator[str]:
        conn = await self.connection()
        proc = await self._open(conn, self._wrap(script, None, None), None)
        pgid: list[int] = []
        try:
            first = await proc.stderr.readline()
            if first.startswith(PGID_MARK):
                pgid.append(int(first[len(PGID_MARK) :]))
            proc.stdin.write_eof()
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            await self._kill_group(conn, pgid)
            proc.close()
