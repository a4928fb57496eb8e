"""Every ``lair`` command line in the README's and the docs' shell blocks parses with the real parser:
a renamed flag or command that the docs still show fails here, not in a new user's first hour.

A synopsis's optional parts (``[--json]``, ``[--cluster C | --nodes N]``) are left out; what stays
must be a command the parser takes as written."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from lair.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("", "sh", "bash", "console", "shell")
_OPTIONAL = re.compile(r"\s*\[[^\[\]]*\](\.\.\.)?")
_COMMAND = re.compile(r"^(?:\S+=\S+\s+)*(?:\S*/)?lair\s+(.*)$")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks whose language is a shell's (or none)."""
    blocks: list[str] = []
    body: list[str] | None = None
    lang = ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if body is None:
                body, lang = [], line.strip()[3:].strip()
            else:
                if lang in SHELL:
                    blocks.append("\n".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return blocks


def commands(text: str) -> list[str]:
    """Each ``lair ...`` command of the shell blocks, continuation lines joined, optional parts out."""
    found = []
    for block in shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            s = line.strip().removeprefix("$ ")
            while _OPTIONAL.search(s):
                s = _OPTIONAL.sub("", s)
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", s):
                m = _COMMAND.match(part.strip())
                if m:
                    found.append(m.group(1))
    return found


def refusal(command: str) -> str | None:
    """None when the parser takes ``lair COMMAND``, else its last error line."""
    argv = shlex.split(command, comments=True)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return (err.getvalue().strip().splitlines() or ["?"])[-1]
    return None


ALL = [(doc.relative_to(ROOT).as_posix(), c) for doc in DOCS for c in commands(doc.read_text())]


def test_the_docs_show_commands_and_the_reader_finds_them() -> None:
    names = {c.split()[0] for _, c in ALL}
    assert len(ALL) >= 80
    assert {"demo", "check", "plan", "launch", "bench", "fit", "serve", "reproduce", "rebench"} <= names


def test_the_reader_itself_finds_a_wrong_flag() -> None:
    text = "```sh\nlair status --nosuch && lair fit --gpu H200 [--json | --brief]\n```\n"
    found = commands(text)
    assert found == ["status --nosuch", "fit --gpu H200"]
    assert refusal(found[0]) == "lair: error: unrecognized arguments: --nosuch"
    assert refusal(found[1]) is None


@pytest.mark.parametrize(("doc", "command"), ALL, ids=[f"{d}:{c[:40]}" for d, c in ALL])
def test_every_documented_command_parses(doc: str, command: str) -> None:
    assert refusal(command) is None, f"{doc}: lair {command}"
