from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every launcher unit test gets its own empty user config dir (rigs, clusters, runs)."""
    home = tmp_path / "lair-home"
    monkeypatch.setenv("LAIR_HOME", str(home))
    return home
