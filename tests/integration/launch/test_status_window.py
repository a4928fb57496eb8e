"""``lair status`` shows the active runs and the last ten ended ones, ``--all`` every run: a journal
of eleven failed launches (an engine that exits at once) through the real ``lair`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.testing.cli import lair
from lair.testing.registry import free_port

pytestmark = [pytest.mark.integration]

RUNS = 11


def test_status_shows_the_last_ten_ended_runs_and_all_with_all(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        f'engine = "custom"\nruntime = "native"\nentrypoint = ["false"]\nmodel = "m"\nport = {free_port()}\n'
    )
    env = {"LAIR_HOME": str(tmp_path / "home")}
    for _ in range(RUNS):
        res = lair("launch", str(recipe), env=env)
        assert res.returncode != 0 and "process exited during start-up" in res.stderr
    every = json.loads(lair("status", "--all", "--json", env=env).stdout)
    assert len(every) == RUNS and {r["state"] for r in every} == {"failed"}
    ids = [r["run_id"] for r in sorted(every, key=lambda r: r["created_at"])]
    shown = lair("status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert [line.split()[0] for line in shown.stdout.splitlines()] == ids[1:]  # the oldest is left out
    assert "1 older ended runs not shown (lair status --all)" in shown.stderr
    assert [r["run_id"] for r in json.loads(lair("status", "--json", env=env).stdout)] == ids[1:]
    one = json.loads(lair("status", ids[0], "--json", env=env).stdout)  # a run named is shown however old
    assert [r["run_id"] for r in one] == [ids[0]]
