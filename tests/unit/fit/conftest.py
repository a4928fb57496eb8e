"""Fixtures for the fit tests: devices from the packaged catalog, a fresh LAIR_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def lair_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "lair-home"
    monkeypatch.setenv("LAIR_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a lair child a test starts never asks huggingface.co
    return home
