"""A PostgreSQL server of a test's own, to stop and start again: ``initdb`` in a temporary folder,
``postgres`` on a free port of 127.0.0.1 or a chosen address (trust authentication, from that
address's subnet too: clients in network namespaces on a bridge), stopped and removed on exit.

    with pg_server() as pg:
        app = create_app(pg.url)
        pg.stop()      # fast shutdown: clients are disconnected, new connections refused
        pg.start()     # the same data and port again

PostgreSQL refuses to run as root: under root the server runs as the ``postgres`` user (or
``nobody``), which then owns the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lair.testing.registry import free_port

__all__ = ["PgServer", "pg_server"]


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found on PATH (PostgreSQL's server binaries)")
    return found


def _account() -> tuple[int, int] | None:
    """(uid, gid) to run the server as under root; None when not root."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            continue
    raise RuntimeError("running as root and no postgres or nobody account to run PostgreSQL as")


def _demote(account: tuple[int, int] | None) -> Callable[[], None] | None:
    if account is None:
        return None

    def drop() -> None:
        os.setgid(account[1])
        os.setuid(account[0])

    return drop


class PgServer:
    def __init__(self, root: Path, port: int, host: str = "127.0.0.1") -> None:
        self.root, self.port, self.host = root, port, host
        self.data = root / "data"
        self.account = _account()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def init(self) -> None:
        if self.account is not None:
            os.chown(self.root, *self.account)
        cmd = [_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        subprocess.run(cmd, check=True, capture_output=True, preexec_fn=_demote(self.account), timeout=120)
        if self.host != "127.0.0.1":  # the clients on the address's own subnet (a test bridge)
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait (with a deadline) until it accepts connections."""
        cmd = [_binary("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root)]
        cmd += ["-c", f"listen_addresses={self.host}", "-c", "fsync=off"]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server's own stderr, closed with it
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_demote(self.account)
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = (self.root / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{tail}")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        """Fast shutdown (SIGINT): open sessions are ended, then the server exits."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout)
        self.proc = None


@contextmanager
def pg_server(host: str = "127.0.0.1") -> Iterator[PgServer]:
    """A fresh server on ``host``, started; stopped and its folder removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="lair-pg-"))
    server = PgServer(root, free_port(), host)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
