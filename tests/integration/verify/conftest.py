"""Real run reports for the registry's verification: the bundled tiny-cpu example launched and
benchmarked on llama.cpp (xllamacpp) through the real ``lair`` command, once per session."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from verify_helpers import BENCH, lair, tiny_copy


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    """A real report folder of the tiny-cpu example (a small bench: ctx 256, 32 tokens, 2 repeats)."""
    recipe = tiny_copy(tmp_path_factory.mktemp("tiny-report"))
    flags = []
    for _ in range(3):  # on a loaded machine the bench may flag its own run client-bound: not a clean one
        res = lair("launch", str(recipe), *BENCH, "--json")
        assert res.returncode == 0, res.stderr
        report = Path(json.loads(res.stdout)["report"])
        flags = [
            f for c in json.loads((report / "results.json").read_text())["bench"]["cells"] for f in c["flags"]
        ]
        if not flags:
            return report
    raise AssertionError(f"no clean run in 3 tries: {flags}")


@pytest.fixture
def report_copy(tiny_report: Path, tmp_path: Path) -> Path:
    """A copy of the session's report to tamper with."""
    out = tmp_path / tiny_report.name
    shutil.copytree(tiny_report, out)
    return out
