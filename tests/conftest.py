"""Shared fixtures live in the package (``lair.testing.fixtures``) so users can load them too.

The sandbox: before any test runs, HOME, every XDG_* folder and LAIR_HOME point into a folder of
this session's own (:func:`pytest_configure`), so no test (nor a child process it starts) reads or
writes the user's real state; the engines' venv cache stays where it is (``LAIR_TEST_CACHE``). At the
end, the real folders lair would write (state, config, data, cache) must be as they were: a test
that escaped the sandbox fails the session, naming what changed.

One guard of our own: the session shares one ``LAIR_HOME``, so a test that leaves a run holding a
machine would make every later launch on it fail with "nodes busy". After each test that uses
``lair_home``, a lease it took and left is stopped (``lair stop``) and the test errors in its
teardown naming the run: the fault stays with the test that made it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["lair.testing.fixtures"]

_XDG = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
_REAL: dict[str, object] = {}


def _real_lair_folders(home: Path) -> list[Path]:
    return [home / ".local" / "state" / "lair", home / ".config" / "lair", home / ".local" / "share" / "lair",
            home / ".cache" / "lair"]  # fmt: skip


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    out = {}
    for folder in folders:
        for p in folder.rglob("*") if folder.is_dir() else []:
            st = p.lstat()
            out[str(p)] = (st.st_mtime_ns, st.st_size)
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Point HOME, XDG_* and LAIR_HOME into this session's own folder (see the module docstring)."""
    if "LAIR_TEST_REAL_HOME" in os.environ:  # a nested pytest (a test of the test set-up) keeps its parent's
        return
    home = Path.home()
    os.environ.setdefault("LAIR_TEST_CACHE", str(home / ".cache" / "lair-test"))
    _REAL["folders"] = _real_lair_folders(home)
    _REAL["before"] = _snapshot(_real_lair_folders(home))
    sandbox = Path(tempfile.mkdtemp(prefix="lair-test-home-"))
    os.environ["LAIR_TEST_REAL_HOME"] = str(home)
    os.environ["HOME"] = str(sandbox / "home")
    for name in _XDG:
        os.environ[name] = str(sandbox / name.lower())
    os.environ["LAIR_HOME"] = str(sandbox / "lair-home")
    for p in [sandbox / "home", *(sandbox / n.lower() for n in _XDG)]:
        p.mkdir(parents=True, exist_ok=True)
    (sandbox / "xdg_runtime_dir").chmod(0o700)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a real folder of lair's changed while the tests ran."""
    folders = _REAL.get("folders")
    if not isinstance(folders, list):
        return
    after = _snapshot(folders)
    before = _REAL["before"]
    assert isinstance(before, dict)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        sys.stderr.write("\nthe tests wrote outside their sandbox:\n" + "".join(f"  {c}\n" for c in changed))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``extended`` tests (another layout of a slow path already covered) run with LAIR_TEST_EXTENDED=1."""
    if os.environ.get("LAIR_TEST_EXTENDED") == "1":
        return
    skip = pytest.mark.skip(reason="extended: set LAIR_TEST_EXTENDED=1 to run it")
    for item in items:
        if item.get_closest_marker("extended"):
            item.add_marker(skip)


def _held() -> set[str]:
    from lair.inventory.leases import leases

    return {lease.run_id for lease in leases().values()}


@pytest.fixture(autouse=True)
def _no_run_left_holding_a_machine(request: pytest.FixtureRequest) -> Iterator[None]:
    if "lair_home" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("lair_home")
    before = _held()
    yield
    if not _held() - before:
        return
    from lair.inventory.leases import reclaim

    reclaim()  # a holder that died is not a leftover
    left = sorted(_held() - before)
    for run_id in left:
        subprocess.run(
            [sys.executable, "-m", "lair", "stop", run_id],
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    if left:
        pytest.fail(f"the test left runs holding machines (now stopped): {', '.join(left)}")
