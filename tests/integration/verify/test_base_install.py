"""lair on a base install (no extra), through the real ``lair`` command of that install:

- ``lair launch`` of the bundled xllamacpp recipe stops before anything runs, naming the ``engines``
  extra (it died with ModuleNotFoundError tracebacks of the engine and the hook); with
  ``--no-doctor`` the hook's failure is that one line;
- ``lair demo`` names the ``engines`` and ``registry`` extras before it starts anything (it printed
  the hint, then a RuntimeError traceback);
- ``lair reproduce`` of a row works without the ``registry`` extra: it recomputes their row's band
  from the report's raw timings (the bench's aggregation, not the server's module), then stops at the
  launch, which names the ``engines`` extra.

The install is real: a venv of its own (no system site packages) with lair installed editable
without dependencies plus only pyproject.toml's base dependencies, made once for this module
(about 17 s, from pip's cache). A sitecustomize that hides the extras' modules would be cheaper, but
the extras' distributions would still be installed, and ``lair demo`` asks the installed metadata,
not the import system, what is there: only a real install shows what a user of one meets. The
registry the reproduction reads runs from the test's own (full) install.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import ROOT, TINY, lair

from lair.testing.forged_reports import made_up_report
from lair.testing.registry import free_port, serve_process, tgz

pytestmark = [pytest.mark.integration]

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _extra_of(distribution: str) -> str:
    """The optional-dependencies group of pyproject.toml that lists ``distribution`` (not ``dev``)."""
    for name, reqs in PYPROJECT["optional-dependencies"].items():
        if name != "dev" and any(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0] == distribution for r in reqs):
            return str(name)
    raise AssertionError(f"{distribution} is in no extra of pyproject.toml")


def _pip(python: Path, *args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The python of a venv holding lair and its base dependencies only."""
    venv = tmp_path_factory.mktemp("base-install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _pip(python, "--no-deps", "-e", str(ROOT))
    _pip(python, *PYPROJECT["dependencies"])
    yield python


def _lair(
    python: Path, *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "lair", *argv], capture_output=True, text=True, timeout=300, cwd=cwd,
        stdin=subprocess.DEVNULL, env={**os.environ, "LAIR_HOME": str(cwd / "home"), **(env or {})},
    )  # fmt: skip


def test_the_base_install_lacks_the_extras(base: Path) -> None:
    for module in ("xllamacpp", "tokenizers", "sqlalchemy", "starlette"):
        res = subprocess.run([str(base), "-c", f"import {module}"], capture_output=True, text=True)
        assert f"No module named '{module}'" in res.stderr


def test_launch_of_the_xllamacpp_recipe_names_the_engines_extra(base: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    res = _lair(base, "launch", str(TINY), "--set", f"MODEL_DIR={model}", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr
    assert "engine xllamacpp runs lair.engines.xllamacpp_server under lair's Python" in res.stderr
    assert "which lacks 'xllamacpp' [doctor check engine.python]" in res.stderr
    assert f"hint: pip install 'lair[{_extra_of('xllamacpp')}]'" in res.stderr
    assert "fix the recipe or the node" not in res.stderr
    assert not model.exists()  # stopped before the hook that builds the model


def test_launch_without_the_doctor_says_the_extra_in_the_hooks_failure(base: Path, tmp_path: Path) -> None:
    """--no-doctor skips the check: the hook that builds the model is what fails, in one line."""
    res = _lair(
        base, "launch", str(TINY), "--no-doctor", "--set", f"MODEL_DIR={tmp_path / 'm'}", cwd=tmp_path
    )
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert f"error: No module named 'tokenizers': pip install 'lair[{_extra_of('tokenizers')}]'" in res.stderr


def test_demo_names_the_extras_before_it_starts_anything(base: Path, tmp_path: Path) -> None:
    res = _lair(base, "demo", "--port", str(free_port()), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "RuntimeError" not in res.stderr
    extras = sorted({_extra_of("xllamacpp"), _extra_of("sqlalchemy")})
    assert "error: lair demo needs lair's engines and registry extras, not installed here" in res.stderr
    assert res.stderr.rstrip().endswith(f"hint: pip install 'lair[{','.join(extras)}]'")
    assert "demo folder" not in res.stderr  # nothing was made, nothing served


def _row_with_a_report(site: str, tmp_path: Path) -> str:
    """A report of tiny-cpu's seeded revision on the site (made up, as a rig's would be); its row's id."""
    made = lair("registry", "user", "add", "rig", "--db", f"sqlite:///{tmp_path / 'r.sqlite3'}", "--json")
    token = json.loads(made.stdout)["token"]
    toml = urllib.request.urlopen(f"{site}/api/v1/recipes/tiny-cpu.toml", timeout=30).read().decode()
    sha = json.loads(urllib.request.urlopen(f"{site}/api/v1/recipes/tiny-cpu.json", timeout=30).read())[
        "sha256"
    ]
    files = made_up_report(toml, sha, decode_tok_s=50.0, gpus=None, contexts=(256,), repeats=3)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/gzip"}
    req = urllib.request.Request(f"{site}/api/v1/reports", tgz(files), headers, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        report_id = json.loads(r.read())["id"]
    doc = json.loads(urllib.request.urlopen(f"{site}/api/v1/recipes/tiny-cpu.json", timeout=30).read())
    (row,) = [m for m in doc["measurements"] if m["report_id"] == report_id]
    return str(row["row_id"])


def test_reproduce_runs_without_the_registry_extra(base: Path, tmp_path: Path) -> None:
    with serve_process(f"sqlite:///{tmp_path / 'r.sqlite3'}", log=tmp_path / "serve.log") as site:
        row = _row_with_a_report(site, tmp_path)
        res = _lair(base, "reproduce", row, "-y", cwd=tmp_path, env={"LAIR_REGISTRY": site})
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr
    assert "registry" not in res.stderr.split("error:", 1)[-1]  # it never asked for lair[registry]
    # their row's band came from their report's raw timings (the bench options are that report's)
    assert "their bench options: decode_tokens=32, repeat=3" in res.stderr
    assert res.returncode == 1
    assert "which lacks 'xllamacpp' [doctor check engine.python]" in res.stderr
    assert f"hint: pip install 'lair[{_extra_of('xllamacpp')}]'" in res.stderr
