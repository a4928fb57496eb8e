"""The CLI builds only the parsers a command needs; the command table must match the modules."""

from __future__ import annotations

import argparse
import importlib

import pytest

from lair.cli import COMMAND_MODULES, _modules_for, build_parser, main


def _registered(module: str) -> list[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(module).register(sub)
    return list(sub.choices)


@pytest.mark.parametrize("module", list(COMMAND_MODULES))
def test_command_table_matches_what_each_module_registers(module: str) -> None:
    assert tuple(_registered(module)) == COMMAND_MODULES[module]


def test_only_the_owning_module_is_loaded() -> None:
    assert _modules_for(["check", "x.toml"]) == ["lair.cli.recipe_cmds"]
    assert _modules_for(["-v", "launch", "r.toml"]) == ["lair.cli.launch_cmds"]
    assert _modules_for(["--help"]) == list(COMMAND_MODULES)
    assert _modules_for(["nope"]) == list(COMMAND_MODULES)
    every = [c for cmds in COMMAND_MODULES.values() for c in cmds]
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == every


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["chek", "x.toml"])
    assert exc.value.code == 2 and "invalid choice: 'chek'" in capsys.readouterr().err
