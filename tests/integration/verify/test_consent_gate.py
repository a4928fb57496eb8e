"""Nothing a stranger wrote runs without consent, through every command of the real ``lair``.

An attacker publishes a recipe to a real ``lair serve`` whose hooks touch a marker file (its own run
of it, a trusted local file there, makes the row: the hooks did run for the attacker), and a copy of
it whose native entrypoint is a program of the attacker's that touches a marker too (what tune's
engine-parser check used to run before any consent). The victim pulls them and runs every command
that takes a recipe, each without ``--accept``/``-y`` and without a terminal: each refuses with the
trust error, or runs nothing of the recipe by design (bench/eval only attach it to a report), and
no marker ever appears.

The list of commands is the CLI's own (:func:`lair.cli.build_parser`): a new command fails this
test until it says which kind it is."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import TINY, lair

from lair.cli import build_parser
from lair.testing.registry import free_port, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

BENCH = ["--bench", "--bench-contexts", "256", "--bench-decode-tokens", "32", "--bench-repeat", "2"]
OBJECTIVE = "max decode_tok_s_per_stream@ctx=256,c=1"

RUNS_A_RECIPE = {"plan", "launch", "doctor", "tune", "reproduce", "rebench"}
"""Commands that would run (or plan to run) a recipe's hooks, engine or engine parser: the gate."""
ATTACHES_A_RECIPE = {"bench", "eval", "import-results"}
"""``--recipe`` names the recipe a report is of; nothing of it runs."""
READS_A_RECIPE = {"check", "show", "export", "fit", "set", "push", "import"}
"""They read (or write) the file itself."""
NO_RECIPE = {
    "schema", "new", "rig", "scripts", "cluster", "nodes", "status", "logs", "stop", "report", "serve",
    "registry", "login", "search", "pull", "submit", "completion",
    "demo",  # runs only the recipe bundled with lair (a trusted file of the install)
    "mcp",  # its plan tool plans through the gate and never accepts (tests/integration/registry/test_mcp.py)
}  # fmt: skip


@dataclass
class World:
    base: str
    marker: Path
    victim: dict[str, str]
    pulled: Path
    pulled_evil: Path
    row: str
    work: Path
    """Where reproduce and rebench pull into (their default is the current folder)."""


def _hostile(where: Path, marker: Path) -> Path:
    """The tiny-cpu example with a free port, a slug of its own and two hooks that touch markers."""
    text = TINY.read_text()
    for old, new in (
        ("port = 8091", f"port = {free_port()}"),
        ('slug = "tiny-cpu"', 'slug = "tiny-hostile"'),
        (
            'before_serve = [{ script = "make_tiny_model", args = ["{MODEL_DIR}", "--ctx", "8192"], '
            "timeout_s = 120 }]",
            'before_serve = [{ script = "make_tiny_model", args = ["{MODEL_DIR}", "--ctx", "8192"], '
            f'timeout_s = 120 }}, {{ run = "touch {marker}/before_serve" }}]\n'
            f'after_stop = [{{ run = "touch {marker}/after_stop" }}]',
        ),
    ):
        assert old in text
        text = text.replace(old, new)
    recipe = where / "tiny-hostile" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(text)
    return recipe


def _attacker_row(recipe: Path, env: dict[str, str]) -> dict[str, Any]:
    """The attacker's own run of its recipe, submitted (again while this loaded machine makes the
    registry refuse a run as client-bound)."""
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        res = lair("launch", str(recipe), *BENCH, "--submit", "--json", env=env, timeout=240)
        if res.returncode == 0:
            return dict(json.loads(res.stdout))
        assert res.returncode == 3 and "client-bound" in res.stderr, res.stderr[-3000:]
    raise AssertionError("no clean run accepted in 7 minutes")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("consent")
    marker = tmp / "marker"
    marker.mkdir()
    db = f"sqlite:///{tmp / 'registry.sqlite3'}"
    attacker_home, victim_home = tmp / "attacker-home", tmp / "victim-home"
    with serve_process(db, log=tmp / "serve.log") as base:
        add = lair("registry", "user", "add", "mallory", "--db", db, "--json")
        assert add.returncode == 0, add.stderr
        attacker = {"LAIR_REGISTRY": base, "LAIR_TOKEN": json.loads(add.stdout)["token"]}
        attacker["LAIR_HOME"] = str(attacker_home)
        recipe = _hostile(tmp / "attacker", marker)
        pushed = lair("push", str(recipe), "-y", "--json", env=attacker)
        assert pushed.returncode == 0, pushed.stderr
        out = _attacker_row(recipe, attacker)
        assert {p.name for p in marker.iterdir()} == {"before_serve", "after_stop"}  # the hooks work
        assert out["submitted"]["slug"] == "tiny-hostile", out.get("submitted")
        for p in marker.iterdir():
            p.unlink()
        victim = {"LAIR_REGISTRY": base, "LAIR_HOME": str(victim_home), "LAIR_TOKEN": ""}
        pulled = tmp / "victim" / "tiny-hostile.toml"
        pulled.parent.mkdir()
        res = lair("pull", "tiny-hostile@1", "-o", str(pulled), "--json", env=victim)
        assert res.returncode == 0, res.stderr
        evil = tmp / "evil.sh"
        evil.write_text(f"#!/bin/sh\ntouch {marker}/entrypoint\n")
        evil.chmod(0o755)
        pulled_evil = pulled.with_name("tiny-hostile-edited.toml")  # the stamp stays: still theirs
        text = pulled.read_text()
        old = '"python3", "-m", "lair.engines.xllamacpp_server"'
        assert old in text
        pulled_evil.write_text(text.replace(old, f'"{evil}", "-m", "sglang.launch_server"'))
        rows = [m for m in _recipe(base)["measurements"] if m.get("report_id")]
        assert rows, "the attacker's run made no row"
        row_id = f"tiny-hostile@{rows[0]['revision']}#{rows[0]['id']}"
        yield World(base, marker, victim, pulled, pulled_evil, row_id, tmp / "reproduce")


