"""What a user meets when something is missing or down, through the real ``lair`` command:

- an optional dependency not installed names the ``pip install 'lair[EXTRA]'`` that brings it (the
  extra read here from pyproject.toml, the code reads lair's installed metadata), no traceback;
- a server that refuses the connection is "cannot connect ... connection refused", not "lists no model";
- a Docker engine that is down says how to start it, not "check the image name";
- an unknown recipe key is hinted by meaning (``gpu`` -> ``gpu_model``), not only by spelling.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lair.cli import main
from lair.cli._extras import extras_providing, missing_extra
from lair.testing.registry import free_port

ROOT = Path(__file__).resolve().parents[2]

# a fresh interpreter where the named top-level packages cannot be imported, as when not installed
WITHOUT = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from lair.cli import main
sys.exit(main({argv!r}))
"""


def _lair(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lair", *argv], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
    )  # fmt: skip


def _without(blocked: set[str], *argv: str) -> subprocess.CompletedProcess[str]:
    code = WITHOUT.format(blocked=blocked, argv=list(argv))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _extra_in_pyproject(distribution: str) -> str:
    """The optional-dependencies group of pyproject.toml that lists ``distribution`` (not ``dev``)."""
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, reqs in groups.items():
        if name != "dev" and any(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0] == distribution for r in reqs):
            return str(name)
    raise AssertionError(f"{distribution} is in no extra of pyproject.toml")


# ---------------------------------------------------------------------------------------------
# missing extras


@pytest.mark.parametrize(
    ("argv", "module", "distribution"),
    [
        (["serve", "--db", "sqlite:///{tmp}/r.sqlite3", "--port", "{port}"], "sqlalchemy", "sqlalchemy"),
        (["registry", "migrate", "--db", "sqlite:///{tmp}/r.sqlite3"], "alembic", "alembic"),
        (["eval", "http://127.0.0.1:{port}", "--suite", "gsm8k"], "lm_eval", "lm-eval"),
    ],
)
def test_a_missing_extra_names_the_pip_install(
    argv: list[str], module: str, distribution: str, tmp_path: Path
) -> None:
    argv = [a.format(tmp=tmp_path, port=free_port()) for a in argv]
    extra = _extra_in_pyproject(distribution)
    res = _without({module}, *argv)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr
    assert f"error: lair {argv[0]} needs the Python package {module!r}, which is not installed" in res.stderr
    assert res.stderr.rstrip().endswith(f"hint: pip install 'lair[{extra}]'")


def test_a_missing_extra_as_json_and_with_its_traceback(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.sqlite3"
    res = _without({"sqlalchemy"}, "registry", "migrate", "--db", db, "--json")
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["ok"] is False
    assert doc["error"]["code"] == "config.extra" and doc["error"]["hint"] == "pip install 'lair[registry]'"
    loud = _without({"sqlalchemy"}, "-v", "registry", "migrate", "--db", db)
    assert loud.returncode == 1 and "ModuleNotFoundError: No module named 'sqlalchemy'" in loud.stderr
    assert "hint: pip install 'lair[registry]'" in loud.stderr


def test_the_extra_of_each_optional_dependency_matches_pyproject() -> None:
    """Every distribution of every extra, by its import name, maps back to that extra."""
    imports = {"argon2-cffi": "argon2", "markdown-it-py": "markdown_it", "python-multipart": "multipart",
               "psycopg": "psycopg", "lm-eval": "lm_eval"}  # fmt: skip
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, reqs in groups.items():
        if extra == "dev":
            continue
        for req in reqs:
            dist = re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0]
            module = imports.get(dist, dist.replace("-", "_").lower())
            assert extras_providing(module)[0] == extra, (dist, module)


def test_a_module_no_extra_brings_is_not_hidden() -> None:
    assert missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"), "eval") is None
    # lair's own dev extra names lair itself: a missing module of lair is a broken install, shown as is
    own = ModuleNotFoundError("No module named 'lair.bench.nothing'", name="lair.bench.nothing")
    assert missing_extra(own, "serve") is None
    assert extras_providing("numpy", ['numpy>=1; extra == "engines"', 'lair[engines]; extra == "dev"']) == [
        "engines"
    ]
    assert extras_providing("yaml", ['PyYAML>=6; extra == "x"']) == ["x"]  # import name != distribution


# ---------------------------------------------------------------------------------------------
# connection refused


@pytest.mark.parametrize("command", [["bench"], ["eval", "--suite", "lair_arith"]])
def test_connection_refused_is_said_as_such(command: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    res = _lair(command[0], url, *command[1:])
    assert res.returncode == 1 and res.stdout == ""
    assert f"error: cannot connect to {url}: connection refused (nothing listens there)" in res.stderr
    assert "lists no model" not in res.stderr and "Traceback" not in res.stderr
    assert "hint: is the server up?" in res.stderr
    res = _lair(command[0], url, *command[1:], "--json")
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["error"]["message"].startswith(
        f"cannot connect to {url}: connection refused"
    )


# ---------------------------------------------------------------------------------------------
# Docker down


def test_docker_down_says_how_to_start_it(tmp_path: Path, lair_home: Path) -> None:
    recipe = tmp_path / "r.toml"
    assert _lair("new", str(recipe), "--runtime", "docker").returncode == 0
    assert _lair("set", str(recipe), f"port={free_port()}").returncode == 0
    sock = tmp_path / "docker.sock"  # no engine answers there: as when dockerd is stopped
    res = _lair(
        "launch", str(recipe), "--set", f"MODEL_DIR={tmp_path}",
        env={"DOCKER_HOST": f"unix://{sock}", "LAIR_HOME": str(lair_home)},
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert (
        f"error: local: the docker engine is not running: Cannot connect to the Docker daemon at unix://{sock}"
        in res.stderr
    )
    assert "hint: start Docker on the node (`sudo systemctl start docker`" in res.stderr
    assert "check the image name" not in res.stderr


# ---------------------------------------------------------------------------------------------
# unknown keys by meaning


def _check(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    assert main(["check", str(path)]) != 0
    return capsys.readouterr().err


def test_unknown_keys_are_hinted_by_meaning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = (ROOT / "examples" / "tiny-cpu" / "recipe.toml").read_text()
    hw = tmp_path / "hw.toml"
    hw.write_text(base + '\n[meta.hardware]\ngpu = "H200"\nvram = 141\n')
    err = _check(capsys, hw)
    assert "meta.hardware.gpu: unknown key 'gpu'\n\nhint: did you mean 'gpu_model'?" in err  # not 'cpu'
    assert "meta.hardware.vram: unknown key 'vram'\n\nhint: did you mean 'vram_gb'?" in err
    top = tmp_path / "top.toml"
    top.write_text("tp = 2\ngpu = 1\n" + base)
    err = _check(capsys, top)
    assert "tp: unknown key 'tp'\n\nhint: did you mean 'tensor_parallel_size'?" in err
    assert "gpu: unknown key 'gpu'\n\nhint: did you mean 'gpus'?" in err  # the top level has no gpu_model
    typo = tmp_path / "typo.toml"
    typo.write_text("tensor_paralel_size = 2\n" + base)
    assert "did you mean 'tensor_parallel_size'?" in _check(capsys, typo)  # spelling still works
