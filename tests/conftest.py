"""Shared fixtures live in the package (``lair.testing.fixtures``) so users can load them too.

One guard of our own: the session shares one ``LAIR_HOME``, so a test that leaves a run holding a
machine would make every later launch on it fail with "nodes busy". After each test that uses
``lair_home``, a lease it took and left is stopped (``lair stop``) and the test errors in its
teardown naming the run: the fault stays with the test that made it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest_plugins = ["lair.testing.fixtures"]


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
