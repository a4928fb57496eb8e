"""Start-up weight: building the parser (what ``lair --help`` and shell completion do) imports none of
the registry's or the recipe core's heavy dependencies, and each command loads only its own.

Each probe runs in a fresh interpreter (``sys.modules`` of this test process already holds them all)
and reports the top-level packages it imported; a control probe that does import one proves the probe
sees an import when there is one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# what start-up must never pay for: the registry (web, database, sign-in), the recipe models, the
# HTTP client stack, the remote runners
NEVER_AT_START = ("pydantic", "sqlalchemy", "authlib", "starlette", "tomlkit", "yaml", "asyncssh", "jinja2")

PROBE = """
import contextlib, io, json, sys
from lair.cli import build_parser, main
{code}
print(json.dumps(sorted(sys.modules)))
"""


def _imported(code: str) -> set[str]:
    """Every module name in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(res.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(NEVER_AT_START))


def test_building_the_whole_parser_imports_nothing_heavy() -> None:
    modules = _imported("build_parser()")
    assert _heavy(modules) == []
    assert (
        not {"urllib.request", "http.client", "lair.errors", "lair.recipe", "lair.registry.oauth"} & modules
    )
    assert "lair.cli.registry_cmds" in modules and "lair.cli.demo_cmds" in modules  # it did build them all


def test_help_output_imports_nothing_heavy() -> None:
    modules = _imported("with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
                        "    main(['--help'])")  # fmt: skip
    assert _heavy(modules) == []


@pytest.mark.parametrize("command", ["serve", "registry", "login", "push", "eval", "bench", "launch", "demo"])
def test_a_commands_help_imports_nothing_heavy(command: str) -> None:
    modules = _imported(
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main([{command!r}, '--help'])"
    )
    assert _heavy(modules) == [], command


def test_check_loads_the_recipe_core_but_not_the_registry() -> None:
    recipe = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
    modules = _imported(
        f"with contextlib.redirect_stderr(io.StringIO()):\n    assert main(['check', {str(recipe)!r}]) == 0"
    )
    assert "pydantic" in modules  # the recipe models: what check is for
    assert not {"sqlalchemy", "starlette", "authlib", "asyncssh", "jinja2"} & {
        m.split(".")[0] for m in modules
    }


def test_the_probe_sees_a_heavy_import_when_there_is_one() -> None:
    """The control: the module the parser used to import (the OAuth settings) brings pydantic."""
    modules = _imported("import lair.registry.oauth")
    assert _heavy(modules) == ["pydantic"]