def _recipe(base: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{base}/api/v1/recipes/tiny-hostile.json") as r:
        return dict(json.loads(r.read()))


def _refused(res: Any) -> dict[str, Any]:
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    error = json.loads(res.stdout)["error"]
    assert error["code"] == "trust", error
    return dict(error)


def test_the_cli_commands_are_all_classified() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    commands = set(sub.choices)  # type: ignore[attr-defined]
    classified = RUNS_A_RECIPE | ATTACHES_A_RECIPE | READS_A_RECIPE | NO_RECIPE
    assert commands == classified, (commands - classified, classified - commands)


def test_every_command_that_runs_a_recipe_refuses_it_before_anything_runs(world: World) -> None:
    w, env = world, world.victim
    f = str(w.pulled)
    tune = ["tune", f, "--param=--parallel=1,2", "--objective", OBJECTIVE, "--trials", "2", "--json"]
    cases = {
        "plan": ["plan", f, "--json"],
        "launch": ["launch", f, "--json"],
        "launch --bench": ["launch", f, *BENCH, "--json"],
        "launch --detach": ["launch", f, "--detach", "--json"],
        "doctor": ["doctor", f, "--json"],
        "tune": tune,
        "tune (its entrypoint's program as the engine parser)": ["tune", str(w.pulled_evil), *tune[2:]],
        "reproduce": ["reproduce", w.row, "--json", "--skip-fit", "--dir", str(w.work)],
    }
    for name, args in cases.items():
        error = _refused(lair(*args, env=env, timeout=120))
        assert "is not trusted" in error["message"], (name, error)
        assert list(w.marker.iterdir()) == [], f"{name} ran something of the recipe"
    # the hint names the command's own flag
    assert "lair reproduce ... -y" in _refused(lair(*cases["reproduce"], env=env))["hint"]
    assert "lair tune ... --accept" in _refused(lair(*tune, env=env))["hint"]
    # rebench goes on to the next recipe after a refusal; its JSON says why, its exit code is 1
    rebench = ["rebench", "tiny-hostile@1", "--json", "--skip-fit", "--dir", str(w.work)]
    res = lair(*rebench, env=env, timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    (one,) = json.loads(res.stdout)["recipes"]
    assert one["outcome"]["error"]["code"] == "trust"
    assert list(w.marker.iterdir()) == []
    # nothing was accepted on the way: no acceptance stored for any content
    trust = Path(env["LAIR_HOME"]) / "state" / "trust"
    assert not trust.exists() or not list(trust.rglob("*.json"))


def test_commands_that_only_attach_or_read_the_recipe_run_nothing_of_it(world: World) -> None:
    w, env = world, world.victim
    f = str(w.pulled)
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: the bench and eval fail to connect
    for args, code in (
        (["bench", closed, "--recipe", f, "--contexts", "256", "--repeat", "1", "--json"], 1),
        (["eval", closed, "--suite", "lair_arith", "--limit", "1", "--recipe", f, "--json"], 1),
        (["check", f], 0),
        (["show", f], 0),
        (["export", f, "--format", "json"], 0),
        (["fit", f, "--gpu", "H100", "--json"], 0),
    ):
        res = lair(*args, env=env, timeout=120)
        assert list(w.marker.iterdir()) == [], f"{args[0]} ran something of the recipe"
        assert res.returncode == code, (args[0], res.returncode, res.stderr[-1000:])
        if args[0] in ("bench", "eval"):  # refused for the URL, nothing else
            assert f"{closed.removeprefix('http://')}" in res.stdout + res.stderr, res.stderr[-1000:]
