from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh LAIR_HOME for one test."""
    monkeypatch.setenv("LAIR_HOME", str(tmp_path))
    return tmp_path
