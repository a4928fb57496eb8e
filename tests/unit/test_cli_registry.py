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


@pytest.mark.parametrize(
    "argv",
    [
        ["registry", "migrate", "--db"],
        ["registry", "seed", "--db"],
        ["registry", "user", "add", "alice", "--db"],
        ["registry", "backup", "out.tar", "--db"],
        ["serve", "--db"],
    ],
)
def test_a_database_password_on_the_command_line_is_refused_unsaid(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every user of the machine sees a command line: ``--db`` with a password is a usage error (exit
    2) before anything connects, and the message does not repeat the password."""
    with pytest.raises(SystemExit) as exc:
        main([*argv, "postgresql://lair:s3cret-pw@127.0.0.1:1/lair"])
    assert exc.value.code == 2
    said = capsys.readouterr().err
    assert "would show in ps" in said and "PGPASSWORD" in said and "s3cret-pw" not in said


def test_a_database_url_without_a_password_is_taken() -> None:
    from lair.cli.registry_cmds import db_arg

    for url in ("postgresql://lair@db.internal/lair?sslmode=verify-full", "sqlite:///x.db", "reg.sqlite3"):
        assert db_arg(url) == url
