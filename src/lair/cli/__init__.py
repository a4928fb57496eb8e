"""The ``lair`` command: argument parsing, one catch point, rendering.

Commands live in small modules (``lair.cli.<area>``) that each expose ``register(sub)``; they import
their service modules lazily inside the handler so that ``lair --help`` stays fast (no pydantic, no
network, nothing heavy at start-up).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.errors import LairError

__all__ = ["build_parser", "main"]

# Each module registers its subcommands (order = order in --help). The names let a command build
# only its own module's parsers; a unit test keeps them equal to what each module registers.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "lair.cli.recipe_cmds": ("check", "show", "export", "schema", "new", "set", "rig", "scripts"),
    "lair.cli.cluster_cmds": ("cluster", "nodes"),
    "lair.cli.launch_cmds": ("plan", "launch", "status", "logs", "stop"),
    "lair.cli.doctor_cmds": ("doctor",),
    "lair.cli.bench_cmds": ("bench", "report"),
    "lair.cli.eval_cmds": ("eval",),
    "lair.cli.tune_cmds": ("tune",),
    "lair.cli.fit_cmds": ("fit",),
    "lair.cli.registry_cmds": ("serve", "registry"),
    "lair.cli.client_cmds": ("login", "search", "pull", "push", "submit"),
    "lair.cli.reproduce_cmds": ("reproduce", "rebench"),
    "lair.cli.demo_cmds": ("demo",),
    "lair.cli.mcp_cmds": ("mcp",),
    "lair.cli.interop_cmds": ("import", "import-results"),
    "lair.cli.completion": ("completion",),
}


def _modules_for(argv: Sequence[str] | None) -> list[str]:
    """The command modules to load: only the one owning the command in ``argv``, else all."""
    if argv is not None:
        words = [a for a in argv if not a.startswith("-")]
        for name, commands in COMMAND_MODULES.items():
            if words and words[0] in commands:
                return [name]
    return list(COMMAND_MODULES)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the parsers that command needs (``--help`` gets all)."""
    from lair import __version__

    parser = argparse.ArgumentParser(
        prog="lair",
        description="Local AI Recipes: check, plan, launch, benchmark and publish LLM serving recipes.",
    )
    parser.add_argument("--version", action="version", version=f"lair {__version__}")
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and debug logs")
    loud.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _modules_for(argv):
        importlib.import_module(name).register(sub)
    _loud_flags_everywhere(parser, set())
    return parser


def _loud_flags_everywhere(parser: argparse.ArgumentParser, seen: set[int]) -> None:
    """``-v`` and ``-q`` after the command too (``lair launch X -v`` as ``lair -v launch X``): each
    subparser takes them, defaulting to nothing so that the top-level value stands."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for p in action.choices.values():
            if id(p) in seen:  # an alias names the same parser again
                continue
            seen.add(id(p))
            for flags in (("-v", "--verbose"), ("-q", "--quiet")):  # not in a group: it marks the usage
                p.add_argument(*flags, action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            _loud_flags_everywhere(p, seen)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    from lair.cli._common import setup_logging

    setup_logging(args.verbose, args.quiet)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    try:
        rc: int = args.handler(args)
        return rc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except ModuleNotFoundError as exc:  # an optional dependency: name the extra that brings it
        from lair.cli._extras import missing_extra

        extra = missing_extra(exc, args.command)
        if extra is None:
            raise
        return _report(extra, args)
    except Exception as exc:
        # Imported only here: lair.errors pulls in dataclasses and inspect, which `lair --help` need not pay.
        from lair.errors import LairError

        if not isinstance(exc, LairError):
            raise
        return _report(exc, args)


def _report(exc: LairError, args: argparse.Namespace) -> int:
    """The one catch point's rendering: traceback with -v, the JSON error envelope with --json."""
    if args.verbose:
        import traceback

        traceback.print_exc()
    if getattr(args, "json", False):
        import json

        print(json.dumps({"ok": False, "error": exc.as_dict()}, indent=2))
    print(f"error: {exc.render()}", file=sys.stderr)
    return exc.exit_code
