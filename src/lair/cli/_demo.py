"""The steps of ``lair demo`` (see :mod:`lair.cli.demo_cmds`): its own module, so that the
process and HTTP modules it needs load only when the demo runs."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from lair.cli._common import err

if TYPE_CHECKING:
    from lair.errors import LaunchError

__all__ = ["cmd_demo"]


def _tiny_recipe() -> Path:
    from lair.registry.service.publish import bundled_examples

    for path in bundled_examples():
        if path.parent.name == "tiny-cpu":
            return path
    raise FileNotFoundError("the bundled tiny-cpu example is missing from this install")


def _lair(*args: str) -> list[str]:
    return [sys.executable, "-m", "lair", *args]


def _serve_exited(proc: subprocess.Popen[bytes]) -> LaunchError:
    from lair.errors import LaunchError

    return LaunchError(
        f"the demo's registry (lair serve) exited with {proc.returncode}", hint="its error is above"
    )


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _serve_exited(proc)
        try:
            with opener.open(url + "/api/v1/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The server and every worker it started (its own process group), then reaped."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _db(folder: Path) -> str:
    return f"sqlite:///{folder / 'registry.sqlite3'}"


def _serve(folder: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _lair("serve", "--db", _db(folder), "--port", str(port)),
        stdin=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,  # Ctrl-C reaches the demo; the demo stops the server's whole group
    )


def _demo_token(folder: Path) -> str:
    """An account ``demo`` on the demo's database and an API token for it (as ``lair registry user add``)."""
    from lair.registry.db.engine import make_engine
    from lair.registry.service.accounts import create_token, create_user

    engine = make_engine(_db(folder))
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "demo"), "demo")
    engine.dispose()
    return token


class _Stopped(KeyboardInterrupt):
    """The demo was told to stop: Ctrl-C (SIGINT), SIGTERM or SIGHUP."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_on_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP end the demo the same way. SIGINT is set explicitly: a demo started
    as a background job of a script inherits SIGINT ignored, and would otherwise never stop on it."""
    for s in _STOP_SIGNALS:
        signal.signal(s, _raise_stopped)


def _shield() -> None:
    """While the demo cleans up, further signals must not cut the cleanup short (each step is bounded)."""
    for s in _STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def _bench_and_submit(folder: Path, url: str, token: str) -> int:
    recipe = folder / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir()
    shutil.copyfile(_tiny_recipe(), recipe)  # byte for byte: the seeded revision is this file
    env = {**os.environ, "LAIR_REGISTRY": url, "LAIR_TOKEN": token}  # never on a command line
    launch = _lair("launch", str(recipe), "--bench", "--bench-contexts", "512,2048", "--submit")
    child = subprocess.Popen(launch, env=env, stdin=subprocess.DEVNULL)
    try:
        return child.wait()
    except KeyboardInterrupt as stop:
        _shield()
        if getattr(stop, "signum", signal.SIGINT) != signal.SIGINT:
            child.send_signal(signal.SIGTERM)  # a signal to the demo alone: the launch must hear it too
        child.wait(120)  # a terminal's Ctrl-C reached the launch as well: it stops its engine and cleans up
        raise


def _wait_for_ctrl_c(url: str, proc: subprocess.Popen[bytes]) -> None:
    err("")
    err(f"the registry: {url}/   the tiny recipe's row: {url}/recipes/tiny-cpu#performance")
    err("Ctrl-C stops it")
    while proc.poll() is None:
        time.sleep(0.5)
    raise _serve_exited(proc)


def cmd_demo(args: argparse.Namespace) -> int:
    from lair.cli._extras import require_extras

    require_extras(("engines", "registry"), "demo")  # before a folder or a server exists
    folder = Path(tempfile.mkdtemp(prefix="lair-demo-"))
    url = f"http://127.0.0.1:{args.port}"
    err(f"demo folder: {folder}")
    _stop_on_signals()
    proc = _serve(folder, args.port)
    try:
        _wait_up(url, proc)
        token = _demo_token(folder)
        rc = _bench_and_submit(folder, url, token)
        for _ in range(4):  # refused (3): e.g. a run the bench itself flagged client-bound on a busy machine
            if rc != 3:
                break
            err("the registry refused that run (reasons above); measuring again")
            shutil.rmtree(folder / "tiny-cpu")
            rc = _bench_and_submit(folder, url, token)
        if rc != 0:
            err(f"error: the launch, bench or submit failed (exit {rc})")
            return rc
        if not args.exit_after_submit:
            _wait_for_ctrl_c(url, proc)
        return 0
    except KeyboardInterrupt:
        err("stopping the registry")
        return 0
    finally:
        _shield()
        _stop(proc)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        err("demo stopped; nothing left running" + (f"; kept {folder}" if args.keep else ""))
