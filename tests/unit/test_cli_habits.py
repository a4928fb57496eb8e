"""CLI habits: --json on every command that reports something, -v/-q logging to stderr, and shell
completion generated from the argparse tables (the bash script sourced in a real bash and its
completion function called)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lair.cli import build_parser, main
from lair.cli.completion import command_tree, render

NO_JSON = {
    ("lair", "export"): "its output is the chosen format (--format json)",
    ("lair", "schema"): "its output is JSON already",
    ("lair", "serve"): "a web server, not a report",
    ("lair", "demo"): "a launch, a bench and a web server until Ctrl-C, not a report",
    ("lair", "mcp"): "an MCP server (stdio or HTTP) speaking JSON-RPC, not a report",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_command_that_reports_has_json() -> None:
    leaves = [n for n in command_tree(build_parser()) if not n.subcommands]
    missing = [" ".join(n.path) for n in leaves if "--json" not in n.options and n.path not in NO_JSON]
    assert len(leaves) > 25 and missing == []


def test_json_of_the_editing_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lair_home: Path
) -> None:
    recipe = tmp_path / "r.toml"
    assert run(capsys, "new", str(recipe), "--json")[0] == 0
    rc, out, _ = run(capsys, "set", str(recipe), "port=9001", "--json")
    assert rc == 0 and json.loads(out) == {"file": str(recipe), "set": ["port"]}
    rc, out, _ = run(capsys, "rig", "set", "habits", "MODEL_DIR=/m", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["updated"] is True and Path(doc["path"]).is_file()
    rc, out, _ = run(capsys, "rig", "path", "habits", "--json")
    assert json.loads(out) == {"rig": "habits", "path": doc["path"], "exists": True}
    rc, out, _ = run(
        capsys, "cluster", "add", "habits", "--node", "name=n1,address=10.9.0.1,rank=0", "--json"
    )
    assert rc == 0 and json.loads(out) == {"cluster": "habits", "kind": "ssh", "nodes": ["n1"]}
    rc, out, _ = run(capsys, "cluster", "remove", "habits", "--json")
    assert rc == 0 and json.loads(out) == {"cluster": "habits", "removed": True}


def test_quiet_hides_progress_but_not_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "q.toml"
    rc, out, err = run(capsys, "-q", "new", str(target))
    assert rc == 0 and err == "" and out == "" and target.is_file()
    rc, _, err = run(capsys, "new", str(tmp_path / "loud.toml"))
    assert rc == 0 and "wrote" in err
    rc, _, err = run(capsys, "-q", "new", str(target))
    assert rc == 1 and "exists" in err


def test_verbose_shows_debug_and_tracebacks(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lair", "-v", "fit", "--model", str(tmp_path / "nothing"), "--gpu", "H200"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert "error: " in proc.stderr and proc.stdout == ""


def test_verbose_and_quiet_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["-v", "-q", "schema"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def _subcommands(parser: argparse.ArgumentParser, *path: str) -> list[str]:
    for word in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def _bash_complete(script: Path, words: list[str]) -> list[str]:
    """Source the script in a real bash and call its completion function the way bash does."""
    array = " ".join(f"'{w}'" for w in words)
    code = f'source "{script}"; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _lair; '
    code += 'printf "%s\\n" "${COMPREPLY[@]}"'
    proc = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert proc.stderr == ""
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_completion_sources_and_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "completion", "bash")
    script = tmp_path / "lair.bash"
    script.write_text(out)
    parser = build_parser()
    assert rc == 0
    assert _bash_complete(script, ["lair", ""]) == _subcommands(parser)
    assert _bash_complete(script, ["lair", "ch"]) == ["check"]
    assert _bash_complete(script, ["lair", "rig", "s"]) == [
        c for c in _subcommands(parser, "rig") if c.startswith("s")
    ]
    assert _bash_complete(script, ["lair", "report", ""]) == _subcommands(parser, "report")
    opts = _bash_complete(script, ["lair", "bench", "http://x", "--api"])
    assert opts == ["--api-key-env", "--api-key-file"]  # the refused --api-key is not offered
    assert "--keep-going" in _bash_complete(script, ["lair", "-v", "bench", "--k"])
    files = _bash_complete(script, ["lair", "check", str(script)[:-2]])
    assert str(script) in files


def test_zsh_and_fish_scripts_name_every_command() -> None:
    parser = build_parser()
    zsh, fish = render("zsh", parser), render("fish", parser)
    assert "bashcompinit" in zsh and "complete -o filenames -F _lair lair" in zsh
    for name in _subcommands(parser):
        assert f"-a {name} " in fish
    assert "__fish_seen_subcommand_from rig; and not __fish_seen_subcommand_from" in fish
    assert "-l api-key-env" in fish and "-l api-key " not in fish
