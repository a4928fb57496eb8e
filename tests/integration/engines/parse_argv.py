"""Parse command lines with an engine's own CLI parser; run with the engine venv's Python.

    PYTHON parse_argv.py vllm|sglang|ray < {"argvs": [[...], ...], "dests": ["tp_size", ...]}
    -> {"results": [{"ok": bool, "error": str, "args": {...}}], "actions": {dest: {...}}}

vllm: ``vllm serve ...`` goes through vLLM's own ``main()`` (its parser, then ``validate``), with the
serve command's dispatch replaced by a dump of the parsed arguments. sglang: the arguments after
``-m sglang.launch_server`` through ``argparse`` with ``ServerArgs.add_cli_args`` (what
``prepare_server_args`` builds). ray: ``ray start ...`` through Ray's click command, without running
it. ``actions`` gives, per requested argparse dest, its option strings and choices. Stdlib + the
engine only: lair is not importable here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


def _jsonable(ns: argparse.Namespace | dict[str, Any]) -> dict[str, Any]:
    items = vars(ns).items() if isinstance(ns, argparse.Namespace) else ns.items()
    out: dict[str, Any] = {}
    for k, v in items:
        if isinstance(v, str | int | float | bool) or v is None:
            out[k] = v
        elif isinstance(v, list | tuple) and all(isinstance(x, str | int | float) for x in v):
            out[k] = list(v)
    return out


def _actions(parser: argparse.ArgumentParser, dests: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for a in parser._actions:
        if a.dest in dests:
            found[a.dest] = {"options": list(a.option_strings), "choices": list(a.choices or [])}
    return found


def _vllm(argvs: list[list[str]], dests: list[str]) -> dict[str, Any]:
    import vllm.entrypoints.cli.serve as serve
    from vllm.entrypoints.cli.main import main
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parsed: list[dict[str, Any]] = []
    serve.ServeSubcommand.cmd = staticmethod(lambda args: parsed.append(_jsonable(args)))  # type: ignore[method-assign]
    results = []
    for argv in argvs:
        sys.argv = ["vllm", *argv]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                main()
            results.append({"ok": True, "error": "", "args": parsed.pop()})
        except (SystemExit, Exception) as exc:  # argparse exits 2; validate raises
            results.append({"ok": False, "error": err.getvalue()[-2000:] + repr(exc), "args": {}})
    return {"results": results, "actions": _actions(make_arg_parser(FlexibleArgumentParser()), dests)}


def _sglang(argvs: list[list[str]], dests: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
        ServerArgs.add_cli_args(p)
        return p

    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                results.append({"ok": True, "error": "", "args": _jsonable(parser().parse_args(argv))})
        except (SystemExit, Exception) as exc:
            results.append({"ok": False, "error": err.getvalue()[-2000:] + repr(exc), "args": {}})
    return {"results": results, "actions": _actions(parser(), dests)}


def _ray(argvs: list[list[str]], dests: list[str]) -> dict[str, Any]:
    from ray.scripts.scripts import cli

    results = []
    for argv in argvs:
        try:
            ctx = cli.make_context("ray", list(argv))
            sub = cli.get_command(ctx, argv[0])
            assert sub is not None, f"no ray command {argv[0]}"
            sub_ctx = sub.make_context(argv[0], list(argv[1:]), parent=ctx)
            results.append({"ok": True, "error": "", "args": _jsonable(dict(sub_ctx.params))})
        except Exception as exc:
            results.append({"ok": False, "error": repr(exc), "args": {}})
    return {"results": results, "actions": {}}


def main() -> None:
    req = json.load(sys.stdin)
    run = {"vllm": _vllm, "sglang": _sglang, "ray": _ray}[sys.argv[1]]
    out = run(req["argvs"], req.get("dests", []))
    sys.stdout.write("\n@@LAIR-PARSE@@" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
