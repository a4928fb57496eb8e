"""``lair eval URL --suite NAME|FILE``: quality of a served model (lm-eval over its API), beside
the speed ``lair bench`` measures. The eval package loads inside the handler."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from lair.cli._common import dump_json, err, path_arg

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["add_eval_options", "empty_bench", "eval_options", "print_quality", "register", "suites_arg"]


def suites_arg(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a suite name or task YAML")
    return names


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not values or any(not 0 <= v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected depths between 0 and 1, got {text!r}")
    return values


def _data(text: str) -> tuple[str, Path]:
    from pathlib import Path

    name, sep, path = text.rpartition("=")
    return (name, Path(path)) if sep else ("", Path(text))


def add_eval_options(p: Any, prefix: str = "") -> None:
    """The evaluation flags (``prefix`` ``eval-`` for ``lair launch``, whose ``--eval`` names the suites)."""
    p.add_argument(f"--{prefix}limit", type=int, metavar="N", help="at most N samples per suite")
    p.add_argument(f"--{prefix}repeat", type=int, default=1, metavar="K", help="repeats (spread, flips)")
    p.add_argument(f"--{prefix}seed", type=int, default=1234, metavar="S", help="seed of repeat 1 (+1 each)")
    p.add_argument(f"--{prefix}concurrency", type=int, default=2, metavar="C", help="requests in flight")
    p.add_argument(
        f"--{prefix}api", choices=("completions", "chat"), default="completions", help="API the prompts go to"
    )
    p.add_argument(
        f"--{prefix}thinking",
        choices=("on", "off"),
        help="chat only: chat_template_kwargs.enable_thinking (engines whose template switches it)",
    )
    p.add_argument(f"--{prefix}num-fewshot", type=int, metavar="N", help="few-shot examples (task default)")
    p.add_argument(
        f"--{prefix}data",
        type=_data,
        action="append",
        default=[],
        metavar="[SUITE=]PATH",
        help="local data file (JSON Lines or Parquet) for SUITE, or for every suite (repeatable)",
    )
    p.add_argument(
        f"--{prefix}sandbox",
        choices=("auto", "docker", "process"),
        default="auto",
        help="where generated code runs (humaneval): a container, or namespaces + rlimits",
    )
    p.add_argument(f"--{prefix}max-gen-toks", type=int, metavar="N", help="output limit per sample")
    p.add_argument(
        f"--{prefix}needle-context", type=int, default=2048, metavar="N", help="needle prompt size"
    )
    p.add_argument(
        f"--{prefix}needle-depths", type=_floats, default=[0.1, 0.5, 0.9], metavar="D,D", help="needle depths"
    )


def register(sub: Any) -> None:
    p = sub.add_parser("eval", help="quality of a served model: gsm8k, humaneval, needle, any lm-eval task")
    p.add_argument("url", metavar="URL", help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--suite",
        dest="suites",
        type=suites_arg,
        action="extend",
        required=True,
        metavar="NAME|FILE",
        help="gsm8k, humaneval, needle, lair_arith, an lm-eval task name or a task YAML (repeatable)",
    )
    p.add_argument("--model", help="served model name (default: the first of /v1/models)")
    add_eval_options(p)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--api-key-env", metavar="NAME", help="bearer token from this environment variable")
    p.add_argument("--api-key-file", type=path_arg, metavar="PATH", help="bearer token from this file")
    p.add_argument("--api-key", help=argparse.SUPPRESS)  # refused: a key in argv is visible in `ps`
    p.add_argument("--out", type=path_arg, metavar="DIR", help="write a run report folder here")
    p.add_argument(
        "--recipe",
        type=path_arg,
        metavar="FILE",
        help="the recipe the server runs: the report names and copies it, so `lair submit` can upload it "
        "(report in the recipe's reports/ unless --out)",
    )
    p.add_argument("--run-name", default="eval", help="report name")
    p.add_argument("--json", action="store_true", help='print {"suites": [...], "report"}')
    p.set_defaults(handler=cmd_eval)


def eval_options(args: argparse.Namespace, suites: list[str], prefix: str = "") -> Any:
    from lair.eval import EvalOptions

    def get(name: str) -> Any:
        return getattr(args, prefix + name)

    thinking = get("thinking")
    return EvalOptions(
        suites=suites,
        limit=get("limit"),
        repeat=get("repeat"),
        seed=get("seed"),
        concurrency=get("concurrency"),
        api=get("api"),
        thinking=None if thinking is None else thinking == "on",
        num_fewshot=get("num_fewshot"),
        data=dict(get("data")),
        sandbox=get("sandbox"),
        max_gen_toks=get("max_gen_toks"),
        needle_context=get("needle_context"),
        needle_depths=get("needle_depths"),
        progress=err,
    )


def print_quality(result: Any) -> None:
    from lair.report.quality import QUALITY_COLUMNS, quality_rows

    print(" | ".join(QUALITY_COLUMNS))
    for row in quality_rows({"eval": result.as_dict()}):
        print(" | ".join(row))


def empty_bench(result: Any) -> dict[str, Any]:
    """The speed section of an evaluation-only report: no cells."""
    keys = ("url", "model", "started_at", "finished_at")
    return {**{k: getattr(result, k) for k in keys}, "options": {}, "cells": [], "needle": None}


def cmd_eval(args: argparse.Namespace) -> int:
    from lair.cli.bench_cmds import _api_key
    from lair.eval import run_eval

    opts = eval_options(args, args.suites)
    opts.model, opts.timeout_s, opts.api_key = args.model, args.timeout, _api_key(args)
    if args.recipe:
        from lair.recipe import load_recipe

        load_recipe(args.recipe)  # a located error now, not after the evaluation
    result = run_eval(args.url, opts)
    report = None
    if args.out or args.recipe:
        from lair.report import write_run_report

        report = write_run_report(
            args.recipe,
            args.run_name,
            empty_bench(result),
            out_dir=args.out,
            api_key=opts.api_key,
            evaluation=result,
        )
    if args.json:
        dump_json({"ok": True, **result.as_dict(), "report": str(report) if report else None})
    else:
        print_quality(result)
    if report:
        err(f"report: {report}")
    return 0
