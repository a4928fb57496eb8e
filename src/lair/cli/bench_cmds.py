"""Bench and report commands: ``lair bench URL``, ``lair report show DIR``, ``lair report compare A B``.

Imports nothing heavy at module level: the bench and report packages load inside the handlers.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from lair.cli._bench_options import add_bench_options, bench_options, print_bench, warn_noisy
from lair.cli._common import dump_json, err, path_arg

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["register"]

_KEY_ENVS = ("LAIR_API_KEY", "OPENAI_API_KEY")


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark an OpenAI-compatible server: speed by context, needle")
    p.add_argument("url", metavar="URL", help="server base URL, e.g. http://127.0.0.1:8000")
    add_bench_options(p)
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="read the bearer token from this environment variable (default: $LAIR_API_KEY, then "
        "$OPENAI_API_KEY); never printed or saved",
    )
    p.add_argument(
        "--api-key-file",
        type=path_arg,
        metavar="PATH",
        help="read the bearer token from this file (first line)",
    )
    p.add_argument("--api-key", help=argparse.SUPPRESS)  # refused: a key in argv is visible in `ps`
    p.add_argument(
        "--rig", help="rig whose power_price_kwh / hardware_cost / hardware_life_years give $/Mtok"
    )
    p.add_argument("--out", type=path_arg, metavar="DIR", help="write a run report folder here")
    p.add_argument(
        "--recipe", type=path_arg, help="the recipe being benchmarked (its report folder, by default)"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="recipe placeholder value"
    )
    p.add_argument("--run-name", help="report name (default: the recipe name, else 'bench')")
    p.add_argument(
        "--engine-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="the engine's process on this machine (repeatable; its children count too): its CPU is "
        "told apart from other processes' in the noisy check (default: unknown)",
    )
    p.add_argument("--json", action="store_true", help='print {"cells": [...], "needle", "report"}')
    p.set_defaults(handler=cmd_bench)

    p = sub.add_parser("report", help="run reports: show one, compare two")
    rs = p.add_subparsers(dest="report_command", metavar="ACTION", required=True)
    q = rs.add_parser("show", help="print a report folder's table")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--json", action="store_true", help="print results.json (plus a roofline section)")
    q.add_argument(
        "--model", help="model folder / GGUF / HF cache entry for the roofline (default: the recipe's)"
    )
    q.add_argument(
        "--gpu",
        help='GPU model for the roofline, e.g. "H200" (default: recipe meta.hardware, then the fingerprint)',
    )
    q.add_argument("--gpus", type=int, help="number of GPUs for the roofline")
    q.set_defaults(handler=cmd_report_show)
    q = rs.add_parser("compare", help="two reports side by side, deltas in %% (B against A)")
    q.add_argument("a", metavar="A")
    q.add_argument("b", metavar="B")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=cmd_report_compare)


def _api_key(args: argparse.Namespace) -> str | None:
    """The bearer token from a file or an environment variable: never from argv, where every user of
    the machine can read it (``ps``)."""
    from lair.errors import BenchError

    if args.api_key is not None:
        raise BenchError(
            "--api-key takes the key on the command line, where any process can read it; it is no "
            "longer accepted",
            hint="export the key and pass --api-key-env NAME (default LAIR_API_KEY), or --api-key-file PATH",
        )
    if args.api_key_file:
        try:
            lines = args.api_key_file.read_text().splitlines()
        except OSError as exc:
            raise BenchError(f"cannot read --api-key-file {args.api_key_file}: {exc.strerror}") from exc
        key = lines[0].strip() if lines else ""
        if not key:
            raise BenchError(f"--api-key-file {args.api_key_file} is empty")
        return key
    if args.api_key_env:
        if not os.environ.get(args.api_key_env):
            raise BenchError(f"--api-key-env: ${args.api_key_env} is not set or empty")
        return os.environ[args.api_key_env]
    return next((os.environ[e] for e in _KEY_ENVS if os.environ.get(e)), None)


def _values(pairs: list[str]) -> dict[str, str]:
    from lair.errors import BenchError

    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise BenchError(f"--set expects NAME=VALUE, got {name!r}")
        out[name.strip()] = value
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    from lair.bench import run_bench

    key = _api_key(args)
    opts = options_of(args, key)
    result = run_bench(args.url, opts)
    report = _write_report(args, result, key) if args.out or args.recipe else None
    failure = result.failure()
    if args.json:
        doc = result.as_dict()
        out = {"ok": failure is None, "cells": doc["cells"], "needle": doc["needle"]}
        out.update(complete=result.complete, server=doc["server"], report=str(report) if report else None)
        out["certificate"] = doc["certificate"]
        if result.load is not None:
            out["load"] = result.load
        if result.sessions is not None:
            out["sessions"] = result.sessions
        if failure is not None:
            out["error"] = failure.as_dict()
        dump_json(out)
    else:
        print_bench(result)
    if report:
        err(f"report: {report}")
    warn_noisy(result)
    if failure is not None:
        err(f"error: {failure.render()}")
        return int(failure.exit_code)
    return 0


def options_of(args: argparse.Namespace, key: str | None) -> Any:
    """The BenchOptions of ``lair bench``: the shared options, the key, the ``--rig``'s prices and the
    ``--recipe``'s context limit."""
    from lair.bench import EngineProcesses

    max_context = _recipe_max_context(args.recipe) if args.recipe else None
    opts = bench_options(args, api_key=key, rig=args.rig, max_context=max_context)
    if args.engine_pid:
        opts.engine = EngineProcesses(pids=list(args.engine_pid))
    return opts


def _recipe_max_context(path: Path) -> int | None:
    from lair.recipe import load_recipe

    value = load_recipe(path).max_model_len
    return value if isinstance(value, int) else None


def _write_report(args: argparse.Namespace, result: Any, key: str | None) -> Path:
    from lair.report import write_run_report

    values = _values(args.set)
    name = args.run_name or (_recipe_name(args.recipe, values) if args.recipe else "bench")
    return write_run_report(args.recipe, name, result, None, values, out_dir=args.out, api_key=key)


def _recipe_name(path: Path, values: dict[str, str]) -> str:
    from lair.recipe import load_recipe

    return load_recipe(path).name or path.stem


def cmd_report_show(args: argparse.Namespace) -> int:
    from lair.report import load_report, markdown
    from lair.report.roofline_rows import rate_report, roofline_markdown

    doc = load_report(args.dir)
    rr = rate_report(args.dir, doc, model=args.model, gpu=args.gpu, gpus=args.gpus)
    if args.json:
        dump_json({**doc, "roofline": rr.as_dict()})
    else:
        print(markdown(doc) + roofline_markdown(rr), end="")
    return 0


def cmd_report_compare(args: argparse.Namespace) -> int:
    from lair.report import compare, compare_text, load_report

    cmp = compare(load_report(args.a), load_report(args.b))
    if args.json:
        dump_json(cmp)
    else:
        print(compare_text(cmp), end="")
    return 0
