"""Fixtures of the launcher's integration tests (helpers are in ``launch_helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_roles import write_roles


@pytest.fixture(scope="session")
def marker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where test hooks leave markers (outside the run folders lair removes)."""
    return tmp_path_factory.mktemp("markers")


@pytest.fixture
def markers(marker_dir: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    d = marker_dir / request.node.name.replace("[", "-").replace("]", "")
    d.mkdir()
    yield d


@pytest.fixture
def roles(tmp_path: Path) -> Path:
    """The head/worker role scripts of the 2-node test recipes."""
    return write_roles(tmp_path / "roles")
