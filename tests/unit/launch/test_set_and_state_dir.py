"""``--set NAME=VALUE`` placeholder values (never secrets) and where runs and leases live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair import config
from lair.cli import main

RECIPE = """
engine = "custom"
docker_image = "img:{TAG}"
entrypoint = ["serve", "--dir", "{DIR}"]
[placeholders.TAG]
type = "string"
default = "1"
[placeholders.DIR]
type = "path"
[placeholders.TOKEN]
type = "secret"
"""


def test_set_gives_placeholder_values_over_the_rigs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    assert main(["rig", "set", "box", "DIR=/from/rig", "TAG=2"]) == 0
    capsys.readouterr()
    assert main(["plan", str(recipe), "--rig", "box", "--set", "TAG=3", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["run"]["image"] == "img:3"
    start = next(s for s in plan["nodes"][0]["steps"] if s["kind"] == "start")
    assert start["argv"][-2:] == ["--dir", "/from/rig"]
    assert main(["plan", str(recipe), "--set", "DIR=/x", "--set", "TOKEN=hunter22", "--json"]) == 1
    err = json.loads(capsys.readouterr().out)["error"]
    assert "--set TOKEN: a secret may not be given on the command line" in err["message"]
    assert main(["plan", str(recipe), "--set", "DIR"]) == 1
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_runs_and_leases_live_in_the_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAIR_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    assert (
        config.home() == tmp_path / "cfg" / "lair" and config.rigs_dir() == tmp_path / "cfg" / "lair" / "rigs"
    )
    assert (
        config.state_dir() == tmp_path / "st" / "lair"
        and config.runs_dir() == tmp_path / "st" / "lair" / "runs"
    )
    from lair.inventory import Node, acquire_nodes, release

    acquire_nodes([Node(name="local", address="127.0.0.1", rank=0, local=True)], run_id="s1")
    assert (tmp_path / "st" / "lair" / "leases" / "machines.json").exists()
    assert not (tmp_path / "cfg").exists()  # nothing of the run under the config dir
    release("s1")
    monkeypatch.delenv("XDG_STATE_HOME")
    from platformdirs import user_state_path

    assert config.state_dir() == user_state_path("lair", appauthor=False)
    monkeypatch.setenv(
        "LAIR_HOME", str(tmp_path / "home")
    )  # the override still puts everything in one folder
    assert (
        config.runs_dir() == tmp_path / "home" / "runs" and config.state_dir() == tmp_path / "home" / "state"
    )
