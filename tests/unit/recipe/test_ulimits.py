"""Bad ``ulimits`` are located recipe errors (``recipe.toml:L:C: ulimits.nofile: ...``), in
``lair check`` and in ``lair plan``, never a traceback; a placeholder value that makes one bad is
a config error naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.cli import main
from lair.recipe import check_text

HEAD = 'engine = "custom"\ndocker_image = "i:1"\nentrypoint = ["serve"]\n'


def _errors(line: str) -> list[tuple[int, int, str, str]]:
    res = check_text(HEAD + line + "\n", "recipe.toml", "toml")
    return [(i.line, i.col, i.path, i.message) for i in res.errors]


NOT_A_VALUE = "not a ulimit value: {!r} (a number, -1 or unlimited, optionally soft:hard)"
CASES = [
    (
        'ulimits = {nofile = "1024 --privileged"}',
        (4, 21, "ulimits.nofile", NOT_A_VALUE.format("1024 --privileged")),
    ),
    (
        'ulimits = {nofile = "10:5"}',
        (4, 21, "ulimits.nofile", "soft limit 10 is above the hard limit 5 in '10:5'"),
    ),
    ('ulimits = {nofile = "1:2:3"}', (4, 21, "ulimits.nofile", NOT_A_VALUE.format("1:2:3"))),
    (
        'ulimits = {memlock = "-1:64"}',
        (4, 22, "ulimits.memlock", "soft limit -1 is above the hard limit 64 in '-1:64'"),
    ),
    ('ulimits = {nofle = "5"}', (4, 12, "ulimits.nofle", "unknown ulimit 'nofle'")),
    (
        'ulimits = {"no --privileged" = "5"}',
        (4, 12, "ulimits.no --privileged", "unknown ulimit 'no --privileged'"),
    ),
]


@pytest.mark.parametrize(("line", "expected"), CASES)
def test_each_bad_ulimit_is_located(line: str, expected: tuple[int, int, str, str]) -> None:
    assert _errors(line) == [expected]  # columns counted by hand on the line


def test_good_ulimits_and_a_placeholder_pass() -> None:
    ok = 'ulimits = {memlock = "-1", nofile = "1024:65536", stack = "unlimited", nproc = "{N}"}\n'
    ok += '[placeholders.N]\ntype = "int"\n'
    assert _errors(ok) == []


def test_a_typo_gets_a_did_you_mean() -> None:
    res = check_text(HEAD + 'ulimits = {nofle = "5"}\n', "recipe.toml", "toml")
    assert res.errors[0].hint == "did you mean 'nofile'?"


def test_lair_plan_on_a_bad_ulimit_is_a_located_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(HEAD + 'ulimits = {nofile = "1024 --privileged"}\n')
    assert main(["plan", str(recipe)]) == 1
    err = capsys.readouterr().err
    assert f"error: {recipe}:4:21: ulimits.nofile: not a ulimit value: '1024 --privileged'" in err
    assert "Traceback" not in err
    assert main(["check", str(recipe), "--json"]) != 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["line"], e["col"], e["path"]) for e in doc["errors"]] == [(4, 21, "ulimits.nofile")]


def test_a_placeholder_value_that_makes_a_ulimit_bad_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path / "home"))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(HEAD + 'ulimits = {nofile = "{N}"}\n[placeholders.N]\ntype = "string"\n')
    assert main(["plan", str(recipe), "--set", "N=1024 --privileged", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["code"] == "config"
    assert "ulimits.nofile: not a ulimit value: '1024 --privileged'" in out["error"]["message"]
