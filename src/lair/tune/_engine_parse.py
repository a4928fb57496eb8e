"""Parse engine command lines with the engine's own parser; run by path with the engine's Python.

    ENGINE_PYTHON _engine_parse.py vllm|sglang < {"argvs": [[...], ...]}
    -> a line "@@LAIR-PARSE@@" + {"results": [{"ok": bool, "error": str}]}

vllm: each ``vllm serve ...`` goes through vLLM's own ``main()`` (its parser, then the serve command's
``validate``) with the serve dispatch replaced, so nothing is started. sglang: the arguments after
``-m sglang.launch_server`` through ``argparse`` with ``ServerArgs.add_cli_args``. Stdlib and the
engine only: lair is not importable in the engine's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


def _vllm(argvs: list[list[str]]) -> list[dict[str, Any]]:
    import vllm.entrypoints.cli.serve as serve  # type: ignore[import-not-found]
    from vllm.entrypoints.cli.main import main  # type: ignore[import-not-found]

    serve.ServeSubcommand.cmd = staticmethod(lambda args: None)
    results = []
    for argv in argvs:
        sys.argv = ["vllm", *argv]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                main()
            results.append({"ok": True, "error": ""})
        except (SystemExit, Exception) as exc:  # argparse exits 2; validate raises
            text = err.getvalue().strip().splitlines()
            last = text[-1] if text else ""
            results.append({"ok": False, "error": last if isinstance(exc, SystemExit) else repr(exc)})
    return results


def _sglang(argvs: list[list[str]]) -> list[dict[str, Any]]:
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    results = []
    for argv in argvs:
        p = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(p)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                p.parse_args(argv)
            results.append({"ok": True, "error": ""})
        except (SystemExit, Exception) as exc:
            text = err.getvalue().strip().splitlines()
            results.append({"ok": False, "error": (text[-1] if text else "") or repr(exc)})
    return results


def main() -> None:
    req = json.load(sys.stdin)
    run = {"vllm": _vllm, "sglang": _sglang}[sys.argv[1]]
    out = {"results": run(req["argvs"])}
    sys.stdout.write("\n@@LAIR-PARSE@@" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
